"""The same thread and resource ids in two tenants through the production shape: the API in celery mode,
Celery workers buffering and observing, beat firing idle activation. Every task, lock, trigger and event
is keyed by the stored id, so each tenant's background work lands on its own thread only."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, select

from om_api.client import OMClient
from om_core.engine import QUEUES
from om_core.engine import events as ev
from om_core.store import schema
from om_core.store.outbox import list_events
from om_core.tenancy import access
from om_core.tenancy.scoped_ids import scoped_id
from tests.support.api_server import ApiServer, new_id, run_api_server
from tests.support.invariants import check_thread
from tests.support.workers import TEST_WORKER_ENV, WorkerCluster, wait_until, worker_cluster

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

TTL_MS = 3000
#: Buffering in the workers, activation only once the thread is idle (beat), never by the threshold.
CONFIG = {
    "observation": {"messageTokens": 20_000, "bufferTokens": 0.05, "activateAfterIdle": f"{TTL_MS}ms"},
    "reflection": {"observationTokens": 40_000},
}


@pytest.fixture(scope="module")
def cluster(
    postgres_url: str, redis_url: str, pg_engine: Engine, tmp_path_factory: Any
) -> Iterator[WorkerCluster]:
    workdir = tmp_path_factory.mktemp("tenant-workers")
    env = {"OM_MODEL": "om-local/extractive", "LITELLM_LOG": "ERROR"}
    with worker_cluster(postgres_url=postgres_url, redis_url=redis_url, workdir=workdir, db=9, env=env) as c:
        c.start_workers([(list(QUEUES), 2)], beats=1)
        yield c


@pytest.fixture(scope="module")
def api(cluster: WorkerCluster, postgres_url: str, tmp_path_factory: Any) -> Iterator[ApiServer]:
    env = {**TEST_WORKER_ENV, "OM_EXECUTOR": "celery", "OM_PLUGINS": ""}
    with run_api_server(postgres_url, cluster.redis_url, tmp_path_factory.mktemp("api"), env=env) as server:
        yield server


def _idle_activations(db: Engine, stored: str) -> list[dict[str, Any]]:
    return [
        e.payload
        for e in list_events(db, thread_id=stored, limit=10_000, types=[ev.ACTIVATION])
        if e.payload.get("triggeredBy") == "ttl"
    ]


def _explain(db: Engine, stored: str) -> str:
    with db.connect() as conn:
        triggers = conn.execute(select(schema.triggers).where(schema.triggers.c.thread_id == stored)).all()
    events = [(e.type, e.payload.get("triggeredBy")) for e in list_events(db, thread_id=stored, limit=1000)]
    return f"triggers {triggers}, events {events[-12:]}"


def test_workers_and_beat_keep_two_tenants_with_the_same_ids_apart(
    api: ApiServer, cluster: WorkerCluster, pg_engine: Engine
) -> None:
    thread, resource = "t1", "user-1"
    tenants = {
        name: access.create_key(pg_engine, name, "workers").secret for name in (new_id("a"), new_id("b"))
    }
    secrets = dict(zip(tenants, ("alphasecret", "betasecret"), strict=True))
    for name, key in tenants.items():
        with OMClient(api.base_url, key) as client:
            client.set_config(thread, CONFIG, resource_id=resource)
            for i in range(12):
                text = f"{secrets[name]} note {i}: " + " ".join(
                    f"{secrets[name]}{(i * 5 + k) % 41}" for k in range(90)
                )
                client.post_turn(
                    thread, [{"id": f"m{i}", "role": "user", "text": text}], resource_id=resource
                )
    # Chunks committed after a trigger's due time wait for the next turn; a short turn once the workers are
    # done re-arms each thread's idle trigger with its chunks in place.
    wait_until(cluster.drained, deadline_s=90, what="the workers to buffer both threads")
    for key in tenants.values():
        with OMClient(api.base_url, key) as client:
            client.post_turn(thread, [{"id": "last", "role": "assistant", "text": "glad to help"}])

    for name in tenants:
        stored = scoped_id(name, thread)
        try:
            wait_until(
                lambda stored=stored: _idle_activations(pg_engine, stored),
                deadline_s=TTL_MS / 1000 + 60,
                what=f"beat to idle-activate the buffered chunks of {stored}",
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}; {_explain(pg_engine, stored)}") from None
    wait_until(cluster.drained, deadline_s=90, what="queues and locks to drain")

    for name, key in tenants.items():
        other = next(s for n, s in secrets.items() if n != name)
        with OMClient(api.base_url, key) as client:
            log = client.observations(thread)
            assert log.active is not None and secrets[name] in log.active.observations
            assert other not in log.active.observations, "one tenant's observations reached the other"
            events = list(client.events(thread, follow=False))
        assert {e.type for e in events} >= {ev.BUFFERING_END, ev.ACTIVATION}
        assert all(other not in e.model_dump_json() for e in events)
        assert check_thread(pg_engine, scoped_id(name, thread)).violations == []
    assert not any(lock.endswith(f":{thread}") for lock in cluster.locks()), "no lock under a bare public id"
