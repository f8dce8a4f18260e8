"""The event outbox: every `data-om-*` event is a row written in the transaction of the change it reports.

Publishing (Redis pub/sub, SSE) reads rows after commit, so a client that reconnects can replay from the
last id it saw and miss nothing. A `(lookup_key, type, cycle_id)` unique index makes a redelivered task's
events no-ops, like the marker rule "same type and cycleId → skip" of behaviour §10.2.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Engine, bindparam, exists, func, literal, select
from sqlalchemy.dialects import postgresql, sqlite

from om_core.store import schema
from om_core.store.types import NewEvent, Record, StoredEvent
from om_core.store.usage import count_usage
from om_core.tenancy.scoped_ids import StoredId

_EVENT_COLUMNS = (
    "thread_id",
    "resource_id",
    "lookup_key",
    "record_id",
    "type",
    "cycle_id",
    "payload",
    "created_at",
)


def _guarded_insert(dialect: Any, owner: Any | None) -> Any:
    """`INSERT ... SELECT <values> WHERE EXISTS (<owner row>)`: an event of a thread (or, with no thread,
    of a resource) that no longer exists is not written. A task still running when its thread or resource
    was erased (`store.erasure`) reports its start, end or failure into the void instead of leaving a row
    that names what was erased. One statement, so the check costs no round trip."""
    E = schema.events
    values = select(*(bindparam(name, type_=E.c[name].type) for name in _EVENT_COLUMNS))
    if owner is not None:
        values = values.where(exists().where(owner == bindparam("owner_id", type_=owner.type)))
    else:
        # SQLite parses `INSERT ... SELECT ... ON CONFLICT` only after a WHERE.
        values = values.where(literal(True))
    return (
        dialect.insert(E).from_select(list(_EVENT_COLUMNS), values).on_conflict_do_nothing().returning(E.c.id)
    )


# Built once per dialect and owner with bind parameters: workers write events on every cycle.
_INSERT_EVENT = {
    (name, owner_kind): _guarded_insert(dialect, owner)
    for name, dialect in (("postgresql", postgresql), ("sqlite", sqlite))
    for owner_kind, owner in (
        ("thread", schema.threads.c.id),
        ("resource", schema.resources.c.id),
        ("none", None),
    )
}
_CYCLE_EVENT = (
    select(schema.events.c.id)
    .where(
        schema.events.c.lookup_key == bindparam("lookup_key"),
        schema.events.c.type.in_(bindparam("types", expanding=True)),
        schema.events.c.cycle_id == bindparam("cycle_id"),
    )
    .limit(1)
)


def write_events(
    conn: Connection,
    *,
    lookup_key: str,
    thread_id: StoredId | None,
    resource_id: StoredId | None,
    record_id: str | None,
    events: Sequence[NewEvent],
) -> list[StoredEvent]:
    """Insert `events`; an event whose (type, cycle_id) is already stored for the key is skipped. The model
    usage an inserted event reports is added to its thread's and tenant's totals here (`store.usage`)."""
    stored: list[StoredEvent] = []
    dialect = "postgresql" if conn.dialect.name == "postgresql" else "sqlite"
    for event in events:
        now = datetime.now(UTC)
        event_thread = event.thread_id or thread_id
        owner_kind, owner_id = (
            ("thread", event_thread)
            if event_thread is not None
            else ("resource", resource_id)
            if resource_id is not None
            else ("none", None)
        )
        statement = _INSERT_EVENT[(dialect, owner_kind)]
        values: dict[str, Any] = {
            "owner_id": owner_id,
            "thread_id": event_thread,
            "resource_id": resource_id,
            "lookup_key": lookup_key,
            "record_id": record_id,
            "type": event.type,
            "cycle_id": event.cycle_id,
            "payload": event.payload,
            "created_at": now,
        }
        row = conn.execute(statement, values).first()
        if row is None:
            continue
        stored.append(
            StoredEvent(
                id=int(row[0]),
                type=event.type,
                thread_id=event_thread,
                lookup_key=lookup_key,
                record_id=record_id,
                cycle_id=event.cycle_id,
                payload=dict(event.payload),
                created_at=now,
            )
        )
    count_usage(conn, stored)
    return stored


def write_record_events(conn: Connection, record: Record, events: Sequence[NewEvent]) -> list[StoredEvent]:
    """`write_events` for the thread, resource and key of `record`: what every change to a record reports."""
    return write_events(
        conn,
        lookup_key=record.lookup_key,
        thread_id=record.thread_id,
        resource_id=record.resource_id,
        record_id=record.id,
        events=events,
    )


def list_events(
    engine: Engine, *, thread_id: StoredId, after_id: int = 0, limit: int = 500, types: Sequence[str] = ()
) -> list[StoredEvent]:
    """Events of a thread in commit order, for replay (`Last-Event-ID`) and for tests."""
    query = (
        select(schema.events)
        .where(schema.events.c.thread_id == thread_id, schema.events.c.id > after_id)
        .order_by(schema.events.c.id)
        .limit(limit)
    )
    if types:
        query = query.where(schema.events.c.type.in_(list(types)))
    with engine.connect() as conn:
        rows = conn.execute(query).mappings().all()
    return [
        StoredEvent(
            id=int(row["id"]),
            type=row["type"],
            thread_id=row["thread_id"],
            lookup_key=row["lookup_key"],
            record_id=row["record_id"],
            cycle_id=row["cycle_id"],
            payload=dict(row["payload"]),
            created_at=row["created_at"],
        )
        for row in rows
    ]


def last_event_id(engine: Engine, thread_id: StoredId) -> int:
    with engine.connect() as conn:
        value = conn.execute(
            select(func.max(schema.events.c.id)).where(schema.events.c.thread_id == thread_id)
        ).scalar()
    return int(value or 0)


def has_event(
    engine_or_conn: Engine | Connection, *, lookup_key: str, cycle_id: str, types: Sequence[str]
) -> bool:
    """Whether a cycle already reported one of `types` (uses the (lookup_key, type, cycle_id) index)."""
    params = {"lookup_key": lookup_key, "types": list(types), "cycle_id": cycle_id}
    if isinstance(engine_or_conn, Connection):
        return engine_or_conn.execute(_CYCLE_EVENT, params).first() is not None
    with engine_or_conn.connect() as conn:
        return conn.execute(_CYCLE_EVENT, params).first() is not None


def cycle_payload(
    conn: Connection, *, thread_id: StoredId, cycle_id: str, types: Sequence[str]
) -> dict[str, Any] | None:
    """The payload of the newest event of `types` a cycle reported on a thread's stream (None: none).
    Structured extraction reads the output of the cycle it follows from its end event."""
    row = conn.execute(
        select(schema.events.c.payload)
        .where(
            schema.events.c.thread_id == thread_id,
            schema.events.c.cycle_id == cycle_id,
            schema.events.c.type.in_(list(types)),
        )
        .order_by(schema.events.c.id.desc())
        .limit(1)
    ).first()
    return dict(row[0]) if row is not None else None
