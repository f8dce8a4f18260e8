"""OM's own model usage (Observer, Reflector: any cycle whose event reports `usage`), per thread and tenant.

Usage is counted in the transaction that writes the event reporting it (`outbox.write_events`), so it can
never disagree with the outbox; an event the outbox skipped as a redelivery (same type and cycle) counts
nothing, so each cycle counts once. A thread's totals are one row, bumped there (a read is one row however
long the thread). A tenant's are not: every cycle of every thread of a tenant would wait on one row at
commit, serialising a tenant's whole traffic and committing outbox ids out of order behind the wait. The
commit appends a delta row instead (an insert waits on nothing), and the maintenance pass folds the deltas
into the tenant's row (`fold_tenant_deltas`); a read adds the deltas not folded yet.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

from sqlalchemy import Connection, Engine, Subquery, Table, bindparam, delete, func, insert, select, union_all
from sqlalchemy.dialects import postgresql, sqlite

from om_core.store import schema
from om_core.store.db import read_only
from om_core.store.payloads import lifecycle_fields
from om_core.store.types import StoredEvent
from om_core.tenancy.scoped_ids import StoredId, tenant_of


@dataclass(frozen=True)
class UsageTotals:
    """Tokens and cost of OM's model calls; `cost_usd` is litellm's figure (0 when the model has no price)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    cycles: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


def usage_of(payload: Mapping[str, Any]) -> UsageTotals | None:
    """The usage an event reports, or None when it reports none (start events, activations, ...)."""
    fields = lifecycle_fields(payload)
    usage = fields.get("usage")
    if not isinstance(usage, Mapping):
        return None
    cost = fields.get("cost")
    return UsageTotals(
        input_tokens=_int(usage.get("inputTokens")),
        output_tokens=_int(usage.get("outputTokens")),
        cost_usd=float(cost) if isinstance(cost, int | float) and cost > 0 else 0.0,
        cycles=1,
    )


def _int(value: object) -> int:
    return int(value) if isinstance(value, int | float) and value > 0 else 0


def _upsert(dialect: Any, table: Table, key: str) -> Any:
    """`INSERT ... ON CONFLICT (key) DO UPDATE` adding the row's values to the stored totals. No VALUES are
    fixed here: the execution parameters name the columns, so the statement is built (and its cache key
    computed) once, not on every commit that reports usage."""
    insert = dialect.insert(table)
    return insert.on_conflict_do_update(
        index_elements=[table.c[key]],
        set_={
            "input_tokens": table.c.input_tokens + insert.excluded.input_tokens,
            "output_tokens": table.c.output_tokens + insert.excluded.output_tokens,
            "cost_usd": table.c.cost_usd + insert.excluded.cost_usd,
            "cycles": table.c.cycles + insert.excluded.cycles,
            "updated_at": insert.excluded.updated_at,
        },
    )


_COUNTS = ("input_tokens", "output_tokens", "cost_usd", "cycles")
_UPSERT = {
    (name, table.name): _upsert(dialect, table, key)
    for name, dialect in (("postgresql", postgresql), ("sqlite", sqlite))
    for table, key in ((schema.usage_threads, "thread_id"), (schema.usage_tenants, "tenant_id"))
}


def _upsert_day(dialect: Any) -> Any:
    """`_upsert` for `usage_tenant_days`, whose key is two columns (tenant, day)."""
    table = schema.usage_tenant_days
    insert = dialect.insert(table)
    return insert.on_conflict_do_update(
        index_elements=[table.c.tenant_id, table.c.day],
        set_={
            **{name: table.c[name] + insert.excluded[name] for name in _COUNTS},
            "updated_at": insert.excluded.updated_at,
        },
    )


_UPSERT_DAY = {
    name: _upsert_day(dialect) for name, dialect in (("postgresql", postgresql), ("sqlite", sqlite))
}
_INSERT_DELTA = insert(schema.usage_tenant_deltas)


def _thread_and_delta() -> Any:
    """Postgres: the thread's upsert and the tenant's delta row in one statement (`WITH delta AS (INSERT
    ...) INSERT ... ON CONFLICT ...`; a data-modifying CTE runs exactly once whatever the outer statement
    does). SQLite has no data-modifying CTE, so it runs the two statements. Bind names are prefixed: a
    bind named after a column of the inserted table is reserved for SQLAlchemy's own VALUES."""
    T, D = schema.usage_threads, schema.usage_tenant_deltas
    counts = {name: bindparam(f"u_{name}", type_=D.c[name].type) for name in _COUNTS}
    tenant = bindparam("u_tenant_id", type_=D.c.tenant_id.type)
    day = bindparam("u_day", type_=D.c.day.type)
    delta = (
        insert(D)
        .from_select(["tenant_id", "day", *_COUNTS], select(tenant, day, *counts.values()))
        .cte("delta")
    )
    upsert = postgresql.insert(T).values(
        thread_id=bindparam("u_thread_id", type_=T.c.thread_id.type),
        updated_at=bindparam("u_updated_at", type_=T.c.updated_at.type),
        **counts,
    )
    added = {name: T.c[name] + upsert.excluded[name] for name in _COUNTS}
    return upsert.on_conflict_do_update(
        index_elements=[T.c.thread_id], set_={**added, "updated_at": upsert.excluded.updated_at}
    ).add_cte(delta, _thread_day_cte(counts, tenant, day))


def _thread_day_upsert(dialect: Any) -> Any:
    """`_upsert` for `usage_thread_days` (key: thread, day); the values come from the execution."""
    table = schema.usage_thread_days
    insert = dialect.insert(table)
    return insert.on_conflict_do_update(
        index_elements=[table.c.thread_id, table.c.day],
        set_={
            **{name: table.c[name] + insert.excluded[name] for name in _COUNTS},
            "updated_at": insert.excluded.updated_at,
        },
    )


def _thread_day_cte(counts: dict[str, Any], tenant: Any, day: Any) -> Any:
    """The thread's day row as a data-modifying CTE of the Postgres statement (same binds)."""
    Y = schema.usage_thread_days
    upsert = postgresql.insert(Y).values(
        thread_id=bindparam("u_thread_id", type_=Y.c.thread_id.type),
        tenant_id=tenant,
        day=day,
        updated_at=bindparam("u_updated_at", type_=Y.c.updated_at.type),
        **counts,
    )
    added = {name: Y.c[name] + upsert.excluded[name] for name in _COUNTS}
    return upsert.on_conflict_do_update(
        index_elements=[Y.c.thread_id, Y.c.day], set_={**added, "updated_at": upsert.excluded.updated_at}
    ).cte("thread_day")


_UPSERT_THREAD_DAY_SQLITE = _thread_day_upsert(sqlite)


_THREAD_AND_DELTA = _thread_and_delta()


def _counts(usage: UsageTotals) -> dict[str, Any]:
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cost_usd": usage.cost_usd,
        "cycles": usage.cycles,
    }


def _bump(conn: Connection, table: Table, key: str, value: str, usage: UsageTotals, now: datetime) -> None:
    dialect = "postgresql" if conn.dialect.name == "postgresql" else "sqlite"
    conn.execute(_UPSERT[(dialect, table.name)], {key: value, **_counts(usage), "updated_at": now})


def utc_day(moment: datetime) -> date:
    """The UTC calendar day of `moment`: the day a daily spend budget counts it in."""
    return moment.astimezone(UTC).date()


def count_usage(conn: Connection, stored: Sequence[StoredEvent]) -> None:
    """Add the usage of each written event to its thread's totals, its thread's day and its tenant's deltas
    (same transaction), the day and each delta dated with the event's UTC day."""
    now = datetime.now(UTC)
    for event in stored:
        usage = usage_of(event.payload)
        if usage is None or event.thread_id is None:
            continue
        tenant = tenant_of(event.thread_id) or ""  # '' : ids stored without tenancy
        day = utc_day(event.created_at)
        if conn.dialect.name == "postgresql":
            counts = {f"u_{name}": value for name, value in _counts(usage).items()}
            conn.execute(
                _THREAD_AND_DELTA,
                {
                    "u_thread_id": event.thread_id,
                    "u_tenant_id": tenant,
                    "u_day": day,
                    "u_updated_at": now,
                    **counts,
                },
            )
            continue
        _bump(conn, schema.usage_threads, "thread_id", event.thread_id, usage, now)
        conn.execute(
            _UPSERT_THREAD_DAY_SQLITE,
            {
                "thread_id": event.thread_id,
                "tenant_id": tenant,
                "day": day,
                **_counts(usage),
                "updated_at": now,
            },
        )
        conn.execute(_INSERT_DELTA, {"tenant_id": tenant, "day": day, **_counts(usage)})


def _summed(table: Table | Subquery) -> tuple[Any, ...]:
    return (
        func.sum(table.c.input_tokens).label("input_tokens"),
        func.sum(table.c.output_tokens).label("output_tokens"),
        func.sum(table.c.cost_usd).label("cost_usd"),
        func.sum(table.c.cycles).label("cycles"),
    )


def fold_tenant_deltas(engine: Engine, *, limit: int = 50_000) -> int:
    """Fold up to `limit` of the oldest deltas into the tenants' totals and delete them, in one transaction
    (a delta is counted in exactly one place at every moment); returns how many were folded. Run by the
    maintenance pass, so only one writer touches a tenant's row."""
    D = schema.usage_tenant_deltas
    with engine.begin() as conn:
        upto = conn.execute(select(D.c.id).order_by(D.c.id).offset(limit - 1).limit(1)).scalar()
        if upto is None:
            upto = conn.execute(select(func.max(D.c.id))).scalar()
        if upto is None:
            return 0
        rows = conn.execute(
            select(D.c.tenant_id, D.c.day, *_summed(D)).where(D.c.id <= upto).group_by(D.c.tenant_id, D.c.day)
        ).all()
        now = datetime.now(UTC)
        dialect = "postgresql" if conn.dialect.name == "postgresql" else "sqlite"
        tenants: dict[str, UsageTotals] = {}
        for row in rows:
            tenant, totals = str(row.tenant_id), _totals(row)
            tenants[tenant] = _added(tenants.get(tenant, UsageTotals()), totals)
            if row.day is not None:  # deltas written before days were recorded count in no day
                conn.execute(
                    _UPSERT_DAY[dialect],
                    {"tenant_id": tenant, "day": row.day, **_counts(totals), "updated_at": now},
                )
        for tenant, totals in tenants.items():
            _bump(conn, schema.usage_tenants, "tenant_id", tenant, totals, now)
        return int(conn.execute(delete(D).where(D.c.id <= upto)).rowcount or 0)


def _added(a: UsageTotals, b: UsageTotals) -> UsageTotals:
    return UsageTotals(
        a.input_tokens + b.input_tokens,
        a.output_tokens + b.output_tokens,
        a.cost_usd + b.cost_usd,
        a.cycles + b.cycles,
    )


def _totals(row: Any) -> UsageTotals:
    if row is None:
        return UsageTotals()
    return UsageTotals(int(row.input_tokens), int(row.output_tokens), float(row.cost_usd), int(row.cycles))


def thread_usage(engine: Engine, thread_id: StoredId) -> UsageTotals:
    U = schema.usage_threads
    with engine.connect() as conn:
        row = conn.execute(
            select(U.c.input_tokens, U.c.output_tokens, U.c.cost_usd, U.c.cycles).where(
                U.c.thread_id == thread_id
            )
        ).first()
    return _totals(row)


def tenant_usage(engine: Engine, limit: int = 10_000) -> dict[str, UsageTotals]:
    """Every tenant's totals, folded and not yet folded (bounded: `/metrics` reads this at each scrape).
    One statement, so one snapshot: a fold committing meanwhile is seen whole or not at all, and a total
    never dips or counts a delta twice (Prometheus reads a dip as a counter reset)."""
    U, D = schema.usage_tenants, schema.usage_tenant_deltas
    columns = ("tenant_id", "input_tokens", "output_tokens", "cost_usd", "cycles")
    both = union_all(
        select(*(U.c[name] for name in columns)), select(*(D.c[name] for name in columns))
    ).subquery()
    query = (
        select(both.c.tenant_id, *_summed(both))
        .group_by(both.c.tenant_id)
        .order_by(both.c.tenant_id)
        .limit(limit)
    )
    with read_only(engine) as conn:
        rows = conn.execute(query).all()
    return {str(row.tenant_id): _totals(row) for row in rows}


def tenant_day_usage(engine: Engine, tenant: str, day: date) -> UsageTotals:
    """The tenant's usage on one UTC day: the folded row plus the deltas not folded yet, in one statement
    (one snapshot: a fold committing meanwhile is seen whole or not at all, never counted twice)."""
    Y, D = schema.usage_tenant_days, schema.usage_tenant_deltas
    both = union_all(
        select(*(Y.c[name] for name in _COUNTS)).where(Y.c.tenant_id == tenant, Y.c.day == day),
        select(*(D.c[name] for name in _COUNTS)).where(D.c.tenant_id == tenant, D.c.day == day),
    ).subquery()
    with read_only(engine) as conn:
        row = conn.execute(select(*_summed(both))).first()
    if row is None or row.cycles is None:
        return UsageTotals()
    return _totals(row)
