"""Service faults with real processes (issue 6, item 4): a worker killed inside its commit, Redis and
Postgres restarted under a running API and workers, and a worker whose clock jumps.

The module runs on its own Postgres and Redis (`tests/support/services.py`), which the tests stop and
start again on the same port, so the API (a real uvicorn process in celery mode) and the Celery workers
keep their URLs and only live through the outage. Every scenario ends with `check_thread` on each thread it
touched and compares the messages stored with the messages the API accepted: nothing accepted is lost,
nothing refused is half-written, nothing is stored twice.
"""

from __future__ import annotations

import json
import os
import signal
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine, func, insert, select, text

from om_adapters.celery_executor import CeleryExecutor
from om_core.engine import QUEUES, BufferObservation, TurnResult, lookup_key, new_cycle_id
from om_core.engine import events as ev
from om_core.messages import Role, text_message
from om_core.store import records, schema
from om_core.store.db import make_engine
from om_core.store.migrate import upgrade
from om_core.store.outbox import last_event_id, list_events
from om_core.tenancy import access
from om_core.tenancy.scoped_ids import scoped_id
from om_workers.tasks import delivery_key
from tests.support import clock_skew
from tests.support import fake_providers as fake
from tests.support.api_server import ApiServer, run_api_server
from tests.support.invariants import check_thread
from tests.support.model_server import PASSTHROUGH_ENV, ModelServer
from tests.support.services import (
    RestartablePostgres,
    RestartableRedis,
    kill_processes,
    kill_workers,
    private_services,
)
from tests.support.workers import (
    REPO,
    Process,
    Producer,
    WorkerCluster,
    set_thread_config,
    wait_results,
    wait_until,
    worker_cluster,
)

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

T0 = datetime(2026, 3, 3, 9, 0, tzinfo=UTC)
WORDS = ["harbor", "lantern", "copper", "meadow", "signal", "orchard", "velvet", "canyon", "ember", "quartz"]
#: Buffering every ~3 messages, far from the observation threshold: the scenarios exercise background work.
BUFFERING: dict[str, Any] = {"observation": {"messageTokens": 4_000, "bufferTokens": 0.15}}
#: How far the skewed worker's clock runs ahead, then behind: more than a day, so a leaked date shows.
CLOCK_JUMP_S = 26 * 3600.0


@dataclass
class Services:
    postgres: RestartablePostgres
    redis: RestartableRedis
    db: Engine
    workdir: Path
    clock_file: Path


@dataclass
class Workers:
    cluster: WorkerCluster
    skewed: Process
    producer: Producer


# ------------------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    workdir = tmp_path_factory.mktemp("faults-services")
    with private_services() as (postgres, redis_server):
        db = make_engine(postgres.url)
        upgrade(db)
        clock_file = workdir / "clock-offset"
        clock_skew.set_offset(clock_file, 0)
        yield Services(postgres, redis_server, db, workdir, clock_file)
        db.dispose()


@pytest.fixture(scope="module")
def model_server() -> Iterator[ModelServer]:
    with ModelServer() as server:
        yield server


@pytest.fixture(scope="module")
def workers(services: Services) -> Iterator[Workers]:
    """One worker serving every queue, whose clock is offset by the module's clock file (0 until the
    clock test). The clock test adds a normal-clock maintenance worker and beat next to it."""
    env = {
        "OM_MODEL": "om-local/extractive",
        "LITELLM_LOG": "ERROR",
        "OPENAI_API_KEY": "sk-fake-loopback",
        **PASSTHROUGH_ENV,
    }
    with worker_cluster(
        postgres_url=services.postgres.url,
        redis_url=services.redis.url,
        workdir=services.workdir,
        db=0,
        env=env,
    ) as cluster:
        skew_env = {
            "PYTHONPATH": os.pathsep.join([str(clock_skew.SITE_DIR), str(REPO)]),
            clock_skew.ENV: str(services.clock_file),
        }
        queues = list(QUEUES)
        skewed = cluster.start_worker(queues, concurrency=1, env=skew_env)
        try:
            yield Workers(cluster, skewed, cluster.producer())
        finally:
            kill_workers(cluster)


@pytest.fixture(scope="module")
def api(services: Services, workers: Workers) -> Iterator[ApiServer]:
    env = {"OM_EXECUTOR": "celery", "OM_PLUGINS": "", **PASSTHROUGH_ENV}  # no proxy: no fake actor
    log_dir = services.workdir / "api"
    with run_api_server(services.postgres.url, services.redis.url, log_dir, env=env) as server:
        yield server


@pytest.fixture
def http(api: ApiServer, services: Services, tenant: str) -> Iterator[httpx.Client]:
    key = access.create_key(services.db, tenant, "faults").secret
    with httpx.Client(
        base_url=api.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=120
    ) as client:
        yield client


# ------------------------------------------------------------------------------------------- helpers


def message(i: int, *, at: datetime | None = None) -> Any:
    body = f"Message {i}: " + " ".join(WORDS[(i * 5 + k * k) % len(WORDS)] for k in range(150))
    role: Role = "user" if i % 2 == 0 else "assistant"
    return text_message(f"m{i}", role, body, at or T0 + timedelta(minutes=i))


def message_json(i: int) -> dict[str, Any]:
    m = message(i)
    return {"id": m.id, "role": m.role, "text": m.parts[0].text, "created_at": m.created_at.isoformat()}


def post_turn(http: httpx.Client, thread_id: str, *indices: int) -> httpx.Response:
    return http.post(f"/v1/threads/{thread_id}/turns", json={"messages": [message_json(i) for i in indices]})


def configure(http: httpx.Client, thread_id: str, overrides: dict[str, Any]) -> None:
    response = http.put(
        f"/v1/threads/{thread_id}/config", json={"overrides": overrides, "resource_id": thread_id}
    )
    assert response.status_code == 200, response.text


def stored_ids(db: Engine, thread_id: str) -> list[str]:
    with db.connect() as conn:
        rows = conn.execute(
            select(schema.messages.c.id)
            .where(schema.messages.c.thread_id == thread_id)
            .order_by(schema.messages.c.first_seq)
        ).all()
    return [row[0] for row in rows]


def events(db: Engine, thread_id: str, kind: str, *, after: int = 0) -> list[Any]:
    return list_events(db, thread_id=thread_id, after_id=after, limit=10_000, types=[kind])


def assert_lossless(db: Engine, thread_id: str, accepted: list[int]) -> None:
    """Invariants hold, and exactly the accepted messages are stored, once each, in order."""
    report = check_thread(db, thread_id)
    assert report.violations == [], report.violations
    assert stored_ids(db, thread_id) == [f"m{i}" for i in accepted]


def assert_unavailable(response: httpx.Response, code: str) -> None:
    assert response.status_code == 503, (response.status_code, response.text)
    error = response.json()["error"]
    assert error["code"] == code and "retry" in error["message"], error
    assert "nothing was stored" not in error["message"], "a cut request may have stored its messages"
    assert response.headers.get("retry-after")


def play_turns(producer: Producer, thread_id: str, indices: range) -> list[TurnResult]:
    return [producer.engine.ingest_turn(thread_id, thread_id, [message(i)]) for i in indices]


# ------------------------------------------------------------------------------ 1. SIGKILL in a commit


def blocked_behind(db: Engine, holder_pid: int) -> dict[str, Any] | None:
    """The backend waiting on a lock `holder_pid` holds, with whether it already wrote om_chunks rows."""
    with db.connect() as conn:
        row = (
            conn.execute(
                text(
                    "SELECT a.pid, a.query, EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = a.pid"
                    " AND l.relation = 'om_chunks'::regclass AND l.mode = 'RowExclusiveLock') AS wrote_chunk"
                    " FROM pg_stat_activity a WHERE a.wait_event_type = 'Lock'"
                    " AND :holder = ANY(pg_blocking_pids(a.pid))"
                ),
                {"holder": holder_pid},
            )
            .mappings()
            .first()
        )
    return dict(row) if row is not None else None


def test_a_worker_killed_inside_its_commit_is_redelivered_and_its_chunk_stored_once(
    services: Services, workers: Workers
) -> None:
    """SIGKILL while the worker's commit transaction has written the chunk but not committed: Postgres
    rolls the transaction back, Celery redelivers the task to a fresh process, the chunk is stored once."""
    producer, db = workers.producer, services.db
    namespace = f"ns{uuid.uuid4().hex[:8]}"
    thread_id = f"kill-commit-{namespace}"
    config = {"model": f"om-fake/{namespace}", "observation": {"messageTokens": 20_000}}
    set_thread_config(db, thread_id, config)
    with producer.holding():
        play_turns(producer, thread_id, range(10))
    head = records.get_head(db, lookup_key(thread_id))
    assert head is not None
    task = BufferObservation(thread_id, new_cycle_id("buffer-obs"), pending_tokens=0, skip_minimum=True)

    # The test takes the unique slot of the task's end event first: the worker's commit transaction locks
    # the record, inserts the chunk, then waits on this row, as late in the commit as it can be stopped.
    with db.connect() as blocker:
        blocker.execute(
            insert(schema.events).values(
                thread_id=thread_id,
                resource_id=thread_id,
                lookup_key=head.lookup_key,
                record_id=head.id,
                type=ev.BUFFERING_END,
                cycle_id=task.cycle_id,
                payload={},
                created_at=datetime.now(UTC),
            )
        )
        holder = int(blocker.execute(text("SELECT pg_backend_pid()")).scalar_one())
        result = CeleryExecutor(producer.app).send(task)
        waiting = wait_until(
            lambda: blocked_behind(db, holder), deadline_s=90, what="the worker's commit to wait on the event"
        )
        assert waiting is not None and "om_events" in waiting["query"] and waiting["wrote_chunk"], waiting
        [call] = fake_calls(workers.cluster, namespace)
        os.kill(call["pid"], signal.SIGKILL)
        blocker.rollback()

    assert result.get(timeout=120) is True, "the redelivered task stored the chunk"
    calls = fake_calls(workers.cluster, namespace)
    assert len(calls) == 2 and calls[1]["pid"] != call["pid"], "redelivered to a fresh worker process"
    assert int(workers.cluster.redis.get(delivery_key(task.cycle_id)) or 0) == 2
    with db.connect() as conn:
        chunks = conn.execute(
            select(func.count()).select_from(schema.chunks).where(schema.chunks.c.cycle_id == task.cycle_id)
        ).scalar()
    assert chunks == 1, "the killed commit left nothing behind and the redelivery stored the chunk once"
    assert len([e for e in events(db, thread_id, ev.BUFFERING_END) if e.cycle_id == task.cycle_id]) == 1
    assert_lossless(db, thread_id, list(range(10)))
    assert producer.engine.activate(thread_id, activate_all=True) is not None
    assert_lossless(db, thread_id, list(range(10)))


def fake_calls(cluster: WorkerCluster, namespace: str) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in cluster.redis.lrange(fake.calls_key(namespace), 0, -1)]


# ------------------------------------------------------------------------------ 2. a clock that jumps


def test_a_worker_whose_clock_jumps_keeps_the_invariants_dates_and_one_idle_activation(
    services: Services, workers: Workers
) -> None:
    """The only worker, maintenance included, runs a day and two hours ahead, then its clock jumps to as
    far behind.

    Messages carry real timestamps here (idle time is measured from the last assistant message), so a
    date taken from the skewed clock instead of the messages would show as another day. Idle triggers
    fire on time all along: the pass reads the fleet's clock (Redis), not the worker's, and beat's passes
    carry no expiry for the worker to judge by its own clock."""
    thread_id = f"clock-{uuid.uuid4().hex[:8]}"
    config = {"observation": {**BUFFERING["observation"], "activateAfterIdle": "4s"}}
    set_thread_config(services.db, thread_id, config)
    beat = workers.cluster.start_beat(env={"OM_WORKER_IMPORTS": ""})  # beat calls no model
    try:
        clock_jump_scenario(services, workers, thread_id)
    finally:
        kill_processes(beat)
        clock_skew.set_offset(services.clock_file, 0)


def clock_jump_scenario(services: Services, workers: Workers, thread_id: str) -> None:
    db, producer = services.db, workers.producer
    key, ttl = lookup_key(thread_id), timedelta(seconds=4)
    cursors: list[int] = []
    written: list[datetime] = []  # every message's time
    replies: list[datetime] = []  # message times of assistant turns

    def turns(indices: range) -> None:
        for i in indices:
            now = datetime.now(UTC)
            result = producer.engine.ingest_turn(thread_id, thread_id, [message(i, at=now)])
            written.append(now)
            if i % 2 == 1:  # an assistant message: the thread's activity, which idle time starts from
                replies.append(now)
            cursors.append(cursor(db, thread_id))
            assert not result.degraded, result.degraded_reason
        outcomes = wait_results(producer.sent.take(thread_id), deadline_s=90)
        assert not [o for o in outcomes if isinstance(o, BaseException)], outcomes

    def quiet_since(event: Any) -> datetime:
        """The activity an idle activation answered (its payload names it: the event's own time is the
        skewed worker's)."""
        return datetime.fromtimestamp(event.payload["lastActivityAt"] / 1000, UTC)

    def answers(event: Any, activity: datetime) -> bool:
        return abs(quiet_since(event) - activity) < timedelta(milliseconds=2)  # stored in whole ms

    def idle_activations() -> list[Any]:
        return [e for e in events(db, thread_id, ev.ACTIVATION) if e.payload.get("triggeredBy") == "ttl"]

    clock_skew.set_offset(services.clock_file, CLOCK_JUMP_S)
    turns(range(0, 6))
    clock_skew.set_offset(services.clock_file, -CLOCK_JUMP_S)
    turns(range(6, 12))
    last_reply = replies[-1]
    wait_until(
        lambda: [e for e in idle_activations() if answers(e, last_reply)],
        deadline_s=90,
        what="the idle activation after the last turn",
    )
    passes = maintenance_passes(workers.skewed)
    wait_until(
        lambda: maintenance_passes(workers.skewed) >= passes + 4,
        deadline_s=60,
        what="four more maintenance passes",
    )
    cursors.append(cursor(db, thread_id))

    # Each idle activation answers its own quiet period, and no quiet period is activated twice (beat
    # claims each armed trigger once, whatever the clocks say). Each fired at least the TTL after its
    # activity and within a minute of it by the fleet's clock: a pass on the worker's clock would have
    # fired a day early (ahead) or never (behind).
    activations = idle_activations()
    periods = [quiet_since(e) for e in activations]
    assert len(periods) == len(set(periods)), f"a quiet period fired twice: {periods}"
    assert all(any(answers(e, at) for at in replies) for e in activations), periods
    for event in activations:
        idle_ms = event.payload["ttlExpiredMs"]
        assert ttl.total_seconds() * 1000 <= idle_ms < 60_000, f"fired {idle_ms} ms after its activity"
    with db.connect() as conn:
        due, claimed_at = conn.execute(
            select(schema.triggers.c.due_at, schema.triggers.c.updated_at).where(
                schema.triggers.c.lookup_key == key
            )
        ).one()
    assert due is None, "the claimed trigger stays disarmed until the next turn"
    assert claimed_at >= last_reply + ttl, "the last trigger was claimed before the idle TTL (real time)"

    # The cursor never moved back; the dates in memory are the messages' dates, not the worker's.
    assert cursors == sorted(cursors) and cursors[-1] > 0, f"the cursor moved back: {cursors}"
    head = records.get_head(db, key)
    assert head is not None
    days = {f"Date: {t:%b} {t.day}, {t.year}" for t in written}
    dates = {line.strip() for line in head.active_observations.splitlines() if line.startswith("Date:")}
    assert dates and dates <= days, f"observation dates {dates} are not the messages' days {days}"
    with db.connect() as conn:
        earliest, latest = conn.execute(
            select(
                func.min(schema.chunks.c.last_observed_at), func.max(schema.chunks.c.last_observed_at)
            ).where(schema.chunks.c.lookup_key == key)
        ).one()
    assert written[0] <= earliest <= latest <= written[-1] + timedelta(seconds=1), (earliest, latest)
    # The skewed worker did the buffering: its start events carry its clock, ahead and then behind.
    skews = {round(_skew_s(e.payload["startedAt"]) / 3600) for e in events(db, thread_id, ev.BUFFERING_START)}
    assert {round(CLOCK_JUMP_S / 3600), -round(CLOCK_JUMP_S / 3600)} <= skews, skews
    assert_lossless(db, thread_id, list(range(12)))


def cursor(db: Engine, thread_id: str) -> int:
    head = records.get_head(db, lookup_key(thread_id))
    assert head is not None
    return head.last_observed_seq


def maintenance_passes(*processes: Process) -> int:
    """Maintenance passes the workers finished (counted in their logs: beat's results are not kept)."""
    return sum(
        1
        for process in processes
        for line in process.log(tail=1_000_000).splitlines()
        if "Task om.maintenance[" in line and "succeeded" in line
    )


def _skew_s(iso: str) -> float:
    """How far ahead of now (in seconds) a timestamp written moments ago is."""
    return (datetime.fromisoformat(iso.replace("Z", "+00:00")) - datetime.now(UTC)).total_seconds()


# --------------------------------------------------------------------------------- 3. Redis restart


def test_a_redis_restart_refuses_turns_with_503_then_the_api_and_workers_recover(
    services: Services, workers: Workers, http: httpx.Client, tenant: str
) -> None:
    """Redis goes away (and comes back empty: no queues, locks or counters survive): turns are refused
    with a 503 that stores nothing, reads still work, and afterwards the same API and workers carry on."""
    db, thread_id = services.db, f"redis-restart-{uuid.uuid4().hex[:8]}"
    stored = scoped_id(tenant, thread_id)
    configure(http, thread_id, BUFFERING)
    accepted = []
    for i in range(6):
        assert post_turn(http, thread_id, i).status_code == 200
        accepted.append(i)
    wait_until(
        lambda: events(db, stored, ev.BUFFERING_END), deadline_s=90, what="a chunk buffered by a worker"
    )

    services.redis.stop()
    try:
        for i in (6, 7):
            assert_unavailable(post_turn(http, thread_id, i), "broker_unavailable")
        assert http.get("/readyz").status_code == 503
        reads = http.get(f"/v1/threads/{thread_id}/messages", params={"limit": 100})
        assert reads.status_code == 200, "reads do not need the broker"
        assert stored_ids(db, stored) == [f"m{i}" for i in accepted], "a refused turn stored nothing"
    finally:
        services.redis.start()

    mark = last_event_id(db, stored)
    for i in range(6, 14):  # the two refused turns again, then more
        response = post_turn(http, thread_id, i)
        assert response.status_code == 200, response.text
        accepted.append(i)
    assert http.get("/readyz").status_code == 200
    wait_until(
        lambda: events(db, stored, ev.BUFFERING_END, after=mark),
        deadline_s=120,
        what="the workers to reconnect and buffer again",
    )
    wait_until(workers.cluster.drained, deadline_s=90, what="queues and locks to drain")
    assert_lossless(db, stored, accepted)


# ------------------------------------------------------------------------------ 4. Postgres restart


def test_a_postgres_restart_refuses_with_503_and_the_api_and_workers_recover_without_a_restart(
    services: Services, workers: Workers, http: httpx.Client, model_server: ModelServer, tenant: str
) -> None:
    """Postgres crashes and restarts while a worker is inside an Observer call and a turn is in flight:
    every request meets a 503 (never a 500), the cut turn is stored whole or not at all, and the same API
    and worker processes go on through fresh pool connections."""
    db, namespace = services.db, f"pg{uuid.uuid4().hex[:8]}"
    thread_id = f"pg-restart-{namespace}"
    stored = scoped_id(tenant, thread_id)
    configure(http, thread_id, model_server.thread_config(namespace, **BUFFERING))
    model_server.script(namespace, "hold")
    accepted = []
    for i in range(6):
        assert post_turn(http, thread_id, i).status_code == 200
        accepted.append(i)
    wait_until(lambda: model_server.calls(namespace), deadline_s=90, what="a worker to call the model")

    # A worker is inside its Observer call, between two transactions, when the database goes away; and a
    # turn of another thread is in flight: its messages are committed and it waits (on a trigger row this
    # test holds) to arm its idle trigger.
    cut_thread = f"pg-cut-{namespace}"
    cut_stored = scoped_id(tenant, cut_thread)
    configure(http, cut_thread, {"observation": {"activateAfterIdle": "1h"}})
    blocker = db.connect()
    try:
        blocker.execute(
            insert(schema.triggers).values(
                lookup_key=lookup_key(cut_stored),
                kind="idle",
                thread_id=cut_stored,
                resource_id=cut_stored,
                payload={},
                updated_at=datetime.now(UTC),
            )
        )
        holder = int(blocker.execute(text("SELECT pg_backend_pid()")).scalar_one())
        with (
            ThreadPoolExecutor(1) as pool,
            httpx.Client(base_url=str(http.base_url), headers=http.headers, timeout=120) as other,
        ):
            in_flight = pool.submit(post_turn, other, cut_thread, 0, 1)
            wait_until(
                lambda: blocked_behind(db, holder), deadline_s=90, what="the turn to wait on the trigger"
            )
            services.postgres.stop(crash=True)  # immediate shutdown: no checkpoint, recovery at start
            try:
                assert_unavailable(in_flight.result(timeout=90), "database_unavailable")
                for i in (6, 7):
                    assert_unavailable(post_turn(http, thread_id, i), "database_unavailable")
                assert_unavailable(http.get(f"/v1/threads/{thread_id}/messages"), "database_unavailable")
                assert http.get("/readyz").status_code == 503
            finally:
                services.postgres.start()
    finally:
        blocker.invalidate()  # its session died with the server (or, on an early failure, is dropped now)
    assert stored_ids(db, stored) == [f"m{i}" for i in accepted], "a refused turn wrote nothing"
    assert stored_ids(db, cut_stored) in ([], ["m0", "m1"]), "a turn cut by the outage is whole or absent"
    retried = post_turn(http, cut_thread, 0, 1)
    assert retried.status_code == 200, retried.text
    assert_lossless(db, cut_stored, [0, 1])
    model_server.release(namespace)

    wait_until(
        lambda: events(db, stored, ev.BUFFERING_END),
        deadline_s=90,
        what="the held worker to commit its chunk through a fresh connection",
    )
    for i in range(6, 12):
        response = post_turn(http, thread_id, i)
        assert response.status_code == 200, response.text
        accepted.append(i)
    wait_until(workers.cluster.drained, deadline_s=90, what="queues and locks to drain")
    assert next(c.action for c in model_server.calls(namespace)) == "hold"
    assert stored_ids(db, stored)[:6] == [f"m{i}" for i in range(6)], "nothing before the outage was lost"
    assert_lossless(db, stored, accepted)
