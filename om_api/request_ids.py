"""The request id of every API request, picked at the outermost edge of the application.

`RequestIds` wraps the whole ASGI stack, Starlette's server-error handler included, so even a 500 carries
the id. It picks the id (`om_adapters.request_context.choose_request_id`: a valid `X-Request-ID`, else
the trace id of a valid `traceparent`, else a new one), keeps it in the request's context for the log
lines, the error bodies (`error.request_id`) and the tasks the request sends, and echoes it in the
response's `X-Request-ID` header. A forged id (too long, or with characters outside `[A-Za-z0-9._:-]`) is
replaced, never echoed.

`install` puts the wrapper outside the stack FastAPI builds, and outside the FastAPI instrumentation's
middleware when tracing is on (so a request's log lines carry its trace id from the request span on, and
the id itself comes from the request, never from the span).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from fastapi import FastAPI

from om_adapters.request_context import REQUEST_ID, TENANT, choose_request_id

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

HEADER = "X-Request-ID"
_HEADER = HEADER.lower().encode()


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers") or ():
        if key == name:
            return str(value.decode("latin-1"))
    return None


def request_id_of(scope: Scope) -> str:
    """The id of the request `scope` describes (see the module's docstring)."""
    return choose_request_id(_header(scope, _HEADER), _header(scope, b"traceparent"))


class RequestIds:
    """Sets the request id for the request's lifetime and echoes it in the response headers."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = request_id_of(scope)
        scope.setdefault("state", {})["request_id"] = request_id
        encoded = request_id.encode()

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers") or () if k.lower() != _HEADER]
                message["headers"] = [*headers, (_HEADER, encoded)]
            await send(message)

        token = REQUEST_ID.set(request_id)
        tenant = TENANT.set(None)
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            TENANT.reset(tenant)
            REQUEST_ID.reset(token)


def install(app: FastAPI) -> None:
    """Put `RequestIds` outside the stack `app` builds, Starlette's server-error handler and the tracing
    middleware (when instrumented) included. Called last: the FastAPI instrumentation replaces the same
    builder and expects to find Starlette's own stack under it."""
    inner = app.build_middleware_stack

    def build() -> ASGIApp:
        return RequestIds(inner())

    # Starlette builds the stack on the first request through this attribute.
    setattr(app, "build_middleware_stack", build)  # noqa: B010
