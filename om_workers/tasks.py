"""Celery tasks: one per kind of engine work, each a thin call into `MemoryEngine.run_task`.

Every task takes the task value as a dict (`task_to_dict`), so Flower shows the thread id and cycle id it
works on. What a task adds on top of the engine is delivery hygiene only:

- **Poison protection.** Deliveries are counted per `cycle_id` in Redis. A task whose every delivery
  kills its worker process (and is therefore redelivered by `reject_on_worker_lost`) would loop forever;
  past `max_deliveries` it is recorded as failed (a `*-failed` event) and dropped.
- **Redelivery after a crash.** The dead process may still hold the thread's lock for up to one lease;
  a redelivered task waits that long for it instead of mistaking its own predecessor for concurrent work
  and doing nothing.

Each worker process builds one engine lazily (after the fork, so no connection or thread crosses it).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import redis
from celery import Task as CeleryTask
from celery.signals import task_postrun, task_prerun, worker_init, worker_process_init, worker_shutdown

from om_adapters import request_context, telemetry
from om_adapters.celery_app import TASK_QUEUES, WorkerSettings
from om_adapters.celery_executor import SENT_AT_HEADER, WorkerExecutor
from om_adapters.redis_coordination import RedisCoordination
from om_adapters.redis_events import RedisPublisher
from om_adapters.token_bucket import TokenBucket
from om_core.config.settings import Settings
from om_core.engine import TASKS, MemoryEngine, Task, TaskKind, kind_of, task_from_dict
from om_core.errors import OperationFailed
from om_core.models.client import load_litellm
from om_core.process.startup_heap import freeze_startup_heap
from om_core.runtime import build_engine
from om_core.store.types import StoredEvent
from om_core.tokens import TokenCounter
from om_workers.app import app
from om_workers.metrics import MemoryWorkMetrics, MetricsServer, worker_metrics

log = logging.getLogger("om.workers.tasks")


@dataclass(frozen=True)
class WorkerRuntime:
    """What one worker process shares between its tasks."""

    engine: MemoryEngine
    coordination: RedisCoordination
    redis: redis.Redis
    settings: WorkerSettings
    pid: int


_runtime: WorkerRuntime | None = None
_runtime_guard = threading.Lock()


class _MeteredPublisher:
    """Counts the memory work in each batch of events (`om_memory_*`), then hands it to Redis."""

    def __init__(self, inner: RedisPublisher, meter: MemoryWorkMetrics) -> None:
        self.inner = inner
        self.meter = meter

    def publish(self, events: Sequence[StoredEvent]) -> None:
        try:
            self.meter.publish(events)
        except Exception:  # metrics never fail a cycle's publishing
            log.exception("counting %d events for the worker's metrics failed", len(events))
        self.inner.publish(events)


def build_runtime(settings: Settings | None = None, worker: WorkerSettings | None = None) -> WorkerRuntime:
    """An engine wired for a worker: Celery executor, Redis locks and events, and the model-call policy
    every process follows with its budgets in the shared Redis bucket."""
    settings = settings or Settings()
    worker = worker or WorkerSettings()
    client = redis.Redis.from_url(settings.redis_url)
    metrics = worker_metrics()
    coordination = RedisCoordination(client, lease_s=worker.lock_lease_s, on_refused=metrics.lock_refused)
    executor = WorkerExecutor(app)
    engine = build_engine(
        settings,
        executor=executor,
        coordination=coordination,
        publisher=_MeteredPublisher(RedisPublisher(client), metrics.memory),
        rate_limiter=TokenBucket(client),
    )
    executor.bind(engine.run_task)
    telemetry.trace_database(engine.db)
    return WorkerRuntime(engine, coordination, client, worker, os.getpid())


def worker_runtime() -> WorkerRuntime:
    """This process's runtime, built on first use (and again in a forked child); shared by the threads
    of a `threads` pool."""
    global _runtime
    with _runtime_guard:
        if _runtime is None or _runtime.pid != os.getpid():
            _runtime = build_runtime()
        return _runtime


def _warm_up_before_serving(**_: Any) -> None:
    """Load the tokenizer and litellm once in the parent, so every pool child (also one restarted after a
    crash) starts with them instead of spending seconds on its first task; then take what start-up made out
    of the garbage collector's sight (`freeze_startup_heap`)."""
    TokenCounter().count_string("warm up")
    load_litellm()
    freeze_startup_heap()


def _build_runtime_in_child(**_: Any) -> None:
    worker_runtime()


_metrics_server: MetricsServer | None = None


def _serve_metrics(**_: Any) -> None:
    """Serve `/metrics` from the main process (`OM_WORKER_METRICS_PORT` on `OM_WORKER_METRICS_HOST`),
    before the pool starts, so every pool process writes its values where the server reads them
    (`om_workers.metrics`)."""
    global _metrics_server
    settings = WorkerSettings()
    if settings.metrics_port and _metrics_server is None:
        server = MetricsServer(settings.metrics_port, settings.metrics_host)
        if server.start():
            _metrics_server = server


def _stop_metrics(**_: Any) -> None:
    """At the main process's shutdown: stop serving and remove the values' folder."""
    global _metrics_server
    if _metrics_server is not None:
        _metrics_server.stop()
    _metrics_server = None


def _queue_of(task: CeleryTask) -> str:
    info = getattr(task.request, "delivery_info", None) or {}
    return str(info.get("routing_key") or TASK_QUEUES.get(task.name, "unknown"))


def _task_started(task_id: str, task: CeleryTask, **_: Any) -> None:
    request_context.adopt_task_headers(
        {name: getattr(task.request, name, None) for name in request_context.TASK_HEADERS}
    )
    sent_at = getattr(task.request, SENT_AT_HEADER, None)
    worker_metrics().task_started(task_id, task.name, _queue_of(task), sent_at)


def _task_finished(task_id: str, task: CeleryTask, state: str | None = None, **_: Any) -> None:
    worker_metrics().task_finished(task_id, task.name, _queue_of(task), state)
    request_context.clear()


def _start_tracing(**_: Any) -> None:
    """The SDK and the Celery instrumentation, in the main process before the pool forks (the batch
    processor restarts its thread in each child), when `OTEL_*` asks for traces."""
    telemetry.setup_tracing("om-worker")


worker_init.connect(_start_tracing, weak=False)
worker_init.connect(_serve_metrics, weak=False)
worker_init.connect(_warm_up_before_serving, weak=False)
worker_process_init.connect(_build_runtime_in_child, weak=False)
worker_shutdown.connect(_stop_metrics, weak=False)
task_prerun.connect(_task_started, weak=False)
task_postrun.connect(_task_finished, weak=False)


#: How much longer than two visibility timeouts a delivery count is kept. The broker makes a dead worker's
#: message visible again only on a restore scan (kombu runs one about every 100 s at most), and a
#: replacement worker takes time to start: with a short visibility timeout, a count kept only twice that
#: long expired before the redelivery and the poison-task bound started again from one.
DELIVERY_COUNT_SLACK_S = 600.0


def delivery_key(cycle_id: str) -> str:
    return f"om:deliveries:{cycle_id}"


def wait_for_dead_holder(runtime: WorkerRuntime, task: Task) -> bool:
    """Wait up to one lease (plus a heartbeat's slack) for the lock a crashed predecessor may hold.

    True when the lock is free. A lock still held after that belongs to a live worker doing the same
    work; the engine then skips this run, as it should.
    """
    names = kind_of(task).locks_of(task)
    started = time.monotonic()
    deadline = started + runtime.settings.lock_lease_s * 1.5 + 1.0
    try:
        while any(runtime.coordination.is_locked(name) for name in names):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True
    finally:
        worker_metrics().lock_waited(names, time.monotonic() - started)


def deliver(payload: dict[str, Any]) -> bool:
    """Run one delivery of a task value. Returns what the engine returned (True: something stored)."""
    task = task_from_dict(payload)
    runtime = worker_runtime()
    ttl = runtime.settings.visibility_timeout_s * 2 + DELIVERY_COUNT_SLACK_S
    deliveries = runtime.coordination.incr(delivery_key(task.cycle_id), ttl_s=ttl)
    if deliveries > runtime.settings.max_deliveries:
        log.error(
            "%s %s: delivery %d is past the bound; dropped", type(task).__name__, task.cycle_id, deliveries
        )
        runtime.engine.record_dropped(task, deliveries - 1)
        return False
    if deliveries > 1:
        log.warning("%s %s: redelivery %d", type(task).__name__, task.cycle_id, deliveries)
        wait_for_dead_holder(runtime, task)
    return runtime.engine.run_task(task)


def _task_of(kind: TaskKind) -> Callable[[dict[str, Any]], bool]:
    def run(task: dict[str, Any]) -> bool:
        if task.get("kind") != kind.value.__name__:
            raise ValueError(f"task {task.get('kind')!r} sent to the {kind.name} task")
        return deliver(task)

    run.__name__ = run.__qualname__ = kind.name.removeprefix("om.")
    return run


# Registered by name (what Flower shows); the producer side sends by name too (`CeleryExecutor`). A
# failure the engine recorded (`OperationFailed`) reaches a waiting turn through the result and is logged
# without a traceback; any other exception escaping a task is a crash and logged as one.
for _kind in TASKS:
    app.task(name=_kind.name, throws=(OperationFailed,))(_task_of(_kind))
