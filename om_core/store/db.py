"""Engines and short write transactions for Postgres and SQLite.

Every lifecycle change is one short transaction (design rule 3). On Postgres the transaction locks the rows
it changes with `SELECT … FOR UPDATE`; on SQLite a write transaction starts with `BEGIN IMMEDIATE`, which
takes the database write lock up front, the SQLite equivalent of locking the row before reading it.

SQLite connections come from `pysqlite3` when it is installed (a current SQLite that can load extensions;
the standard library's module here cannot), and every one loads `sqlite-vec` when that is installed: the
search index's vector tables are `vec0` virtual tables, and a trigger deletes a document's vector when the
document goes, so any connection that may delete a document (or a thread) must know the module, not only
the ones that search. `sqlite_vectors_available` says whether both are there.

Connections are pooled and stay open between checkouts, on both dialects. On SQLite this saves a WAL open,
the extension load and the PRAGMAs per transaction, and keeps each connection's statement cache; the pool
never makes a checkout wait (overflow connections are opened, and closed on return), and a connection goes
back outside any transaction. Connections still open and close one at a time in a process (`_OPEN_CLOSE`):
the SQLite that pysqlite3-binary ships deadlocks otherwise. On Postgres there is no ping per checkout: a
pooled connection is checked at checkout without a round trip (`_socket_says_dead`; a ping only after
`IDLE_PING_S` idle) and replaced when dead, before any statement of the caller ran. A connection belongs to
the process that opened it: a forked child opens its own.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import select
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import pydantic_core
from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.exc import DisconnectionError, OperationalError
from sqlalchemy.pool import QueuePool


def _to_json(value: Any) -> str:
    return pydantic_core.to_json(value).decode()


#: JSON columns (part bodies, event payloads) are encoded and decoded on every turn; pydantic-core's
#: encoder and parser do it several times faster than the standard library's.
_JSON = {"json_serializer": _to_json, "json_deserializer": pydantic_core.from_json}


def _optional(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


#: The DB-API module of SQLite engines: pysqlite3 when installed, else the standard library's.
_SQLITE_MODULE = _optional("pysqlite3.dbapi2")
#: sqlite-vec's loader, when installed.
_SQLITE_VEC = _optional("sqlite_vec")


def sqlite_vectors_available() -> bool:
    """Whether SQLite engines made here load sqlite-vec (vector search on SQLite needs both packages)."""
    return _SQLITE_MODULE is not None and _SQLITE_VEC is not None


#: Held while a SQLite connection opens or closes, so no two do at once in this process. SQLite 3.51.0 and
#: 3.51.1 (the build pysqlite3-binary ships) take two mutexes of their unix VFS in opposite orders when one
#: connection opens a WAL database while another closes it (`unixOpen`/`findReusableFd` against
#: `sqlite3WalClose`/`unixIsSharingShmNode`): both threads wait for ever. Fixed in SQLite 3.51.2. With the
#: pool these are rare: a checkout that finds no idle connection, an invalidated connection, `dispose`.
_OPEN_CLOSE = threading.Lock()

# A fork happens between opens and closes, never during one: a child forked while another thread of the
# parent was inside SQLite's open or close would inherit SQLite's VFS mutexes held, and this lock, and
# wait for ever on its first connection (Celery's prefork pool forks a process that has threads).
os.register_at_fork(
    before=_OPEN_CLOSE.acquire,
    after_in_parent=_OPEN_CLOSE.release,
    after_in_child=_OPEN_CLOSE.release,
)


def _serialised_connection_class(module: ModuleType) -> type:
    """The module's connection class, closing under `_OPEN_CLOSE` (passed to `connect` as `factory`)."""

    class SerialisedClose(module.Connection):  # type: ignore[name-defined,misc]
        def close(self) -> None:
            with _OPEN_CLOSE:
                super().close()

    return SerialisedClose


#: How long a SQLite writer waits for the write lock before it fails with "database is locked".
BUSY_TIMEOUT_S = 60.0

#: Connections a SQLite engine keeps open between checkouts. Enough for the API's busy request threads and a
#: worker's threads; past it a checkout opens an overflow connection (never waits), closed on return.
SQLITE_POOL_SIZE = 32

#: A pooled Postgres connection idle longer than this is pinged (one round trip) before it is handed out:
#: a firewall or NAT can drop an idle connection without a word, which the socket check cannot see.
IDLE_PING_S = 60.0

#: Postgres connections are replaced after this long, whatever their health (bounds a backend's memory
#: growth and how long a silently dropped connection can sit in the pool).
PG_RECYCLE_S = 1800


def make_engine(url: str, *, pool_size: int = 10, echo: bool = False) -> Engine:
    """An engine for `url` with the settings our transactions rely on."""
    if url.startswith("sqlite"):
        dbapi = _SQLITE_MODULE if _SQLITE_MODULE is not None else importlib.import_module("sqlite3")
        memory = ":memory:" in url or "mode=memory" in url
        pooling: dict[str, Any] = (
            {}  # SQLAlchemy's default for a memory database: one connection per thread
            if memory
            else {
                "poolclass": QueuePool,
                "pool_size": max(pool_size, SQLITE_POOL_SIZE),
                "max_overflow": -1,  # a checkout never waits: a thread may hold a writer and a reader
                "pool_use_lifo": True,  # the most recently used connections stay warm, the rest idle
                # A connection waits in the pool outside any transaction: one left open would hold the
                # write lock (BEGIN IMMEDIATE) or pin a WAL snapshot until its next use.
                "pool_reset_on_return": "rollback",
            }
        )
        engine = create_engine(
            url,
            echo=echo,
            **_JSON,
            module=dbapi,
            connect_args={
                "check_same_thread": False,
                "timeout": BUSY_TIMEOUT_S,
                "factory": _serialised_connection_class(dbapi),
            },
            **pooling,
        )
        _forget_connections_across_fork(
            engine
        )  # first: no other listener touches another process's connection
        _configure_sqlite(engine)
        return engine
    engine = create_engine(
        url,
        echo=echo,
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_recycle=PG_RECYCLE_S,
        isolation_level="READ COMMITTED",
        **_JSON,
    )
    _forget_connections_across_fork(engine)  # first: no other listener touches another process's connection
    _check_liveness_at_checkout(engine)
    return engine


def _socket_says_dead(dbapi_connection: Any) -> bool:
    """Whether an idle psycopg2 connection is known dead without asking the server: closed on our side, or
    its socket readable. An idle healthy backend sends nothing; one that was terminated
    (`pg_terminate_backend`, a server restart or shutdown, an idle-session timeout) sent its FATAL error and
    closed the socket, which makes it readable."""
    if dbapi_connection.closed:
        return True
    try:
        poller = select.poll()
        poller.register(dbapi_connection.fileno(), select.POLLIN | select.POLLPRI)
        return bool(poller.poll(0))
    except (OSError, ValueError):
        return True


def _check_liveness_at_checkout(engine: Engine) -> None:
    """Postgres liveness without a round trip per checkout (what `pool_pre_ping` cost: a `SELECT 1` per
    checkout). At checkout, before any statement of the caller ran, a connection found dead (socket check;
    a ping only after `IDLE_PING_S` idle) is discarded and the pool hands out a fresh one: the retry is at
    the only point where it cannot repeat any work. A disconnect that is only seen by a statement fails
    that transaction, which the server rolls back; SQLAlchemy then invalidates the whole pool
    (`invalidate_pool_on_disconnect`), so the next checkout opens a fresh connection."""

    @event.listens_for(engine, "checkin")
    def _returned(_dbapi_connection: Any, record: Any) -> None:
        if record is not None:
            record.info[_RETURNED] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _check(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        returned = record.info.pop(_RETURNED, None)
        if returned is None:
            return  # just opened
        if _socket_says_dead(dbapi_connection):
            raise DisconnectionError("the pooled connection was closed by the server")
        if time.monotonic() - returned > IDLE_PING_S:
            try:
                engine.dialect.do_ping(dbapi_connection)
            except engine.dialect.loaded_dbapi.Error as exc:
                raise DisconnectionError("the pooled connection did not answer a ping") from exc


_RETURNED = "om_returned_at"
_PID = "om_pid"


def _forget_connections_across_fork(engine: Engine) -> None:
    """A pooled connection belongs to the process that opened it: a forked child that inherited the pool
    opens its own instead of sharing the parent's socket or SQLite file handles (and never closes the
    parent's, which for SQLite could disturb the parent's locks)."""

    @event.listens_for(engine, "connect")
    def _owner(_dbapi_connection: Any, record: Any) -> None:
        record.info[_PID] = os.getpid()

    @event.listens_for(engine, "checkout")
    def _same_process(_dbapi_connection: Any, record: Any, proxy: Any) -> None:
        if record.info.get(_PID, os.getpid()) != os.getpid():
            record.dbapi_connection = proxy.dbapi_connection = None  # not closed: it is the parent's
            raise DisconnectionError("connection opened by another process")


def _prepare_sqlite_connection(dbapi_connection: Any, _record: Any) -> None:
    """Every new SQLite connection: transactions begun by the engine's "begin" event, sqlite-vec loaded
    where installed, WAL and foreign keys on."""
    # Let SQLAlchemy's "begin" event issue BEGIN IMMEDIATE instead of pysqlite's deferred BEGIN.
    dbapi_connection.isolation_level = None
    if sqlite_vectors_available():
        dbapi_connection.enable_load_extension(True)
        _SQLITE_VEC.load(dbapi_connection)  # type: ignore[union-attr]
        dbapi_connection.enable_load_extension(False)
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "do_connect")
    def _open(dialect: Any, _record: Any, cargs: Any, cparams: Any) -> Any:
        with _OPEN_CLOSE:  # see `_OPEN_CLOSE`
            return dialect.loaded_dbapi.connect(*cargs, **cparams)

    event.listen(engine, "connect", _prepare_sqlite_connection)

    writer = threading.local()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        if conn.get_execution_options().get(READ_ONLY):
            conn.exec_driver_sql("BEGIN")  # deferred: a reader, never waiting on (or for) a writer
            return
        held = getattr(writer, "conn", None)
        if held is not None and not held.closed and held.in_transaction():
            raise NestedWriteError(
                "a SQLite write transaction was opened by a thread that already holds one: it would wait "
                "for itself until the busy timeout; read through `read_only`, or pass the open connection"
            )
        if WRITERS_QUEUE_IN_PROCESS:
            queue.enter(conn.connection.dbapi_connection)
        try:
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        except BaseException:
            queue.leave(conn.connection.dbapi_connection)
            raise
        writer.conn = conn

    @event.listens_for(engine, "commit")
    @event.listens_for(engine, "rollback")
    def _on_end(conn: Connection) -> None:
        if getattr(writer, "conn", None) is conn:
            writer.conn = None

    queue = _WriterQueue()
    _QUEUES[engine] = queue
    # The queue is left once the transaction really ended: after the driver's COMMIT or ROLLBACK (also the
    # pool's rollback of a connection returned inside a transaction), or when the connection is closed or
    # invalidated whatever it was doing.
    dialect = engine.dialect
    for name in ("do_commit", "do_rollback"):
        setattr(dialect, name, _then_leave(getattr(dialect, name), queue))
    for name in ("close", "invalidate", "soft_invalidate", "checkin", "close_detached"):
        event.listen(engine, name, lambda dbapi_connection, *_: queue.leave(dbapi_connection))


#: On SQLite the writers of one engine queue in the process before `BEGIN IMMEDIATE` (`_WriterQueue`).
WRITERS_QUEUE_IN_PROCESS = True


@dataclass(frozen=True)
class WriterQueueStats:
    """What the write transactions of one SQLite engine cost in waiting, since the engine was made: the
    turn path's share of the write lock is a figure of its own (issue 29), not something to infer from
    latency. `wait_s` and `waits` count only writers that found the queue taken; `held_s` is how long the
    lock was held in all, so its growth over a span says how busy the one writer was (near the span's
    length, turns queue for it whatever else is free)."""

    wait_s: float = 0.0
    waits: int = 0
    transactions: int = 0
    held_s: float = 0.0


class _WriterQueue:
    """The write transactions of one SQLite engine, one at a time, in this process.

    SQLite makes a writer that finds the database locked poll: its busy handler sleeps 1, 2, 5, 10, 15, 20,
    25, 25, 25, 50, 50, then 100 ms between attempts, so under contention a writer sleeps on after the lock
    was freed (a p95 of tens of ms for a lock held for one). Writers of the same process wait here instead,
    on a lock that wakes the next one as soon as the holder's transaction ended; only writers of other
    processes (API and worker of `om up`) still meet the busy handler. Waiting is bounded like SQLite's
    busy timeout, and ends in the same error.

    The counters (`stats`) cost an uncontended writer one increment and two clock reads, made while it
    holds the queue; a wait is added under a lock of its own (a waiter that timed out does not hold the
    queue), so no update is lost; a reader may see one transaction half counted."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holder: Any = None
        self._counting = threading.Lock()
        self._wait_s = 0.0
        self._waits = 0
        self._transactions = 0
        self._held_s = 0.0
        self._entered = 0.0

    @property
    def stats(self) -> WriterQueueStats:
        return WriterQueueStats(self._wait_s, self._waits, self._transactions, self._held_s)

    def enter(self, dbapi_connection: Any) -> None:
        if not self._lock.acquire(blocking=False):
            started = time.perf_counter()
            turn = self._lock.acquire(timeout=BUSY_TIMEOUT_S)
            with self._counting:
                self._wait_s += time.perf_counter() - started
                self._waits += 1
            if not turn:
                raise OperationalError(
                    "BEGIN IMMEDIATE",
                    None,
                    RuntimeError(
                        f"database is locked: no write turn within {BUSY_TIMEOUT_S:.0f}s in this process"
                    ),
                )
        self._transactions += 1
        self._holder = dbapi_connection
        self._entered = time.perf_counter()

    def leave(self, dbapi_connection: Any) -> None:
        if dbapi_connection is not None and self._holder is dbapi_connection:
            self._held_s += time.perf_counter() - self._entered
            self._holder = None
            self._lock.release()


#: Each SQLite engine's queue, for `writer_queue_stats`; an engine that is gone takes its queue with it.
_QUEUES: weakref.WeakKeyDictionary[Engine, _WriterQueue] = weakref.WeakKeyDictionary()


def writer_queue_stats(engine: Engine) -> WriterQueueStats | None:
    """The writer queue's counters of a SQLite engine made by `make_engine`; None for any other engine
    (Postgres has no queue: its writers wait on row locks in the server)."""
    queue = _QUEUES.get(engine)
    return None if queue is None else queue.stats


def _then_leave(method: Any, queue: _WriterQueue) -> Any:
    def ended(proxied: Any) -> None:
        try:
            method(proxied)
        finally:
            queue.leave(getattr(proxied, "dbapi_connection", proxied))

    return ended


class NestedWriteError(RuntimeError):
    """SQLite serialises writers with one database lock, so a second write transaction in a thread that
    holds one can never start: refused at once instead of after the busy timeout."""


#: Execution option of a connection that only reads (`read_only`): on SQLite its transaction is a deferred
#: `BEGIN`, which in WAL mode neither takes nor waits for the write lock.
READ_ONLY = "om_read_only"


@contextmanager
def read_only(engine: Engine) -> Iterator[Connection]:
    """A connection for reads only. Every other SQLite transaction here starts with `BEGIN IMMEDIATE` (it
    takes the write lock), so a read opened while the same thread holds another connection (search called
    from within recall's read) would wait for itself; on Postgres this is a plain connection."""
    with engine.connect() as conn:
        yield conn.execution_options(**{READ_ONLY: True})


@contextmanager
def single_write(engine: Engine) -> Iterator[Connection]:
    """A connection for one write statement (and reads that need not be consistent with it). On Postgres it
    runs in autocommit: one statement is atomic by itself, and a transaction around it would cost two more
    round trips (`BEGIN`, `COMMIT`). On SQLite it is an ordinary write transaction, so the writer still
    queues (`_WriterQueue`) and takes the write lock up front like every other."""
    if engine.dialect.name == "postgresql":
        with engine.connect() as conn:
            yield conn.execution_options(isolation_level="AUTOCOMMIT")
    else:
        with engine.begin() as conn:
            yield conn


def is_postgres(conn: Connection) -> bool:
    return conn.dialect.name == "postgresql"


def key_lock(conn: Connection, key: str) -> None:
    """Serialise initialisation and rollover per lookup key (Postgres advisory lock, held to commit).

    SQLite needs nothing here: BEGIN IMMEDIATE already serialises every writer.
    """
    if is_postgres(conn):
        digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
        lock_id = int.from_bytes(digest, "big", signed=True)
        conn.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": lock_id})
