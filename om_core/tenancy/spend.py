"""A tenant's spend on memory models today (UTC), against its daily budget: whether observation pauses.

The spend is what `store.usage` records from the events of OM's own model calls (Observer, Reflector and
every other cycle whose event reports usage and cost), dated with the UTC day the event was written. The
budget is `OM_TENANT_DAILY_BUDGET_USD`, or the tenant's own (`om tenants limits`), with 0 or unset meaning
none. Over it, the background cycle does not call a model: it fails the cycle with `spend_refusal`'s
message, the failure policy applies (the turn goes on with the uncompressed context), and the failed event
and `GET /v1/usage` say why and until when. The next UTC midnight ends the pause.

The check runs before every cycle, so the state is remembered per process for `max_age_s` (10 s by
default): a decision is at most that stale, and a tenant can overspend its budget by what its cycles spend
in that time plus the cycles already past the check. Actor-model calls through the proxy are not part of
this spend (they are metered per key, `om keys list`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from datetime import time as day_time

from sqlalchemy import Engine
from sqlalchemy.engine import URL

from om_core.store.usage import tenant_day_usage, utc_day
from om_core.tenancy.limits import TenantLimits, limits_of

__all__ = [
    "SPEND_CACHE_S",
    "BudgetState",
    "SpendCache",
    "budget_state",
    "daily_budget",
    "spend_refusal",
]

#: How long a process trusts the spend it read for a tenant.
SPEND_CACHE_S = 10.0


@dataclass(frozen=True)
class BudgetState:
    """A tenant's memory-model spend on one UTC day against its budget (`budget_usd` None: no budget)."""

    tenant_id: str
    day: date
    budget_usd: float | None
    spent_usd: float

    @property
    def paused(self) -> bool:
        return self.budget_usd is not None and self.spent_usd >= self.budget_usd

    @property
    def resets_at(self) -> datetime:
        """The next UTC midnight: when the day's spend starts again from zero."""
        return datetime.combine(self.day + timedelta(days=1), day_time(0), tzinfo=UTC)

    def refusal(self) -> str | None:
        """None under budget; otherwise what the tenant is told (the budget, the spend, the reset)."""
        if not self.paused:
            return None
        assert self.budget_usd is not None
        return (
            f"observation is paused for tenant {self.tenant_id!r}: its memory-model spend today (UTC "
            f"{self.day.isoformat()}) is ${self.spent_usd:.4f}, at or over its daily budget of "
            f"${self.budget_usd:.4f}. It resumes at {self.resets_at.isoformat().replace('+00:00', 'Z')}; "
            "until then turns go on with the recent messages uncompressed. Ask the operator to raise the "
            "budget (`om tenants limits`) to resume sooner."
        )


def daily_budget(default_budget_usd: float | None, limits: TenantLimits | None) -> float | None:
    """The budget that applies: the tenant's own if the operator set one, else the setting; 0 is none."""
    own = limits.daily_budget_usd if limits is not None else None
    budget = own if own is not None else default_budget_usd
    return budget if budget is not None and budget > 0 else None


def _read(db: Engine, tenant: str, day: date, default_budget_usd: float | None) -> BudgetState:
    budget = daily_budget(default_budget_usd, limits_of(db, tenant))
    spent = tenant_day_usage(db, tenant, day).cost_usd
    return BudgetState(tenant_id=tenant, day=day, budget_usd=budget, spent_usd=spent)


class SpendCache:
    """Budget states remembered per process for `max_age_s`, keyed by database, tenant, day and default
    budget (a new UTC day is a new key, so a reset is seen at once). Bounded: past `max_entries` it starts
    over, which costs a read per tenant, never a wrong answer."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic, max_entries: int = 10_000) -> None:
        self._clock = clock
        self.max_entries = max_entries
        self._states: dict[tuple[URL, str, date, float | None], tuple[BudgetState, float]] = {}
        self._lock = threading.Lock()

    def state(
        self, db: Engine, tenant: str, now: datetime, default_budget_usd: float | None, max_age_s: float
    ) -> BudgetState:
        if now.tzinfo is None:
            raise ValueError("`now` must be an aware datetime (the budget's day is a UTC day)")
        day = utc_day(now)
        key = (db.url, tenant, day, default_budget_usd)
        with self._lock:
            entry = self._states.get(key)
        if entry is not None and entry[1] > self._clock():
            return entry[0]
        state = _read(db, tenant, day, default_budget_usd)
        with self._lock:
            if len(self._states) >= self.max_entries:
                self._states.clear()
            self._states[key] = (state, self._clock() + max_age_s)
        return state


_CACHE = SpendCache()


def budget_state(
    db: Engine,
    tenant: str,
    now: datetime,
    *,
    default_budget_usd: float | None,
    max_age_s: float = SPEND_CACHE_S,
) -> BudgetState:
    """The tenant's budget and spend on `now`'s UTC day, at most `max_age_s` old (0: read now, and
    remember that for the next caller). `tenant` is the stored tenant (`scoped_ids.tenant_of`, `''`
    without tenancy)."""
    return _CACHE.state(db, tenant, now, default_budget_usd, max_age_s)


def spend_refusal(
    db: Engine,
    tenant: str,
    now: datetime,
    *,
    default_budget_usd: float | None,
    max_age_s: float = SPEND_CACHE_S,
) -> str | None:
    """None while the tenant's memory-model spend on `now`'s UTC day is under its budget (or it has
    none); otherwise the message to fail the cycle with. Cheap on a hot path: see `SPEND_CACHE_S`."""
    return budget_state(db, tenant, now, default_budget_usd=default_budget_usd, max_age_s=max_age_s).refusal()
