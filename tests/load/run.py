"""The load test: `python -m tests.load.run --threads 50 --duration 300`.

One API process in celery mode (`tests/bench/stack.py`: production worker knobs, API keys, 30 s blocking
deadline), two Celery worker processes on the threads pool (one for `om.observe`, one for `om.buffer` and
`om.reflect`), the real Postgres and Redis (those of `scripts/testenv.py run --`, or throwaway ones started
here), and the traced fake model (`tests/support/traced_model.py`) in the workers with a seeded latency of
1-2 s per call and no faults (faults are the fuzz's business; this measures throughput and loss).

`--threads` chats (`tests/load/driver.py`) play conversations for `--duration` seconds. Then the run waits
until the workers are idle, posts one final turn per thread, waits again, and checks every thread
(`tests/load/verify.py`). Prints a short table and writes `load-results.json` (`--out`). Exit status 1
when a request was lost, a 5xx was answered, or an invariant failed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from om_core.tenancy import access
from tests.bench import stack as bench_stack
from tests.bench.http_driver import TurnPoster
from tests.load.driver import Chats, LoadLog, LoadSettings, percentile
from tests.load.verify import Verdict, verify
from tests.support.api_server import ApiServer
from tests.support.parallel_start import call_all, enter_all
from tests.support.progress import Progress
from tests.support.queues import drain
from tests.support.traced_calls import model_id
from tests.support.workers import WorkerCluster

#: The Redis database of the load test's broker and locks (the fuzz uses 14, other suites 0-13).
REDIS_DB = 15
TRACE_MODULE = "tests.support.traced_model"
#: After the chats stop, the workers get this long to finish the backlog they built up.
DRAIN_DEADLINE_S = 600.0
#: Seconds between two progress lines (stderr) while the chats run.
PROGRESS_EVERY_S = 10.0


@dataclass(frozen=True)
class StackOptions:
    #: The fake model's latency range per call, seconds.
    model_latency_s: tuple[float, float] = (1.0, 2.0)
    message_tokens: int = 12_000
    observation_tokens: int = 8_000
    observe_concurrency: int = 8
    buffer_concurrency: int = 16

    def om_config(self) -> dict[str, Any]:
        return {
            "model": model_id("load"),
            "observation": {"messageTokens": self.message_tokens},
            "reflection": {"observationTokens": self.observation_tokens},
        }

    def env(self) -> dict[str, str]:
        low, high = self.model_latency_s
        return {
            "OM_CONFIG": json.dumps(self.om_config()),
            "OM_TRACE_LATENCY_S": f"{low:g}-{high:g}",
            "OM_TRACE_FAULTS": "off",
            "OM_TRACE_RECORD": "off",
            "OM_TRACE_WARM": "on",
            "LITELLM_LOG": "ERROR",
        }


@dataclass
class Stack:
    api: ApiServer
    cluster: WorkerCluster
    api_key: str
    services: bench_stack.Services
    #: The key's tenant: threads are stored under it.
    tenant: str


@contextlib.contextmanager
def load_stack(services: bench_stack.Services, workdir: Path, options: StackOptions) -> Iterator[Stack]:
    """The workers and the API process, started at the same time."""
    env = options.env()
    worker_env = {**env, "OM_WORKER_IMPORTS": TRACE_MODULE}
    with (
        bench_stack.worker_cluster(
            services, workdir / "workers", redis_db=REDIS_DB, env=worker_env
        ) as cluster,
        contextlib.ExitStack() as servers,
    ):
        specs = [
            (["om.observe"], options.observe_concurrency),
            (["om.buffer", "om.reflect"], options.buffer_concurrency),
        ]
        api_server = bench_stack.api_server(services, cluster.redis_url, workdir / "api", env=env)
        apis, _ = call_all([lambda: enter_all(servers, [api_server]), lambda: cluster.start_workers(specs)])
        tenant = f"load-{uuid.uuid4().hex[:8]}"
        key = access.create_key(services.db, tenant, "load test").secret
        yield Stack(apis[0], cluster, key, services, tenant)


@dataclass
class LoadResult:
    settings: LoadSettings
    options: StackOptions
    log: LoadLog
    verdict: Verdict
    drain_problems: list[str] = field(default_factory=list)
    drain_s: float = 0.0

    @property
    def requests(self) -> int:
        return sum(self.log.outcomes.values())

    @property
    def server_errors(self) -> int:
        return sum(n for status, n in self.log.outcomes.items() if status.isdigit() and int(status) >= 500)

    @property
    def client_errors(self) -> int:
        return sum(
            n for status, n in self.log.outcomes.items() if status.isdigit() and 400 <= int(status) < 500
        )

    @property
    def transport_errors(self) -> int:
        return sum(n for status, n in self.log.outcomes.items() if status.startswith("transport:"))

    @property
    def ok(self) -> bool:
        return (
            not self.verdict.lost
            and self.server_errors == 0
            and self.verdict.violation_count == 0
            and not self.drain_problems
        )

    def figures(self) -> dict[str, Any]:
        seconds = max(self.log.seconds, 1e-9)
        ms = 1000.0
        return {
            "threads": self.settings.threads,
            "duration_s": round(seconds, 1),
            "requests": self.requests,
            "requests_per_s": round(len(self.log.request_s) / seconds, 2),
            "turns": len(self.log.turn_s),
            "turns_per_s": round(len(self.log.turn_s) / seconds, 2),
            "turn_p50_ms": _round(percentile(self.log.turn_s, 0.50) * ms),
            "turn_p99_ms": _round(percentile(self.log.turn_s, 0.99) * ms),
            "request_p50_ms": _round(percentile(self.log.request_s, 0.50) * ms),
            "request_p99_ms": _round(percentile(self.log.request_s, 0.99) * ms),
            "request_max_ms": _round(max(self.log.request_s, default=math.nan) * ms),
            "outcomes": dict(sorted(self.log.outcomes.items())),
            "final_turn_outcomes": dict(sorted(self.log.final_outcomes.items())),
            "errors_5xx": self.server_errors,
            "errors_4xx": self.client_errors,
            "errors_transport": self.transport_errors,
            "blocked_turn_calls": self.log.blocked,
            "degraded_turn_calls": self.log.degraded,
            "messages_acknowledged": self.verdict.acknowledged,
            "requests_lost": len(self.verdict.lost),
            "threads_checked": self.verdict.threads,
            "threads_failing": self.verdict.failing_threads,
            "invariant_violations": self.verdict.violation_count,
            "drain_s": round(self.drain_s, 1),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "figures": self.figures(),
            "settings": asdict(self.settings),
            "stack": {**asdict(self.options), "om_config": self.options.om_config()},
            "stored_state": dict(sorted(self.verdict.stats.items())),
            "accepted_duplicates": dict(sorted(self.verdict.duplicates.items())),
            "lost": self.verdict.lost[:100],
            "violations": self.verdict.violations,
            "drain_problems": self.drain_problems,
            "errors": self.log.errors[:50],
        }


def _round(value: float) -> float | None:
    return None if math.isnan(value) else round(value, 1)


def _requests_note(log: LoadLog) -> str:
    requests = sum(log.outcomes.values())
    failed = requests - log.outcomes.get("200", 0)
    return f"{requests:,} requests, {failed} not 200"


async def _report(meter: Progress, log: LoadLog) -> None:
    """A progress line every few seconds while the chats run (same event loop: no locking needed)."""
    while True:
        await asyncio.sleep(meter.every_s)
        meter.set(round(time.monotonic() - log.started), _requests_note(log))


async def _drive(stack: Stack, settings: LoadSettings, tag: str) -> tuple[LoadLog, list[str], float]:
    """The chats, then a drain, the final turns and a drain (the HTTP client stays open throughout)."""
    connections = settings.threads + 8
    async with TurnPoster(
        stack.api.base_url, stack.api_key, connections=connections, timeout_s=settings.request_timeout_s
    ) as poster:
        chats = Chats(poster, settings, tag)
        meter = Progress("load", settings.duration_s, unit="s", every_s=PROGRESS_EVERY_S)
        meter.maybe_print()
        reporter = asyncio.create_task(_report(meter, chats.log))
        try:
            log = await chats.run()
        finally:
            reporter.cancel()
        meter.set(settings.duration_s, _requests_note(log), quiet=True)
        meter.finish()
        began = time.monotonic()
        problems = []
        print("load: chats done; the workers finish their backlog", file=sys.stderr, flush=True)
        first = await asyncio.to_thread(drain, stack.cluster, DRAIN_DEADLINE_S)
        drain_s = time.monotonic() - began
        print(f"load: backlog done in {drain_s:.0f} s; final turns and checks", file=sys.stderr, flush=True)
        if first is not None:
            problems.append(f"after the chats: {first}")
        await chats.final_turns()
        second = await asyncio.to_thread(drain, stack.cluster, DRAIN_DEADLINE_S)
        if second is not None:
            problems.append(f"after the final turns: {second}")
    return log, problems, drain_s


def run_load(stack: Stack, settings: LoadSettings, options: StackOptions) -> LoadResult:
    log, problems, drain_s = asyncio.run(_drive(stack, settings, uuid.uuid4().hex[:6]))
    verdict = verify(stack.services.db, log.threads, stack.tenant)
    return LoadResult(settings, options, log, verdict, problems, drain_s)


def render(result: LoadResult) -> str:
    f = result.figures()
    s = result.settings
    o = result.options
    latency = f"{o.model_latency_s[0]:g}-{o.model_latency_s[1]:g} s"
    rows = [
        ("load", f"{s.threads} threads x {f['duration_s']} s, think {s.think_s[0]:g}-{s.think_s[1]:g} s"),
        (
            "stack",
            f"1 API (celery), workers: observe x{o.observe_concurrency}, buffer+reflect "
            f"x{o.buffer_concurrency} (threads pool), model {latency}",
        ),
        (
            "requests",
            f"{f['requests']} ({f['requests_per_s']}/s ok), turns {f['turns']} ({f['turns_per_s']}/s)",
        ),
        ("turn latency", f"p50 {f['turn_p50_ms']} ms, p99 {f['turn_p99_ms']} ms (both calls)"),
        (
            "request latency",
            f"p50 {f['request_p50_ms']} ms, p99 {f['request_p99_ms']} ms, max {f['request_max_ms']} ms",
        ),
        ("errors", f"5xx {f['errors_5xx']}, 4xx {f['errors_4xx']}, transport {f['errors_transport']}"),
        ("blocked / degraded", f"{f['blocked_turn_calls']} / {f['degraded_turn_calls']} calls"),
        ("lost", f"{f['requests_lost']} of {f['messages_acknowledged']} acknowledged messages"),
        (
            "invariants",
            f"{f['invariant_violations']} violations on {f['threads_failing']} of "
            f"{f['threads_checked']} threads",
        ),
        ("drain", f"{f['drain_s']} s after the chats"),
    ]
    state = result.verdict.stats
    rows.append(
        (
            "stored",
            f"{state['parts']} traced parts, {state['chunks:activated']} chunks activated, "
            f"{state['sync-commits']} sync observations, {state['generations']} reflections "
            f"({state['buffered-reflections-activated']} buffered, {state['reflections']} sync)",
        )
    )
    width = max(len(name) for name, _ in rows)
    lines = [f"{name:<{width}}  {value}" for name, value in rows]
    lines.extend(f"  ! {v}" for v in [*result.drain_problems, *result.verdict.violations[:10]])
    lines.extend(f"  ! {e}" for e in result.log.errors[:10])
    lines.append("PASS" if result.ok else "FAIL")
    return "\n".join(lines)


def parse_args(argv: list[str]) -> argparse.Namespace:
    load, stack = LoadSettings(), StackOptions()
    parser = argparse.ArgumentParser(prog="python -m tests.load.run", description=__doc__)
    parser.add_argument("--threads", type=int, default=load.threads, help="concurrent chats (default 50)")
    parser.add_argument("--duration", type=float, default=load.duration_s, help="seconds (default 300)")
    parser.add_argument("--seed", type=int, default=load.seed)
    parser.add_argument(
        "--think",
        type=float,
        nargs=2,
        default=load.think_s,
        metavar=("LO", "HI"),
        help="actor think time between the two calls of a turn, seconds",
    )
    parser.add_argument(
        "--model-latency",
        type=float,
        nargs=2,
        default=stack.model_latency_s,
        metavar=("LO", "HI"),
        help="memory model latency per call, seconds",
    )
    parser.add_argument("--message-tokens", type=int, default=stack.message_tokens)
    parser.add_argument("--observation-tokens", type=int, default=stack.observation_tokens)
    parser.add_argument("--out", type=Path, default=Path("load-results.json"))
    parser.add_argument("--keep-logs", action="store_true", help="keep the process logs also on success")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    settings = LoadSettings(
        threads=args.threads, duration_s=args.duration, think_s=tuple(args.think), seed=args.seed
    )
    options = StackOptions(
        model_latency_s=tuple(args.model_latency),
        message_tokens=args.message_tokens,
        observation_tokens=args.observation_tokens,
    )
    workdir = Path(tempfile.mkdtemp(prefix="om-load-"))
    with bench_stack.services() as services:
        started = time.monotonic()
        with load_stack(services, workdir, options) as stack:
            print(f"processes up in {time.monotonic() - started:.1f} s (logs in {workdir})", flush=True)
            result = run_load(stack, settings, options)
    args.out.write_text(json.dumps(result.to_json(), indent=2) + "\n")
    print(render(result))
    print(f"results written to {args.out}")
    if result.ok and not args.keep_logs:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        print(f"process logs kept in {workdir}")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
