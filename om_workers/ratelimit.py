"""Provider rate limits shared by every worker: a token bucket per provider/model in Redis.

Celery's own `rate_limit` is per worker process, so ten workers would send ten times the budget. Here the
bucket lives in Redis and is refilled from Redis's clock (`TIME`), so every process draws from one budget
and clock skew between hosts does not matter. A caller reserves a token atomically and is told how long
to wait for it; reservations queue up in arrival order instead of polling.

Retrying is not done here: `ModelClient`'s `RetryPolicy` stays the only retry layer (a 429 that still
happens is retried there, with backoff).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import redis
from pydantic import BaseModel, Field

from om_core.errors import OMError
from om_core.models.client import ModelClient
from om_core.models.retry import RetryPolicy
from om_core.models.routing import split_router_id

log = logging.getLogger("om.workers.ratelimit")

KEY_PREFIX = "om:ratelimit:"

# Refill from Redis's clock, then take one token; a deficit is a reservation the caller waits out.
# Returns {reserved (0/1), wait seconds as a string} (Lua numbers would be truncated to integers).
_RESERVE = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local max_wait = tonumber(ARGV[3])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local state = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(state[1])
local at = tonumber(state[2])
if tokens == nil or at == nil then
    tokens = burst
    at = now
end
tokens = math.min(burst, tokens + math.max(0, now - at) * rate)
local after = tokens - 1
local wait = 0
if after < 0 then
    wait = -after / rate
end
if wait > max_wait then
    return {0, tostring(wait)}
end
redis.call('HSET', KEYS[1], 'tokens', tostring(after), 'at', tostring(now))
redis.call('EXPIRE', KEYS[1], math.ceil(burst / rate) + 60)
return {1, tostring(wait)}
"""


class RateLimit(BaseModel):
    """A budget: `per_second` tokens refill continuously, at most `burst` can be saved up."""

    per_second: float = Field(gt=0)
    burst: int = Field(default=1, ge=1)


class RateLimitWaitTooLong(OMError):
    """The shared budget is exhausted for longer than the caller may wait; nothing was reserved."""

    is_retryable = False

    def __init__(self, key: str, wait_s: float, max_wait_s: float) -> None:
        self.key = key
        self.wait_s = wait_s
        self.max_wait_s = max_wait_s
        super().__init__(
            "MODEL_RATE_LIMIT_WAIT",
            f"rate limit {key}: the next token is {wait_s:.1f}s away, "
            f"more than the {max_wait_s:.1f}s allowed",
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (RateLimitWaitTooLong, (self.key, self.wait_s, self.max_wait_s))


class TokenBucket:
    """One Redis token bucket per key, shared by every process that uses the same Redis."""

    def __init__(self, client: redis.Redis, *, prefix: str = KEY_PREFIX) -> None:
        self.client = client
        self.prefix = prefix
        self._reserve = client.register_script(_RESERVE)

    def reserve(self, key: str, limit: RateLimit, *, max_wait_s: float) -> tuple[bool, float]:
        """Reserve one token: (reserved, seconds until it is due). Nothing is reserved when the wait
        would be longer than `max_wait_s`."""
        reserved, wait = self._reserve(
            keys=[self.prefix + key], args=[limit.per_second, limit.burst, max_wait_s]
        )
        return int(reserved) == 1, float(wait.decode() if isinstance(wait, bytes) else wait)

    def acquire(
        self,
        key: str,
        limit: RateLimit,
        *,
        max_wait_s: float,
        sleep: Callable[[float], None] = time.sleep,
    ) -> float:
        """Take one token, sleeping until it is due. Returns the seconds waited."""
        reserved, wait_s = self.reserve(key, limit, max_wait_s=max_wait_s)
        if not reserved:
            raise RateLimitWaitTooLong(key, wait_s, max_wait_s)
        if wait_s > 0:
            sleep(wait_s)
        return wait_s


def limit_for(router_id: str, limits: Mapping[str, RateLimit]) -> tuple[str, RateLimit] | None:
    """The budget a model call draws from: its own (`openai/gpt-4o`) or its provider's (`openai`)."""
    if router_id in limits:
        return router_id, limits[router_id]
    provider, _ = split_router_id(router_id)
    if provider is not None and provider in limits:
        return provider, limits[provider]
    return None


class RateLimitedModelClient(ModelClient):
    """`ModelClient` that takes a token from the shared bucket before every request it sends: each retry
    and each fallback model is charged to the budget of the model it goes to, since each is a request the
    provider counts."""

    def __init__(
        self,
        bucket: TokenBucket,
        limits: Mapping[str, RateLimit],
        *,
        max_wait_s: float = 60.0,
        retry: RetryPolicy | None = None,
        environ: Mapping[str, str] | None = None,
        check_credentials: bool = True,
    ) -> None:
        super().__init__(retry, environ=environ, check_credentials=check_credentials)
        self.bucket = bucket
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
        waited = self.bucket.acquire(key, limit, max_wait_s=self.max_wait_s)
        if waited > 0:
            log.debug("waited %.2fs for a %s token", waited, key)
        return waited
