"""The API in its production shape: `OM_EXECUTOR=celery`, real Celery worker processes on separate queues,
Redis for the broker, locks and live events, Postgres for everything stored.

Background work runs in the workers, so the events a client streams are published by other processes and
reach it through Redis pub/sub; a broker that is down is a 503 that writes nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import Engine

from om_api.client import OMClient
from om_core.store import history
from om_core.tenancy import access
from om_core.tenancy.scoped_ids import scoped_id
from tests.support.api_server import ApiServer, Follower, free_port, new_id, run_api_server
from tests.support.invariants import check_thread
from tests.support.workers import TEST_WORKER_ENV, WorkerCluster, worker_cluster

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

CYCLE = {"observation": {"messageTokens": 1500}, "reflection": {"observationTokens": 600}}


@pytest.fixture(scope="module")
def cluster(
    postgres_url: str, redis_url: str, pg_engine: Engine, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerCluster]:
    workdir = tmp_path_factory.mktemp("workers")
    with worker_cluster(
        postgres_url=postgres_url,
        redis_url=redis_url,
        workdir=workdir,
        db=11,
        env={"OM_MODEL": "om-local/extractive"},
    ) as workers:
        workers.start_worker(["om.observe", "om.reflect"])
        workers.start_worker(["om.buffer"])
        yield workers


@pytest.fixture(scope="module")
def distributed(
    cluster: WorkerCluster, postgres_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApiServer]:
    env = {**TEST_WORKER_ENV, "OM_EXECUTOR": "celery", "OM_BLOCKING_DEADLINE_S": "60"}
    with run_api_server(postgres_url, cluster.redis_url, tmp_path_factory.mktemp("api"), env=env) as server:
        yield server


def test_a_conversation_through_the_api_with_workers(
    distributed: ApiServer, cluster: WorkerCluster, pg_engine: Engine
) -> None:
    tenant = new_id("tenant")
    key = access.create_key(pg_engine, tenant, "distributed").secret
    thread = new_id("dist")
    with OMClient(distributed.base_url, key) as om:
        om.set_config(thread, CYCLE, resource_id=thread)
        follower = Follower(distributed.base_url, key, thread)
        try:
            turns = []
            for i in range(40):
                role = "user" if i % 2 == 0 else "assistant"
                text = f"Turn {i}: " + " ".join(f"topic{(i * 13 + k) % 89}" for k in range(70))
                message = {"id": f"m{i}", "role": role, "text": text}
                turns.append(om.post_turn(thread, [message], context="full"))
            seen = follower.wait_for(
                lambda got: (
                    any(e.type == "data-om-activation" for e in got)
                    and any(e.type == "data-om-buffering-end" for e in got)
                )
            )
        finally:
            follower.close()

        ends = [e for e in seen if e.type == "data-om-buffering-end"]
        assert ends and all(e.data["observations"].strip() for e in ends), "workers buffered and published"
        assert any("<observations>" in t.context.system_messages for t in turns)
        assert max(t.status.windows.active.messages.tokens for t in turns) <= 1800 + 400
        assert [m.id for m in om.messages(thread, limit=500).messages] == [f"m{i}" for i in range(40)]
    assert check_thread(pg_engine, scoped_id(tenant, thread)).violations == []
    metrics = distributed.metrics()
    assert 'om_queue_depth{queue="om.buffer"}' in metrics
    # Each process reports what it ran: the workers buffered, so this API counts no buffering run.
    assert 'om_memory_cycles_total{kind="buffering"' not in metrics
    ready = httpx.get(distributed.base_url + "/readyz").json()
    assert ready["checks"]["broker"]["ok"] is True


@pytest.fixture
def broker_down(postgres_url: str, pg_engine: Engine, tmp_path: Path) -> Iterator[ApiServer]:
    dead = f"redis://127.0.0.1:{free_port()}/0"
    env = {"OM_EXECUTOR": "celery", "OM_AUTH": "none"}
    with run_api_server(postgres_url, dead, tmp_path, env=env, probe="/healthz") as server:
        yield server


def test_the_broker_down_is_503_and_nothing_is_written(broker_down: ApiServer, pg_engine: Engine) -> None:
    ready = httpx.get(broker_down.base_url + "/readyz")
    assert ready.status_code == 503 and ready.json()["checks"]["broker"]["ok"] is False
    thread = new_id("nobroker")
    turn = httpx.post(
        f"{broker_down.base_url}/v1/threads/{thread}/turns",
        json={"messages": [{"role": "user", "text": "hi"}]},
    )
    assert turn.status_code == 503
    assert turn.json()["error"]["code"] == "broker_unavailable"
    assert history.get_thread(pg_engine, thread) is None
