"""Observation groups as rows: written in the transaction of the commit that puts them in the log, read
back by id for recall and by the search index. Reflection never deletes them, so a range stays findable
after the log's text moved on (behaviour §9.1: "fall back across generations")."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from sqlalchemy import Connection, select
from sqlalchemy.engine import RowMapping

from om_core.store.schema import observation_groups as G
from om_core.store.types import ObservationGroup
from om_core.tenancy.scoped_ids import StoredId

__all__ = ["find", "insert", "of_thread"]


def insert(conn: Connection, groups: Sequence[ObservationGroup]) -> None:
    """Store `groups`. Callers write them only when their commit applied, in its transaction: a refused
    commit stores none, and every group a log carries has its row."""
    if not groups:
        return
    now = datetime.now(UTC)
    conn.execute(
        G.insert(),
        [
            {
                "id": g.id,
                "thread_id": g.thread_id,
                "resource_id": g.resource_id,
                "lookup_key": g.key,
                "cycle_id": g.cycle_id,
                "kind": g.kind,
                "ranges": g.ranges,
                "text": g.text,
                "observed_at": g.observed_at,
                "created_at": now,
            }
            for g in groups
        ],
    )


def find(conn: Connection, group_id: str, resource_id: StoredId) -> ObservationGroup | None:
    """The group `group_id` of the resource; None for a group of any other resource."""
    row = conn.execute(select(G).where(G.c.id == group_id, G.c.resource_id == resource_id)).mappings().first()
    return _group(row) if row is not None else None


def of_thread(conn: Connection, thread_id: StoredId) -> list[ObservationGroup]:
    """A thread's groups, oldest first."""
    rows = conn.execute(
        select(G).where(G.c.thread_id == thread_id).order_by(G.c.created_at, G.c.id)
    ).mappings()
    return [_group(row) for row in rows]


def _group(row: RowMapping) -> ObservationGroup:
    return ObservationGroup(
        id=row["id"],
        thread_id=row["thread_id"],
        resource_id=row["resource_id"],
        key=row["lookup_key"],
        cycle_id=row["cycle_id"],
        kind=row["kind"],
        ranges=row["ranges"],
        text=row["text"],
        observed_at=row["observed_at"],
    )
