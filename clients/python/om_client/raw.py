"""The HTTP answer behind a client call: `client.with_raw_response.<method>(...)` makes the same call and
returns a `RawResponse` (status code, headers, body) whose `parse()` gives what the method returns.

    raw = om.with_raw_response.status("thread-1")
    print(raw.status_code, raw.headers["content-type"])
    status = raw.parse()                      # the StatusPayload `om.status("thread-1")` returns

Why a context variable rather than a flag through every method: the methods stay one list, each written
once, and the response they read is recorded where every call passes (`record`, from the client's
request loop), for the call running in this thread or task only. The call is otherwise unchanged: retries
happen as usual (the raw response is the answer that was used), and an error status still raises its
`OMAPIError`, which carries the response too. Methods that are iterators (`events`, `iter_threads`) make
many requests and are not offered.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any, Generic, TypeVar

import httpx

__all__ = ["AsyncRawMethods", "RawMethods", "RawResponse", "record"]

T = TypeVar("T")

#: The responses of the raw call running in this context (None: no raw call is running).
_seen: ContextVar[list[httpx.Response] | None] = ContextVar("om_client_raw_responses", default=None)

#: Client attributes that are not one request with one answer.
_NOT_ONE_REQUEST = frozenset({"events", "iter_threads", "close", "aclose", "with_raw_response"})


def record(response: httpx.Response) -> None:
    """Keep `response` for the raw call running in this context, if any (the client calls this with
    every answer it accepts)."""
    seen = _seen.get()
    if seen is not None:
        seen.append(response)


class RawResponse(Generic[T]):
    """One call's HTTP answer and what the method made of it."""

    def __init__(self, http_response: httpx.Response, parsed: T) -> None:
        self.http_response = http_response
        self._parsed = parsed

    @property
    def status_code(self) -> int:
        return self.http_response.status_code

    @property
    def headers(self) -> httpx.Headers:
        return self.http_response.headers

    @property
    def content(self) -> bytes:
        return self.http_response.content

    @property
    def text(self) -> str:
        return self.http_response.text

    def json(self) -> Any:
        """The body as JSON (None for an empty body, such as a 204)."""
        return json.loads(self.http_response.content) if self.http_response.content else None

    def parse(self) -> T:
        """What the method returns: its typed model (None for a method that returns nothing)."""
        return self._parsed

    def __repr__(self) -> str:
        request = self.http_response.request
        return f"<RawResponse {request.method} {request.url.path} {self.status_code}>"


def _method(client: object, name: str) -> Callable[..., Any]:
    if name.startswith("_") or name in _NOT_ONE_REQUEST:
        raise AttributeError(f"with_raw_response has no {name!r}: only methods that make one request")
    method = getattr(client, name)
    if not callable(method):
        raise AttributeError(f"with_raw_response has no {name!r}: it is not a method")
    return method  # type: ignore[no-any-return]


def _last(seen: list[httpx.Response], name: str) -> httpx.Response:
    if not seen:  # every one-request method records its answer; this would be a client bug
        raise RuntimeError(f"{name} made no request to record")
    return seen[-1]


class RawMethods:
    """`OMClient.with_raw_response`: every one-request method of the client, returning a `RawResponse`."""

    def __init__(self, client: object) -> None:
        self._client = client

    def __getattr__(self, name: str) -> Callable[..., RawResponse[Any]]:
        method = _method(self._client, name)

        def call(*args: Any, **kwargs: Any) -> RawResponse[Any]:
            seen: list[httpx.Response] = []
            token = _seen.set(seen)
            try:
                parsed = method(*args, **kwargs)
            finally:
                _seen.reset(token)
            return RawResponse(_last(seen, name), parsed)

        return call


class AsyncRawMethods:
    """`AsyncOMClient.with_raw_response`: the same, awaited."""

    def __init__(self, client: object) -> None:
        self._client = client

    def __getattr__(self, name: str) -> Callable[..., Awaitable[RawResponse[Any]]]:
        method = _method(self._client, name)

        async def call(*args: Any, **kwargs: Any) -> RawResponse[Any]:
            seen: list[httpx.Response] = []
            token = _seen.set(seen)
            try:
                parsed = await method(*args, **kwargs)
            finally:
                _seen.reset(token)
            return RawResponse(_last(seen, name), parsed)

        return call
