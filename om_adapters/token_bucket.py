"""Provider rate limits shared by every process on one Redis: a token bucket per provider/model.

Celery's own `rate_limit` is per worker process, so ten workers would send ten times the budget. Here the
bucket lives in Redis and is refilled from Redis's clock (`TIME`), so every process (each worker, and each
API server running background work inline) draws from one budget and clock skew between hosts does not
matter. A caller reserves a token atomically and is told how long to wait for it; reservations queue up in
arrival order instead of polling.

This is the Redis `RateLimiter` the shells plug into the one model-call policy
(`om_core.models.call_policy`), which also holds the budgets' rules and the rate-limited client; they are
re-exported here for the code that imported them from this module. Retrying is not done here: the
policy's `RetryPolicy` stays the only retry layer (a 429 that still happens is retried there, with backoff).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import redis

from om_core.models.call_policy import RateLimitedModelClient
from om_core.models.rate_limit import RateLimit, RateLimitWaitTooLong, limit_for

__all__ = [
    "KEY_PREFIX",
    "RateLimit",
    "RateLimitWaitTooLong",
    "RateLimitedModelClient",
    "TokenBucket",
    "limit_for",
]

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
