"""Engines and short write transactions for Postgres and SQLite.

Every lifecycle change is one short transaction (design rule 3). On Postgres the transaction locks the rows
it changes with `SELECT … FOR UPDATE`; on SQLite a write transaction starts with `BEGIN IMMEDIATE`, which
takes the database write lock up front, the SQLite equivalent of locking the row before reading it.

SQLite connections come from `pysqlite3` when it is installed (a current SQLite that can load extensions;
the standard library's module here cannot), and every one loads `sqlite-vec` when that is installed: the
search index's vector tables are `vec0` virtual tables, and a trigger deletes a document's vector when the
document goes, so any connection that may delete a document (or a thread) must know the module, not only
the ones that search. `sqlite_vectors_available` says whether both are there. Connections open and close
one at a time in a process (`_OPEN_CLOSE`): the SQLite that pysqlite3-binary ships deadlocks otherwise.
"""

from __future__ import annotations

import hashlib
import importlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import pydantic_core
from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.pool import NullPool


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
#: `sqlite3WalClose`/`unixIsSharingShmNode`): both threads wait for ever. Fixed in SQLite 3.51.2.
_OPEN_CLOSE = threading.Lock()


def _serialised_connection_class(module: ModuleType) -> type:
    """The module's connection class, closing under `_OPEN_CLOSE` (passed to `connect` as `factory`)."""

    class SerialisedClose(module.Connection):  # type: ignore[name-defined,misc]
        def close(self) -> None:
            with _OPEN_CLOSE:
                super().close()

    return SerialisedClose


def make_engine(url: str, *, pool_size: int = 10, echo: bool = False) -> Engine:
    """An engine for `url` with the settings our transactions rely on."""
    if url.startswith("sqlite"):
        dbapi = _SQLITE_MODULE if _SQLITE_MODULE is not None else importlib.import_module("sqlite3")
        engine = create_engine(
            url,
            echo=echo,
            **_JSON,
            module=dbapi,
            connect_args={
                "check_same_thread": False,
                "timeout": 60,
                "factory": _serialised_connection_class(dbapi),
            },
            poolclass=NullPool if ":memory:" not in url else None,
        )
        _configure_sqlite(engine)
        return engine
    return create_engine(
        url,
        echo=echo,
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_pre_ping=True,
        isolation_level="READ COMMITTED",
        **_JSON,
    )


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "do_connect")
    def _open(dialect: Any, _record: Any, cargs: Any, cparams: Any) -> Any:
        with _OPEN_CLOSE:  # see `_OPEN_CLOSE`
            return dialect.loaded_dbapi.connect(*cargs, **cparams)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
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
        conn.exec_driver_sql("BEGIN IMMEDIATE")
        writer.conn = conn

    @event.listens_for(engine, "commit")
    @event.listens_for(engine, "rollback")
    def _on_end(conn: Connection) -> None:
        if getattr(writer, "conn", None) is conn:
            writer.conn = None


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
