"""One model-call policy for every executor, against real Postgres and Redis.

The inline executor (the API process running background work itself) used to call models with a bare
client: no shared rate limit, the built-in retry numbers. Here it is built the way `om serve` builds it
(`om_api.runtime.build_runtime`) and must retry exactly as configured, charge every request it sends to
the Redis bucket the workers use, and share that one budget with a worker process.

The model is a loopback OpenAI-compatible server (`tests/support/model_server.py`) reached through litellm,
the OpenAI SDK and httpx, so a 429 and a 500 are real HTTP statuses on the real client path.
"""

from __future__ import annotations

import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from om_adapters.token_bucket import KEY_PREFIX, TokenBucket
from om_api.runtime import ApiRuntime, build_runtime
from om_api.settings import ApiSettings
from om_core import queries
from om_core.messages import text_message
from om_core.models.rate_limit import RateLimit
from tests.support.model_server import ModelServer
from tests.support.shared_budget import assert_one_budget, race
from tests.support.workers import redis_db_url

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

REDIS_DB = 9
#: A budget that barely refills during a test: what is left shows how many requests were charged.
SLOW = RateLimit(per_second=0.001, burst=20)
WORDS = ("harbor", "lantern", "copper", "meadow", "signal", "orchard", "velvet", "canyon", "ember")


@pytest.fixture(scope="module")
def server() -> Iterator[ModelServer]:
    with ModelServer() as running:
        yield running


@pytest.fixture
def bucket_redis(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_db_url(redis_url, REDIS_DB))
    client.flushdb()
    yield client
    client.close()


def inline_runtime(postgres_url: str, redis_url: str, max_retries: int) -> ApiRuntime:
    """The API's inline runtime as `om serve` builds it from its settings."""
    settings = ApiSettings(
        _env_file=None,
        database_url=postgres_url,
        redis_url=redis_url,
        executor="inline",
        model_retry_max_retries=max_retries,
        model_retry_base_delay_s=0.05,
        model_retry_max_delay_s=0.1,
        model_rate_limits={"openai": SLOW},
        memory_tenant_passthrough=True,  # `ModelServer.thread_config` routes through it
    )
    return build_runtime(settings)


def tokens_left(client: redis.Redis, key: str) -> float:
    return float(client.hget(f"{KEY_PREFIX}{key}", "tokens") or SLOW.burst)


@pytest.mark.usefixtures("pg_engine")  # the schema, migrated
@pytest.mark.parametrize(
    ("max_retries", "calls", "observed"),
    [(2, ["error429", "error500", "ok"], True), (1, ["error429", "error500"], False)],
)
def test_the_inline_executor_retries_per_the_policy_and_charges_the_shared_bucket(
    server: ModelServer,
    bucket_redis: redis.Redis,
    postgres_url: str,
    redis_url: str,
    max_retries: int,
    calls: list[str],
    observed: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake-key-for-the-loopback-model")
    namespace = f"policy-{max_retries}"
    server.script(namespace, "error429", "error500")  # then "ok"
    runtime = inline_runtime(postgres_url, redis_db_url(redis_url, REDIS_DB), max_retries)
    try:
        assert isinstance(runtime.engine.models.limiter, TokenBucket), "a Redis is configured: its bucket"
        thread = f"t-{uuid.uuid4().hex[:10]}"
        runtime.engine.ingest_turn(thread, thread, [text_message("hello", "user", "Hello there.")])
        overrides = server.thread_config(
            namespace, observation={"messageTokens": 1000, "bufferTokens": False}
        )
        queries.set_config_overrides(runtime.engine, thread, overrides)
        turns = []
        for i in range(12):
            text = f"Message {i} is about " + " ".join(
                WORDS[(i * 7 + k * k) % len(WORDS)] for k in range(150)
            )
            turns.append(runtime.engine.ingest_turn(thread, thread, [text_message(f"m{i}", "user", text)]))
            if any(t.blocked for t in turns):
                break
        blocked = [t for t in turns if t.blocked]
        assert blocked, "the threshold was crossed: a blocking observation ran on the inline executor"
    finally:
        runtime.close()

    assert [c.action for c in server.calls(namespace)] == calls, (
        "one request per attempt, as many as configured"
    )
    assert blocked[0].degraded is not observed
    assert bool(blocked[0].context.system_messages) is observed
    assert tokens_left(bucket_redis, "openai") == pytest.approx(SLOW.burst - len(calls), abs=0.1), (
        "every attempt was charged to the Redis bucket the workers use"
    )


# One caller per process, built the way each kind of process builds its engine: the worker runtime, or the
# API's inline runtime. Each makes its calls through its engine's model client and records token grants.
CALLER = textwrap.dedent(
    """
    import json, sys, time
    import redis

    url, run, index, calls, kind = sys.argv[1:6]
    if kind == "worker":
        from om_workers.tasks import build_runtime
        models = build_runtime().engine.models
    else:
        from om_api.runtime import build_runtime
        from om_api.settings import ApiSettings
        models = build_runtime(ApiSettings()).engine.models
    client = redis.Redis.from_url(url)
    grants = []
    take = models.take_token

    def recording(router_id):
        waited = take(router_id)
        grants.append(time.time())
        return waited

    models.take_token = recording
    models.complete("om-local/extractive", system="warm up", user="ok")  # imports, before the race
    client.rpush(f"{run}:ready", index)
    client.blpop([f"{run}:go:{index}"], timeout=120)
    grants.clear()
    for _ in range(int(calls)):
        models.complete("om-local/extractive", system="You take notes.", user="My dog is called Biscuit.")
    limiter = type(models.limiter)
    report = {"process": index, "kind": kind, "limiter": f"{limiter.__module__}.{limiter.__name__}"}
    client.rpush(f"{run}:grants", json.dumps({**report, "grants": grants}))
    """
)
RATE = RateLimit(per_second=10, burst=3)
CALLS = 15


@pytest.mark.usefixtures("pg_engine")
def test_a_worker_and_an_inline_api_share_one_budget(
    bucket_redis: redis.Redis, postgres_url: str, redis_url: str, tmp_path: Path
) -> None:
    env: dict[str, Any] = {
        "OM_DATABASE_URL": postgres_url,
        "OM_REDIS_URL": redis_db_url(redis_url, REDIS_DB),
        "OM_EXECUTOR": "inline",
        "OM_MODEL": "om-local/extractive",
        "OM_MODEL_RATE_LIMITS": RATE.model_dump_json().join(['{"om-local": ', "}"]),
    }
    reports = race(bucket_redis, CALLER, [["worker"], ["inline"]], calls=CALLS, logs=tmp_path, env=env)
    assert sorted(r["kind"] for r in reports) == ["inline", "worker"]
    assert {r["limiter"] for r in reports} == {"om_adapters.token_bucket.TokenBucket"}
    assert_one_budget(reports, RATE, CALLS)
