"""The real stack the benchmarks run against: Postgres, Redis, the API process, Celery worker processes.

Services come from `scripts/testenv.py` (a throwaway Postgres and Redis): reused when the environment
already names them (`OM_TEST_DATABASE_URL`, `OM_TEST_REDIS_URL`, as under `testenv.py run -- ...`),
started here otherwise. The API and workers are the test suite's own launchers
(`tests/support/api_server.py`, `tests/support/workers.py`), configured as production would be: the celery
executor, API keys, production worker knobs (not the tests' short leases), and a threads pool for workers,
because their work is waiting on model calls.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from sqlalchemy import Engine

from om_adapters.celery_app import WorkerSettings
from om_core.config.settings import Settings
from om_core.store.db import make_engine
from om_core.store.migrate import upgrade
from om_core.tenancy import access
from tests.support.api_server import ApiServer, run_api_server
from tests.support.workers import TEST_WORKER_ENV, Process, WorkerCluster, redis_db_url

REPO = Path(__file__).resolve().parents[2]
FAKE_MODEL_MODULE = "tests.bench.fake_latency_model"
#: The API in celery mode calls no model (per-thread configs only name the latency model; workers load
#: it), and the benchmarks do not use the proxy: no plugin, as a deployment without the proxy runs it.
API_PLUGINS = ""


def _shipped_default(key: str) -> str | None:
    """The default of a variable the test launcher shortens: a worker setting, or a model-call setting
    under its former worker name (`OM_WORKER_RETRY_*` is read as `OM_MODEL_RETRY_*`)."""
    name = key.removeprefix("OM_WORKER_").lower()
    if name in WorkerSettings.model_fields:
        return str(WorkerSettings.model_fields[name].default)
    if f"model_{name}" in Settings.model_fields:
        return str(Settings.model_fields[f"model_{name}"].default)
    return None


#: The test launcher's short leases and backoffs reset to production defaults: a benchmark measures
#: the shipped configuration.
PRODUCTION_WORKER_ENV = {
    key: default
    for key in TEST_WORKER_ENV
    if (default := _shipped_default(key)) is not None
    and key not in ("OM_WORKER_IMPORTS", "OM_WORKER_BEAT_INTERVAL_S")
}


def _testenv() -> ModuleType:
    path = REPO / "scripts" / "testenv.py"
    spec = importlib.util.spec_from_file_location("om_testenv", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while it executes
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class Services:
    database_url: str
    redis_url: str
    db: Engine
    started_here: bool


@contextlib.contextmanager
def services() -> Iterator[Services]:
    """Postgres and Redis: the ones in the environment, or throwaway ones started (and stopped) here."""
    database_url = os.environ.get("OM_TEST_DATABASE_URL")
    redis_url = os.environ.get("OM_TEST_REDIS_URL")
    with contextlib.ExitStack() as stack:
        started = not (database_url and redis_url)
        if started:
            testenv = _testenv()
            workdir = Path(tempfile.mkdtemp(prefix="om-bench-"))
            stack.callback(lambda: __import__("shutil").rmtree(workdir, ignore_errors=True))
            database_url = stack.enter_context(testenv.postgres(workdir))
            redis_url = stack.enter_context(testenv.redis(workdir))
        assert database_url and redis_url
        db = make_engine(database_url)
        upgrade(db)
        stack.callback(db.dispose)
        yield Services(database_url, redis_url, db, started)


class ThreadPoolCluster(WorkerCluster):
    """`WorkerCluster` whose workers run the threads pool (`om worker --pool threads`): model calls are
    I/O, so one process overlaps N of them without N processes' memory."""

    pool = "threads"

    def _spawn_worker(self, queues: list[str], concurrency: int, env: Mapping[str, str] | None) -> Process:
        name = f"w{len(self.processes)}-{os.urandom(3).hex()}@bench"
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
            "WARNING",
        ]
        return self._spawn(name, argv, env)


@contextlib.contextmanager
def worker_cluster(
    svc: Services, workdir: Path, *, redis_db: int, env: Mapping[str, str] | None = None
) -> Iterator[ThreadPoolCluster]:
    """A fresh Redis database (broker, locks, counters) and the workers started on it."""
    import redis

    url = redis_db_url(svc.redis_url, redis_db)
    redis.Redis.from_url(url).flushdb()
    workdir.mkdir(parents=True, exist_ok=True)
    cluster = ThreadPoolCluster(
        postgres_url=svc.database_url,
        redis_url=url,
        workdir=workdir,
        env={**PRODUCTION_WORKER_ENV, "OM_WORKER_IMPORTS": FAKE_MODEL_MODULE, **(env or {})},
    )
    try:
        yield cluster
    finally:
        cluster.stop()


@contextlib.contextmanager
def api_server(
    svc: Services, redis_url: str, workdir: Path, *, env: Mapping[str, str] | None = None
) -> Iterator[ApiServer]:
    """The API process in production shape: `om serve`, celery executor, API keys, production blocking
    deadline."""
    settings: dict[str, str] = {
        "OM_EXECUTOR": "celery",
        "OM_AUTH": "keys",
        "OM_PLUGINS": API_PLUGINS,
        "OM_BLOCKING_DEADLINE_S": "30",
        "OM_SSE_HEARTBEAT_S": "15",
        "OM_SSE_POLL_S": "1",
        **PRODUCTION_WORKER_ENV,
        **(env or {}),
    }
    with run_api_server(svc.database_url, redis_url, workdir, env=settings, om_serve=True) as server:
        yield server


def new_key(svc: Services, tenant: str) -> str:
    return access.create_key(svc.db, tenant, "bench").secret


def config_env(config: Mapping[str, Any]) -> dict[str, str]:
    import json

    return {"OM_CONFIG": json.dumps(dict(config))}
