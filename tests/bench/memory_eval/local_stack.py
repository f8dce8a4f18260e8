"""A stack of its own for the standalone run, the bench section and the smoke test: Postgres and Redis (from
the environment under `scripts/testenv.py run -- ...`, else throwaway ones), one worker process serving
every OM queue (observation, reflection, buffering, indexing) and the API, with the offline model.

Under `testenv.py` the database is its pgvector Postgres (`OM_TEST_PGVECTOR_URL`) when there is one, so
search ranks by the embedder as well as by words; without it search is lexical only (the report says
which).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from om_adapters.celery_executor import CeleryExecutor
from om_core.engine import IndexThread, new_cycle_id
from om_core.store.db import make_engine
from om_core.store.migrate import upgrade
from om_core.tenancy.scoped_ids import StoredId
from tests.bench.memory_eval.runner import Stack
from tests.bench.stack import Services, api_server, new_key, services, worker_cluster

REDIS_DB = 14
#: The offline Observer and Reflector (the offline embedder is the default).
ENV = {"OM_MODEL": "om-local/extractive"}
QUEUES = ["om.observe", "om.reflect", "om.buffer", "om.index"]


@contextlib.contextmanager
def local_stack(workdir: Path, *, concurrency: int = 4) -> Iterator[Stack]:
    workdir.mkdir(parents=True, exist_ok=True)
    with (
        services() as plain,
        _with_vectors(plain) as svc,
        worker_cluster(svc, workdir / "workers", redis_db=REDIS_DB, env=ENV) as cluster,
    ):
        spawned = cluster.spawn_workers([(QUEUES, concurrency)])
        with api_server(svc, cluster.redis_url, workdir / "api", env=ENV) as api:
            cluster.wait_started(spawned)
            executor = CeleryExecutor(cluster.app)
            tenant = f"mem-eval-{workdir.name}"

            def submit(thread: StoredId) -> None:
                executor.submit(IndexThread(thread, new_cycle_id("index")))

            yield Stack(
                base_url=api.base_url,
                api_key=new_key(svc, tenant),
                tenant=tenant,
                db=svc.db,
                submit_index=submit,
                drained=cluster.drained,
            )


@contextlib.contextmanager
def _with_vectors(svc: Services) -> Iterator[Services]:
    """The pgvector Postgres `testenv.py` exported, migrated, in place of the plain one; else `svc`."""
    url = os.environ.get("OM_TEST_PGVECTOR_URL")
    if not url:
        yield svc
        return
    db = make_engine(url)
    try:
        upgrade(db)
        yield Services(url, svc.redis_url, db, started_here=False)
    finally:
        db.dispose()
