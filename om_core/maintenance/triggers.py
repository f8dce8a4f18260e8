"""Trigger rows that celery-beat evaluates: idle activation and stale-work recovery.

A turn writes (or moves) its thread's `idle` trigger to the moment the idle TTL will have expired. Beat
claims due rows with one conditional UPDATE (`due_at <= now` → `due_at = NULL`), so a trigger fires once
even when two beat processes run by mistake: only one UPDATE can match the row.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Engine, and_, select, update
from sqlalchemy.dialects import postgresql, sqlite

from om_core.store import schema
from om_core.tenancy.scoped_ids import StoredId

IDLE = "idle"
STALE = "stale"

T = schema.triggers


@dataclass(frozen=True)
class DueTrigger:
    lookup_key: str
    kind: str
    thread_id: StoredId | None
    resource_id: StoredId | None
    payload: dict[str, Any]


def schedule(
    conn: Connection,
    *,
    lookup_key: str,
    kind: str,
    thread_id: StoredId | None,
    resource_id: StoredId | None,
    due_at: datetime | None,
    payload: dict[str, Any] | None = None,
) -> None:
    """Create or move a trigger. `due_at=None` disarms it."""
    now = datetime.now(UTC)
    insert = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
    values = {
        "lookup_key": lookup_key,
        "kind": kind,
        "thread_id": thread_id,
        "resource_id": resource_id,
        "due_at": due_at,
        "payload": payload or {},
        "updated_at": now,
    }
    statement = insert(T).values(**values)
    conn.execute(
        statement.on_conflict_do_update(
            index_elements=["lookup_key", "kind"],
            set_={"due_at": due_at, "payload": payload or {}, "updated_at": now},
        )
    )


def claim_due(engine: Engine, *, now: datetime | None = None, limit: int = 100) -> list[DueTrigger]:
    """Claim due triggers; each row is returned to exactly one caller."""
    moment = now or datetime.now(UTC)
    claimed: list[DueTrigger] = []
    with engine.begin() as conn:
        rows = conn.execute(
            select(T.c.lookup_key, T.c.kind).where(T.c.due_at.is_not(None), T.c.due_at <= moment).limit(limit)
        ).all()
        for lookup_key, kind in rows:
            result = conn.execute(
                update(T)
                .where(
                    and_(
                        T.c.lookup_key == lookup_key,
                        T.c.kind == kind,
                        T.c.due_at.is_not(None),
                        T.c.due_at <= moment,
                    )
                )
                .values(due_at=None, updated_at=moment)
                .returning(T.c.lookup_key, T.c.kind, T.c.thread_id, T.c.resource_id, T.c.payload)
            ).first()
            if result is not None:
                claimed.append(DueTrigger(result[0], result[1], result[2], result[3], dict(result[4] or {})))
    return claimed
