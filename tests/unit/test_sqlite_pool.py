"""The SQLite connection pool (`om_core.store.db.make_engine`): connections stay open between checkouts
(no WAL open, extension load and PRAGMAs per transaction), a connection never waits in the pool inside a
transaction, a checkout never waits for the pool, and a forked child opens its own connections."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.exc import OperationalError

from om_core.store import db as db_module
from om_core.store.db import (
    _SQLITE_MODULE,
    SQLITE_POOL_SIZE,
    WriterQueueStats,
    make_engine,
    read_only,
    sqlite_vectors_available,
    writer_queue_stats,
)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "om.db"


@pytest.fixture
def db(path: Path) -> Iterator[Engine]:
    engine = make_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE t (x INTEGER)"))
    yield engine
    engine.dispose()


def opens(db: Engine) -> list[int]:
    counter: list[int] = []
    event.listen(db.pool, "connect", lambda *_: counter.append(1))
    return counter


def rows(db: Engine) -> list[int]:
    with read_only(db) as conn:
        return [int(x) for x in conn.execute(text("SELECT x FROM t ORDER BY x")).scalars()]


def test_transactions_reuse_open_connections(db: Engine) -> None:
    opened = opens(db)
    for i in range(50):
        with db.begin() as conn:
            conn.execute(text("INSERT INTO t VALUES (:x)"), {"x": i})
            rows(db)  # a reader inside the writer: a second connection, also kept
    assert len(opened) <= 1  # the reader's connection may be new; the writer's was opened by the fixture
    assert len(rows(db)) == 50


def test_every_pooled_connection_has_its_settings_and_the_vector_module(db: Engine) -> None:
    held = [db.connect() for _ in range(3)]
    try:
        for conn in held:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar_one() == "wal"
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar_one() == 1
            if sqlite_vectors_available():
                assert conn.exec_driver_sql("SELECT vec_version()").scalar_one()
            conn.rollback()
    finally:
        for conn in held:
            conn.close()


def test_a_connection_returned_inside_a_transaction_waits_outside_it(db: Engine, path: Path) -> None:
    """Even a transaction begun behind SQLAlchemy's back is rolled back when the connection goes back to
    the pool: it would otherwise hold the write lock until the connection's next use."""
    with db.connect() as conn:
        dbapi = conn.connection.driver_connection
        assert dbapi is not None
        dbapi.execute("BEGIN IMMEDIATE")  # SQLAlchemy has no transaction open on `conn`
        dbapi.execute("INSERT INTO t VALUES (1)")
    assert not dbapi.in_transaction
    module = _SQLITE_MODULE if _SQLITE_MODULE is not None else pytest.importorskip("sqlite3")
    other = module.connect(str(path), timeout=0.5, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # the write lock is free
        other.execute("ROLLBACK")
    finally:
        other.close()
    assert rows(db) == []
    with db.connect() as conn:  # an ordinary connection left without commit: rolled back as before
        conn.execute(text("INSERT INTO t VALUES (2)"))
    assert rows(db) == []


def test_a_checkout_never_waits_for_the_pool(db: Engine) -> None:
    """More connections at once than the pool keeps: the extra ones are opened (a thread may hold a writer
    and a reader, so waiting for a free connection could wait for itself), and closed when returned."""
    opened = opens(db)
    held = [db.raw_connection() for _ in range(SQLITE_POOL_SIZE + 5)]
    for connection in held:
        connection.close()
    assert len(opened) >= SQLITE_POOL_SIZE + 4
    assert db.pool.checkedin() == SQLITE_POOL_SIZE  # type: ignore[attr-defined]


def test_threads_share_the_pool_and_writers_still_take_turns(db: Engine) -> None:
    errors: list[BaseException] = []

    def write(start: int) -> None:
        try:
            for i in range(start, start + 20):
                with db.begin() as conn:
                    conn.execute(text("INSERT INTO t VALUES (:x)"), {"x": i})
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(n * 100,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert errors == []
    assert len(rows(db)) == 160


#: Forking a process that has threads is only safe when none of them is inside SQLite at that moment, and
#: pytest's process may hold threads of earlier tests: each fork test runs in a fresh interpreter (as
#: Celery's prefork parent forks its children), whose only extra thread is the one the test starts.
_FORK_SCRIPT = """
import multiprocessing, sys, threading
from sqlalchemy import text
from om_core.store.db import _OPEN_CLOSE, make_engine

db = make_engine(f"sqlite:///{sys.argv[1]}")


def write(value):
    with db.begin() as conn:
        conn.execute(text("INSERT INTO t VALUES (:x)"), {"x": value})


def fork_writing(value):
    child = multiprocessing.get_context("fork").Process(target=write, args=(value,))
    child.start()
    child.join(30)
    if child.exitcode is None:
        child.kill()
        child.join()
    return child.exitcode


def rows():
    with db.connect() as conn:
        return [r[0] for r in conn.execute(text("SELECT x FROM t ORDER BY x"))]


def forked_child_opens_its_own():
    with db.begin() as conn:
        conn.execute(text("INSERT INTO t VALUES (1)"))
        parent_connection = conn.connection.driver_connection
    assert fork_writing(2) == 0, "the child wrote"
    with db.begin() as conn:
        assert conn.connection.driver_connection is parent_connection, "still the parent's, still open"
        conn.execute(text("INSERT INTO t VALUES (3)"))
    assert rows() == [1, 2, 3], rows()


def fork_waits_for_an_open():
    inside, leave = threading.Event(), threading.Event()

    def opening():
        with _OPEN_CLOSE:
            inside.set()
            leave.wait(10)

    opener = threading.Thread(target=opening)
    opener.start()
    inside.wait(10)
    threading.Timer(0.5, leave.set).start()
    assert fork_writing(2) == 0, "the child opened a connection"
    opener.join(10)
    assert rows() == [2], rows()


globals()[sys.argv[2]]()
db.dispose()
"""


def _run_fork_case(db: Engine, case: str) -> None:
    path = db.url.database
    db.dispose()
    done = subprocess.run(
        [sys.executable, "-c", _FORK_SCRIPT, str(path), case],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_forked_child_opens_its_own_connections(db: Engine) -> None:
    """The parent's pooled connection is not used (nor closed) by a child that inherited the engine."""
    _run_fork_case(db, "forked_child_opens_its_own")


def test_a_fork_during_another_threads_open_waits_for_it(db: Engine) -> None:
    """A child forked while a thread was inside an open or close would inherit `_OPEN_CLOSE` (and SQLite's
    own mutexes) held and never open a connection: the fork waits for the open instead."""
    _run_fork_case(db, "fork_waits_for_an_open")


def test_a_memory_database_keeps_one_connection_per_thread() -> None:
    engine = make_engine("sqlite://")
    try:
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE t (x INTEGER)"))
            conn.execute(text("INSERT INTO t VALUES (1)"))
        assert rows(engine) == [1]
    finally:
        engine.dispose()


def _write_within(db: Engine, value: int, deadline_s: float = 30) -> None:
    """A write in another thread that must finish well within the busy timeout (60 s): it would wait
    that long for a write turn that was never given back."""
    done = threading.Event()
    errors: list[BaseException] = []

    def write() -> None:
        try:
            with db.begin() as conn:
                conn.execute(text("INSERT INTO t VALUES (:x)"), {"x": value})
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            done.set()

    threading.Thread(target=write, daemon=True).start()
    assert done.wait(deadline_s), "the write turn was not given back"
    assert errors == []


def test_every_end_of_a_write_transaction_gives_the_write_turn_back(db: Engine) -> None:
    """Writers of one engine take turns in the process (`store.db._WriterQueue`) before SQLite's lock: a
    commit, a rollback, a connection closed or invalidated inside its write transaction each give the
    turn back."""
    with db.begin() as conn:
        conn.execute(text("INSERT INTO t VALUES (1)"))
    _write_within(db, 2)
    with db.connect() as conn:
        conn.execute(text("INSERT INTO t VALUES (100)"))
        conn.rollback()
    _write_within(db, 3)
    conn = db.connect()
    conn.execute(text("INSERT INTO t VALUES (101)"))
    conn.close()  # inside the transaction
    _write_within(db, 4)
    conn = db.connect()
    conn.execute(text("INSERT INTO t VALUES (102)"))
    conn.invalidate()  # the connection is closed, its transaction with it
    _write_within(db, 5)
    assert rows(db) == [1, 2, 3, 4, 5]


def test_a_writer_that_found_the_database_locked_gives_its_turn_back(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process holds the write lock past the busy timeout: the writer fails as SQLite would
    ("database is locked"), and the next writer of this process is not kept waiting by it."""
    monkeypatch.setattr(db_module, "BUSY_TIMEOUT_S", 0.2)
    engine = make_engine(f"sqlite:///{path}")
    try:
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE t (x INTEGER)"))
        module = _SQLITE_MODULE if _SQLITE_MODULE is not None else pytest.importorskip("sqlite3")
        other = module.connect(str(path), isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(OperationalError, match="locked"), engine.begin() as conn:
                conn.execute(text("INSERT INTO t VALUES (1)"))
        finally:
            other.execute("ROLLBACK")
            other.close()
        _write_within(engine, 2, deadline_s=10)
        assert rows(engine) == [2]
    finally:
        engine.dispose()


class _ObservedLock:
    """The writer queue's lock, saying when a writer starts to wait on it (after finding it taken), so a
    test can let the holder go only once the other writer is certainly waiting."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.waiting = threading.Event()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if blocking:
            self.waiting.set()
        return bool(self.inner.acquire(blocking, timeout))

    def release(self) -> None:
        self.inner.release()


def _stats(engine: Engine) -> WriterQueueStats:
    stats = writer_queue_stats(engine)
    assert stats is not None
    return stats


def test_the_writer_queue_counts_transactions_and_the_writer_that_waited(db: Engine) -> None:
    """Two threads write to one SQLite file at once: both transactions are counted, the one that found
    the other holding the queue is counted as a wait of at most its own time, the holder is not."""
    queue = db_module._QUEUES[db]
    observed = _ObservedLock(queue._lock)
    queue._lock = observed  # type: ignore[assignment]
    before = _stats(db)
    holding, release = threading.Event(), threading.Event()
    waited: list[float] = []
    errors: list[BaseException] = []

    def holder() -> None:
        try:
            with db.begin() as conn:
                conn.execute(text("INSERT INTO t VALUES (1)"))
                holding.set()
                assert release.wait(30), "never let go"
        except BaseException as exc:  # reported below
            errors.append(exc)

    def waiter() -> None:
        started = time.perf_counter()
        try:
            with db.begin() as conn:
                conn.execute(text("INSERT INTO t VALUES (2)"))
        except BaseException as exc:  # reported below
            errors.append(exc)
        waited.append(time.perf_counter() - started)

    first = threading.Thread(target=holder, daemon=True)
    first.start()
    assert holding.wait(30), "the first writer did not begin"
    second = threading.Thread(target=waiter, daemon=True)
    second.start()
    assert observed.waiting.wait(30), "the second writer never waited"
    release.set()
    first.join(30)
    second.join(30)
    assert not first.is_alive() and not second.is_alive() and errors == []

    after = _stats(db)
    assert after.transactions - before.transactions == 2
    assert after.waits - before.waits == 1
    assert 0 < after.wait_s - before.wait_s <= waited[0]
    assert rows(db) == [1, 2]
    with db.begin() as conn:  # alone: a transaction, no wait
        conn.execute(text("INSERT INTO t VALUES (3)"))
    assert (_stats(db).transactions, _stats(db).waits) == (after.transactions + 1, after.waits)


def test_the_writer_queue_counts_how_long_the_lock_was_held(db: Engine) -> None:
    """The held time covers each transaction from its turn to its end: a transaction kept open for a
    measured span adds at least that span, and a span with no transaction adds nothing."""
    before = _stats(db)
    with db.begin() as conn:
        conn.execute(text("INSERT INTO t VALUES (1)"))
        opened = time.perf_counter()
        deadline = opened + 0.05
        while time.perf_counter() < deadline:  # hold the lock for a known span (no sleep: measured)
            pass
        kept = time.perf_counter() - opened
    after = _stats(db)
    assert after.held_s - before.held_s >= kept
    idle = _stats(db)
    deadline = time.perf_counter() + 0.05
    while time.perf_counter() < deadline:
        pass
    assert _stats(db).held_s == idle.held_s


def test_a_writer_that_timed_out_waiting_is_counted(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A wait that ends in "database is locked" was still a wait, of the whole timeout."""
    monkeypatch.setattr(db_module, "BUSY_TIMEOUT_S", 0.2)
    engine = make_engine(f"sqlite:///{path}")
    try:
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE t (x INTEGER)"))
        before = _stats(engine)
        failed: list[BaseException] = []

        def late() -> None:
            try:
                with engine.begin() as conn:
                    conn.execute(text("INSERT INTO t VALUES (2)"))
            except OperationalError as exc:
                failed.append(exc)

        with engine.begin() as conn:
            conn.execute(text("INSERT INTO t VALUES (1)"))
            other = threading.Thread(target=late, daemon=True)
            other.start()
            other.join(30)
        assert len(failed) == 1 and "locked" in str(failed[0])
        after = _stats(engine)
        assert after.waits - before.waits == 1 and after.transactions - before.transactions == 1
        assert after.wait_s - before.wait_s >= 0.2
    finally:
        engine.dispose()


def test_only_sqlite_engines_made_here_have_writer_counters() -> None:
    assert writer_queue_stats(create_engine("sqlite://")) is None
