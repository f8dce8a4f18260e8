"""Postgres connections without a ping per checkout (`om_core.store.db`): a pooled connection whose backend
was terminated is replaced at checkout, before any statement of the caller ran, so the next turn succeeds
and nothing is written twice; a connection lost inside a transaction fails that transaction whole."""

from __future__ import annotations

import multiprocessing
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, func, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from om_core.engine import MemoryEngine
from om_core.messages import Message, Part
from om_core.models.client import ModelClient
from om_core.store import db as db_module
from om_core.store import schema
from om_core.store.db import make_engine
from om_core.store.migrate import upgrade
from tests.support.workers import HoldingExecutor, wait_until

pytestmark = pytest.mark.postgres


@pytest.fixture
def app_name() -> str:
    return f"om-pool-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def db(postgres_url: str, app_name: str) -> Iterator[Engine]:
    url = make_url(postgres_url).update_query_dict({"application_name": app_name})
    engine = make_engine(url.render_as_string(hide_password=False))
    upgrade(engine)
    yield engine
    engine.dispose()


@pytest.fixture
def admin(postgres_url: str) -> Iterator[Engine]:
    engine = create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    yield engine
    engine.dispose()


def backends(admin: Engine, app_name: str) -> list[int]:
    with admin.connect() as conn:
        return [
            int(pid)
            for pid in conn.execute(
                text("SELECT pid FROM pg_stat_activity WHERE application_name = :a"), {"a": app_name}
            ).scalars()
        ]


def terminate_all(admin: Engine, app_name: str) -> int:
    pids = backends(admin, app_name)
    with admin.connect() as conn:
        for pid in pids:
            conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid})
    wait_until(lambda: not backends(admin, app_name), deadline_s=30, what="the backends to exit")
    return len(pids)


def count_pings(db: Engine, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    pings: list[int] = []
    original = db.dialect.do_ping

    def counted(dbapi_connection: Any) -> bool:
        pings.append(1)
        return original(dbapi_connection)

    monkeypatch.setattr(db.dialect, "do_ping", counted)
    return pings


def message(i: int) -> Message:
    return Message(id=f"m{i}", role="user", parts=[Part(type="text", text=f"message number {i}")])


def stored(db: Engine, thread_id: str) -> list[str]:
    with db.connect() as conn:
        return list(
            conn.execute(
                select(schema.messages.c.id)
                .where(schema.messages.c.thread_id == thread_id)
                .order_by(schema.messages.c.id)
            ).scalars()
        )


def test_a_checkout_costs_no_round_trip(db: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    pings = count_pings(db, monkeypatch)
    for _ in range(20):
        with db.begin() as conn:
            conn.execute(text("SELECT 1"))
    assert pings == []


def test_a_terminated_backend_is_replaced_and_the_next_turn_is_stored_once(
    db: Engine, admin: Engine, app_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = MemoryEngine(db, models=ModelClient(), executor=HoldingExecutor())
    thread_id = f"pool-{uuid.uuid4().hex[:8]}"
    for i in range(3):
        engine.ingest_turn(thread_id, "user-1", [message(i)])
    pooled = db.pool.checkedin()  # type: ignore[attr-defined]
    assert pooled >= 1
    assert terminate_all(admin, app_name) == pooled  # every pooled connection is now dead
    pings = count_pings(db, monkeypatch)

    engine.ingest_turn(thread_id, "user-1", [message(3)])  # would fail on a dead connection

    assert pings == []  # found dead by its socket, not by a round trip
    assert len(backends(admin, app_name)) >= 1
    ids = stored(db, thread_id)
    assert ids == ["m0", "m1", "m2", "m3"]  # each once
    with db.connect() as conn:
        assert (
            conn.execute(
                select(func.count())
                .select_from(schema.messages)
                .where(schema.messages.c.thread_id == thread_id)
            ).scalar_one()
            == 4
        )


def test_a_connection_idle_past_the_limit_is_pinged_and_replaced_when_silent(
    db: Engine, admin: Engine, app_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connection dropped without a word (a firewall, a NAT) shows nothing on its socket: one that sat
    idle longer than `IDLE_PING_S` is pinged before it is handed out."""
    with db.begin() as conn:
        conn.execute(text("SELECT 1"))
    terminate_all(admin, app_name)
    monkeypatch.setattr(db_module, "_socket_says_dead", lambda _connection: False)  # the socket cannot tell
    monkeypatch.setattr(db_module, "IDLE_PING_S", 0.0)
    pings = count_pings(db, monkeypatch)
    with db.begin() as conn:
        assert conn.execute(text("SELECT 41 + 1")).scalar_one() == 42
    assert len(pings) >= 1


def test_a_connection_lost_inside_a_transaction_fails_it_whole_and_the_pool_recovers(
    db: Engine, admin: Engine, app_name: str
) -> None:
    table = f"om_pool_probe_{uuid.uuid4().hex[:8]}"
    with db.begin() as conn:
        conn.execute(text(f"CREATE TABLE {table} (x INTEGER)"))
    try:
        with pytest.raises(DBAPIError) as raised, db.begin() as conn:
            conn.execute(text(f"INSERT INTO {table} VALUES (1)"))
            own = int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())
            with admin.connect() as other:
                other.execute(text("SELECT pg_terminate_backend(:p)"), {"p": own})
            wait_until(
                lambda: own not in backends(admin, app_name), deadline_s=30, what="the backend to exit"
            )
            conn.execute(text(f"INSERT INTO {table} VALUES (2)"))  # never retried: half a transaction ran
        assert raised.value.connection_invalidated
        with db.begin() as conn:  # a fresh connection
            conn.execute(text(f"INSERT INTO {table} VALUES (3)"))
        with db.connect() as conn:
            assert list(conn.execute(text(f"SELECT x FROM {table}")).scalars()) == [3]
    finally:
        with db.begin() as conn:
            conn.execute(text(f"DROP TABLE {table}"))


def _use_in_child(db: Engine, queue: Any) -> None:
    with db.connect() as conn:
        queue.put(int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one()))


def test_a_forked_child_opens_its_own_connection(db: Engine) -> None:
    with db.connect() as conn:
        parent = int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_use_in_child, args=(db, queue))
    child.start()
    child_backend = queue.get(timeout=60)
    child.join(60)
    assert child.exitcode == 0
    assert child_backend != parent
    with db.connect() as conn:  # the parent's connection was neither used nor closed by the child
        assert int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one()) == parent
