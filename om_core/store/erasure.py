"""Erasing a resource or a thread: every row of it, in every table, in one transaction.

A data-subject request must leave nothing behind, including in tables added after this module was
written. So the rows are not found by a list of tables kept here: every table of `schema.metadata` with
a `thread_id`, `resource_id` or `lookup_key` column is swept (children before parents, the order the
metadata's foreign keys give), plus the tables created at run time whose names start with `om_vec_`
(the search index's vector tables, found by the database inspector), plus the resource or thread row
itself. A new table with one of those columns is erased with no change here; the test that enumerates the
database's tables (`tests/integration/test_api_manage.py`) fails for one without.

Locks, in the order every other writer of these rows takes them: the thread rows first (id order; a turn
holds its thread's row while it appends), then each record chain's key lock (initialisation and rollover
hold it), then the record rows (a cycle's commit holds its record's row while it writes its chunk, groups,
events and usage, tables with no foreign key to the thread), then the deletes: a commit either finished
before the sweep, which then sees its rows, or runs after it and finds its record gone
(`records.lock_live` answers "not-found", so nothing is written). The outbox refuses an event of a thread or
resource that no longer exists (`outbox.write_events`), so a late task resurrects nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, column, delete, inspect, literal_column, or_, select
from sqlalchemy import table as table_clause
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.expression import TableClause

from om_core.store import history, schema
from om_core.store.db import key_lock
from om_core.tenancy.scoped_ids import StoredId

__all__ = [
    "RUNTIME_TABLE_PREFIX",
    "ErasedIds",
    "erase_in_transaction",
    "erase_resource",
    "erase_thread",
    "runtime_tables",
]

#: Tables other parts create at run time (one per embedding size) and erasure must find by name.
RUNTIME_TABLE_PREFIX = "om_vec_"
#: The columns that tie a row to a thread or resource (or to one of their record chains).
OWNER_COLUMNS = ("thread_id", "resource_id", "lookup_key")


@dataclass(frozen=True)
class ErasedIds:
    """What an erasure removed: stored ids, and the record-chain keys that named them."""

    resource_id: StoredId | None
    thread_ids: tuple[StoredId, ...]
    lookup_keys: tuple[str, ...]


def _thread_key(thread_id: StoredId) -> str:
    return f"thread:{thread_id}"


def _resource_key(resource_id: StoredId) -> str:
    return f"resource:{resource_id}"


def runtime_tables(conn: Connection) -> list[str]:
    """The run-time tables (`om_vec_*`) the database holds now."""
    return sorted(
        name
        for name in inspect(conn).get_table_names()
        if name.startswith(RUNTIME_TABLE_PREFIX) and name not in schema.metadata.tables
    )


def _owner_filter(
    columns: dict[str, ColumnElement[object]],
    *,
    resource_id: StoredId | None,
    thread_ids: Sequence[StoredId],
    keys: Sequence[str],
) -> ColumnElement[bool] | None:
    conditions: list[ColumnElement[bool]] = []
    if "thread_id" in columns and thread_ids:
        conditions.append(columns["thread_id"].in_(list(thread_ids)))
    if "resource_id" in columns and resource_id is not None:
        conditions.append(columns["resource_id"] == resource_id)
    if "lookup_key" in columns and keys:
        conditions.append(columns["lookup_key"].in_(list(keys)))
    return or_(*conditions) if conditions else None


def _sweep(
    conn: Connection, *, resource_id: StoredId | None, thread_ids: Sequence[StoredId], keys: Sequence[str]
) -> None:
    """Delete the rows of the ids from every owning table, children first."""
    for owning in reversed(schema.metadata.sorted_tables):
        if owning.name in (schema.threads.name, schema.resources.name):
            continue
        columns: dict[str, ColumnElement[object]] = {
            c.name: c for c in owning.columns if c.name in OWNER_COLUMNS
        }
        where = _owner_filter(columns, resource_id=resource_id, thread_ids=thread_ids, keys=keys)
        if where is not None:
            conn.execute(delete(owning).where(where))
    for name in runtime_tables(conn):
        found = {c["name"] for c in inspect(conn).get_columns(name)}
        owned = [c for c in OWNER_COLUMNS if c in found]
        if not owned:
            continue
        runtime = table_clause(name, *(column(c) for c in owned))
        columns = {c: runtime.c[c] for c in owned}
        where = _owner_filter(columns, resource_id=resource_id, thread_ids=thread_ids, keys=keys)
        if where is None:
            continue
        try:
            with conn.begin_nested():
                conn.execute(delete(runtime).where(where))
        except DBAPIError:
            # A virtual table (sqlite-vec) may delete by rowid only: find the rows, then delete those.
            rowids = [row[0] for row in conn.execute(select(_rowid(runtime)).where(where))]
            for rowid in rowids:
                conn.execute(delete(runtime).where(_rowid(runtime) == rowid))
    if thread_ids:
        conn.execute(delete(schema.threads).where(schema.threads.c.id.in_(list(thread_ids))))


def _lock_records(conn: Connection, keys: Sequence[str]) -> None:
    """Wait for every commit holding a record of `keys` (and keep new ones out) until the erase commits."""
    R = schema.records
    conn.execute(select(R.c.id).where(R.c.lookup_key.in_(list(keys))).order_by(R.c.id).with_for_update())


def _rowid(runtime: TableClause) -> ColumnElement[object]:
    return literal_column(f"{runtime.name}.rowid")


#: Postgres's deadlock and serialization failures: the erase lost a lock race and can simply run again.
_RETRYABLE = ("40P01", "40001")
ERASE_ATTEMPTS = 3


def erase_in_transaction(db: Engine, erase: Callable[[Connection], ErasedIds | None]) -> ErasedIds | None:
    """Run `erase` in its own transaction, again if Postgres aborted it for a deadlock: a commit that holds
    a record row and then patches the thread row takes the two in the other order (see ARCHITECTURE.md,
    Known problems), and the erase, which a client retries anyway, is the cheap one to repeat."""
    for attempt in range(ERASE_ATTEMPTS):
        try:
            with db.begin() as conn:
                return erase(conn)
        except DBAPIError as exc:
            if attempt + 1 == ERASE_ATTEMPTS or getattr(exc.orig, "pgcode", None) not in _RETRYABLE:
                raise
    raise AssertionError("unreachable")


def erase_thread(conn: Connection, thread_id: StoredId) -> ErasedIds | None:
    """Erase one thread (its messages, parts, records, chunks, events, triggers, groups, search entries)
    in the caller's transaction. None if it does not exist.

    In resource scope the resource's shared log is the resource's, not the thread's, and stays (its
    sections of this thread were written in the log's text; `erase_resource` removes them)."""
    if history.lock_thread(conn, thread_id) is None:
        return None
    key = _thread_key(thread_id)
    key_lock(conn, key)
    _lock_records(conn, [key])
    _sweep(conn, resource_id=None, thread_ids=[thread_id], keys=[key])
    return ErasedIds(None, (thread_id,), (key,))


def erase_resource(conn: Connection, resource_id: StoredId) -> ErasedIds | None:
    """Erase a resource with everything of it, in the caller's transaction: every thread (as
    `erase_thread`), the shared log and its generations, every row naming the resource, and the resource
    row. None if it does not exist."""
    R = schema.resources
    if conn.execute(select(R.c.id).where(R.c.id == resource_id).with_for_update()).first() is None:
        return None
    T = schema.threads
    thread_ids = sorted(conn.execute(select(T.c.id).where(T.c.resource_id == resource_id)).scalars())
    for thread_id in thread_ids:
        history.lock_thread(conn, thread_id)
    keys = sorted([_thread_key(t) for t in thread_ids] + [_resource_key(resource_id)])
    for key in keys:
        key_lock(conn, key)
    _lock_records(conn, keys)
    _sweep(conn, resource_id=resource_id, thread_ids=thread_ids, keys=keys)
    conn.execute(delete(R).where(R.c.id == resource_id))
    return ErasedIds(resource_id, tuple(thread_ids), tuple(keys))
