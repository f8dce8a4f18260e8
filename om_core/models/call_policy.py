"""One model-call policy for every process that calls the Observer or Reflector.

A model call is retried, paced and bounded the same way wherever it runs: in a Celery worker, in the API
process running background work itself (`OM_EXECUTOR=inline`), or in anything else built with
`om_core.runtime.build_engine`. Before this, only workers had a shared rate limit and the configured retry
settings; the inline executor called models with neither, so an API next to a fleet spent a budget the
workers believed was theirs.

- `ModelCallPolicy` holds the numbers: retries and their back-off, the provider budgets, the longest wait
  for a budget token. `om_core.config.settings.Settings.model_call_policy()` builds it from
  `OM_MODEL_RETRY_*`, `OM_MODEL_RATE_LIMITS` and `OM_MODEL_RATE_LIMIT_MAX_WAIT_S` (the former `OM_WORKER_*`
  names still read), once per process.
- `build_model_client(policy, limiter)` is the one place a process's model client is made. The shell
  passes where budgets live (a `RateLimiter`): the Redis bucket when a Redis is configured, so API servers
  and workers draw from one budget; without one, an in-process bucket.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from om_core.models.client import ModelClient
from om_core.models.rate_limit import LocalTokenBucket, RateLimit, RateLimiter, limit_for
from om_core.models.retry import RetryPolicy

__all__ = ["ModelCallPolicy", "RateLimitedModelClient", "build_model_client"]

log = logging.getLogger("om.models.policy")


@dataclass(frozen=True)
class ModelCallPolicy:
    """How every model call of a process is retried and paced (see the module docstring)."""

    max_retries: int = 8
    base_delay_s: float = 1.0
    max_delay_s: float = 120.0
    #: Budgets by model (`openai/gpt-4o`) or provider (`openai`); a model without one is not paced.
    rate_limits: Mapping[str, RateLimit] = field(default_factory=dict)
    rate_limit_max_wait_s: float = 60.0

    def retry(self) -> RetryPolicy:
        return RetryPolicy(
            max_retries=self.max_retries, base_delay_s=self.base_delay_s, max_delay_s=self.max_delay_s
        )

    def worst_case_retry_wait_s(self) -> float:
        """The longest total back-off of one model call (every retry at the top of its jitter): what a
        worker's task time limit must leave room for."""
        retry = self.retry()
        return sum(
            min(retry.base_delay_s * 2.0**k, retry.max_delay_s) * (1 + retry.jitter)
            for k in range(retry.max_retries)
        )


class RateLimitedModelClient(ModelClient):
    """`ModelClient` that takes a token from its budget before every request it sends: each retry and each
    fallback model is charged to the budget of the model it goes to, since each is a request the provider
    counts."""

    def __init__(
        self,
        limiter: RateLimiter,
        limits: Mapping[str, RateLimit],
        *,
        max_wait_s: float = 60.0,
        retry: RetryPolicy | None = None,
        environ: Mapping[str, str] | None = None,
        check_credentials: bool = True,
    ) -> None:
        super().__init__(retry, environ=environ, check_credentials=check_credentials)
        self.limiter = limiter
        self.limits = dict(limits)
        self.max_wait_s = max_wait_s

    def before_attempt(self, router_id: str) -> None:
        self.take_token(router_id)

    def take_token(self, router_id: str) -> float:
        """Wait for a token of `router_id`'s budget (no-op without one). Returns the seconds waited."""
        found = limit_for(router_id, self.limits)
        if found is None:
            return 0.0
        key, limit = found
        waited = self.limiter.acquire(key, limit, max_wait_s=self.max_wait_s)
        if waited > 0:
            log.debug("waited %.2fs for a %s token", waited, key)
        return waited


def build_model_client(
    policy: ModelCallPolicy,
    limiter: RateLimiter | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    check_credentials: bool = True,
) -> RateLimitedModelClient:
    """The model client of a process: `policy`'s retries, and its budgets drawn from `limiter` (the shared
    Redis bucket a shell passes in; an in-process bucket without one)."""
    return RateLimitedModelClient(
        limiter if limiter is not None else LocalTokenBucket(),
        policy.rate_limits,
        max_wait_s=policy.rate_limit_max_wait_s,
        retry=policy.retry(),
        environ=environ,
        check_credentials=check_credentials,
    )
