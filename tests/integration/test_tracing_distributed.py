"""One turn followed across processes: the API (`om serve`, celery mode) and a Celery worker process, both
sending their spans to a local OTLP/HTTP receiver (`tests.support.otlp_receiver`) and writing JSON logs.

A turn past `messageTokens` with buffering off observes synchronously: the API sends an `Observe` task to
`om.observe` and waits for it, the worker runs it and calls the model (the offline `om-local/extractive`,
through litellm like any other). The trace must hold the request's server span, the task's run span in
the worker's process and the model call's span, linked by parent ids, the trace context having crossed
the broker in the task's headers. The request id the response echoes must be in a JSON log line of each
process, and beat writes JSON lines too.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import httpx
import pytest
from sqlalchemy import Engine

from om_api.client import OMClient
from om_client.client import _turn_body
from om_core.tenancy import access
from tests.support.api_server import ApiServer, run_api_server
from tests.support.otlp_receiver import OtlpReceiver, ReceivedSpan, otlp_receiver
from tests.support.workers import BEAT_PREFIX, TEST_WORKER_ENV, WorkerCluster, wait_until, worker_cluster

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

#: Spans are exported every 100 ms instead of every 5 s, so the test waits on the receiver briefly.
TRACED_ENV = {"OTEL_BSP_SCHEDULE_DELAY": "100", "OM_LOG_FORMAT": "json", "OM_MODEL": "om-local/extractive"}
REQUEST_ID = f"turn-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    with otlp_receiver() as running:
        yield running


@pytest.fixture(scope="module")
def cluster(
    postgres_url: str, redis_url: str, receiver: OtlpReceiver, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerCluster]:
    env = {**TRACED_ENV, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url}
    with worker_cluster(
        postgres_url=postgres_url,
        redis_url=redis_url,
        workdir=tmp_path_factory.mktemp("traced-workers"),
        db=7,
        env=env,
    ) as workers:
        # Started side by side with the API (`api` waits for them): start-up is mostly imports.
        workers.spawn_workers([(["om.observe"], 1)], beats=1)
        yield workers


@pytest.fixture(scope="module")
def api(
    cluster: WorkerCluster,
    postgres_url: str,
    receiver: OtlpReceiver,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ApiServer]:
    env = {
        **TEST_WORKER_ENV,
        **TRACED_ENV,
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        "OM_EXECUTOR": "celery",
        "OM_BLOCKING_DEADLINE_S": "60",
    }
    logs = tmp_path_factory.mktemp("traced-api")
    with run_api_server(postgres_url, cluster.redis_url, logs, env=env, om_serve=True) as server:
        cluster.wait_started(cluster.processes)
        yield server


@pytest.fixture(scope="module")
def turn(api: ApiServer, pg_engine: Engine) -> httpx.Response:
    """One turn that observes in the turn: its response, with the request id the caller chose."""
    key = access.create_key(pg_engine, f"tenant-{uuid.uuid4().hex[:8]}", "traced").secret
    thread = f"traced-{uuid.uuid4().hex[:8]}"
    with OMClient(api.base_url, key) as om:
        om.set_config(
            thread, {"observation": {"messageTokens": 300, "bufferTokens": False}}, resource_id=thread
        )
    text = " ".join(
        f"Maya moved to Lisbon in March {i} and teaches piano to {i} students." for i in range(60)
    )
    body = _turn_body([{"id": "m1", "role": "user", "text": text}], None, None, 0, None)
    headers = {"Authorization": f"Bearer {key}", "X-Request-ID": REQUEST_ID}
    response = httpx.post(f"{api.base_url}/v1/threads/{thread}/turns", json=body, headers=headers, timeout=90)
    assert response.status_code == 200, response.text
    return response


def _chain(span: ReceivedSpan, spans: list[ReceivedSpan]) -> list[ReceivedSpan]:
    """`span` and its ancestors, nearest first, as far as the parent ids lead."""
    by_id = {s.span_id: s for s in spans}
    chain = [span]
    while chain[-1].parent_id and chain[-1].parent_id in by_id:
        chain.append(by_id[chain[-1].parent_id])
    return chain


def test_one_trace_holds_the_request_the_workers_task_and_the_model_call(
    turn: httpx.Response, receiver: OtlpReceiver
) -> None:
    assert turn.headers["x-request-id"] == REQUEST_ID

    def model_call_reaching_the_request() -> list[ReceivedSpan] | None:
        spans = receiver.spans()
        for call in (s for s in spans if s.name == "chat om-local/extractive"):
            chain = _chain(call, spans)
            if chain[-1].service == "om-api" and chain[-1].kind == 2:  # SPAN_KIND_SERVER
                return chain
        return None

    chain = wait_until(
        model_call_reaching_the_request, deadline_s=30, what="the model call's span linked to the request"
    )
    call, root = chain[0], chain[-1]
    names = [(s.service, s.name) for s in chain]
    assert call.service == "om-worker", names
    assert call.attributes["gen_ai.request.model"] == "om-local/extractive"
    assert call.attributes["om.memory.operation"] == "om.observation"
    assert ("om-worker", "om.observation") in names, names
    assert any(s.service == "om-worker" and s.name.startswith("run/") for s in chain), names
    assert any(s.service == "om-api" and s.name.startswith("apply_async/") for s in chain), names
    assert ("om-api", "om.turn") in names, names
    assert root.name == "POST /v1/threads/{thread_id}/turns", names  # FastAPI's request span
    assert len({s.trace_id for s in chain}) == 1

    # The libraries' instrumentations add their spans to the same trace, in both processes.
    in_trace = [s for s in receiver.spans() if s.trace_id == root.trace_id]
    for service in ("om-api", "om-worker"):
        statements = [s for s in in_trace if s.service == service and "db.statement" in s.attributes]
        assert statements, f"no SQL statement span from {service}"


def _json_lines(text: str) -> list[dict[str, object]]:
    lines = []
    for raw in text.splitlines():
        if raw.startswith("{"):
            lines.append(json.loads(raw))
    return lines


def test_each_process_logs_json_lines_with_the_responses_request_id(
    turn: httpx.Response, api: ApiServer, cluster: WorkerCluster
) -> None:
    request_id = turn.headers["x-request-id"]
    (worker,) = [p for p in cluster.processes if not p.name.startswith(BEAT_PREFIX)]
    (beat,) = [p for p in cluster.processes if p.name.startswith(BEAT_PREFIX)]

    def line_with_the_id(read: object) -> dict[str, object] | None:
        text = read() if callable(read) else ""
        return next((line for line in _json_lines(str(text)) if line.get("request_id") == request_id), None)

    api_line = wait_until(lambda: line_with_the_id(api.log_text), deadline_s=15, what="the API's JSON line")
    worker_line = wait_until(
        lambda: line_with_the_id(lambda: worker.log_path.read_text(errors="replace")),
        deadline_s=15,
        what="the worker's JSON line",
    )
    for line in (api_line, worker_line):
        assert {"time", "level", "logger", "message", "trace_id", "request_id", "tenant"} <= set(line)
        assert str(line["tenant"]).startswith("tenant-")
        assert line["trace_id"] and len(str(line["trace_id"])) == 32

    beat_lines = _json_lines(beat.log_path.read_text(errors="replace"))
    assert beat_lines and all({"time", "level", "logger", "message"} <= set(line) for line in beat_lines)
