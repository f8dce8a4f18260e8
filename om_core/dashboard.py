"""Read models of the memory dashboard (`/ui`): a tenant's resources with their totals, its recent
failures, its OM model usage, and what one reflection changed.

Each list is one statement per page (no query per row), bounded by the page, because the dashboard asks
for them on every visit and a tenant may hold many resources. Everything is scoped to the caller's tenant
(`tenant_id` None: tenancy off, every row) and returns public ids only, like `queries`; the HTTP shell
only translates.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, func, or_, select, union_all

from om_core.engine import lookup_key
from om_core.engine.events import EventType
from om_core.observations.diff import DiffLine, diff_lines
from om_core.pagination import DEFAULT_LIMIT, Page, decode_cursor, encode_cursor
from om_core.store import schema
from om_core.store.db import read_only
from om_core.store.history import ThreadRow, contains_text, public_part
from om_core.store.usage import UsageTotals
from om_core.tenancy.scoped_ids import PublicId, StoredId, public_id, scoped_id

__all__ = [
    "FAILURE_TYPES",
    "GenerationDiff",
    "RecentFailure",
    "ResourceSummary",
    "generation_diff",
    "recent_failures",
    "resources_page",
    "tenant_om_usage",
]

#: The event types that report a background cycle's failure (one per phase).
FAILURE_TYPES = tuple(sorted(t.value for t in EventType if t.value.endswith("-failed")))

_RESOURCES = "resources"


@dataclass(frozen=True)
class ResourceSummary:
    """A resource with the totals of its threads: how many, their messages, the newest activity, and the
    cost of OM's model calls for them."""

    id: str
    threads: int
    messages: int
    last_activity_at: datetime | None
    cost_usd: float


def resources_page(
    db: Engine,
    *,
    tenant_id: str | None,
    q: str | None = None,
    cursor: str | None = None,
    limit: int = DEFAULT_LIMIT,
) -> Page[ResourceSummary]:
    """One page of the tenant's resources by id, after `cursor`; with `q`, only those whose public id
    contains it (any case). Raises `CursorError` for a cursor this list did not hand out.

    The page of resource ids is chosen first (keyset on the primary key), then only its threads are
    joined and summed, in the same statement; a thread's messages are counted by a correlated subquery on
    the messages' primary key."""
    R, T, M, U = schema.resources, schema.threads, schema.messages, schema.usage_threads
    page = select(R.c.id)
    if tenant_id is not None:
        page = page.where(R.c.tenant_id == tenant_id)
    if q:
        page = page.where(contains_text(public_part(R.c.id, tenant_id), q))
    if cursor is not None:
        (public,) = decode_cursor(_RESOURCES, cursor, (str,))
        page = page.where(R.c.id > scoped_id(tenant_id, PublicId(str(public))))
    chosen = page.order_by(R.c.id).limit(limit + 1).subquery("page")
    message_count = (
        select(func.count()).select_from(M).where(M.c.thread_id == T.c.id).correlate(T).scalar_subquery()
    )
    query = (
        select(
            chosen.c.id,
            func.count(T.c.id).label("threads"),
            func.coalesce(func.sum(message_count), 0).label("messages"),
            func.max(T.c.last_activity_at).label("last_activity_at"),
            func.coalesce(func.sum(U.c.cost_usd), 0.0).label("cost_usd"),
        )
        .select_from(chosen)
        .outerjoin(T, T.c.resource_id == chosen.c.id)
        .outerjoin(U, U.c.thread_id == T.c.id)
        .group_by(chosen.c.id)
        .order_by(chosen.c.id)
    )
    with read_only(db) as conn:
        rows = conn.execute(query).all()
    items = [
        ResourceSummary(
            id=public_id(StoredId(str(row.id))),
            threads=int(row.threads or 0),
            messages=int(row.messages or 0),
            last_activity_at=row.last_activity_at,
            cost_usd=float(row.cost_usd or 0.0),
        )
        for row in rows[:limit]
    ]
    if len(rows) <= limit or not items:
        return Page(items)
    return Page(items, encode_cursor(_RESOURCES, (items[-1].id,)))


@dataclass(frozen=True)
class RecentFailure:
    """One failed background cycle: which thread (public id; None for a resource's shared log), the
    event type, the error it reported and when."""

    thread_id: PublicId | None
    type: str
    error: str
    at: datetime


def recent_failures(db: Engine, *, tenant_id: str | None, limit: int = 20) -> list[RecentFailure]:
    """The tenant's newest failure events, newest first: of its threads, and of its resources' shared logs
    (resource scope, where a reflection's event names no thread)."""
    E, T, R = schema.events, schema.threads, schema.resources
    query = select(E.c.thread_id, E.c.type, E.c.payload, E.c.created_at).where(E.c.type.in_(FAILURE_TYPES))
    if tenant_id is not None:
        query = query.where(
            or_(
                E.c.thread_id.in_(select(T.c.id).where(T.c.tenant_id == tenant_id)),
                E.c.thread_id.is_(None)
                & E.c.resource_id.in_(select(R.c.id).where(R.c.tenant_id == tenant_id)),
            )
        )
    query = query.order_by(E.c.id.desc()).limit(limit)
    with read_only(db) as conn:
        rows = conn.execute(query).all()
    return [
        RecentFailure(
            thread_id=public_id(row.thread_id) if row.thread_id else None,
            type=str(row.type),
            error=_error_text(row.payload),
            at=row.created_at,
        )
        for row in rows
    ]


def _error_text(payload: Any) -> str:
    error = payload.get("error") if isinstance(payload, dict) else None
    return str(error) if error is not None else ""


def tenant_om_usage(db: Engine, tenant_id: str | None) -> UsageTotals:
    """OM's own model usage (Observer, Reflector) of the tenant: its folded total and the deltas not
    folded yet, in one statement (one snapshot, as `store.usage.tenant_usage` reads it). Without tenancy
    the ids are stored unscoped, and their usage is counted under the tenant `''`."""
    UT, D = schema.usage_tenants, schema.usage_tenant_deltas
    tenant = tenant_id or ""
    columns = ("input_tokens", "output_tokens", "cost_usd", "cycles")
    both = union_all(
        select(*(UT.c[name] for name in columns)).where(UT.c.tenant_id == tenant),
        select(*(D.c[name] for name in columns)).where(D.c.tenant_id == tenant),
    ).subquery()
    query = select(*(func.coalesce(func.sum(both.c[name]), 0).label(name) for name in columns))
    with read_only(db) as conn:
        row = conn.execute(query).one()
    return UsageTotals(int(row.input_tokens), int(row.output_tokens), float(row.cost_usd), int(row.cycles))


@dataclass(frozen=True)
class GenerationDiff:
    """Generation `generation` of a log against the one before it (None for the first generation)."""

    generation: int
    previous_generation: int | None
    lines: list[DiffLine]


def generation_diff(
    db: Engine, thread: ThreadRow, generation: int, *, log_key: str | None = None
) -> GenerationDiff | None:
    """What the reflection (or line edit) that made `generation` changed: the generation's log, as it is
    now (the head) or was when it was retired, against the previous generation's log as it was retired,
    which is the text that reflection started from. Lines appended to the generation after its
    reflection show as added too. None when the log has no such generation.

    `log_key` names the log when it is not the thread's own (resource scope: the resource's shared log)."""
    Rec = schema.records
    key = log_key or lookup_key(thread.id)
    base = select(Rec.c.generation_count, Rec.c.active_observations).where(Rec.c.lookup_key == key)
    newest = (Rec.c.generation_count.desc(), Rec.c.created_at.desc())
    with read_only(db) as conn:
        current = conn.execute(
            base.where(Rec.c.generation_count == generation).order_by(*newest).limit(1)
        ).first()
        if current is None:
            return None
        previous = conn.execute(
            base.where(Rec.c.generation_count < generation).order_by(*newest).limit(1)
        ).first()
    before = str(previous.active_observations) if previous is not None else ""
    return GenerationDiff(
        generation=generation,
        previous_generation=int(previous.generation_count) if previous is not None else None,
        lines=diff_lines(before, str(current.active_observations)),
    )
