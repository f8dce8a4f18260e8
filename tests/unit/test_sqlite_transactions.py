"""SQLite write transactions (`om_core.store.db`): one writer at a time, and a thread that already holds
the write lock is refused a second write transaction at once instead of waiting for itself."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, text

from om_core.store.db import _OPEN_CLOSE, NestedWriteError, make_engine, read_only


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Engine]:
    engine = make_engine(f"sqlite:///{tmp_path / 'om.db'}")
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE t (x INTEGER)"))
    yield engine
    engine.dispose()


def count(db: Engine) -> int:
    with read_only(db) as conn:
        return int(conn.execute(text("SELECT count(*) FROM t")).scalar_one())


def test_a_second_write_transaction_in_the_same_thread_is_refused_at_once(db: Engine) -> None:
    started = time.monotonic()
    with db.begin() as outer:
        outer.execute(text("INSERT INTO t VALUES (1)"))
        with pytest.raises(NestedWriteError, match="already holds one"), db.begin() as inner:
            inner.execute(text("INSERT INTO t VALUES (2)"))
    # Refused before SQLite's busy timeout (60 s) could start counting; the outer write still commits.
    assert time.monotonic() - started < 30
    assert count(db) == 1


def test_a_read_inside_a_write_and_writes_one_after_another_are_allowed(db: Engine) -> None:
    with db.begin() as conn:
        conn.execute(text("INSERT INTO t VALUES (1)"))
        assert count(db) == 0  # a reader sees what is committed, and never waits for the writer
    with db.begin() as conn:
        conn.execute(text("INSERT INTO t VALUES (2)"))
    with db.connect() as conn:  # a rolled-back write releases the thread too
        conn.execute(text("INSERT INTO t VALUES (3)"))
        conn.rollback()
    with db.begin() as conn:
        conn.execute(text("INSERT INTO t VALUES (4)"))
    assert count(db) == 3


def test_a_writer_in_another_thread_waits_for_the_lock_instead_of_being_refused(db: Engine) -> None:
    holding, done = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def other() -> None:
        try:
            holding.wait(10)
            with db.begin() as conn:  # blocks until the main thread commits
                conn.execute(text("INSERT INTO t VALUES (2)"))
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=other)
    thread.start()
    with db.begin() as conn:
        conn.execute(text("INSERT INTO t VALUES (1)"))
        holding.set()
        assert not done.wait(0.3), "the other thread's write did not wait for the lock"
    assert done.wait(30)
    thread.join()
    assert errors == []
    assert count(db) == 2


def _blocked_while_held(action: Callable[[], object]) -> None:
    """`action`, run in another thread, waits while this thread holds the open/close lock and finishes
    once it is released."""
    done = threading.Event()

    def run() -> None:
        action()
        done.set()

    with _OPEN_CLOSE:
        thread = threading.Thread(target=run)
        thread.start()
        assert not done.wait(0.3), "it went ahead while another open or close was under way"
    assert done.wait(30)
    thread.join()


def test_connections_open_and_close_one_at_a_time(db: Engine) -> None:
    """SQLite 3.51.0-3.51.1 deadlock when one connection opens a WAL database while another closes it:
    opening and closing are serialised in the process (`store.db._OPEN_CLOSE`). The pool keeps
    connections open, so the opens and closes that remain are a checkout finding the pool empty, an
    invalidated connection, and `dispose`."""
    opened: list[Any] = []
    held = [db.raw_connection() for _ in range(3)]  # the pool has none idle now
    _blocked_while_held(lambda: opened.append(db.raw_connection()))
    _blocked_while_held(opened[0].invalidate)  # an invalidated connection is closed
    for connection in held:
        connection.close()  # back to the pool: open still
    _blocked_while_held(db.dispose)  # closes every pooled connection
