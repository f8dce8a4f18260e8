"""The one model-call policy: its settings (new names and the former worker names), the in-process bucket,
the client every process builds from it, and which bucket each kind of API runtime plugs in.

No services: litellm's own mock stands in for the provider (the network boundary), and the Redis bucket
is only checked for being the one chosen; its sharing across processes is proven against a real Redis in
tests/integration/test_model_call_policy.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import litellm
import pytest

from om_adapters.celery_executor import CeleryExecutor
from om_adapters.redis_coordination import RedisCoordination
from om_adapters.token_bucket import TokenBucket
from om_api.runtime import build_runtime
from om_api.settings import ApiSettings
from om_app.preflight import check, needs
from om_core.config.settings import Settings
from om_core.models.call_policy import ModelCallPolicy, build_model_client
from om_core.models.client import ModelCallFailed
from om_core.models.rate_limit import LocalTokenBucket, RateLimit, RateLimitWaitTooLong


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("OM_"):
            monkeypatch.delenv(name)


# ------------------------------------------------------------------------------------------- settings


def test_the_policy_is_read_from_the_new_names_and_the_former_worker_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert Settings(_env_file=None).model_call_policy() == ModelCallPolicy()
    monkeypatch.setenv("OM_WORKER_RETRY_MAX_RETRIES", "3")
    monkeypatch.setenv("OM_WORKER_RETRY_BASE_DELAY_S", "0.5")
    monkeypatch.setenv("OM_WORKER_RATE_LIMITS", '{"openai": {"per_second": 2, "burst": 4}}')
    monkeypatch.setenv("OM_MODEL_RETRY_MAX_DELAY_S", "30")
    monkeypatch.setenv("OM_MODEL_RATE_LIMIT_MAX_WAIT_S", "5")
    assert Settings(_env_file=None).model_call_policy() == ModelCallPolicy(
        max_retries=3,
        base_delay_s=0.5,
        max_delay_s=30,
        rate_limits={"openai": RateLimit(per_second=2, burst=4)},
        rate_limit_max_wait_s=5,
    )
    monkeypatch.setenv("OM_MODEL_RETRY_MAX_RETRIES", "6")
    assert Settings(_env_file=None).model_retry_max_retries == 6, "the new name wins over the former one"


def test_the_policy_builds_the_configured_retry_and_bounds_its_back_off() -> None:
    policy = Settings(
        _env_file=None, model_retry_max_retries=2, model_retry_base_delay_s=3
    ).model_call_policy()
    retry = policy.retry()
    assert (retry.max_retries, retry.base_delay_s, retry.max_delay_s) == (2, 3, 120)
    assert policy.worst_case_retry_wait_s() == pytest.approx((3 + 6) * 1.2)


def test_a_redis_counts_as_configured_only_when_its_url_was_set(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not Settings(_env_file=None).redis_configured
    assert Settings(_env_file=None, redis_url="redis://127.0.0.1:1/0").redis_configured
    assert not ApiSettings.from_base(Settings(_env_file=None)).redis_configured, "copying sets nothing"
    monkeypatch.setenv("OM_REDIS_URL", "redis://127.0.0.1:1/0")
    assert Settings(_env_file=None).redis_configured


# --------------------------------------------------------------------------------- in-process bucket


class Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_the_local_bucket_spends_the_burst_then_paces_at_the_rate_and_refuses_long_waits() -> None:
    clock = Clock()
    bucket = LocalTokenBucket(clock=clock, sleep=clock.sleep)
    rate = RateLimit(per_second=10, burst=3)
    waits = [bucket.acquire("openai", rate, max_wait_s=1) for _ in range(5)]
    assert waits == [0, 0, 0, pytest.approx(0.1), pytest.approx(0.1)]
    assert bucket.acquire("anthropic", rate, max_wait_s=1) == 0, "each key has its own budget"

    reserved, wait = bucket.reserve("openai", rate, max_wait_s=60)  # two ahead in the queue
    assert reserved and wait == pytest.approx(0.1)
    with pytest.raises(RateLimitWaitTooLong, match="openai"):
        bucket.acquire("openai", rate, max_wait_s=0.15)
    assert bucket.reserve("openai", rate, max_wait_s=60) == (True, pytest.approx(0.2)), (
        "the refused attempt took nothing"
    )
    clock.now += 10
    assert bucket.acquire("openai", rate, max_wait_s=0) == 0, "refilled up to the burst"


# ------------------------------------------------------------------------------------------ the client


@pytest.fixture
def rate_limited() -> litellm.RateLimitError:
    return litellm.RateLimitError("slow down", llm_provider="openai", model="gpt-4o")


def test_the_client_retries_as_configured_and_charges_every_attempt_in_process(
    rate_limited: litellm.RateLimitError,
) -> None:
    policy = ModelCallPolicy(
        max_retries=2,
        base_delay_s=0.01,
        max_delay_s=0.01,
        rate_limits={"openai": RateLimit(per_second=0.001)},
    )
    charged: list[str] = []

    class Counting(LocalTokenBucket):
        def acquire(self, key: str, limit: RateLimit, *, max_wait_s: float) -> float:
            charged.append(key)
            return 0.0

    models = build_model_client(policy, Counting(), check_credentials=False)
    with pytest.raises(ModelCallFailed) as failed:
        models.complete(
            "openai/gpt-4o",
            system="You take notes.",
            user="hello",
            provider_options={"litellm": {"mock_response": rate_limited}},
        )
    assert isinstance(failed.value.__cause__, litellm.RateLimitError), "the provider's error is chained"
    assert "slow down" in str(failed.value.__cause__) and "slow down" not in str(failed.value)
    assert "RateLimitError (HTTP 429)" in str(failed.value), "the public form names the class and status"
    assert charged == ["openai"] * 3, "the first request and both configured retries, each charged"

    default = build_model_client(policy, check_credentials=False)
    assert isinstance(default.limiter, LocalTokenBucket), "no shared bucket given: an in-process one"
    with pytest.raises(RateLimitWaitTooLong):  # burst 1, refill 1/1000 s: the second request waits too long
        default.complete(
            "openai/gpt-4o",
            system="You take notes.",
            user="hello",
            provider_options={"litellm": {"mock_response": rate_limited}},
        )


# ---------------------------------------------------------------------------- which bucket each runtime


@pytest.fixture
def database(tmp_path: Path) -> Iterator[str]:
    yield f"sqlite:///{tmp_path / 'om.db'}"


BUDGETS: dict[str, Any] = {"openai": {"per_second": 5, "burst": 10}}


@pytest.mark.parametrize(
    ("knobs", "shared"),
    [
        ({"model_rate_limits": BUDGETS}, False),  # no Redis configured: this process keeps the budget
        ({"model_rate_limits": BUDGETS, "redis_url": "redis://127.0.0.1:1/0"}, True),
        ({"redis_url": "redis://127.0.0.1:1/0"}, False),  # nothing to share: no Redis client at all
        ({"executor": "celery", "redis_url": "redis://127.0.0.1:1/0"}, True),
    ],
)
def test_every_api_runtime_follows_the_policy_with_the_bucket_its_redis_allows(
    database: str, knobs: dict[str, Any], shared: bool
) -> None:
    settings = ApiSettings(
        _env_file=None,
        database_url=database,
        model_retry_max_retries=4,
        model_rate_limit_max_wait_s=7,
        **knobs,
    )
    runtime = build_runtime(settings)  # as `om serve` builds it
    try:
        models: Any = runtime.engine.models
        assert models.retry.max_retries == 4 and models.max_wait_s == 7
        assert models.limits == settings.model_call_policy().rate_limits
        assert isinstance(models.limiter, TokenBucket if shared else LocalTokenBucket)
    finally:
        runtime.close()


def test_a_celery_mode_api_runs_on_the_adapters_it_imports_itself(database: str) -> None:
    """Nothing above the API hands it its adapters: built alone, as the uvicorn factory builds it, a
    celery-mode runtime sends work through Celery and keeps its locks in Redis."""
    settings = ApiSettings(
        _env_file=None, database_url=database, redis_url="redis://127.0.0.1:1/0", executor="celery"
    )
    runtime = build_runtime(settings)
    try:
        executor: Any = runtime.engine.executor
        assert isinstance(executor, CeleryExecutor) and executor.app is runtime.celery_app
        assert isinstance(runtime.engine.coordination, RedisCoordination)
    finally:
        runtime.close()


def test_an_inline_api_loads_no_celery(database: str) -> None:
    """The adapters are imported where celery mode needs them, so an inline API process never loads
    Celery (a fresh interpreter: this one has imported it already)."""
    code = (
        "import sys\n"
        "from om_api.runtime import build_runtime\n"
        "from om_api.settings import ApiSettings\n"
        f"build_runtime(ApiSettings(_env_file=None, database_url={database!r})).close()\n"
        "print('celery' in sys.modules)\n"
    )
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if not k.startswith("OM_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "False"


def test_an_api_keeping_budgets_in_redis_checks_that_redis_before_it_starts(database: str) -> None:
    def problems(**knobs: Any) -> list[str]:
        settings = Settings(_env_file=None, database_url=database, model="om-local/extractive", **knobs)
        return [p.setting for p in check(settings, needs("serve"), timeout_s=1)]

    dead_redis = "redis://127.0.0.1:1/0"
    assert problems(redis_url=dead_redis, model_rate_limits=BUDGETS) == ["OM_REDIS_URL"]
    assert problems(redis_url=dead_redis) == [], "no budgets: the inline API needs no Redis"
    assert problems(model_rate_limits=BUDGETS) == [], "no Redis configured: budgets stay in the process"
