"""Delivery faults with real worker processes: a worker killed mid-call, a poison task, two workers on one
window, and a lock that expires under a stalled holder (issue 3, "Done when").

The model is the scripted litellm provider of `tests/support/fake_providers.py`, selected per thread
through the thread's config, so the engine, `ModelClient` and the workers run unchanged. Every scenario
ends with `check_thread`: every stored part covered exactly once, or still raw.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy import Engine, func, select

from om_adapters.celery_executor import CeleryExecutor
from om_core.coordination import Keys
from om_core.engine import BufferObservation, Observe, TurnResult, lookup_key, new_cycle_id
from om_core.engine import events as ev
from om_core.messages import Role, text_message
from om_core.store import records, schema
from om_core.store.outbox import list_events
from om_workers.tasks import delivery_key
from tests.support import fake_providers as fake
from tests.support.invariants import check_thread
from tests.support.workers import Producer, WorkerCluster, set_thread_config, wait_until, worker_cluster

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

T0 = datetime(2026, 3, 3, 9, 0, tzinfo=UTC)
WORDS = [
    "harbor",
    "lantern",
    "copper",
    "meadow",
    "signal",
    "orchard",
    "velvet",
    "canyon",
    "ember",
    "quartz",
    "willow",
    "falcon",
]


@pytest.fixture(scope="module")
def cluster(
    postgres_url: str, redis_url: str, pg_engine: Engine, tmp_path_factory: Any
) -> Iterator[WorkerCluster]:
    workdir: Path = tmp_path_factory.mktemp("workers-faults")
    env = {"OM_MODEL": "om-local/extractive", "LITELLM_LOG": "ERROR"}
    with worker_cluster(postgres_url=postgres_url, redis_url=redis_url, workdir=workdir, db=2, env=env) as c:
        c.start_workers([(["om.buffer", "om.observe"], 1), (["om.buffer", "om.observe"], 1)])
        yield c


@pytest.fixture(scope="module")
def producer(cluster: WorkerCluster) -> Producer:
    return cluster.producer()


def scripted_thread(
    cluster: WorkerCluster,
    producer: Producer,
    *actions: str,
    default: str | None = None,
    messages: int = 10,
    hold: bool = True,
    **observation: Any,
) -> tuple[str, str]:
    """A thread whose model is a fresh fake namespace scripted with `actions` (then `default`), holding
    `messages` turns. With `hold`, the turns start no background work: the test sends what it needs."""
    namespace = f"ns{uuid.uuid4().hex[:8]}"
    thread_id = f"faults-{namespace}"
    set_thread_config(
        producer.engine.db,
        thread_id,
        {"model": f"om-fake/{namespace}", "observation": {"messageTokens": 20_000, **observation}},
    )
    if actions:
        cluster.redis.rpush(fake.script_key(namespace), *actions)
    if default is not None:
        cluster.redis.set(fake.default_key(namespace), default)
    with producer.holding() if hold else contextlib.nullcontext():
        play(producer, thread_id, messages)
    return thread_id, namespace


def play(producer: Producer, thread_id: str, messages: int) -> list[TurnResult]:
    results = []
    for i in range(messages):
        text = f"Message {i}: " + " ".join(WORDS[(i * 5 + k * k) % len(WORDS)] for k in range(150))
        role: Role = "user" if i % 2 == 0 else "assistant"
        message = text_message(f"m{i}", role, text, T0 + timedelta(minutes=i))
        results.append(producer.engine.ingest_turn(thread_id, thread_id, [message]))
    return results


def fake_calls(client: redis.Redis, namespace: str) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in client.lrange(fake.calls_key(namespace), 0, -1)]


def chunk_rows(db: Engine, thread_id: str, cycle_id: str | None = None) -> int:
    query = (
        select(func.count())
        .select_from(schema.chunks)
        .where(schema.chunks.c.lookup_key == lookup_key(thread_id))
    )
    if cycle_id is not None:
        query = query.where(schema.chunks.c.cycle_id == cycle_id)
    with db.connect() as conn:
        return int(conn.execute(query).scalar() or 0)


def event_count(db: Engine, thread_id: str, kind: str, cycle_id: str) -> int:
    return sum(
        1
        for e in list_events(db, thread_id=thread_id, limit=10_000)
        if e.type == kind and e.cycle_id == cycle_id
    )


def assert_covered_once(db: Engine, thread_id: str) -> None:
    report = check_thread(db, thread_id)
    assert report.violations == [], report.violations


def buffer_task(thread_id: str) -> BufferObservation:
    return BufferObservation(thread_id, new_cycle_id("buffer-obs"), pending_tokens=0, skip_minimum=True)


def test_a_worker_killed_mid_observer_call_is_redelivered_and_its_chunk_stored_once(
    cluster: WorkerCluster, producer: Producer
) -> None:
    thread_id, namespace = scripted_thread(cluster, producer, "sleep:60")
    executor = CeleryExecutor(producer.app)
    task = buffer_task(thread_id)
    result = executor.send(task)

    first = wait_until(lambda: fake_calls(cluster.redis, namespace), deadline_s=60, what="the Observer call")[
        0
    ]
    os.kill(first["pid"], signal.SIGKILL)

    assert result.get(timeout=90) is True
    calls = fake_calls(cluster.redis, namespace)
    assert [c["action"] for c in calls] == ["sleep:60", "ok"]
    assert calls[1]["pid"] != first["pid"], "the redelivery ran in a fresh worker process"
    assert int(cluster.redis.get(delivery_key(task.cycle_id)) or 0) == 2
    assert chunk_rows(producer.engine.db, thread_id, task.cycle_id) == 1
    assert event_count(producer.engine.db, thread_id, ev.BUFFERING_END, task.cycle_id) == 1
    assert_covered_once(producer.engine.db, thread_id)

    # The stored chunk then activates normally, and coverage still tiles exactly.
    assert producer.engine.activate(thread_id, activate_all=True) is not None
    assert_covered_once(producer.engine.db, thread_id)
    wait_until(cluster.drained, deadline_s=30, what="queues and locks to drain")


#: Limits short enough that an unacknowledged message of a dead worker becomes visible again in seconds
#: (the settings require visibility > hard limit > soft limit > the longest retry wait).
SHORT_VISIBILITY_ENV = {
    "OM_WORKER_SOFT_TIME_LIMIT_S": "3",
    "OM_WORKER_TIME_LIMIT_S": "4",
    "OM_WORKER_VISIBILITY_TIMEOUT_S": "5",
    "OM_WORKER_RETRY_MAX_RETRIES": "1",
}


def test_a_whole_threads_pool_worker_killed_mid_call_is_redelivered_after_the_visibility_timeout(
    postgres_url: str, redis_url: str, pg_engine: Engine, tmp_path: Path
) -> None:
    """With the threads pool there is no pool child to lose: the worker process itself dies with the
    message unacknowledged, and only the broker's visibility timeout hands it to another worker."""
    env = {"OM_MODEL": "om-local/extractive", "LITELLM_LOG": "ERROR", **SHORT_VISIBILITY_ENV}
    with worker_cluster(
        postgres_url=postgres_url, redis_url=redis_url, workdir=tmp_path, db=6, env=env, pool="threads"
    ) as cluster:
        (doomed,) = cluster.start_workers([(["om.buffer"], 2)])
        producer = cluster.producer()
        thread_id, namespace = scripted_thread(cluster, producer, "sleep:60")
        task = buffer_task(thread_id)
        result = CeleryExecutor(producer.app).send(task)

        first = wait_until(
            lambda: fake_calls(cluster.redis, namespace), deadline_s=60, what="the Observer call"
        )
        assert first[0]["pid"] == doomed.popen.pid, "a threads-pool worker calls the model in its own process"
        os.killpg(doomed.popen.pid, signal.SIGKILL)
        doomed.popen.wait(timeout=10)
        cluster.start_workers([(["om.buffer"], 2)])

        assert result.get(timeout=120) is True
        calls = fake_calls(cluster.redis, namespace)
        assert [c["action"] for c in calls] == ["sleep:60", "ok"]
        assert calls[1]["pid"] != doomed.popen.pid
        assert int(cluster.redis.get(delivery_key(task.cycle_id)) or 0) == 2
        assert chunk_rows(producer.engine.db, thread_id, task.cycle_id) == 1
        assert event_count(producer.engine.db, thread_id, ev.BUFFERING_END, task.cycle_id) == 1
        assert_covered_once(producer.engine.db, thread_id)
        wait_until(cluster.drained, deadline_s=30, what="queues and locks to drain")
        producer.engine.db.dispose()


def test_a_task_that_kills_every_worker_is_dropped_as_failed_after_the_delivery_bound(
    cluster: WorkerCluster, producer: Producer
) -> None:
    thread_id, namespace = scripted_thread(cluster, producer, "kill", "kill", "kill", "kill")
    task = buffer_task(thread_id)
    result = CeleryExecutor(producer.app).send(task)

    assert result.get(timeout=120) is False
    assert [c["action"] for c in fake_calls(cluster.redis, namespace)] == ["kill", "kill", "kill"]
    failed = [
        e
        for e in list_events(producer.engine.db, thread_id=thread_id, limit=1000)
        if e.type == ev.BUFFERING_FAILED and e.cycle_id == task.cycle_id
    ]
    assert len(failed) == 1 and "[WORKER_LOST]" in failed[0].payload["error"]
    assert chunk_rows(producer.engine.db, thread_id) == 0
    # Nothing left the actor's context: every message is still there, raw.
    turn = producer.engine.ingest_turn(thread_id, thread_id, [])
    assert [m.id for m in turn.messages] == [f"m{i}" for i in range(10)]
    assert_covered_once(producer.engine.db, thread_id)
    wait_until(cluster.drained, deadline_s=30, what="queues and locks to drain")


@pytest.mark.parametrize("same_cycle", [False, True], ids=["two-cycles", "duplicate-delivery"])
def test_two_workers_given_the_same_buffering_window_store_one_chunk(
    cluster: WorkerCluster, producer: Producer, same_cycle: bool
) -> None:
    thread_id, namespace = scripted_thread(cluster, producer, "sleep:2")
    executor = CeleryExecutor(producer.app)
    first = buffer_task(thread_id)
    second = first if same_cycle else buffer_task(thread_id)
    results = [executor.send(first), executor.send(second)]

    outcomes = [r.get(timeout=60) for r in results]
    assert sorted(outcomes) == [False, True]
    assert len({r.worker for r in results}) == 2, "both workers took one delivery"
    assert len(fake_calls(cluster.redis, namespace)) == 1, "no second Observer run over the same window"
    head = records.get_head(producer.engine.db, lookup_key(thread_id))
    assert head is not None and len(head.chunks) == 1
    assert chunk_rows(producer.engine.db, thread_id) == 1
    assert_covered_once(producer.engine.db, thread_id)
    wait_until(cluster.drained, deadline_s=30, what="queues and locks to drain")


def test_a_buffering_lock_lost_by_a_stalled_holder_never_duplicates_coverage(
    cluster: WorkerCluster, producer: Producer
) -> None:
    thread_id, namespace = scripted_thread(cluster, producer, "sleep:4")
    executor = CeleryExecutor(producer.app)
    lock = Keys.buffer_lock(lookup_key(thread_id))
    stalled_task = buffer_task(thread_id)
    stalled = executor.send(stalled_task)
    holder = wait_until(
        lambda: fake_calls(cluster.redis, namespace), deadline_s=60, what="the Observer call"
    )[0]
    os.kill(holder["pid"], signal.SIGSTOP)
    try:
        wait_until(
            lambda: not cluster.redis.exists(lock), deadline_s=15, what="the stalled holder's lock to expire"
        )
        rival_task = buffer_task(thread_id)
        assert executor.send(rival_task).get(timeout=60) is True, "the other worker buffers the same window"
    finally:
        os.kill(holder["pid"], signal.SIGCONT)

    assert stalled.get(timeout=60) is False, "the late commit is refused, not stored twice"
    assert chunk_rows(producer.engine.db, thread_id, stalled_task.cycle_id) == 0
    assert chunk_rows(producer.engine.db, thread_id, rival_task.cycle_id) == 1
    assert not cluster.redis.exists(lock), "the resumed holder did not delete a lock it no longer owned"
    assert_covered_once(producer.engine.db, thread_id)
    producer.engine.activate(thread_id, activate_all=True)
    assert_covered_once(producer.engine.db, thread_id)
    wait_until(cluster.drained, deadline_s=30, what="queues and locks to drain")


def test_an_observe_lock_lost_by_a_stalled_holder_never_removes_or_duplicates_messages(
    cluster: WorkerCluster, producer: Producer
) -> None:
    thread_id, namespace = scripted_thread(
        cluster, producer, "sleep:4", bufferTokens=False, messageTokens=1500
    )
    executor = CeleryExecutor(producer.app)
    lock = Keys.observe_lock(lookup_key(thread_id))
    stalled = executor.send(Observe(thread_id, new_cycle_id("observe")))
    holder = wait_until(
        lambda: fake_calls(cluster.redis, namespace), deadline_s=60, what="the Observer call"
    )[0]
    os.kill(holder["pid"], signal.SIGSTOP)
    try:
        wait_until(
            lambda: not cluster.redis.exists(lock), deadline_s=15, what="the stalled holder's lock to expire"
        )
        assert executor.send(Observe(thread_id, new_cycle_id("observe"))).get(timeout=60) is True
    finally:
        os.kill(holder["pid"], signal.SIGCONT)

    assert stalled.get(timeout=60) is False
    refused = [
        e
        for e in list_events(producer.engine.db, thread_id=thread_id, limit=1000)
        if e.type == ev.OBSERVATION_FAILED and "commit refused" in e.payload.get("error", "")
    ]
    assert len(refused) == 1
    assert_covered_once(producer.engine.db, thread_id)
    turn = producer.engine.ingest_turn(thread_id, thread_id, [])
    head = records.get_head(producer.engine.db, lookup_key(thread_id))
    assert head is not None and head.last_observed_seq > 0
    assert all(p.seq is not None and p.seq > head.last_observed_seq for m in turn.messages for p in m.parts)
    wait_until(cluster.drained, deadline_s=30, what="queues and locks to drain")


# ----------------------------------------------------------------------------------------- model errors


def test_rate_limit_errors_are_retried_with_backoff_then_succeed(
    cluster: WorkerCluster, producer: Producer
) -> None:
    thread_id, namespace = scripted_thread(cluster, producer, "ratelimit", "ratelimit")
    task = buffer_task(thread_id)
    assert CeleryExecutor(producer.app).send(task).get(timeout=60) is True

    calls = fake_calls(cluster.redis, namespace)
    assert [c["action"] for c in calls] == ["ratelimit", "ratelimit", "ok"]
    assert len({c["pid"] for c in calls}) == 1, "retried in the model client, not redelivered by Celery"
    first_gap, second_gap = calls[1]["at"] - calls[0]["at"], calls[2]["at"] - calls[1]["at"]
    # Test workers back off 0.2 s, then 0.4 s, each ±20 %: exponential, so the second wait is longer.
    assert first_gap >= 0.2 * 0.8 and second_gap >= 0.4 * 0.8 and second_gap > first_gap
    [end] = [
        e
        for e in list_events(producer.engine.db, thread_id=thread_id, limit=1000)
        if e.type == ev.BUFFERING_END and e.cycle_id == task.cycle_id
    ]
    assert end.payload["usage"]["inputTokens"] > 0 and end.payload["usage"]["outputTokens"] > 0
    assert end.payload["cost"] > 0, "litellm's cost of the call is reported on the end event"
    assert_covered_once(producer.engine.db, thread_id)


def test_a_model_that_always_loops_ends_background_buffering_in_a_failed_event(
    cluster: WorkerCluster, producer: Producer
) -> None:
    thread_id, namespace = scripted_thread(cluster, producer, default="degenerate")
    task = buffer_task(thread_id)
    assert CeleryExecutor(producer.app).send(task).get(timeout=60) is False

    assert [c["action"] for c in fake_calls(cluster.redis, namespace)] == ["degenerate", "degenerate"]
    [failed] = [
        e
        for e in list_events(producer.engine.db, thread_id=thread_id, limit=1000)
        if e.type == ev.BUFFERING_FAILED and e.cycle_id == task.cycle_id
    ]
    assert "OBSERVER_DEGENERATE" in failed.payload["error"]
    assert failed.payload["usage"]["inputTokens"] > 0, "failed calls still report what they cost"
    assert chunk_rows(producer.engine.db, thread_id) == 0
    turn = producer.engine.ingest_turn(thread_id, thread_id, [])
    assert [m.id for m in turn.messages] == [f"m{i}" for i in range(10)]


def test_a_looping_model_in_a_blocking_observation_degrades_the_turn_and_keeps_the_context(
    cluster: WorkerCluster, producer: Producer
) -> None:
    thread_id, _namespace = scripted_thread(
        cluster, producer, default="degenerate", hold=False, bufferTokens=False, messageTokens=1500
    )
    turns = producer.sent.take(thread_id)
    assert turns and all(isinstance(task, Observe) for task, _ in turns)
    last = play(producer, thread_id, 11)[-1]  # the same ten messages again (stored once) plus one more

    assert last.degraded and "OBSERVER_DEGENERATE" in (last.degraded_reason or "")
    assert [m.id for m in last.messages] == [f"m{i}" for i in range(11)], "a failure removes nothing"
    head = records.get_head(producer.engine.db, lookup_key(thread_id))
    assert head is not None and head.last_observed_seq == 0
    failures = [
        e
        for e in list_events(producer.engine.db, thread_id=thread_id, limit=1000)
        if e.type == ev.OBSERVATION_FAILED
    ]
    assert failures and all("OBSERVER_DEGENERATE" in e.payload["error"] for e in failures)
    logs = "".join(process.log(tail=1_000_000) for process in cluster.processes)
    assert "raised expected: OperationFailed" in logs, "the recorded failure reached the result"
    crashes = [
        line for line in logs.splitlines() if "raised unexpected" in line and "OBSERVER_DEGENERATE" in line
    ]
    assert not crashes, "a recorded failure is not a crash"

    strict = cluster.producer(failure_policy="raise")
    with pytest.raises(Exception, match="OBSERVER_DEGENERATE"):
        strict.engine.ingest_turn(thread_id, thread_id, [text_message("m11b", "user", "one more", T0)])
    assert_covered_once(producer.engine.db, thread_id)
    wait_until(cluster.drained, deadline_s=30, what="queues and locks to drain")


def test_an_unparseable_reply_in_a_blocking_observation_is_not_committed(
    cluster: WorkerCluster, producer: Producer
) -> None:
    thread_id, _ = scripted_thread(
        cluster, producer, default="junk", hold=False, bufferTokens=False, messageTokens=1500
    )
    last = play(producer, thread_id, 11)[-1]
    assert [m.id for m in last.messages] == [f"m{i}" for i in range(11)], "nothing left the context"
    head = records.get_head(producer.engine.db, lookup_key(thread_id))
    assert head is not None and head.last_observed_seq == 0 and not head.active_observations
    failures = [
        e
        for e in list_events(producer.engine.db, thread_id=thread_id, limit=1000)
        if e.type == ev.OBSERVATION_FAILED
    ]
    assert failures and all("no observations" in e.payload["error"] for e in failures)
    assert_covered_once(producer.engine.db, thread_id)
