"""When and how long the client waits before trying a call again.

A call is tried again when it got no answer (the connection failed or was cut) or an answer that says
"later": 429 and 503. The wait doubles from `backoff_s` up to `max_backoff_s`, with random jitter (so
clients that failed together do not come back together), and is never shorter than the answer's
`Retry-After`. A call gives up after `attempts` tries, or sooner when the next wait would take its total
waiting past `budget_s`, with `OMRetriesExhausted` naming the last error.

Only calls that are safe to send twice are retried after a failure that may have reached the server:
reads, PUT/DELETE/PATCH-as-replace, searches, and turns (each message carries an id, and the server stores
a message id once however often it is posted, so a turn sent again adds nothing). Other calls (observe,
reflect, observation line edits) are retried only when the server cannot have acted on them: a
connection that was never made, or a 429.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import httpx

from om_client.errors import OMAPIError, OMRateLimited, OMRetriesExhausted

#: No answer, and the request never reached the server: safe to send again whatever the call.
NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
#: No answer, and the request may have reached the server: safe again only for an idempotent call. A read
#: timeout is not here: the call's `timeout` is the caller's deadline, not a failure to hide.
MAYBE_SENT = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)
RETRIED_STATUSES = frozenset({429, 503})


@dataclass(frozen=True)
class RetryPolicy:
    """How a client retries (`OMClient(..., retry=RetryPolicy(...))`; `RetryPolicy.off()` never does)."""

    attempts: int = 5
    """Tries of one call, the first included (1: never retry)."""
    backoff_s: float = 0.5
    """The wait before the first retry; it doubles with each further one."""
    max_backoff_s: float = 15.0
    """The longest computed wait (a longer `Retry-After` is still honoured, within the budget)."""
    budget_s: float = 30.0
    """The most one call waits in total between its tries; a wait that would pass it gives up instead."""
    jitter: float = 0.5
    """Up to this fraction of each computed wait is random (0: none)."""

    @classmethod
    def off(cls) -> RetryPolicy:
        return cls(attempts=1)

    def wait_s(self, retry: int, retry_after_s: float | None = None) -> float:
        """The wait before retry number `retry` (1 for the first): the jittered backoff, and never less
        than the server's `Retry-After`."""
        base = min(self.max_backoff_s, self.backoff_s * 2.0 ** (retry - 1))
        wait = base * (1.0 - self.jitter * random.random())
        return max(wait, retry_after_s) if retry_after_s is not None else wait


class Attempts:
    """The retry state of one call: `next_wait(error)` is the seconds to wait before trying again, or
    raises (the error itself when it is not retried, `OMRetriesExhausted` when the budget is spent)."""

    def __init__(self, policy: RetryPolicy, *, idempotent: bool) -> None:
        self.policy = policy
        self.idempotent = idempotent
        self.tries = 0
        self.waited_s = 0.0

    def retryable(self, error: Exception) -> bool:
        if isinstance(error, (*NOT_SENT, OMRateLimited)):
            return True
        if isinstance(error, MAYBE_SENT):
            return self.idempotent
        if isinstance(error, OMAPIError):
            return self.idempotent and error.status in RETRIED_STATUSES
        return False

    def next_wait(self, error: Exception) -> float:
        self.tries += 1
        if not self.retryable(error) or self.policy.attempts <= 1:
            raise error
        if self.tries >= self.policy.attempts:
            raise OMRetriesExhausted(self.tries, self.waited_s, error, "no attempts left") from error
        retry_after = error.retry_after_s if isinstance(error, OMAPIError) else None
        wait = self.policy.wait_s(self.tries, retry_after)
        if self.waited_s + wait > self.policy.budget_s:
            reason = f"the next wait of {wait:.1f}s would pass the {self.policy.budget_s:.0f}s budget"
            raise OMRetriesExhausted(self.tries, self.waited_s, error, reason) from error
        self.waited_s += wait
        return wait

    def reset(self) -> None:
        """Progress was made (an event stream delivered events): the next failure starts afresh."""
        self.tries = 0
        self.waited_s = 0.0
