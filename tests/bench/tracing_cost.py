"""What tracing costs the turn path: CPU per turn with tracing off and on, in the same run.

Measured in this process, on the run's Postgres, with the API app built in-process (inline executor, auth
off) and driven through Starlette's test client: first with tracing off, as every deployment runs by
default (no SDK installed: om's spans are one boolean test each, the request-id wrapper is the only
addition to the request), then, after `om_adapters.telemetry.setup_tracing` installed the SDK, through
a second app with the FastAPI and SQLAlchemy instrumentations and om's spans on. The "on" exporter encodes
every batch as OTLP protobuf, as the OTLP exporter does, and drops it instead of posting it: the figure is
om's and the SDK's CPU, not a collector's network. The off phase runs first because a process's tracer
provider cannot be taken back; each phase warms up untimed first.

The turns are short user messages on a few threads with a threshold no turn reaches: the turn path alone
(store, decide, answer), no model call. CPU is the process's (`time.process_time`), client side included,
the same in both phases, so the ratio understates tracing's share of the server's own work a little.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from starlette.testclient import TestClient

from om_adapters import telemetry
from om_api.app import create_app
from om_api.request_ids import RequestIds
from om_api.settings import ApiSettings
from om_core import tracing
from tests.bench.harness import Bench
from tests.bench.results import FigureDef

SECTION = "tracing"
#: Timed turns per phase (full run, quick run), spread over `THREADS` threads.
TURNS = {False: 600, True: 150}
WARM_UP = 40
THREADS = 6
OFF = FigureDef("API CPU per turn, tracing off (in-process)", "ms")
ON = FigureDef("API CPU per turn, tracing on (in-process)", "ms")
RATIO = FigureDef("turn CPU, tracing on ÷ off", "×")
SPANS = FigureDef("spans per turn, tracing on", "spans")
WRAPPER = FigureDef("request-id wrapper per request", "µs")


def figures(quick: bool) -> list[FigureDef]:
    """The figures `run` reports, in order."""
    return [OFF, ON, RATIO, SPANS, WRAPPER]


class EncodingExporter(SpanExporter):
    """Encodes each batch as the OTLP/HTTP exporter would, counts the spans, sends nothing."""

    def __init__(self) -> None:
        self.spans = 0
        self.bytes = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.bytes += len(encode_spans(spans).SerializeToString())
        self.spans += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def _client(bench: Bench) -> TestClient:
    settings = ApiSettings(
        database_url=bench.services.database_url,
        auth="none",
        executor="inline",
        model="om-local/extractive",
        _env_file=None,  # type: ignore[call-arg]
    )
    return TestClient(create_app(settings), base_url="http://localhost")


def _turns(client: TestClient, prefix: str, count: int) -> float:
    """CPU seconds for `count` turns, round-robin over the threads."""
    started = time.process_time()
    for i in range(count):
        body = {"messages": [{"id": f"m{i}", "role": "user", "text": f"Turn {i}: Maya teaches piano."}]}
        response = client.post(f"/v1/threads/{prefix}-{i % THREADS}/turns", json=body)
        if response.status_code != 200:
            raise AssertionError(f"turn {i} failed: {response.status_code} {response.text[:300]}")
    return time.process_time() - started


def _phase(bench: Bench, name: str, count: int) -> float:
    prefix = f"tracing-{name}-{bench.run_id}-{uuid.uuid4().hex[:4]}"
    # The default thresholds (30k tokens) are far above what these short turns add up to per thread.
    with _client(bench) as client:
        _turns(client, prefix, WARM_UP)
        return _turns(client, prefix, count) / count


Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Any]]


def _wrapper_cost_us() -> float:
    """The request-id wrapper's CPU per request: the same trivial app called with and without it, many
    times in one coroutine, best of three (the difference is the wrapper's own work)."""

    async def app(
        scope: Scope, receive: Callable[[], Awaitable[Any]], send: Callable[[Any], Awaitable[None]]
    ) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})

    async def sink(_message: Any) -> None:
        return None

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    wrapped = RequestIds(app)
    headers = [(b"host", b"localhost"), (b"x-request-id", b"caller-id-1")]
    n = 20_000

    async def calls(target: Any) -> float:
        started = time.process_time()
        for _ in range(n):
            await target({"type": "http", "headers": headers}, receive, sink)
        return time.process_time() - started

    async def measure() -> tuple[float, float]:
        plain = min([await calls(app) for _ in range(3)])
        ids = min([await calls(wrapped) for _ in range(3)])
        return plain, ids

    plain, ids = asyncio.run(measure())
    return max(ids - plain, 0.0) / n * 1e6


def run(bench: Bench) -> None:
    count = TURNS[bench.quick]
    if telemetry.tracing_on():
        raise RuntimeError("tracing is already on in the bench process: the off phase would be on too")
    bench.say(f"tracing: {count} turns with tracing off (in-process API, Postgres)")
    off = _phase(bench, "off", count)
    exporter = EncodingExporter()
    telemetry.setup_tracing("om-bench", exporter=exporter)
    bench.say(f"tracing: {count} turns with tracing on (SDK, instrumentations, OTLP encoding)")
    spans_before = exporter.spans
    try:
        on = _phase(bench, "on", count)
        telemetry.shutdown()
    finally:
        tracing.enable(False)  # later sections in this process make no om spans
    spans = (exporter.spans - spans_before) / (count + WARM_UP)
    wrapper = _wrapper_cost_us()
    bench.section_meta(SECTION, turns=count, threads=THREADS, exported_bytes=exporter.bytes)
    bench.results.add(SECTION, OFF, off * 1000, note=f"{count} turns over {THREADS} threads, after {WARM_UP}")
    bench.results.add(SECTION, ON, on * 1000, note="the same turns; spans encoded as OTLP, not sent")
    bench.results.add(SECTION, RATIO, on / off if off else float("nan"), note="same process, same run")
    bench.results.add(SECTION, SPANS, spans, note="request, om.turn, SQL statements")
    bench.results.add(SECTION, WRAPPER, wrapper, note="X-Request-ID picked, echoed, kept in context")
