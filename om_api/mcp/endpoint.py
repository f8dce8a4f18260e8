"""`/mcp`: the MCP endpoint of the API, behind the same key as `/v1/`.

Every request is authenticated here before the MCP SDK sees a byte of it: the key (`Authorization: Bearer`
or `X-API-Key`, as `om_api.auth` reads it) names the tenant, and the tools of that request are answered as
that tenant (`in_process.InProcessBackend`). No key or an unknown one is a 401, in the API's error shape.
The tenant's request rate (`om_api.tenant_rate_limit`) counts `/mcp` requests like `/v1/` ones, and the
body limit (`OM_MAX_REQUEST_BYTES`) applies as to every request.

The SDK is imported on the first `/mcp` request (`serving.py`), never at start-up: a server nobody calls
over MCP does not pay for loading it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.routing import Route

from om_api.auth import Principal
from om_api.errors import error_body
from om_api.mcp.in_process import InProcessBackend
from om_api.mcp.tools import BACKEND_STATE
from om_api.runtime import ApiRuntime
from om_api.tenant_rate_limit import presented_key

if TYPE_CHECKING:
    from om_api.mcp.serving import HttpServing

PATH = "/mcp"
#: GET opens a server-to-client stream and DELETE ends a session; a stateless endpoint answers both
#: itself (405), so they are routed here too rather than to a bare 405 without the MCP shape.
METHODS = ["GET", "POST", "DELETE"]


class McpEndpoint:
    """The ASGI app at `/mcp`: authenticate, then hand the request to the SDK (loaded on first use)."""

    def __init__(self, runtime: ApiRuntime, max_body_bytes: int) -> None:
        self.runtime = runtime
        self.max_body_bytes = max_body_bytes
        self._serving: HttpServing | None = None

    def _loaded(self) -> HttpServing:
        if self._serving is None:
            from om_api.mcp.serving import HttpServing

            self._serving = HttpServing(self.max_body_bytes)
        return self._serving

    async def _principal(self, scope: dict[str, Any]) -> Principal | None:
        if self.runtime.settings.auth == "none":
            return Principal(tenant_id=None)
        token = presented_key(scope)
        if token is None:
            return None
        keys = self.runtime.keys
        key = keys.remembered(token)
        if key is None:
            key = await run_in_threadpool(keys.verify, token)
        return None if key is None else Principal(tenant_id=key.tenant_id, key_id=key.id)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        principal = await self._principal(scope)
        if principal is None:
            await _unauthorized(send)
            return
        state = scope.setdefault("state", {})
        state["tenant_id"] = principal.tenant_id
        state[BACKEND_STATE] = InProcessBackend(self.runtime, principal)
        await self._loaded()(scope, receive, send)


async def _unauthorized(send: Any) -> None:
    message = (
        "missing, unknown or revoked API key: send 'Authorization: Bearer <key>' (create a key with "
        "`om keys create`)"
    )
    body = json.dumps(error_body("unauthorized", message)).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"www-authenticate", b"Bearer"),
    ]
    await send({"type": "http.response.start", "status": 401, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def route(runtime: ApiRuntime, max_body_bytes: int) -> Route:
    """The route `create_app` adds: `/mcp`, outside the OpenAPI document (it is not a REST resource)."""
    return Route(PATH, McpEndpoint(runtime, max_body_bytes), methods=METHODS, include_in_schema=False)
