"""The client's errors: an `OMAPIError` subclass per kind of error answer, and `OMRetriesExhausted` when
the retry budget ran out (it is an `OMUnavailable`, so one `except OMUnavailable` covers both)."""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import httpx


class OMAPIError(Exception):
    """An error answer of the API: `status`, and the body's `code`, `message`, `field` and `limit`;
    `retry_after_s` is the answer's `Retry-After` in seconds (None without one); `request_id` the
    answer's `X-Request-ID` (what to quote to the operator; None from a server that sends none)."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        field: str | None = None,
        limit: int | None = None,
        *,
        retry_after_s: float | None = None,
        request_id: str | None = None,
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.limit = limit
        self.retry_after_s = retry_after_s
        self.request_id = request_id


class OMBadRequest(OMAPIError):
    """400/422: a field is invalid (`field` names it)."""


class OMUnauthorized(OMAPIError):
    """401: missing, unknown or revoked API key."""


class OMNotFound(OMAPIError):
    """404: the thread or resource does not exist for this key."""


class OMConflict(OMAPIError):
    """409: the request conflicts with stored data (a message id reused with another role...)."""


class OMPayloadTooLarge(OMAPIError):
    """413: a message or the request is over a limit (`limit` says which)."""


class OMRateLimited(OMAPIError):
    """429: too many requests (or the actor model's provider is rate limited); retried by the client."""


class OMUnavailable(OMAPIError):
    """503: the database or broker is down. A broker outage stores nothing; a database outage may cut a
    turn part-way, so retry with the same message ids (a stored message is not stored twice). The client
    retries it by itself (see `RetryPolicy`)."""


class OMRetriesExhausted(OMUnavailable):
    """The call was retried until the retry budget ran out (`RetryPolicy`): `attempts` tries over
    `waited_s` seconds of waiting. `last_error` is the last failure: an `OMAPIError` (429/503 answer) or
    an `httpx.TransportError` (no answer); it is also this exception's `__cause__`. `status` is the last
    answer's status, 0 when the last try got no answer."""

    def __init__(self, attempts: int, waited_s: float, last_error: Exception, reason: str) -> None:
        status = last_error.status if isinstance(last_error, OMAPIError) else 0
        detail = str(last_error) or type(last_error).__name__
        super().__init__(
            status,
            "retries_exhausted",
            f"gave up after {attempts} attempt(s) and {waited_s:.1f}s of waiting ({reason}); last error: "
            f"{type(last_error).__name__}: {detail}",
        )
        self.attempts = attempts
        self.waited_s = waited_s
        self.last_error = last_error


ERRORS: dict[int, type[OMAPIError]] = {
    400: OMBadRequest,
    401: OMUnauthorized,
    404: OMNotFound,
    409: OMConflict,
    413: OMPayloadTooLarge,
    422: OMBadRequest,
    429: OMRateLimited,
    503: OMUnavailable,
}


def error_for(response: httpx.Response) -> OMAPIError | None:
    """The typed error of an error answer (the body must have been read), None for a success."""
    if response.status_code < 400:
        return None
    try:
        detail = response.json().get("error", {})
    except (ValueError, AttributeError):
        detail = {}
    if not isinstance(detail, dict):
        detail = {}
    error_type = ERRORS.get(response.status_code, OMAPIError)
    return error_type(
        response.status_code,
        str(detail.get("code", "error")),
        str(detail.get("message", response.text[:500])),
        detail.get("field"),
        detail.get("limit"),
        retry_after_s=retry_after_s(response),
        request_id=response.headers.get("x-request-id"),
    )


def raise_for(response: httpx.Response) -> None:
    error = error_for(response)
    if error is not None:
        raise error


def retry_after_s(response: httpx.Response) -> float | None:
    """`Retry-After` in seconds (delta-seconds or an HTTP date), None when absent or unreadable."""
    value = response.headers.get("retry-after")
    if value is None:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())
