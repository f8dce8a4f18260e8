"""Transport retries for model calls (behaviour §5.9).

This is the only retry layer: litellm is always called with its own retries switched off, so a rate
limit costs at most nine calls rather than nine times litellm's count. Only failures a later attempt can
fix are retried (timeouts, rate limits, 5xx, dropped connections, partial streams); a bad request, a
missing key or an over-long prompt fails at once, and a cancelled operation is never resurrected.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import random
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from om_core.errors import OMError

__all__ = [
    "TRANSIENT_MESSAGE_FRAGMENTS",
    "TRANSIENT_STATUS_CODES",
    "OperationAborted",
    "RetryPolicy",
    "error_chain",
    "is_abort",
    "is_transient",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: HTTP statuses worth another attempt; every 5xx is added on top of these.
TRANSIENT_STATUS_CODES = frozenset({408, 425, 429})
#: Lower-case fragments of error messages that mean "the network or the server hiccuped".
TRANSIENT_MESSAGE_FRAGMENTS = (
    "terminated",
    "fetch failed",
    "econnreset",
    "econnrefused",
    "enotfound",
    "eai_again",
    "socket hang up",
    "network error",
    "request timed out",
    "request timeout",
    "connection reset",
    "connection closed",
    'finished with finishreason "other"',
)
#: Exception class names that mean someone cancelled the work on purpose (matched by name so that
#: Celery's and other libraries' cancellations count without importing them here).
_ABORT_CLASS_NAMES = frozenset(
    {"AbortError", "CancelledError", "Terminated", "TaskRevokedError", "SoftTimeLimitExceeded"}
)
#: litellm's transient classes, checked by name so this module never has to import litellm (slow).
_LITELLM_TRANSIENT = (
    "RateLimitError",
    "Timeout",
    "APIConnectionError",
    "ServiceUnavailableError",
    "InternalServerError",
    "BadGatewayError",
)
_CHAIN_LIMIT = 32


class OperationAborted(OMError):
    """The caller cancelled the operation; raised instead of sleeping or starting another attempt."""

    is_retryable = False

    def __init__(self, message: str = "model call aborted by the caller") -> None:
        super().__init__("OPERATION_ABORTED", message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (OperationAborted, (str(self),))


def error_chain(exc: BaseException) -> Iterator[BaseException]:
    """`exc` and everything it wraps (`__cause__`, `__context__`, `.cause`, `.error`), outermost first."""
    seen: set[int] = set()
    queue: list[BaseException] = [exc]
    while queue and len(seen) < _CHAIN_LIMIT:
        current = queue.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        for linked in (
            current.__cause__,
            current.__context__,
            getattr(current, "cause", None),
            getattr(current, "error", None),
        ):
            if isinstance(linked, BaseException):
                queue.append(linked)


def is_abort(exc: BaseException) -> bool:
    """True when a deliberate cancellation appears anywhere in the chain."""
    for link in error_chain(exc):
        if isinstance(
            link,
            OperationAborted
            | asyncio.CancelledError
            | concurrent.futures.CancelledError
            | KeyboardInterrupt
            | SystemExit,
        ):
            return True
        if type(link).__name__ in _ABORT_CLASS_NAMES:
            return True
    return False


def is_transient(exc: BaseException) -> bool:
    """Whether another attempt may succeed (§5.9).

    Links are read outermost first; an explicit `is_retryable`/`isRetryable` flag decides for its link
    (our own permanent errors set it False, so the 500 that litellm reports for a missing key does not
    trigger nine attempts). Any cancellation in the chain means no retry.
    """
    if is_abort(exc):
        return False
    for link in error_chain(exc):
        flag = _explicit_flag(link)
        if flag is not None:
            return flag
        if _link_is_transient(link):
            return True
    return False


def _explicit_flag(link: BaseException) -> bool | None:
    for name in ("is_retryable", "isRetryable"):
        value = getattr(link, name, None)
        if isinstance(value, bool):
            return value
    return None


def _link_is_transient(link: BaseException) -> bool:
    if _transient_status(getattr(link, "status_code", None)) or _transient_status(
        getattr(link, "status", None)
    ):
        return True
    code = getattr(link, "code", None)
    if _transient_status(code):
        return True
    if isinstance(code, str) and code.upper().startswith("UND_ERR_"):
        return True
    if (
        isinstance(link, TimeoutError | ConnectionError)
        or _is_litellm_transient(link)
        or _is_httpx_transport(link)
    ):
        return True
    message = str(link).lower()
    return any(fragment in message for fragment in TRANSIENT_MESSAGE_FRAGMENTS)


def _transient_status(value: object) -> bool:
    if isinstance(value, bool) or not isinstance(value, int):
        return False
    return value in TRANSIENT_STATUS_CODES or 500 <= value <= 599


def _is_litellm_transient(link: BaseException) -> bool:
    litellm = sys.modules.get("litellm")
    if litellm is None:
        return False
    classes = tuple(getattr(litellm, name) for name in _LITELLM_TRANSIENT if hasattr(litellm, name))
    return isinstance(link, classes)


def _is_httpx_transport(link: BaseException) -> bool:
    httpx = sys.modules.get("httpx")
    transport_error = getattr(httpx, "TransportError", None) if httpx is not None else None
    return isinstance(transport_error, type) and isinstance(link, transport_error)


@dataclass(frozen=True)
class RetryPolicy:
    """How many times and how patiently a failed call is repeated.

    Delay before retry `k` (0-based) is `min(base_delay_s * 2**k, max_delay_s)` scaled by a uniform
    factor in `[1 - jitter, 1 + jitter]`; with the defaults that is about four minutes over 8 retries.
    `sleep` and `rng` are injectable so tests run instantly and deterministically.
    """

    max_retries: int = 8
    base_delay_s: float = 1.0
    max_delay_s: float = 120.0
    jitter: float = 0.2
    sleep: Callable[[float], None] = time.sleep
    rng: Callable[[], float] = random.random
    classify: Callable[[BaseException], bool] = is_transient

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {self.max_retries}")
        if not 0 <= self.jitter < 1:
            raise ValueError(f"jitter must be in [0, 1), got {self.jitter}")

    def is_transient(self, exc: BaseException) -> bool:
        return self.classify(exc)

    def delay(self, retry_index: int) -> float:
        """Seconds to wait before retry number `retry_index` (0 = the first retry)."""
        nominal = min(self.base_delay_s * (2.0**retry_index), self.max_delay_s)
        factor = 1.0 + self.jitter * (2.0 * self.rng() - 1.0)
        return float(nominal * factor)

    def run(
        self,
        fn: Callable[[], T],
        *,
        abort: threading.Event | None = None,
        on_retry: Callable[[int, BaseException, float], None] | None = None,
    ) -> T:
        """Call `fn` until it succeeds, fails permanently, runs out of retries, or `abort` is set.

        The last error is re-raised unchanged (its type is what callers branch on) with a note saying
        how many attempts were made. `on_retry(retry_index, error, delay_s)` runs before each wait.
        """
        retry_index = 0
        while True:
            _check_abort(abort)
            try:
                return fn()
            except Exception as exc:
                if not self.classify(exc) or retry_index >= self.max_retries:
                    if retry_index:
                        exc.add_note(f"gave up after {retry_index + 1} attempts")
                    raise
                delay = self.delay(retry_index)
                log.debug("transient model error (retry %d in %.2fs): %s", retry_index + 1, delay, exc)
                if on_retry is not None:
                    on_retry(retry_index, exc, delay)
                self._wait(delay, abort)
                retry_index += 1

    def _wait(self, delay: float, abort: threading.Event | None) -> None:
        # A real wait on the abort event ends early when the caller cancels; an injected sleep (tests)
        # is honoured as is and the event is checked again right after.
        if abort is not None and self.sleep is time.sleep:
            abort.wait(delay)
        else:
            self.sleep(delay)
        _check_abort(abort)


def _check_abort(abort: threading.Event | None) -> None:
    if abort is not None and abort.is_set():
        raise OperationAborted()
