"""Real Celery worker (and beat) processes for integration tests, against the test Postgres and Redis.

`WorkerCluster` starts `python -m om_workers.cli worker …` subprocesses for chosen queues with the
environment a deployment would give them, waits until each answers a ping (with a deadline, failing with
the process's log), and stops them at the end: SIGTERM to the process group, then SIGKILL to whatever is
left. Each cluster uses its own Redis database, so broker queues, locks and results of one test module
never meet another's.

The producer side (the engine a test drives, as the API would) is built with `cluster.engine(...)`:
`CeleryExecutor` + `RedisCoordination` + `RedisPublisher`, with every sent task recorded per thread so a
test can wait for exactly the work it caused.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import redis
from celery import Celery
from celery.result import AsyncResult
from pydantic import AliasChoices
from sqlalchemy import update

from om_adapters.celery_app import WorkerSettings, create_app
from om_adapters.celery_executor import CeleryExecutor
from om_adapters.redis_coordination import RedisCoordination
from om_adapters.redis_events import RedisPublisher
from om_core.config.settings import Settings
from om_core.engine import QUEUES, MemoryEngine, Task
from om_core.models.client import ModelClient
from om_core.runtime import engine_settings
from om_core.store import history, schema
from om_core.store.db import make_engine

REPO = Path(__file__).resolve().parents[2]
T = TypeVar("T")
#: Names of beat processes start with this; workers are named `w<n>-<hex>@<host>`.
BEAT_PREFIX = "beat"

#: Worker knobs for tests: short leases and backoffs so failure paths run in seconds.
TEST_WORKER_ENV = {
    # The suite's thresholds of a few dozen tokens are below a fresh server's floors for tenant configs
    # (`om_core.config.trust`; tests/conftest.py lowers them for in-process apps the same way).
    "OM_MEMORY_MIN_TOKENS": "1",
    "OM_MEMORY_MIN_BUFFER_TOKENS": "1",
    "OM_WORKER_LOCK_LEASE_S": "2",
    "OM_WORKER_RETRY_BASE_DELAY_S": "0.2",
    "OM_WORKER_RETRY_MAX_DELAY_S": "2",
    "OM_WORKER_RETRY_MAX_RETRIES": "5",
    "OM_WORKER_SOFT_TIME_LIMIT_S": "120",
    "OM_WORKER_TIME_LIMIT_S": "150",
    "OM_WORKER_VISIBILITY_TIMEOUT_S": "600",
    "OM_WORKER_MAX_DELIVERIES": "3",
    "OM_WORKER_BEAT_INTERVAL_S": "0.5",
    "OM_WORKER_IMPORTS": "tests.support.fake_providers",
    # Off unless a test asks (tests/integration/test_worker_metrics.py): workers of parallel tests would
    # all try the default port.
    "OM_WORKER_METRICS_PORT": "0",
}


def wait_until(predicate: Callable[[], T], *, deadline_s: float, what: str, every_s: float = 0.05) -> T:
    """Poll `predicate` until it returns something truthy; fail with `what` after `deadline_s`."""
    end = time.monotonic() + deadline_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= end:
            raise AssertionError(f"timed out after {deadline_s:.0f}s waiting for {what}")
        time.sleep(every_s)


def redis_db_url(url: str, db: int) -> str:
    """`url` pointing at database `db` (each cluster gets its own)."""
    base = url.rsplit("/", 1)[0] if url.rsplit("/", 1)[-1].isdigit() else url.rstrip("/")
    return f"{base}/{db}"


@dataclass
class Process:
    name: str
    argv: list[str]
    popen: subprocess.Popen[bytes]
    log_path: Path

    def log(self, tail: int = 60) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return ""
        return "\n".join(lines[-tail:])

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, grace_s: float = 15.0) -> None:
        """SIGTERM the process group (warm shutdown), then SIGKILL whatever is left of it."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=grace_s)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=5)


@dataclass
class SentTasks:
    """Every task a producer sent, per thread, so a test waits for exactly the work it caused."""

    by_thread: dict[str, list[tuple[Task, AsyncResult]]] = field(default_factory=lambda: defaultdict(list))
    guard: threading.Lock = field(default_factory=threading.Lock)

    def record(self, task: Task, result: AsyncResult) -> None:
        with self.guard:
            self.by_thread[task.thread_id].append((task, result))

    def take(self, thread_id: str) -> list[tuple[Task, AsyncResult]]:
        with self.guard:
            return list(self.by_thread.pop(thread_id, []))

    def all(self, thread_id: str) -> list[tuple[Task, AsyncResult]]:
        with self.guard:
            return list(self.by_thread.get(thread_id, []))


def wait_results(sent: list[tuple[Task, AsyncResult]], *, deadline_s: float) -> list[Any]:
    """Wait for every result (a failed task's exception is returned, not raised)."""
    end = time.monotonic() + deadline_s
    values = []
    for task, result in sent:
        remaining = end - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"{type(task).__name__} {task.cycle_id} did not finish in {deadline_s:.0f}s")
        values.append(result.get(timeout=remaining, propagate=False, disable_sync_subtasks=False))
    return values


class HoldingExecutor:
    """Keeps what the turn path would enqueue, so a test decides what runs where and when."""

    def __init__(self) -> None:
        self.held: list[Task] = []

    def submit(self, task: Task) -> None:
        self.held.append(task)

    def run(self, task: Task, deadline_s: float) -> bool:
        self.held.append(task)
        return False

    def run_all(self, tasks: Sequence[Task], deadline_s: float) -> bool:
        self.held.extend(tasks)
        return False


class InOrderCeleryExecutor(CeleryExecutor):
    """Sends each background task and waits for it before the turn goes on, as the InlineExecutor runs it.

    A turn can start two background tasks for one thread (a buffered reflection and a buffering run); on
    Celery they race, and which commits first decides what the Observer is shown. Lock-step parity runs use
    this executor so every task sees exactly the state it saw inline; free-running drivers keep the race.
    """

    def __init__(
        self, app: Celery, *, on_sent: Callable[[Task, AsyncResult], None], deadline_s: float
    ) -> None:
        super().__init__(app, on_sent=on_sent)
        self.deadline_s = deadline_s

    def submit(self, task: Task) -> None:
        result = self.send(task)
        result.get(timeout=self.deadline_s, propagate=True, disable_sync_subtasks=False)


@dataclass
class Producer:
    """The engine a test drives (as the API would), its Celery app and what it sent."""

    engine: MemoryEngine
    app: Celery
    sent: SentTasks
    coordination: RedisCoordination

    @contextlib.contextmanager
    def holding(self) -> Iterator[HoldingExecutor]:
        """Turns inside the block start no background work."""
        holder = HoldingExecutor()
        previous, self.engine.executor = self.engine.executor, holder
        try:
            yield holder
        finally:
            self.engine.executor = previous


class WorkerCluster:
    #: Celery pool of the workers this cluster starts (`threads` is the deployment advice for model I/O).
    pool = "prefork"

    def __init__(self, *, postgres_url: str, redis_url: str, workdir: Path, env: Mapping[str, str]) -> None:
        self.postgres_url = postgres_url
        self.redis_url = redis_url
        self.workdir = workdir
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("OM_", "CELERY"))},
            "OM_DATABASE_URL": postgres_url,
            "OM_REDIS_URL": redis_url,
            "OM_TEST_REDIS_URL": redis_url,
            "OM_WORKER_BEAT_SCHEDULE_FILE": str(workdir / "celerybeat-schedule"),
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
            "PYTHONUNBUFFERED": "1",
            **TEST_WORKER_ENV,
            **env,
        }
        self.redis = redis.Redis.from_url(redis_url)
        self.processes: list[Process] = []
        self.app = create_app(self.settings(), WorkerSettings(**self._worker_kwargs()))

    # ---------------------------------------------------------------------------------- settings

    def _worker_kwargs(self) -> dict[str, Any]:
        prefix = "OM_WORKER_"
        fields = WorkerSettings.model_fields
        out: dict[str, Any] = {}
        for key, value in self.env.items():
            name = key[len(prefix) :].lower() if key.startswith(prefix) else None
            if name in fields and name not in ("rate_limits",):
                out[name] = value
        return out

    def _model_call_kwargs(self) -> dict[str, Any]:
        """The model-call policy the workers read from `self.env`, under either of its names: the producer
        app checks it against the workers' time limit as a worker does."""
        out: dict[str, Any] = {}
        for name, info in Settings.model_fields.items():
            alias = info.validation_alias
            if not isinstance(alias, AliasChoices):
                continue
            names = [choice for choice in alias.choices if isinstance(choice, str)]
            value = next((self.env[n] for n in names if n in self.env), None)
            if value is not None:
                out[name] = json.loads(value) if name == "model_rate_limits" else value
        return out

    def settings(self, **overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "database_url": self.postgres_url,
            "redis_url": self.redis_url,
            "config": self.env.get("OM_CONFIG"),
            "model": self.env.get("OM_MODEL"),
            **self._model_call_kwargs(),
        }
        values.update(overrides)
        return Settings(**values)

    # --------------------------------------------------------------------------------- processes

    def start_worker(
        self, queues: list[str], *, concurrency: int = 1, env: Mapping[str, str] | None = None
    ) -> Process:
        return self.start_workers([(queues, concurrency)], env=env)[0]

    def start_workers(
        self, specs: list[tuple[list[str], int]], *, beats: int = 0, env: Mapping[str, str] | None = None
    ) -> list[Process]:
        """Start one worker per (queues, concurrency) and `beats` beat processes, all at once, then wait
        until each worker answers a ping and each beat has started."""
        processes = self.spawn_workers(specs, beats=beats, env=env)
        self.wait_started(processes)
        return processes

    def spawn_workers(
        self, specs: list[tuple[list[str], int]], *, beats: int = 0, env: Mapping[str, str] | None = None
    ) -> list[Process]:
        """`start_workers` without the wait: several clusters can start their processes side by side
        (start-up is mostly imports, one core each) and then wait for all of them."""
        workers = [self._spawn_worker(queues, concurrency, env) for queues, concurrency in specs]
        return workers + [self._spawn_beat(env) for _ in range(beats)]

    def wait_started(self, processes: list[Process]) -> None:
        """Wait until each worker among `processes` answers a ping and each beat has started."""
        for process in processes:
            if process.name.startswith(BEAT_PREFIX):
                self._wait_beat(process)
            else:
                self._wait_ready(process)

    def _spawn_worker(self, queues: list[str], concurrency: int, env: Mapping[str, str] | None) -> Process:
        unknown = set(queues) - set(QUEUES)
        assert not unknown, unknown
        name = f"w{len(self.processes)}-{uuid.uuid4().hex[:6]}@test"
        argv = [
            sys.executable,
            "-m",
            "om_workers.cli",
            "worker",
            "--queues",
            ",".join(queues),
            "--concurrency",
            str(concurrency),
            "--pool",
            self.pool,
            "--hostname",
            name,
            "--loglevel",
            "INFO",
        ]
        return self._spawn(name, argv, env)

    def start_beat(self, env: Mapping[str, str] | None = None) -> Process:
        process = self._spawn_beat(env)
        self._wait_beat(process)
        return process

    def _spawn_beat(self, env: Mapping[str, str] | None) -> Process:
        argv = [sys.executable, "-m", "om_workers.cli", "beat", "--loglevel", "INFO"]
        name = f"{BEAT_PREFIX}{len(self.processes)}"
        schedule = {"OM_WORKER_BEAT_SCHEDULE_FILE": str(self.workdir / f"{name}-schedule")}
        return self._spawn(name, argv, {**(env or {}), **schedule})

    def _wait_beat(self, process: Process, deadline_s: float = 90.0) -> None:
        wait_until(
            lambda: "beat: Starting" in process.log(200) or not process.alive(),
            deadline_s=deadline_s,
            what=f"{process.name} to start",
        )
        assert process.alive(), process.log()

    def _spawn(self, name: str, argv: list[str], env: Mapping[str, str] | None) -> Process:
        log_path = self.workdir / f"{name.split('@')[0]}.log"
        with open(log_path, "wb") as log:
            popen = subprocess.Popen(
                argv,
                cwd=REPO,
                env={**self.env, **(env or {})},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        process = Process(name, argv, popen, log_path)
        self.processes.append(process)
        return process

    def _wait_ready(self, process: Process, deadline_s: float = 90.0) -> None:
        def answered() -> bool:
            if not process.alive():
                raise AssertionError(f"worker {process.name} exited:\n{process.log()}")
            replies = self.app.control.ping(destination=[process.name], timeout=0.5)
            return any(process.name in reply for reply in replies or [])

        try:
            wait_until(answered, deadline_s=deadline_s, what=f"worker {process.name} to answer a ping")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{process.log()}") from None

    def stop(self, processes: list[Process] | None = None) -> None:
        """Stop `processes` (default: every process): all are told at once, so their warm shutdowns
        overlap."""
        chosen = list(self.processes if processes is None else processes)
        for process in chosen:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.popen.pid, signal.SIGTERM)
        for process in reversed(chosen):
            process.stop()
            self.processes.remove(process)

    # ---------------------------------------------------------------------------------- producer

    def producer(self, *, in_order: bool = False, **settings_overrides: Any) -> Producer:
        """An engine in this process that sends its background work to the workers.

        Turns wait up to 120 s for blocking work by default: a test machine under load must not turn a
        slow observation into a "deadline" that changes what gets stored. `in_order` makes each background
        task finish before the turn goes on (`InOrderCeleryExecutor`)."""
        settings = self.settings(**{"blocking_deadline_s": 120.0, **settings_overrides})
        app = create_app(settings, WorkerSettings(**self._worker_kwargs()))
        sent = SentTasks()
        coordination = RedisCoordination(redis.Redis.from_url(self.redis_url))
        engine = MemoryEngine(
            make_engine(settings.database_url),
            models=ModelClient(),
            config=settings.om_config,
            coordination=coordination,
            executor=(
                InOrderCeleryExecutor(app, on_sent=sent.record, deadline_s=settings.blocking_deadline_s)
                if in_order
                else CeleryExecutor(app, on_sent=sent.record)
            ),
            publisher=RedisPublisher(redis.Redis.from_url(self.redis_url)),
            settings=engine_settings(settings),
        )
        return Producer(engine, app, sent, coordination)

    # ----------------------------------------------------------------------------------- helpers

    def queue_lengths(self) -> dict[str, int]:
        return {name: int(self.redis.llen(name)) for name in QUEUES}

    def locks(self) -> list[str]:
        return sorted(key.decode() for key in self.redis.scan_iter("om:lock:*"))

    def drained(self) -> bool:
        """No queued message, none delivered but unacknowledged, no OM lock held."""
        return (
            not any(self.queue_lengths().values())
            and int(self.redis.hlen("unacked")) == 0
            and not self.locks()
        )


@contextlib.contextmanager
def worker_cluster(
    *,
    postgres_url: str,
    redis_url: str,
    workdir: Path,
    db: int,
    env: Mapping[str, str] | None = None,
    pool: str = WorkerCluster.pool,
) -> Iterator[WorkerCluster]:
    url = redis_db_url(redis_url, db)
    redis.Redis.from_url(url).flushdb()
    cluster = WorkerCluster(postgres_url=postgres_url, redis_url=url, workdir=workdir, env=env or {})
    cluster.pool = pool
    try:
        yield cluster
    finally:
        cluster.stop()


def set_thread_config(db_url_or_engine: Any, thread_id: str, overrides: Mapping[str, Any]) -> None:
    """Create `thread_id` with per-thread OM option overrides (as the API's thread config would)."""
    engine = make_engine(db_url_or_engine) if isinstance(db_url_or_engine, str) else db_url_or_engine
    with engine.begin() as conn:
        history.ensure_thread(conn, thread_id, thread_id)
        conn.execute(
            update(schema.threads)
            .where(schema.threads.c.id == thread_id)
            .values(config_overrides=dict(overrides))
        )


def run_inline(database_url: str, config_json: str, jobs: list[tuple[str, int]], target_tokens: int) -> None:
    """The in-process reference: play each (thread id, seed) conversation with the InlineExecutor.

    Runs in its own (spawned) process next to the distributed run, so both use the machine at once.
    """
    from om_core.config.options import ObservationalMemoryConfig
    from om_core.engine import EngineSettings
    from tests.support.conversation import generate

    engine = MemoryEngine(
        make_engine(database_url),
        models=ModelClient(),
        config=ObservationalMemoryConfig.parse_json(config_json),
        settings=EngineSettings(blocking_deadline_s=120.0),
    )
    for thread_id, seed in jobs:
        for message in generate(seed, target_tokens).turns():
            result = engine.ingest_turn(thread_id, thread_id, [message])
            if result.degraded:
                raise AssertionError(f"reference turn degraded: {result.degraded_reason}")
