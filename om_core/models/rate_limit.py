"""Provider rate limits: the budgets (`RateLimit`), where a call draws from (`limit_for`) and the bucket
interface a process paces its model requests with (`RateLimiter`).

Where a budget lives is the shell's choice. `LocalTokenBucket` keeps it in this process (one machine, one
process calling models); `om_adapters.token_bucket.TokenBucket` keeps it in Redis, so every process on that
Redis (workers and API servers alike) draws from one budget. Both reserve a token atomically and say how
long to wait for it, so waiting callers queue in arrival order instead of polling, and both refuse a wait
longer than the caller allows without taking anything.

This module is light on purpose (no litellm, no client): the settings import `RateLimit` to parse
`OM_MODEL_RATE_LIMITS`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from pydantic import BaseModel, Field

from om_core.errors import OMError
from om_core.models.routing import split_router_id

__all__ = ["LocalTokenBucket", "RateLimit", "RateLimitWaitTooLong", "RateLimiter", "limit_for"]


class RateLimit(BaseModel):
    """A budget: `per_second` tokens refill continuously, at most `burst` can be saved up."""

    per_second: float = Field(gt=0)
    burst: int = Field(default=1, ge=1)


class RateLimitWaitTooLong(OMError):
    """The budget is exhausted for longer than the caller may wait; nothing was reserved."""

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


class RateLimiter(Protocol):
    """Takes one token of `key`'s budget, waiting until it is due; raises `RateLimitWaitTooLong` (taking
    nothing) when that is more than `max_wait_s` away. Returns the seconds waited."""

    def acquire(self, key: str, limit: RateLimit, *, max_wait_s: float) -> float: ...


def limit_for(router_id: str, limits: Mapping[str, RateLimit]) -> tuple[str, RateLimit] | None:
    """The budget a model call draws from: its own (`openai/gpt-4o`) or its provider's (`openai`)."""
    if router_id in limits:
        return router_id, limits[router_id]
    provider, _ = split_router_id(router_id)
    if provider is not None and provider in limits:
        return provider, limits[provider]
    return None


class LocalTokenBucket:
    """The token buckets of one process, with the Redis bucket's rules (refill, reserve, refuse past the
    longest wait). Used when no Redis is configured: a budget shared by the threads of this process."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._clock = clock
        self._sleep = sleep
        self._guard = threading.Lock()
        #: key -> (tokens, when they were counted); a deficit is reservations not yet due.
        self._state: dict[str, tuple[float, float]] = {}

    def reserve(self, key: str, limit: RateLimit, *, max_wait_s: float) -> tuple[bool, float]:
        """Reserve one token: (reserved, seconds until it is due). Nothing is reserved when the wait
        would be longer than `max_wait_s`."""
        with self._guard:
            now = self._clock()
            tokens, at = self._state.get(key, (float(limit.burst), now))
            tokens = min(float(limit.burst), tokens + max(0.0, now - at) * limit.per_second)
            after = tokens - 1
            wait = -after / limit.per_second if after < 0 else 0.0
            if wait > max_wait_s:
                return False, wait
            self._state[key] = (after, now)
            return True, wait

    def acquire(self, key: str, limit: RateLimit, *, max_wait_s: float) -> float:
        reserved, wait_s = self.reserve(key, limit, max_wait_s=max_wait_s)
        if not reserved:
            raise RateLimitWaitTooLong(key, wait_s, max_wait_s)
        if wait_s > 0:
            self._sleep(wait_s)
        return wait_s
