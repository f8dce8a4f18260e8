"""Resource scope in its production shape: five threads of one user posting at once through the API,
Celery workers observing the resource's batches in parallel, Postgres and Redis real.

The model is the scripted fake provider behind litellm (`tests/support/fake_providers.py`), answering
like the offline model after a fixed delay, so two batches of one observation visibly overlap in time.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

import pytest
from sqlalchemy import Engine

from om_api.client import OMClient
from om_core.engine import resource_key
from om_core.store import records
from om_core.store.outbox import list_events
from om_core.store.types import StoredEvent
from om_core.tenancy import access
from om_core.tenancy.scoped_ids import scoped_id
from tests.support import fake_providers as fake
from tests.support.api_server import ApiServer, new_id, run_api_server
from tests.support.invariants import check_thread
from tests.support.workers import TEST_WORKER_ENV, WorkerCluster, worker_cluster

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

THREADS = 5
TURNS = 12
_SECTION = re.compile(r'<thread id="([^"]+)">')


@pytest.fixture(scope="module")
def cluster(
    postgres_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerCluster]:
    with worker_cluster(
        postgres_url=postgres_url,
        redis_url=redis_url,
        workdir=tmp_path_factory.mktemp("workers"),
        db=12,
        env={"OM_MODEL": "om-local/extractive"},
    ) as workers:
        # Two processes on the observe queue: two batches can run at the same time.
        workers.start_workers([(["om.observe"], 1), (["om.observe", "om.reflect", "om.buffer"], 1)])
        yield workers


@pytest.fixture(scope="module")
def api(
    cluster: WorkerCluster, postgres_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApiServer]:
    env = {**TEST_WORKER_ENV, "OM_EXECUTOR": "celery", "OM_BLOCKING_DEADLINE_S": "60"}
    with run_api_server(postgres_url, cluster.redis_url, tmp_path_factory.mktemp("api"), env=env) as server:
        yield server


def _text(thread: int, turn: int) -> str:
    return f"Thread {thread} turn {turn}: " + " ".join(
        f"topic{(thread * 31 + turn * 7 + k) % 97}" for k in range(45)
    )


def _overlapping(events: list[StoredEvent]) -> bool:
    """Whether two batches of one observation (cycle ids `<plan>-b<i>`) ran at the same time."""
    spans: dict[str, tuple[datetime, datetime]] = {}
    for event in events:
        cycle = event.cycle_id or ""
        if "-b" not in cycle or event.payload.get("operationType") != "observation":
            continue
        if event.type == "data-om-observation-start":
            start = datetime.fromisoformat(event.payload["startedAt"])
            spans[cycle] = (start, spans.get(cycle, (start, start))[1])
        elif event.type == "data-om-observation-end":
            end = datetime.fromisoformat(event.payload["completedAt"])
            spans[cycle] = (spans.get(cycle, (end, end))[0], end)
    by_plan: dict[str, list[tuple[datetime, datetime]]] = {}
    for cycle, span in spans.items():
        by_plan.setdefault(cycle.rsplit("-b", 1)[0], []).append(span)
    return any(
        a[0] < b[1] and b[0] < a[1]
        for plan in by_plan.values()
        for i, a in enumerate(plan)
        for b in plan[i + 1 :]
    )


def test_five_threads_of_one_user_share_one_log_observed_in_parallel_batches(
    api: ApiServer, cluster: WorkerCluster, pg_engine: Engine
) -> None:
    tenant = new_id("tenant")
    key = access.create_key(pg_engine, tenant, "resource-scope").secret
    user = new_id("user")
    threads = [f"{user}-t{k}" for k in range(THREADS)]
    namespace = f"ns{uuid.uuid4().hex[:8]}"
    cluster.redis.set(fake.default_key(namespace), "sleep:0.4")
    with OMClient(api.base_url, key, timeout=120) as om:
        config = om.set_resource_config(
            user,
            {
                "scope": "resource",
                "model": f"om-fake/{namespace}",
                "obscureThreadIds": False,
                "observation": {"messageTokens": 1500, "maxTokensPerBatch": 500},
                "reflection": {"observationTokens": 100_000},
            },
        )
        assert config.effective["scope"] == "resource"

        def converse(index: int) -> list[object]:
            out = []
            for turn in range(TURNS):
                role = "user" if turn % 2 == 0 else "assistant"
                message = {"id": f"m{turn}", "role": role, "text": _text(index, turn)}
                out.append(om.post_turn(threads[index], [message], resource_id=user, context="full"))
            return out

        with ThreadPoolExecutor(THREADS) as pool:
            results = list(pool.map(converse, range(THREADS)))
        final = om.observe(threads[0])
        assert final.error is None

        for index, turns in enumerate(results):
            others = [
                t for t in turns if any("<other-conversation id=" in m for m in t.context.system_messages)
            ]
            assert others, f"thread {index} never saw the other threads"
            assert not any(
                f'<other-conversation id="{threads[index]}">' in m
                for t in turns
                for m in t.context.system_messages
            ), "a thread is never shown to itself as another conversation"
            assert [m.id for m in om.messages(threads[index], limit=100).messages] == [
                f"m{i}" for i in range(TURNS)
            ]
        view = om.observations(threads[1])

    log = records.get_head(pg_engine, resource_key(scoped_id(tenant, user)))
    assert log is not None and view.active is not None
    assert view.active.observations == log.active_observations, "every thread reads the one shared log"
    assert set(_SECTION.findall(log.active_observations)) == set(threads)
    events: list[StoredEvent] = []
    for thread in threads:
        stored = scoped_id(tenant, thread)
        report = check_thread(pg_engine, stored)
        assert report.violations == [], (thread, report.violations)
        assert report.cursor > 0
        events.extend(list_events(pg_engine, thread_id=stored, limit=10_000))
    assert _overlapping(events), "batches of one observation ran in parallel on the workers"
