"""Limits the operator sets for one tenant, over the server-wide settings (`om tenants limits`).

Tenants exist only through their keys, which live in the database and are managed with `om keys`; their
limits live beside them, so the operator changes one tenant's limits with one command, without editing
every process's environment or restarting the fleet. API processes read the whole table now and then
(`TenantLimitsCache`), never per request; the budget check reads it with the day's spend.

Each field is optional: None means "the setting's value" (`OM_TENANT_RATE_LIMIT`, `OM_TENANT_RATE_BURST`,
`OM_TENANT_DAILY_BUDGET_USD`). A rate or a budget of 0 means "no limit" for that tenant, as it does for the
settings, so the operator can exempt one tenant from a server-wide limit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import Connection, Engine, delete, select

from om_core.store import schema
from om_core.store.db import read_only
from om_core.tenancy.scoped_ids import MAX_TENANT_LENGTH

__all__ = [
    "TenantLimits",
    "clear_tenant_limits",
    "limits_of",
    "read_tenant_limits",
    "set_tenant_limits",
]

L = schema.tenant_limits


@dataclass(frozen=True)
class TenantLimits:
    """One tenant's overrides; None fields fall back to the server-wide settings."""

    requests_per_s: float | None = None
    burst: int | None = None
    daily_budget_usd: float | None = None

    def __post_init__(self) -> None:
        for name in ("requests_per_s", "daily_budget_usd"):
            value = getattr(self, name)
            if value is not None and (not math.isfinite(value) or value < 0):
                raise ValueError(f"{name} must be a number >= 0 (0: no limit for this tenant), not {value!r}")
        if self.burst is not None and self.burst < 1:
            raise ValueError(f"burst must be at least 1 request, not {self.burst!r}")

    @property
    def empty(self) -> bool:
        return self.requests_per_s is None and self.burst is None and self.daily_budget_usd is None


def _check_tenant(tenant_id: str) -> None:
    if not tenant_id.strip() or len(tenant_id) > MAX_TENANT_LENGTH or not tenant_id.isprintable():
        raise ValueError(f"a tenant id is 1 to {MAX_TENANT_LENGTH} printable characters, not {tenant_id!r}")


def set_tenant_limits(db: Engine, tenant_id: str, limits: TenantLimits) -> TenantLimits:
    """Store the fields of `limits` that are set, keeping the tenant's other stored fields; returns what is
    stored now. Takes effect in each API process within `OM_TENANT_LIMITS_REFRESH_S`."""
    _check_tenant(tenant_id)
    with db.begin() as conn:
        stored = _limits_in(conn, tenant_id) or TenantLimits()
        merged = TenantLimits(
            requests_per_s=_first(limits.requests_per_s, stored.requests_per_s),
            burst=limits.burst if limits.burst is not None else stored.burst,
            daily_budget_usd=_first(limits.daily_budget_usd, stored.daily_budget_usd),
        )
        conn.execute(delete(L).where(L.c.tenant_id == tenant_id))
        conn.execute(
            L.insert().values(
                tenant_id=tenant_id,
                requests_per_s=merged.requests_per_s,
                burst=merged.burst,
                daily_budget_usd=merged.daily_budget_usd,
                updated_at=datetime.now(UTC),
            )
        )
    return merged


def _first(given: float | None, stored: float | None) -> float | None:
    return given if given is not None else stored


def clear_tenant_limits(db: Engine, tenant_id: str) -> bool:
    """Drop the tenant's overrides (the settings apply again); False when it had none."""
    with db.begin() as conn:
        result = conn.execute(delete(L).where(L.c.tenant_id == tenant_id))
    return bool(result.rowcount)


def _limits_in(conn: Connection, tenant_id: str) -> TenantLimits | None:
    row = conn.execute(
        select(L.c.requests_per_s, L.c.burst, L.c.daily_budget_usd).where(L.c.tenant_id == tenant_id)
    ).first()
    return None if row is None else TenantLimits(*row)


def limits_of(db: Engine, tenant_id: str) -> TenantLimits | None:
    """The tenant's overrides, or None when the operator set none."""
    with read_only(db) as conn:
        return _limits_in(conn, tenant_id)


def read_tenant_limits(db: Engine) -> dict[str, TenantLimits]:
    """Every tenant's overrides (one row per tenant the operator gave limits to: a small table)."""
    with read_only(db) as conn:
        rows = conn.execute(
            select(L.c.tenant_id, L.c.requests_per_s, L.c.burst, L.c.daily_budget_usd).order_by(L.c.tenant_id)
        ).all()
    return {str(row[0]): TenantLimits(row[1], row[2], row[3]) for row in rows}
