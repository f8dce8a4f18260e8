"""Observer throughput against worker concurrency, with a model that takes 1 s per call.

Model calls are I/O: a worker with the threads pool should overlap N of them, so observations per second
should grow almost linearly with `--concurrency` until the CPU work around each call (reading the window,
building the prompt, parsing, committing) fills a core. Each level gets fresh worker processes consuming
`om.buffer` and a backlog of independent threads, each with one unobserved exchange, queued at once as
the turn path queues them (no task result is kept); the figure is buffered observations stored per second
of wall time from the first enqueue until the database holds every one's end event.

Each level runs on its own Redis database with its own workers, so no other workers take its tasks. All
levels' workers start together before the first level runs: a worker's start-up is mostly importing
litellm (~8 s of CPU here), so starting them side by side uses both cores, and a level's idle neighbours
cost it nothing measurable (they block on the broker). The quick run starts them earlier still, while the
blocking section (mostly waiting on its slow model) runs (`spawn_fleet`, see `run.EARLY_STARTS`).
"""

from __future__ import annotations

import contextlib
import importlib
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import litellm
from sqlalchemy import func, select

from om_adapters.celery_executor import CeleryExecutor
from om_core.config.options import ObservationalMemoryConfig
from om_core.engine import BufferObservation, MemoryEngine, new_cycle_id
from om_core.engine import events as ev
from om_core.models.client import ModelClient
from om_core.store import schema
from om_core.store.db import make_engine
from tests.bench.conversations import generate
from tests.bench.cpu import CpuSpan, postgres_pids
from tests.bench.harness import Bench
from tests.bench.latency_model_ids import PROVIDER, model_for
from tests.bench.memory import resident
from tests.bench.results import FigureDef, Target, median
from tests.bench.sqlcount import counting
from tests.bench.stack import FAKE_MODEL_MODULE, ThreadPoolCluster, worker_cluster
from tests.support.workers import HoldingExecutor, Process, Producer, wait_until

SECTION = "throughput"
REDIS_DB = 9
LINEARITY_TARGET = 0.8


@dataclass(frozen=True)
class Level:
    #: model calls in flight at once: worker threads over all processes
    concurrency: int
    #: worker processes sharing them (one per core is the deployment advice: one GIL per process)
    processes: int


@dataclass(frozen=True)
class Plan:
    latency_s: float
    levels: list[Level]
    #: Tasks per level are this many times its concurrency ("waves" of model calls). Throughput is a
    #: steady state: with only a few waves, the ramp (the first tasks reaching their threads) and the tail
    #: (the last wave) are a large share of a level's time and understate what the workers sustain.
    waves: int

    def tasks(self, level: Level) -> int:
        return max(level.concurrency * self.waves, 6)


CORES = 2
FULL = Plan(
    latency_s=1.0,
    levels=[Level(1, 1), Level(4, 1), Level(16, 1), Level(64, 1), Level(64, CORES)],
    waves=12,
)
#: The smoke run keeps the base and the deployment-shaped top level (one process per core).
QUICK = Plan(latency_s=0.5, levels=[Level(1, 1), Level(16, CORES)], waves=6)
ONE_OBSERVATION = FigureDef("one buffered observation, instant model (in-process)", "ms")
WORKER_CPU = FigureDef("worker CPU per buffered observation (model excluded)", "ms")
#: Issue 18's target for `WORKER_CPU`.
WORKER_CPU_TARGET_MS = 5.0


def per_second(level: Level) -> FigureDef:
    name = _level_name(level.concurrency, level.processes)
    return FigureDef(f"observations/s at concurrency {name}", "obs/s")


def figures(quick: bool) -> list[FigureDef]:
    """The figures `run` reports, in order: each level of the plan, one observation alone, then the worker
    CPU per observation."""
    return [*map(per_second, (QUICK if quick else FULL).levels), ONE_OBSERVATION, WORKER_CPU]


def _prepare(producer: Producer, count: int, tag: str) -> list[tuple[str, int]]:
    """`count` threads with one exchange each, stored without starting any background work."""
    conversation = generate(seed=777, target_tokens=4_000)
    user, reply = conversation.exchanges()[0]

    def one(index: int) -> tuple[str, int]:
        thread_id = f"tput-{tag}-{index}"
        result = producer.engine.ingest_turn(thread_id, f"tput-user-{tag}", [user, reply])
        return thread_id, int(result.status["windows"]["active"]["messages"]["tokens"])

    with producer.holding(), ThreadPoolExecutor(8) as pool:
        return list(pool.map(one, range(count)))


def _observe_all(producer: Producer, threads: list[tuple[str, int]]) -> tuple[int, int]:
    """Send each thread's buffering as a turn does (fire and forget: no result is stored, so neither the
    workers nor this process pay for the result backend) and wait, on the database, until every one has
    ended. Returns (chunks stored, failures)."""
    executor = producer.engine.executor
    assert isinstance(executor, CeleryExecutor)
    for thread_id, pending in threads:
        task = BufferObservation(thread_id, new_cycle_id("buffer-obs"), pending, skip_minimum=True)
        executor.send(task, keep_result=False)
    for thread_id, _ in threads:
        producer.sent.take(thread_id)  # nothing to wait on: no result is kept
    E = schema.events
    ids = [thread_id for thread_id, _ in threads]
    query = (
        select(E.c.type, func.count())
        .where(E.c.thread_id.in_(ids), E.c.type.in_([ev.BUFFERING_END, ev.BUFFERING_FAILED]))
        .group_by(E.c.type)
    )

    def ended() -> tuple[int, int] | None:
        with producer.engine.db.connect() as conn:
            counts: dict[str, int] = {kind: count for kind, count in conn.execute(query)}
        stored, failed = counts.get(ev.BUFFERING_END, 0), counts.get(ev.BUFFERING_FAILED, 0)
        return (stored, failed) if stored + failed >= len(ids) else None

    return wait_until(ended, deadline_s=300, what=f"{len(ids)} buffered observations", every_s=0.1)


def _level_name(concurrency: int, processes: int) -> str:
    return f"{concurrency}" + (f" over {processes} worker processes" if processes > 1 else "")


def _level(
    bench: Bench, cluster: ThreadPoolCluster, processes: list[Process], level: Level, tasks: int
) -> dict[str, Any]:
    concurrency = level.concurrency
    producer = cluster.producer()
    try:
        clock = time.monotonic()
        threads = _prepare(producer, concurrency + tasks, f"{bench.run_id}-{concurrency}x{level.processes}")
        bench.say(
            f"throughput: concurrency {concurrency} over {level.processes} process(es): {tasks} threads "
            f"prepared in {time.monotonic() - clock:.1f} s"
        )
        return _measure(bench, producer, processes, level, threads)
    finally:
        cluster.stop(processes)
        producer.engine.db.dispose()


def _measure(
    bench: Bench, producer: Producer, processes: list[Process], level: Level, threads: list[tuple[str, int]]
) -> dict[str, Any]:
    concurrency = level.concurrency
    warm_up, threads = threads[:concurrency], threads[concurrency:]
    # One task per worker thread first: each thread's first model call imports and loads what litellm
    # loads lazily, which is start-up, not throughput.
    _observe_all(producer, warm_up)
    port = bench.postgres_port
    cpu = CpuSpan(
        {"worker": lambda: [p.popen.pid for p in processes], "postgres": lambda: postgres_pids(port)}
    ).start()
    started = time.perf_counter()
    stored, failed = _observe_all(producer, threads)
    elapsed = time.perf_counter() - started
    cpu.stop()
    memory = max((resident(p.popen.pid) for p in processes), key=lambda m: m.rss_mb)
    return {
        **cpu.summary(len(threads), "observation"),
        "concurrency": concurrency,
        "processes": level.processes,
        "tasks": len(threads),
        "stored": stored,
        "failed": failed,
        "seconds": elapsed,
        "per_s": stored / elapsed if elapsed else float("nan"),
        "worker_rss_mb": memory.rss_mb,
        "worker_peak_mb": memory.peak_mb,
    }


class _ModelCpu:
    """Thread CPU spent inside model calls: the model client's whole call (litellm and the provider) and
    the fake provider's own handler (what "model excluded" takes out)."""

    def __init__(self) -> None:
        self.client_s = 0.0
        self.handler_s = 0.0
        self.calls = 0

    @contextlib.contextmanager
    def installed(self, models: ModelClient) -> Iterator[None]:
        handler: Any = next(
            entry["custom_handler"] for entry in litellm.custom_provider_map if entry["provider"] == PROVIDER
        )
        own_completion, own_complete = handler.completion, models.complete

        def completion(*args: Any, **kwargs: Any) -> Any:
            started = time.thread_time()
            try:
                return own_completion(*args, **kwargs)
            finally:
                self.handler_s += time.thread_time() - started

        def complete(*args: Any, **kwargs: Any) -> Any:
            started = time.thread_time()
            try:
                return own_complete(*args, **kwargs)
            finally:
                self.client_s += time.thread_time() - started
                self.calls += 1

        handler.completion = completion
        setattr(models, "complete", complete)  # noqa: B010 (an instance attribute, removed below)
        try:
            yield
        finally:
            del handler.completion
            del models.complete


def profile_observation(bench: Bench, count: int = 8) -> dict[str, Any]:
    """One buffered observation's own cost, in this process with an instant fake model: wall time, CPU
    (the process's, so work litellm leaves to a background thread counts), the model call's share of it,
    and what it asks of Postgres (the work a worker thread does around the model call)."""
    importlib.import_module(FAKE_MODEL_MODULE)  # registers the provider here (`run` may have preloaded it)
    config = ObservationalMemoryConfig.parse({"model": model_for(0)})
    db = make_engine(bench.services.database_url)
    models = ModelClient()
    engine = MemoryEngine(db, models=models, config=config, executor=HoldingExecutor())
    user, reply = generate(seed=777, target_tokens=4_000).exchanges()[0]
    threads = []
    for index in range(count + 1):
        thread_id = f"tput-profile-{bench.run_id}-{index}"
        result = engine.ingest_turn(thread_id, f"tput-profile-{bench.run_id}", [user, reply])
        threads.append((thread_id, int(result.status["windows"]["active"]["messages"]["tokens"])))

    def observe(thread_id: str, pending: int) -> None:
        engine.run_task(BufferObservation(thread_id, new_cycle_id("buffer-obs"), pending, skip_minimum=True))

    observe(*threads[0])  # warm up: first model call, pools
    latencies = []
    model = _ModelCpu()
    with counting(db) as sql, model.installed(models):
        cpu = time.process_time()
        for thread_id, pending in threads[1:]:
            started = time.perf_counter()
            observe(thread_id, pending)
            latencies.append((time.perf_counter() - started) * 1000)
        cpu = time.process_time() - cpu
    db.dispose()
    return {
        "observation_p50_ms": median(latencies),
        "cpu_ms": cpu * 1000 / count,
        "model_client_cpu_ms": model.client_s * 1000 / max(model.calls, 1),
        "model_handler_cpu_ms": model.handler_s * 1000 / max(model.calls, 1),
        "model_calls": model.calls / count,
        **sql.per(count),
    }


@dataclass(frozen=True)
class Fleet:
    """Every level's cluster (its own Redis database) and its worker processes, started, maybe not ready."""

    clusters: list[ThreadPoolCluster]
    spawned: list[list[Process]]
    spawned_at: float


def spawn_fleet(bench: Bench) -> Fleet:
    """Start every level's workers without waiting for them. The clusters live as long as the run
    (`bench.resources`); each level stops its own processes when it is done."""
    plan = QUICK if bench.quick else FULL
    env = {"OM_MODEL": model_for(plan.latency_s)}
    clusters = [
        bench.resources.enter_context(
            worker_cluster(
                bench.services, bench.workdir / f"throughput-{index}", redis_db=REDIS_DB + index, env=env
            )
        )
        for index in range(len(plan.levels))
    ]
    spawned = [
        cluster.spawn_workers([(["om.buffer"], level.concurrency // level.processes)] * level.processes)
        for cluster, level in zip(clusters, plan.levels, strict=True)
    ]
    return Fleet(clusters, spawned, time.monotonic())


def run(bench: Bench) -> None:
    plan = QUICK if bench.quick else FULL
    own = profile_observation(bench)
    bench.say(
        f"throughput: fake model {plan.latency_s:g} s per call, worker concurrency "
        f"{', '.join(_level_name(v.concurrency, v.processes) for v in plan.levels)} (threads pool, om.buffer)"
    )
    fleet = bench.early.pop(SECTION, None) or spawn_fleet(bench)
    assert isinstance(fleet, Fleet)
    for cluster, processes in zip(fleet.clusters, fleet.spawned, strict=True):
        cluster.wait_started(processes)
    bench.say(
        f"throughput: {sum(map(len, fleet.spawned))} worker processes up "
        f"{time.monotonic() - fleet.spawned_at:.1f} s after they were started"
    )
    levels = [
        _level(bench, cluster, processes, level, plan.tasks(level))
        for cluster, processes, level in zip(fleet.clusters, fleet.spawned, plan.levels, strict=True)
    ]
    bench.results.series["throughput"] = levels
    bench.section_meta(SECTION, latency_s=plan.latency_s, one_observation=own)
    base = float(levels[0]["per_s"])

    def why(data: dict[str, Any], n: int) -> str:
        worker_ms = max(float(data["worker_cpu_ms_per_observation"]), 0.1)
        linear = data["per_s"] / (n * base) * 100
        processes = int(data["processes"])
        return (
            f"{linear:.0f} % of linear; the workers spent {worker_ms:.0f} ms of CPU per "
            f"observation around the model call (each process holds one GIL: at most "
            f"~{processes * 1000 / worker_ms:.0f} observations/s with {processes}); one observation alone "
            f"takes {own['observation_p50_ms']:.0f} ms with "
            f"{own['sql_statements']:.0f} SQL statements and {own['pool_checkouts']:.0f} pool checkouts; "
            f"Postgres {data['postgres_cpu_ms_per_observation']:.0f} ms CPU; the machine was "
            f"{data['machine_busy_pct']:.0f} % busy, {data['others_busy_pct']:.0f} % with other work"
        )

    top_concurrency = max(level.concurrency for level in plan.levels)
    for data in levels:
        n, processes = int(data["concurrency"]), int(data["processes"])
        top = n == top_concurrency
        ideal = LINEARITY_TARGET * n * base
        bench.results.add(
            SECTION,
            per_second(Level(n, processes)),
            data["per_s"],
            target=Target.at_least(round(ideal, 2), " (0.8 × N × at 1)") if top and n > 1 else None,
            why=why(data, n),
            note=(
                f"{data['stored']}/{data['tasks']} stored in {data['seconds']:.1f} s; worker RSS "
                f"{data['worker_rss_mb']:.0f} MB" + (f"; {data['failed']} failed" if data["failed"] else "")
            ),
        )
    bench.results.add(
        SECTION,
        ONE_OBSERVATION,
        own["observation_p50_ms"],
        note=f"{own['sql_statements']:.0f} SQL statements, {own['pool_checkouts']:.0f} pool checkouts "
        "(pre-ping + rollback each) per observation, model call excluded",
    )
    if bench.quick:
        bench.results.figures[-2].note = (bench.results.figures[-2].note or "") + (
            f"; quick run: {plan.latency_s:g} s latency, concurrency up to {top_concurrency}"
        )
    _worker_cpu(bench, levels[-1], own)


def _worker_cpu(bench: Bench, top: dict[str, Any], own: dict[str, Any]) -> None:
    """Worker CPU per buffered observation, model excluded, at the plan's deployment-shaped top level: the
    worker processes' CPU over the measured span (`CpuSpan`) divided by the observations stored in it,
    minus the fake model's own handler CPU per call (measured in process by `profile_observation`; its
    answer is memoised and its wait is a sleep, so it is close to nothing). litellm's client work around
    the call stays in: a hosted model costs the worker that too."""
    handler_ms = float(own["model_handler_cpu_ms"]) * float(own["model_calls"])
    value = float(top["worker_cpu_ms_per_observation"]) - handler_ms
    litellm_ms = (float(own["model_client_cpu_ms"]) - float(own["model_handler_cpu_ms"])) * float(
        own["model_calls"]
    )
    level = _level_name(int(top["concurrency"]), int(top["processes"]))

    def why() -> str:
        return (
            f"in process one observation costs {own['cpu_ms']:.1f} ms of CPU: litellm's client work around "
            f"the call {litellm_ms:.1f} ms, {own['sql_statements']:.0f} SQL statements and "
            f"{own['pool_checkouts']:.0f} pool checkouts; the rest of the worker's share is Celery's "
            f"consumer (kombu's Redis transport: BRPOP, the unacked hash, the ack) and the Redis round "
            f"trips of the task (delivery count, lock, boundary, event publish); the machine was "
            f"{top['machine_busy_pct']:.0f} % busy, {top['others_busy_pct']:.0f} % with other work"
        )

    bench.results.add(
        SECTION,
        WORKER_CPU,
        value,
        target=Target.at_most(WORKER_CPU_TARGET_MS, " ms"),
        why=why,
        note=(
            f"worker CPU over the span / observations at concurrency {level} "
            f"({top['worker_cpu_ms_per_observation']:.1f} ms) minus the fake model's own handler "
            f"({handler_ms:.2f} ms, in process); in process: {own['cpu_ms']:.1f} ms CPU, of which litellm "
            f"{litellm_ms:.1f} ms"
        ),
        in_process_cpu_ms=own["cpu_ms"],
        litellm_client_cpu_ms=litellm_ms,
        model_handler_cpu_ms=handler_ms,
    )
