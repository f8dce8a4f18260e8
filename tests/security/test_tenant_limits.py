"""Issue 28, "no tenant holds shared capacity": an attacker holding one ordinary tenant key can neither take
an API process's requests from the other tenants nor spend without bound on memory models.

- Requests per second per tenant (`om_api.tenant_rate_limit`): one tenant bursting past its limit gets 429
  with `Retry-After` and the IETF `RateLimit-Policy` / `RateLimit` fields, while another tenant is
  answered; once the `Retry-After` has passed the first tenant is answered again; the operator's
  per-tenant limits (`om tenants limits`) apply, and a change reaches a running process.
- A memory-model budget per tenant per UTC day (`om_core.tenancy.spend`): `spend_refusal` against recorded
  costs on the real Postgres and on SQLite, around the budget and across the UTC day boundary (clock
  injected), with the tenant's own budget over the setting's; `GET /v1/usage` shows the state.

Before issue 28 nothing limited a tenant: every request was served and no budget existed.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from sqlalchemy import Engine
from starlette.testclient import TestClient
from typer.testing import CliRunner

from om_api.app import create_app
from om_api.settings import ApiSettings
from om_app.cli import app as om_cli
from om_core.store.types import StoredEvent
from om_core.store.usage import count_usage, fold_tenant_deltas
from om_core.tenancy import access
from om_core.tenancy.limits import TenantLimits, clear_tenant_limits, set_tenant_limits
from om_core.tenancy.scoped_ids import scoped_id
from om_core.tenancy.spend import SpendCache, spend_refusal
from tests.support.listener import listening

pytestmark = [pytest.mark.postgres]

#: Slow enough that the refill during a burst is small even on a loaded machine (counted anyway).
RATE, BURST = 0.5, 3
#: The test's own route: authenticated, cheap, under /v1/.
LIMITED = "/v1/usage"


def _tenant(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _settings(postgres_url: str, **overrides: object) -> ApiSettings:
    values: dict[str, object] = {
        "database_url": postgres_url,
        "auth": "keys",
        "executor": "inline",
        "model": "om-local/extractive",
        "tenant_rate_limit": RATE,
        "tenant_rate_burst": BURST,
        **overrides,
    }
    return ApiSettings(**values)  # type: ignore[arg-type]


@pytest.fixture
def client(postgres_url: str, pg_engine: Engine) -> Iterator[TestClient]:
    with TestClient(create_app(_settings(postgres_url))) as client:
        yield client


def _key(db: Engine, tenant: str) -> str:
    return access.create_key(db, tenant, "limits").secret


def _until_refused(client: TestClient, key: str, most: int = 30) -> tuple[list[int], httpx.Response, float]:
    """Requests until one is refused: the statuses before it, the refusal, and the seconds it took."""
    statuses: list[int] = []
    started = time.monotonic()
    for _ in range(most):
        response = client.get(LIMITED, headers=_auth(key))
        if response.status_code == 429:
            return statuses, response, time.monotonic() - started
        statuses.append(response.status_code)
    pytest.fail(f"{most} requests in a row were answered: no rate limit applied ({statuses})")


def _answered_within(client: TestClient, key: str, deadline_s: float) -> float:
    """Seconds until a request of `key` is answered again, polling until `deadline_s`."""
    started = time.monotonic()
    while time.monotonic() - started < deadline_s:
        response = client.get(LIMITED, headers=_auth(key))
        if response.status_code == 200:
            return time.monotonic() - started
        assert response.status_code == 429, response.text
        time.sleep(0.05)
    pytest.fail(f"still refused {deadline_s} s after the 429")


def test_a_tenant_over_its_rate_gets_429_with_the_fields_and_others_are_answered(
    client: TestClient, pg_engine: Engine
) -> None:
    attacker, other = _key(pg_engine, _tenant("burst")), _key(pg_engine, _tenant("quiet"))

    answered, refused, took_s = _until_refused(client, attacker)

    # The bucket holds BURST requests, plus what refilled while they were served.
    assert set(answered) == {200}
    assert BURST <= len(answered) <= BURST + math.ceil(took_s * RATE)
    assert refused.json()["error"]["code"] == "rate_limited"
    assert "0.5 requests per second" in refused.json()["error"]["message"]
    retry_after = int(refused.headers["Retry-After"])
    assert 1 <= retry_after <= math.ceil(1 / RATE)
    assert refused.headers["RateLimit-Policy"] == f'"tenant";q={BURST};w={math.ceil(BURST / RATE)}'
    assert refused.headers["RateLimit"] == f'"tenant";r=0;t={retry_after}'

    # Another tenant has its own bucket, full: all of its requests are answered meanwhile, and its
    # RateLimit field counts its own requests down from its own burst.
    others = [client.get(LIMITED, headers=_auth(other)) for _ in range(BURST)]
    assert [r.status_code for r in others] == [200] * BURST
    remaining = [int(r.headers["RateLimit"].split(";r=")[1].split(";")[0]) for r in others]
    assert remaining[0] == BURST - 1 and remaining == sorted(remaining, reverse=True)

    # Probes and anonymous routes are never limited, even with the limited tenant's key.
    assert client.get("/healthz", headers=_auth(attacker)).status_code == 200
    assert client.get("/readyz", headers=_auth(attacker)).status_code == 200
    # A wrong key is not a tenant: the route's 401, not a 429.
    assert client.get(LIMITED, headers=_auth("omk_000000000000_" + "x" * 40)).status_code == 401

    # After Retry-After the tenant is answered again (waited on, with a deadline).
    assert _answered_within(client, attacker, deadline_s=retry_after + 3) <= retry_after + 3


def test_the_operators_per_tenant_limits_apply_and_reach_a_running_process(
    postgres_url: str, pg_engine: Engine
) -> None:
    tight, exempt, later = _tenant("tight"), _tenant("exempt"), _tenant("later")
    set_by_cli = CliRunner().invoke(
        om_cli,
        ["tenants", "limits", tight, "--requests-per-s", "0.1", "--burst", "1"],
        env={"OM_DATABASE_URL": postgres_url},
    )
    assert set_by_cli.exit_code == 0, set_by_cli.output
    assert "requests_per_s=0.1\tburst=1\tdaily_budget_usd=-" in set_by_cli.output
    set_tenant_limits(pg_engine, exempt, TenantLimits(requests_per_s=0))
    keys = {tenant: _key(pg_engine, tenant) for tenant in (tight, exempt, later)}

    settings = _settings(postgres_url, tenant_limits_refresh_s=0.2)
    try:
        with TestClient(create_app(settings)) as client:
            answered, refused, _ = _until_refused(client, keys[tight])
            assert answered == [200]
            assert refused.headers["RateLimit-Policy"] == '"tenant";q=1;w=10'
            assert 1 <= int(refused.headers["Retry-After"]) <= 10

            # Rate 0 for this tenant: no limit, over a server-wide one it would meet at once.
            exempted = [client.get(LIMITED, headers=_auth(keys[exempt])) for _ in range(BURST * 4)]
            assert {r.status_code for r in exempted} == {200}
            assert all("RateLimit" not in r.headers for r in exempted)

            # A limit set while the process runs applies within OM_TENANT_LIMITS_REFRESH_S.
            assert client.get(LIMITED, headers=_auth(keys[later])).status_code == 200
            set_tenant_limits(pg_engine, later, TenantLimits(requests_per_s=0.1, burst=1))
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                response = client.get(LIMITED, headers=_auth(keys[later]))
                if response.status_code == 429 and '"tenant";q=1;' in response.headers["RateLimit-Policy"]:
                    break
                time.sleep(0.05)
            else:
                pytest.fail("the new limit did not reach the running process within 5 s")
    finally:
        for tenant in (tight, exempt, later):
            clear_tenant_limits(pg_engine, tenant)


# --- the daily memory-model budget -------------------------------------------------------------------

DAY = datetime(2026, 12, 2, tzinfo=UTC)


def _spend(db: Engine, tenant: str, cost: float, at: datetime) -> None:
    """Record one memory-model cycle's cost as the outbox does, at `at`."""
    event = StoredEvent(
        id=0,
        type="data-om-observation-end",
        thread_id=scoped_id(tenant, "t1"),
        lookup_key=f"thread:{scoped_id(tenant, 't1')}",
        record_id=None,
        cycle_id=uuid.uuid4().hex,
        payload={"usage": {"inputTokens": 100, "outputTokens": 20}, "cost": cost},
        created_at=at,
    )
    with db.begin() as conn:
        count_usage(conn, [event])


def _refusal(db: Engine, tenant: str, now: datetime, budget: float | None = 1.0) -> str | None:
    return spend_refusal(db, tenant, now, default_budget_usd=budget, max_age_s=0)


@pytest.mark.parametrize("folded", [False, True], ids=["unfolded", "folded"])
def test_spend_refusal_around_the_budget_and_across_the_utc_day(
    engine: Engine, tenant: str, folded: bool
) -> None:
    def settle() -> None:
        if folded:  # the maintenance pass may have folded the deltas: the same answer either way
            fold_tenant_deltas(engine)

    _spend(engine, tenant, 0.3, DAY - timedelta(seconds=1))  # yesterday (UTC): not today's spend
    _spend(engine, tenant, 0.6, DAY + timedelta(hours=1))
    _spend(engine, _tenant("neighbour"), 5.0, DAY + timedelta(hours=2))  # another tenant's spend
    settle()
    assert _refusal(engine, tenant, DAY + timedelta(hours=3)) is None
    assert _refusal(engine, tenant, DAY + timedelta(hours=3), budget=None) is None

    _spend(engine, tenant, 0.4, DAY + timedelta(hours=23, minutes=59, seconds=59))
    settle()
    refusal = _refusal(engine, tenant, DAY + timedelta(hours=23, minutes=59, seconds=59))
    assert refusal is not None
    assert "$1.0000" in refusal  # spent today: 0.6 + 0.4, yesterday's 0.3 not counted
    assert "daily budget of $1.0000" in refusal
    assert "resumes at 2026-12-03T00:00:00Z" in refusal
    assert tenant in refusal
    # Under a larger budget, or with none, the same spend refuses nothing.
    assert _refusal(engine, tenant, DAY + timedelta(hours=23), budget=1.5) is None
    assert _refusal(engine, tenant, DAY + timedelta(hours=23), budget=0) is None

    # The next UTC day starts from zero.
    assert _refusal(engine, tenant, DAY + timedelta(days=1)) is None
    _spend(engine, tenant, 1.2, DAY + timedelta(days=1, hours=5))
    settle()
    later = _refusal(engine, tenant, DAY + timedelta(days=1, hours=6))
    assert later is not None and "$1.2000" in later and "resumes at 2026-12-04T00:00:00Z" in later


def test_the_tenants_own_budget_overrides_the_setting(engine: Engine, tenant: str) -> None:
    _spend(engine, tenant, 2.0, DAY + timedelta(hours=1))
    now = DAY + timedelta(hours=2)
    assert _refusal(engine, tenant, now, budget=1.0) is not None

    set_tenant_limits(engine, tenant, TenantLimits(daily_budget_usd=3.0))
    assert _refusal(engine, tenant, now, budget=1.0) is None
    set_tenant_limits(engine, tenant, TenantLimits(daily_budget_usd=0))  # 0: no budget for this tenant
    assert _refusal(engine, tenant, now, budget=1.0) is None
    set_tenant_limits(engine, tenant, TenantLimits(daily_budget_usd=1.5))
    refusal = _refusal(engine, tenant, now, budget=None)  # a budget of its own, with none server-wide
    assert refusal is not None and "daily budget of $1.5000" in refusal
    clear_tenant_limits(engine, tenant)
    assert _refusal(engine, tenant, now, budget=None) is None


def test_a_process_trusts_the_spend_it_read_for_at_most_max_age(engine: Engine, tenant: str) -> None:
    clock = [0.0]
    cache = SpendCache(clock=lambda: clock[0])
    now = DAY + timedelta(hours=1)
    assert cache.state(engine, tenant, now, 1.0, max_age_s=10).paused is False
    _spend(engine, tenant, 1.5, now)
    clock[0] = 9.9
    assert cache.state(engine, tenant, now, 1.0, max_age_s=10).paused is False  # remembered
    clock[0] = 10.1
    assert cache.state(engine, tenant, now, 1.0, max_age_s=10).paused is True
    # A new UTC day is a new entry: never answered from the day before.
    assert cache.state(engine, tenant, now + timedelta(days=1), 1.0, max_age_s=10).paused is False


def test_usage_shows_the_tenants_budget_state(postgres_url: str, pg_engine: Engine) -> None:
    spender, other = _tenant("spender"), _tenant("thrifty")
    keys = {tenant: _key(pg_engine, tenant) for tenant in (spender, other)}
    now = datetime.now(UTC)
    _spend(pg_engine, spender, 0.7, now)
    settings = _settings(postgres_url, tenant_daily_budget_usd=0.5, tenant_rate_limit=0)
    with TestClient(create_app(settings)) as client:
        paused = client.get(LIMITED, headers=_auth(keys[spender])).json()["memory_budget"]
        calm = client.get(LIMITED, headers=_auth(keys[other])).json()["memory_budget"]

    tomorrow = (now + timedelta(days=1)).date().isoformat()
    assert paused == {
        "daily_budget_usd": 0.5,
        "spent_today_usd": pytest.approx(0.7),
        "paused": True,
        "day": now.date().isoformat(),
        "resets_at": f"{tomorrow}T00:00:00Z",
    }
    assert calm["paused"] is False and calm["spent_today_usd"] == 0 and calm["daily_budget_usd"] == 0.5


def test_a_tenant_over_its_budget_calls_no_model_and_its_turns_go_on(
    postgres_url: str, pg_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The budget pauses observation: the next memory-model call is refused before it reaches the provider
    (the operator's own, a listener here), the failed event says why, the turn answers, and another
    tenant's observation still calls the provider."""
    spender, other = _tenant("spender"), _tenant("thrifty")
    keys = {tenant: _key(pg_engine, tenant) for tenant in (spender, other)}
    _spend(pg_engine, spender, 0.7, datetime.now(UTC))
    long_text = " ".join(f"word{i}" for i in range(80))
    with listening() as provider:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-server")
        operator = {
            "model": "openai/gpt-4o-mini",
            "observation": {
                "messageTokens": 30,
                "bufferTokens": False,
                "providerOptions": {"litellm": {"api_base": provider.url + "/v1"}},
            },
        }
        settings = _settings(
            postgres_url,
            config=json.dumps(operator),
            model=None,
            tenant_daily_budget_usd=0.5,
            tenant_rate_limit=0,
            model_retry_max_retries=0,
        )
        with TestClient(create_app(settings)) as client:
            results = {}
            for tenant in (spender, other):
                turn = client.post(
                    "/v1/threads/t1/turns",
                    json={"messages": [{"role": "user", "text": long_text}], "context": "none"},
                    headers=_auth(keys[tenant]),
                )
                assert turn.status_code == 200, turn.text
                results[tenant] = client.post(
                    "/v1/threads/t1/observe", json={"wait": True}, headers=_auth(keys[tenant])
                ).json()
                if tenant == spender:
                    assert provider.received == [], "the spender's observation reached the provider"
    refused = [e for e in results[spender]["events"] if e["type"] == "data-om-observation-failed"]
    assert refused and "SPEND_BUDGET_EXCEEDED" in str(refused) and "0.5" in str(refused), results[spender]
    assert provider.received, "the other tenant's observation still called the provider"
