"""Prometheus metrics of a Celery worker: what this worker measured, served over HTTP by its main process.

`OM_WORKER_METRICS_PORT` (default 9808, 0 = off) is the port and `OM_WORKER_METRICS_HOST` (default
127.0.0.1: only the worker's own host reaches it) the address; every worker serves `/metrics` there (beat
serves nothing). A scraper on another host needs the address opened: the deploy manifests set 0.0.0.0
inside the pod, whose port only the cluster network reaches. Every series counts only the work of this
worker, so Prometheus aggregates replicas the normal way (`sum by (queue)`, `histogram_quantile` over
summed buckets).

- **Tasks** (`om_task_*`, labels `task`, `queue`): duration of each execution
  (`om_task_duration_seconds`), executions by outcome (`om_tasks_total`, `outcome` = success / retry /
  failure), and queue wait (`om_task_queue_wait_seconds`): from the moment the producer sent the message
  (`CeleryExecutor` stamps the `om_sent_at` header with its wall clock) to the start of the execution,
  so clock skew between hosts shifts it; messages without the header (beat's maintenance) are not timed.
- **Memory work** (`om_memory_*`): the cycles this worker ran, read from the end/failed events its engine
  published (`om_core.metering`): cycles by kind and outcome, their duration and compression, and model
  usage by model and role (observer / reflector / extractor): tokens in and out, cost (litellm), and
  cycles that called the model by outcome (`om_memory_model_cycles_total`; one cycle may make several
  calls: retries, the reflector's compression ladder). The API exports the same series for the work it
  ran itself, under the same names and labels.
- **Locks** (`om_lock_*`, label `lock` = the lock's kind, never its key): attempts that found a lock held
  by another run (`om_lock_contended_total`; the engine then skips the work, as it should) and the time a
  redelivered task waited for the lock its crashed predecessor may still hold (`om_lock_wait_seconds`).
- **Process and GC**: `process_*` covers the worker's whole process tree (the main process, its live pool
  children, and the CPU of children that already exited), `python_gc_*` and `python_info` the main
  process.

A prefork pool runs tasks in child processes, so the counters use prometheus_client's multiprocess mode:
each process writes its values to files in a fresh folder (`PROMETHEUS_MULTIPROC_DIR`, made at start-up
and removed at shutdown), and the main process merges them at each scrape. A threads or solo pool takes
the same path with one process.
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import resource
import shutil
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from om_adapters.celery_executor import SENT_AT_HEADER
from om_core.metering import MemoryWorkMetrics

__all__ = ["SENT_AT_HEADER", "MemoryWorkMetrics", "MetricsServer", "WorkerMetrics", "worker_metrics"]

log = logging.getLogger("om.workers.metrics")

#: Where prometheus_client's multiprocess mode keeps each process's values.
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

TASK_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
LOCK_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)

_LOCK_KINDS = frozenset({"buffer", "extract", "observe", "reflect", "index", "maintenance", "webhook"})


def lock_kind(name: str) -> str:
    """The label of a lock: its kind (`om:lock:observe:<key>` is `observe`), bounded whatever the keys."""
    parts = name.split(":")
    if len(parts) < 3 or parts[:2] != ["om", "lock"]:
        return "other"
    kind = parts[2] if parts[2] in _LOCK_KINDS else "other"
    return "reflect-buffer" if kind == "reflect" and parts[-1] == "buffer" and len(parts) > 4 else kind


class WorkerMetrics:
    """Every series of a worker. `registry=None`: the values only go to the multiprocess files (the
    server's registry reads them); tests pass a registry to read them in-process."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = registry
        self.task_seconds = Histogram(
            "om_task_duration_seconds",
            "Execution time of each task this worker ran",
            ["task", "queue"],
            buckets=TASK_BUCKETS,
            registry=r,
        )
        self.tasks = Counter(
            "om_tasks_total",
            "Task executions this worker finished, by outcome (success, retry, failure)",
            ["task", "queue", "outcome"],
            registry=r,
        )
        self.queue_wait = Histogram(
            "om_task_queue_wait_seconds",
            "From the producer sending a task to this worker starting it (sender and worker clocks)",
            ["task", "queue"],
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.lock_contended = Counter(
            "om_lock_contended_total",
            "Lock attempts that found the lock held by another run, by lock kind",
            ["lock"],
            registry=r,
        )
        self.lock_wait = Histogram(
            "om_lock_wait_seconds",
            "Time a redelivered task waited for the lock its crashed predecessor may hold, by lock kind",
            ["lock"],
            buckets=LOCK_BUCKETS,
            registry=r,
        )
        self.memory = MemoryWorkMetrics(r)
        self._started: dict[str, float] = {}
        self._guard = threading.Lock()

    # ------------------------------------------------------------------------------------ tasks

    def task_started(self, task_id: str, task: str, queue: str, sent_at: Any) -> None:
        now = time.time()
        with self._guard:
            self._started[task_id] = time.monotonic()
        if isinstance(sent_at, int | float) and not isinstance(sent_at, bool):
            self.queue_wait.labels(task, queue).observe(max(0.0, now - float(sent_at)))

    def task_finished(self, task_id: str, task: str, queue: str, state: str | None) -> None:
        with self._guard:
            started = self._started.pop(task_id, None)
        if started is not None:
            self.task_seconds.labels(task, queue).observe(time.monotonic() - started)
        outcome = {"SUCCESS": "success", "RETRY": "retry"}.get(state or "", "failure")
        self.tasks.labels(task, queue, outcome).inc()

    # ------------------------------------------------------------------------------------ locks

    def lock_refused(self, name: str) -> None:
        self.lock_contended.labels(lock_kind(name)).inc()

    def lock_waited(self, names: Sequence[str], seconds: float) -> None:
        for name in names:
            self.lock_wait.labels(lock_kind(name)).observe(seconds)


_metrics: WorkerMetrics | None = None
_metrics_guard = threading.Lock()


def worker_metrics() -> WorkerMetrics:
    """This worker's metrics, made on first use: after `serve` chose the multiprocess folder, so every
    value (also in a forked pool child) lands in a file the main process reads."""
    global _metrics
    with _metrics_guard:
        if _metrics is None:
            _metrics = WorkerMetrics()
        return _metrics


# ---------------------------------------------------------------------------------- process tree


def _child_pids(pid: int) -> list[int]:
    """Direct children of `pid` (the pool's processes), from `/proc/<pid>/task/*/children`."""
    children: list[int] = []
    for path in glob.glob(f"/proc/{pid}/task/*/children"):
        with contextlib.suppress(OSError, ValueError), open(path) as handle:
            children.extend(int(word) for word in handle.read().split())
    return children


class ProcessTreeCollector(Collector):
    """`process_*` of the worker's process tree: the main process's series with CPU, memory and open
    files summed over its live children, plus the CPU of the children it already reaped (so the counter
    does not drop when the pool replaces a process)."""

    _SUMMED = ("cpu_seconds_total", "resident_memory_bytes", "virtual_memory_bytes", "open_fds")

    def __init__(self) -> None:
        self.pid = os.getpid()

    def collect(self) -> Iterable[Metric]:
        own = {family.name: family for family in ProcessCollector(registry=None).collect()}
        totals: dict[str, float] = {}
        for child in _child_pids(self.pid):
            collector = ProcessCollector(pid=lambda child=child: child, registry=None)  # type: ignore[misc]
            with contextlib.suppress(Exception):  # the child exited between listing and reading
                for family in collector.collect():
                    for sample in family.samples:
                        name = sample.name.removeprefix("process_")
                        if name in self._SUMMED:
                            totals[name] = totals.get(name, 0.0) + sample.value
        reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
        totals["cpu_seconds_total"] = totals.get("cpu_seconds_total", 0.0) + reaped.ru_utime + reaped.ru_stime
        for name, family in own.items():
            if not family.samples:
                continue
            sample = family.samples[0]
            key = sample.name.removeprefix("process_")
            value = sample.value + (totals.get(key, 0.0) if key in self._SUMMED else 0.0)
            out: Metric
            if family.type == "counter":
                out = CounterMetricFamily(name, family.documentation, value=value)
            else:
                out = GaugeMetricFamily(name, family.documentation, value=value)
            yield out


# ---------------------------------------------------------------------------------------- serving


def export_registry(folder: str) -> CollectorRegistry:
    """The registry the HTTP server exports: every process's values from `folder`, the process tree,
    and the main process's GC and platform collectors."""
    from prometheus_client import multiprocess

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=folder)  # type: ignore[no-untyped-call]
    registry.register(ProcessTreeCollector())
    GCCollector(registry=registry)
    PlatformCollector(registry=registry)
    return registry


def use_multiprocess_folder(folder: str) -> None:
    """Switch prometheus_client to multiprocess mode with its values in `folder`, before any value exists
    (`worker_metrics` makes them on first use); pool children inherit the variable."""
    from prometheus_client import values

    os.environ[MULTIPROC_ENV] = folder
    values.ValueClass = values.get_value_class()  # type: ignore[no-untyped-call]


class MetricsServer:
    """The worker's `/metrics` endpoint, run by the main process."""

    def __init__(self, port: int, address: str = "127.0.0.1") -> None:
        self.port = port
        self.address = address
        self.folder: str | None = None
        self._server: Any = None

    def start(self) -> bool:
        """Serve; False (logged, the worker goes on without metrics, and without multiprocess mode) when
        the port is taken."""
        folder = tempfile.mkdtemp(prefix="om-worker-metrics-")
        try:
            self._server, _thread = start_http_server(
                self.port, addr=self.address, registry=export_registry(folder)
            )
        except OSError as exc:
            shutil.rmtree(folder, ignore_errors=True)
            log.error(
                "worker metrics not served on %s:%d: %s (set OM_WORKER_METRICS_PORT, OM_WORKER_METRICS_HOST)",
                self.address,
                self.port,
                exc,
            )
            return False
        self.folder = folder
        use_multiprocess_folder(folder)
        log.info("worker metrics on http://%s:%d/metrics", self.address, self.port)
        return True

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None
