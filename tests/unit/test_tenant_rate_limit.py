"""The per-tenant token bucket (`om_api.tenant_rate_limit`) on an injected clock: burst, refill, the
seconds it announces, a limit changed on a live bucket, and the bound on remembered tenants."""

from __future__ import annotations

import pytest

from om_api.tenant_rate_limit import Rate, TokenBuckets, rate_for
from om_core.tenancy.limits import TenantLimits


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_bucket_gives_its_burst_then_refills_at_its_rate() -> None:
    clock = Clock()
    buckets = TokenBuckets(clock=clock)
    rate = Rate(per_s=2.0, burst=3)
    taken = [buckets.take("a", rate) for _ in range(4)]
    assert [d.allowed for d in taken] == [True, True, True, False]
    assert [d.remaining for d in taken] == [2, 1, 0, 0]
    assert taken[-1].retry_after_s == 1  # one token at 2/s: half a second, announced as a whole second
    assert taken[-1].full_in_s == 2
    clock.now += 0.49
    assert buckets.take("a", rate).allowed is False
    clock.now += 0.02
    assert buckets.take("a", rate).allowed is True
    assert buckets.take("b", rate).remaining == 2  # every tenant has its own bucket


def test_a_slow_rate_announces_the_whole_wait() -> None:
    buckets = TokenBuckets(clock=Clock())
    rate = Rate(per_s=0.1, burst=1)
    assert buckets.take("a", rate).allowed is True
    refused = buckets.take("a", rate)
    assert (refused.allowed, refused.retry_after_s) == (False, 10)
    assert rate.window_s == 10


def test_a_lowered_burst_applies_to_a_live_bucket() -> None:
    clock = Clock()
    buckets = TokenBuckets(clock=clock)
    buckets.take("a", Rate(per_s=1.0, burst=100))
    assert buckets.take("a", Rate(per_s=1.0, burst=1)).allowed is True
    assert buckets.take("a", Rate(per_s=1.0, burst=1)).allowed is False


def test_past_its_bound_only_full_buckets_are_forgotten() -> None:
    clock = Clock()
    buckets = TokenBuckets(clock=clock, max_entries=2)
    rate = Rate(per_s=1.0, burst=2)
    buckets.take("full-again", rate)
    clock.now += 5  # refilled
    buckets.take("busy", rate)
    buckets.take("busy", rate)
    buckets.take("newcomer", rate)  # over the bound: "full-again" goes, "busy" (empty) stays
    assert buckets.take("busy", rate).allowed is False


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        (None, Rate(50.0, 100)),
        (TenantLimits(), Rate(50.0, 100)),
        (TenantLimits(requests_per_s=5.0), Rate(5.0, 100)),
        (TenantLimits(burst=7), Rate(50.0, 7)),
        (TenantLimits(requests_per_s=0.0, burst=1), Rate(0.0, 1)),
        (TenantLimits(daily_budget_usd=3.0), Rate(50.0, 100)),
    ],
)
def test_a_tenants_own_values_win_field_by_field(limits: TenantLimits | None, expected: Rate) -> None:
    assert rate_for(limits, 50.0, 100) == expected
    assert rate_for(TenantLimits(requests_per_s=0.0), 50.0, 100).unlimited


@pytest.mark.parametrize(
    "fields",
    [{"requests_per_s": -1.0}, {"daily_budget_usd": float("nan")}, {"burst": 0}],
    ids=["negative-rate", "nan-budget", "zero-burst"],
)
def test_invalid_tenant_limits_are_refused_with_the_field_named(fields: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=next(iter(fields))):
        TenantLimits(**fields)  # type: ignore[arg-type]
