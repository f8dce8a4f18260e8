"""The shared provider budget: one Redis token bucket limits the combined rate of several processes."""

from __future__ import annotations

import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import litellm
import pytest
import redis

from om_adapters.token_bucket import (
    RateLimit,
    RateLimitedModelClient,
    RateLimitWaitTooLong,
    TokenBucket,
    limit_for,
)
from om_core.models.client import ModelCallFailed
from om_core.models.retry import RetryPolicy
from tests.support.shared_budget import assert_one_budget, race
from tests.support.workers import redis_db_url

pytestmark = pytest.mark.redis

RATE = RateLimit(per_second=10, burst=3)
CALLS_PER_PROCESS = 15

# Each process makes real model calls (the local model through litellm) through the rate-limited
# client, after a start signal, and records when each call got its token.
CALLER = textwrap.dedent(
    """
    import json, sys, time
    import redis
    from om_adapters.token_bucket import RateLimit, RateLimitedModelClient, TokenBucket

    url, run, index, calls, bucket_prefix = sys.argv[1:6]
    client = redis.Redis.from_url(url)
    grants = []

    class Recording(RateLimitedModelClient):
        def take_token(self, router_id):
            waited = super().take_token(router_id)
            grants.append(time.time())
            return waited

    models = Recording(
        TokenBucket(client, prefix=bucket_prefix),
        {"om-local": RateLimit(per_second=10, burst=3)},
    )
    models.complete("om-local/extractive", system="warm up", user="ok")  # imports, before the race
    client.rpush(f"{run}:ready", index)
    client.blpop([f"{run}:go:{index}"], timeout=120)
    grants.clear()
    for _ in range(int(calls)):
        models.complete("om-local/extractive", system="You take notes.", user="My dog is called Biscuit.")
    client.rpush(f"{run}:grants", json.dumps({"process": index, "grants": grants}))
    """
)


@pytest.fixture(scope="module")
def client(redis_url: str) -> Iterator[redis.Redis]:
    connection = redis.Redis.from_url(redis_db_url(redis_url, 6))
    connection.flushdb()
    yield connection
    connection.close()


def test_two_processes_share_one_budget(client: redis.Redis, tmp_path: Path) -> None:
    prefix = f"om:ratelimit:{uuid.uuid4().hex[:8]}:"
    reports = race(client, CALLER, [[prefix], [prefix]], calls=CALLS_PER_PROCESS, logs=tmp_path)
    assert_one_budget(reports, RATE, CALLS_PER_PROCESS)


def test_a_wait_longer_than_allowed_fails_without_reserving(client: redis.Redis) -> None:
    bucket = TokenBucket(client, prefix=f"om:ratelimit:{uuid.uuid4().hex[:8]}:")
    slow = RateLimit(per_second=0.1, burst=1)
    assert bucket.acquire("openai/gpt-4o", slow, max_wait_s=1) == 0
    with pytest.raises(RateLimitWaitTooLong, match="openai/gpt-4o"):
        bucket.acquire("openai/gpt-4o", slow, max_wait_s=1)
    reserved, wait_s = bucket.reserve("openai/gpt-4o", slow, max_wait_s=60)
    assert reserved and 9 < wait_s <= 10, "the refused attempt took nothing from the bucket"


@pytest.mark.parametrize(
    ("model", "limits", "expected"),
    [
        ("openai/gpt-4o", {"openai/gpt-4o": 1, "openai": 2}, "openai/gpt-4o"),
        ("openai/gpt-4o-mini", {"openai/gpt-4o": 1, "openai": 2}, "openai"),
        ("anthropic/claude-sonnet-4-5", {"openai": 2}, None),
        ("gpt-4o", {"openai": 2}, None),
    ],
)
def test_a_call_draws_from_its_models_budget_else_its_providers(
    model: str, limits: dict[str, int], expected: str | None
) -> None:
    budgets = {key: RateLimit(per_second=value) for key, value in limits.items()}
    found = limit_for(model, budgets)
    assert (found[0] if found else None) == expected


def test_every_request_sent_is_charged_retries_and_fallbacks_to_their_own_models(
    client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each attempt is a request the provider counts: a request retried twice takes three tokens, and a
    fallback model is charged to its own budget."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    prefix = f"om:test:charges:{uuid.uuid4().hex[:8]}:"
    charged: list[str] = []

    class Recording(RateLimitedModelClient):
        def take_token(self, router_id: str) -> float:
            charged.append(router_id)
            return super().take_token(router_id)

    slow = RateLimit(per_second=0.01, burst=10)  # no refill to speak of during the test
    limits = {"openai": slow, "om-local": slow}
    models = Recording(
        TokenBucket(client, prefix=prefix),
        limits,
        retry=RetryPolicy(max_retries=2, sleep=lambda _s: None),
        check_credentials=False,
    )
    rate_limited = litellm.RateLimitError("slow down", llm_provider="openai", model="gpt-4o")
    with pytest.raises(ModelCallFailed) as failed:
        models.complete(
            "openai/gpt-4o",
            system="You take notes.",
            user="hello",
            provider_options={"litellm": {"mock_response": rate_limited}},
        )
    assert isinstance(failed.value.__cause__, litellm.RateLimitError), "the provider's error, chained"
    assert charged == ["openai/gpt-4o"] * 3, "the first request and both retries were charged"

    charged.clear()
    # No key for the primary: refused at once (not retried), then the offline fallback answers.
    completion = models.complete(
        ["openai/gpt-4o", "om-local/extractive"], system="You take notes.", user="My dog is called Biscuit."
    )
    assert completion.model == "om-local/extractive"
    assert charged == ["openai/gpt-4o", "om-local/extractive"]
    left = {
        key.decode().removeprefix(prefix): float(client.hget(key, "tokens") or 0)
        for key in client.keys(f"{prefix}*")
    }
    assert left == {"openai": pytest.approx(6, abs=0.1), "om-local": pytest.approx(9, abs=0.1)}, left
