"""Indexing through a real Celery worker on the `om.index` queue, on the pgvector Postgres: a turn of a
thread with retrieval on sends one `IndexThread` (throttled per interval), the worker writes the
documents and their vectors (offline embedder through litellm in the worker process), and search finds
an exact code lexically and a misspelt phrase by its vector. A turn of a thread with retrieval off sends
nothing to the queue."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, func, select

from om_core.engine import INDEX_QUEUE, IndexThread, kind_of
from om_core.maintenance.sweep import MaintenancePolicy, run_maintenance
from om_core.messages import text_message
from om_core.search import SearchRequest
from om_core.store import schema
from tests.support.workers import WorkerCluster, set_thread_config, wait_results, worker_cluster

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

T0 = datetime(2026, 7, 1, 8, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def cluster(
    pgvector_url: str, redis_url: str, pgvector_engine: Engine, tmp_path_factory: Any
) -> Iterator[WorkerCluster]:
    workdir: Path = tmp_path_factory.mktemp("workers-index")
    env = {"OM_MODEL": "om-local/extractive", "OM_INDEX_INTERVAL_S": "3600"}
    with worker_cluster(postgres_url=pgvector_url, redis_url=redis_url, workdir=workdir, db=5, env=env) as c:
        c.start_worker([INDEX_QUEUE], concurrency=2)
        yield c


def _documents(db: Engine, thread_id: str, *, embedded: bool = False) -> int:
    D = schema.search_docs
    query = select(func.count()).select_from(D).where(D.c.thread_id == thread_id)
    if embedded:
        query = query.where(D.c.embedding_model.is_not(None))
    with db.connect() as conn:
        return int(conn.execute(query).scalar() or 0)


def test_a_turn_with_retrieval_on_is_indexed_by_the_index_worker(
    cluster: WorkerCluster, pgvector_engine: Engine
) -> None:
    producer = cluster.producer(index_interval_s=3600)
    thread = f"idx-{uuid.uuid4().hex[:8]}"
    set_thread_config(pgvector_engine, thread, {"retrieval": {"vector": True}})
    history = [
        text_message(
            f"m{i}",
            "user" if i % 2 == 0 else "assistant",
            f"Chat line {i} about the garden.",
            T0 + timedelta(minutes=i),
        )
        for i in range(30)
    ]
    history[7] = text_message(
        "m7", "user", "The alarm code for the Lindqvist warehouse is 7731-KD.", T0 + timedelta(minutes=7)
    )
    producer.engine.ingest_turn(thread, thread, history[:20])
    first = [(task, result) for task, result in producer.sent.all(thread) if isinstance(task, IndexThread)]
    assert len(first) == 1 and kind_of(first[0][0]).queue == INDEX_QUEUE
    assert wait_results(first, deadline_s=120) == [True]
    assert _documents(pgvector_engine, thread, embedded=True) == 20

    # Within the interval a turn asks for nothing; the maintenance pass asks once the thread was quiet
    # for an interval (the throttle's trailing edge).
    producer.engine.ingest_turn(thread, thread, history[20:])
    assert len([task for task, _ in producer.sent.all(thread) if isinstance(task, IndexThread)]) == 1
    report = run_maintenance(producer.engine, MaintenancePolicy(), now=datetime.now(UTC) + timedelta(hours=2))
    assert thread in report.reindexed
    later = [(task, result) for task, result in producer.sent.all(thread) if isinstance(task, IndexThread)]
    assert len(later) == 2
    assert wait_results(later[1:], deadline_s=120) == [True]
    assert _documents(pgvector_engine, thread, embedded=True) == 30
    assert (
        run_maintenance(
            producer.engine, MaintenancePolicy(), now=datetime.now(UTC) + timedelta(hours=2)
        ).reindexed
        == []
    )

    searcher = producer.engine.searcher_for(producer.engine.thread_config(thread))
    exact = searcher(SearchRequest(resource_id=thread, query="7731-KD", limit=3))
    assert exact[0].ref == "m7" and "lexical" in exact[0].sources
    fuzzy = searcher(SearchRequest(resource_id=thread, query="lindquist warehous alarms", limit=3))
    assert fuzzy[0].ref == "m7" and "vector" in fuzzy[0].sources


def test_a_turn_with_retrieval_off_sends_nothing_to_the_index_queue(
    cluster: WorkerCluster, pgvector_engine: Engine
) -> None:
    producer = cluster.producer(index_interval_s=3600)
    thread = f"plain-{uuid.uuid4().hex[:8]}"
    set_thread_config(pgvector_engine, thread, {"observation": {"messageTokens": 30000}})
    producer.engine.ingest_turn(thread, thread, [text_message("m0", "user", "hello there", T0)])
    assert not [task for task, _ in producer.sent.all(thread) if isinstance(task, IndexThread)]
    assert _documents(pgvector_engine, thread) == 0
    with pgvector_engine.connect() as conn:
        state = conn.execute(
            select(func.count())
            .select_from(schema.index_state)
            .where(schema.index_state.c.thread_id == thread)
        ).scalar()
    assert state == 0
