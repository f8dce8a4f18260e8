"""OM's model usage over time: per UTC day for a tenant and for each of its threads (the spend view).

A tenant's days are `usage_tenant_days` plus its deltas the maintenance pass has not folded yet, read in
one statement (one snapshot: a fold committing meanwhile is seen whole or not at all). A thread's days are
`usage_thread_days`, bumped in the transaction of each event that reports usage (`usage.count_usage`), so
they exist from migration 0010 on. Every read is bounded by a day range and a row limit the caller gives.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Any

from sqlalchemy import Engine, func, select, union_all

from om_core.store import schema
from om_core.store.db import read_only
from om_core.store.usage import UsageTotals
from om_core.tenancy.scoped_ids import StoredId

_COUNTS = ("input_tokens", "output_tokens", "cost_usd", "cycles")


@dataclass(frozen=True)
class DayUsage:
    day: date
    usage: UsageTotals


@dataclass(frozen=True)
class ThreadDayUsage:
    thread_id: StoredId
    day: date
    usage: UsageTotals


def _usage(row: Any) -> UsageTotals:
    return UsageTotals(
        int(row.input_tokens or 0),
        int(row.output_tokens or 0),
        float(row.cost_usd or 0.0),
        int(row.cycles or 0),
    )


def tenant_days(engine: Engine, tenant: str, first: date, last: date) -> list[DayUsage]:
    """The tenant's usage on each day in [first, last] that has any, oldest first."""
    Y, D = schema.usage_tenant_days, schema.usage_tenant_deltas
    both = union_all(
        select(Y.c.day, *(Y.c[n] for n in _COUNTS)).where(
            Y.c.tenant_id == tenant, Y.c.day >= first, Y.c.day <= last
        ),
        select(D.c.day, *(D.c[n] for n in _COUNTS)).where(
            D.c.tenant_id == tenant, D.c.day >= first, D.c.day <= last
        ),
    ).subquery()
    query = (
        select(both.c.day, *(func.sum(both.c[n]).label(n) for n in _COUNTS))
        .group_by(both.c.day)
        .order_by(both.c.day)
    )
    with read_only(engine) as conn:
        rows = conn.execute(query).all()
    return [DayUsage(day=row.day, usage=_usage(row)) for row in rows]


def thread_days(engine: Engine, thread_id: StoredId, first: date, last: date) -> list[DayUsage]:
    """One thread's usage on each day in [first, last] that has any, oldest first."""
    T = schema.usage_thread_days
    query = (
        select(T.c.day, *(T.c[n] for n in _COUNTS))
        .where(T.c.thread_id == thread_id, T.c.day >= first, T.c.day <= last)
        .order_by(T.c.day)
    )
    with read_only(engine) as conn:
        rows = conn.execute(query).all()
    return [DayUsage(day=row.day, usage=_usage(row)) for row in rows]


def tenant_thread_days(
    engine: Engine, tenant: str, first: date, last: date, *, limit: int
) -> tuple[list[ThreadDayUsage], bool]:
    """(the tenant's per-thread day rows in [first, last], newest day first and the costliest thread first
    within a day, at most `limit`; whether more rows were left out)."""
    T = schema.usage_thread_days
    query = (
        select(T.c.thread_id, T.c.day, *(T.c[n] for n in _COUNTS))
        .where(T.c.tenant_id == tenant, T.c.day >= first, T.c.day <= last)
        .order_by(T.c.day.desc(), T.c.cost_usd.desc(), T.c.thread_id)
        .limit(limit + 1)
    )
    with read_only(engine) as conn:
        rows = conn.execute(query).all()
    found = [
        ThreadDayUsage(thread_id=StoredId(str(r.thread_id)), day=r.day, usage=_usage(r)) for r in rows[:limit]
    ]
    return found, len(rows) > limit
