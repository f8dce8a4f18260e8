"""Working-memory rows (`om_working_memory`): read one, and write one under its row lock.

A write compares the stored `version` with the one the writer last saw (when it says one) while holding
the row, so two writers that read the same version cannot both win: the second gets `Conflict` with the
version that beat it. A memory never written has version 0; the first write creates the row.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import Connection, select, update
from sqlalchemy.dialects import postgresql, sqlite

from om_core.store import schema
from om_core.tenancy.scoped_ids import StoredId

__all__ = ["Conflict", "WorkingMemoryRow", "read", "write"]

W = schema.working_memory


@dataclass(frozen=True)
class WorkingMemoryRow:
    lookup_key: str
    scope: str
    thread_id: StoredId | None
    resource_id: StoredId
    content: str
    format: str
    version: int
    updated_at: datetime
    updated_by: str


@dataclass(frozen=True)
class Conflict:
    """The write was refused: the stored version is not the one the writer expected."""

    current_version: int


def _row(mapping: object) -> WorkingMemoryRow:
    m = dict(mapping)  # type: ignore[call-overload]
    return WorkingMemoryRow(**{name: m[name] for name in WorkingMemoryRow.__dataclass_fields__})


def read(conn: Connection, lookup_key: str, *, for_update: bool = False) -> WorkingMemoryRow | None:
    statement = select(W).where(W.c.lookup_key == lookup_key)
    if for_update:
        statement = statement.with_for_update()
    found = conn.execute(statement).mappings().first()
    return _row(found) if found is not None else None


def write(
    conn: Connection,
    *,
    lookup_key: str,
    scope: str,
    thread_id: StoredId | None,
    resource_id: StoredId,
    content: str,
    format: str,
    updated_by: str,
    expected_version: int | None,
) -> WorkingMemoryRow | Conflict:
    """Store `content` as the next version, in the caller's transaction. The row is created empty first
    (`ON CONFLICT DO NOTHING`, so two first writers meet on one row) and then locked, so the version check
    and the update see one writer at a time on both databases."""
    now = datetime.now(UTC)
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    conn.execute(
        dialect.insert(W)
        .values(
            lookup_key=lookup_key,
            scope=scope,
            thread_id=thread_id,
            resource_id=resource_id,
            content="",
            format=format,
            version=0,
            updated_at=now,
            updated_by=updated_by,
        )
        .on_conflict_do_nothing(index_elements=[W.c.lookup_key])
    )
    current = read(conn, lookup_key, for_update=True)
    assert current is not None, "inserted or present above"
    if expected_version is not None and current.version != expected_version:
        return Conflict(current.version)
    conn.execute(
        update(W)
        .where(W.c.lookup_key == lookup_key)
        .values(
            content=content, format=format, version=current.version + 1, updated_at=now, updated_by=updated_by
        )
    )
    return WorkingMemoryRow(
        lookup_key=lookup_key,
        scope=current.scope,
        thread_id=current.thread_id,
        resource_id=current.resource_id,
        content=content,
        format=format,
        version=current.version + 1,
        updated_at=now,
        updated_by=updated_by,
    )
