"""The MCP SDK's side: the tools of `tools.py` served by its low-level `Server`, over streamable HTTP (one
stateless exchange per request, JSON answers) or over stdio.

Only `endpoint.py` (on a first `/mcp` request) and `om mcp` import this module, so the API pays for the
SDK only when MCP is used. The low-level server is used rather than the decorator API because the tools
already carry their schemas and checks (`tools.py`), shared with the stdio proxy.

Which backend answers a call is decided per call by `backend_for`: over HTTP it is the one `endpoint.py`
put in the request's state after checking the key (the tenant), over stdio the one proxy backend.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings

from om_api.mcp.tools import BACKEND_STATE, TOOLS, MemoryBackend, ToolDef, ToolFailure, call_tool

log = logging.getLogger("om.mcp")

INSTRUCTIONS = (
    "om is the user's long-term conversation memory. Use search_memory or recall to find what was said "
    "before, get_observations for what om has noted about a conversation, get_working_memory and "
    "update_working_memory for the facts it keeps, list_threads to find conversations, and post_turn to "
    "store new messages."
)

# The SDK logs every stateless exchange's start and end at INFO.
logging.getLogger("mcp.server.streamable_http_manager").setLevel(logging.WARNING)


def _tool(tool: ToolDef) -> types.Tool:
    return types.Tool(
        name=tool.name,
        title=tool.title,
        description=tool.description,
        input_schema=tool.input_schema(),
        annotations=types.ToolAnnotations(
            title=tool.title,
            read_only_hint=tool.read_only,
            destructive_hint=False,
            idempotent_hint=tool.read_only,
            open_world_hint=False,
        ),
    )


_TOOL_LIST = [_tool(tool) for tool in TOOLS]


def _error(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=message)], is_error=True)


def build_server(backend_for: Callable[[Any], MemoryBackend], *, version: str = "") -> Server[Any]:
    """The MCP server: the tool list, and each call checked then answered by `backend_for(ctx)`."""

    async def list_tools(_ctx: Any, _params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=_TOOL_LIST)

    async def call(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        try:
            answer = await call_tool(backend_for(ctx), params.name, params.arguments)
        except ToolFailure as exc:
            return _error(str(exc))
        except Exception:
            log.exception("MCP tool %s failed", params.name[:100])
            return _error("internal error: the server could not answer this call; try again later")
        text = json.dumps(answer, ensure_ascii=False, separators=(",", ":"))
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)], structured_content=answer
        )

    return Server(
        "om",
        version=version,
        title="om memory",
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call,
    )


def _backend_of_request(ctx: Any) -> MemoryBackend:
    request = getattr(ctx, "request", None)
    state = getattr(request, "scope", {}).get("state") or {}
    backend: MemoryBackend | None = state.get(BACKEND_STATE)
    if backend is None:  # endpoint.py always sets it; a request without one reaches nothing
        raise ToolFailure("unauthorized: no API key was checked for this request")
    return backend


class HttpServing:
    """Streamable HTTP for `/mcp`: each request is one stateless exchange with its own short-lived
    session manager (no session outlives its request, so nothing needs the application's lifespan),
    answered with JSON rather than an event stream.

    DNS-rebinding protection is left to the API: with keys, a browser page cannot make a caller of
    another site's key; without them, `LoopbackOnly` checks Host and Origin before this runs."""

    def __init__(self, max_body_bytes: int) -> None:
        self.server = build_server(_backend_of_request)
        self.max_body_bytes = max_body_bytes
        self.security = TransportSecuritySettings(enable_dns_rebinding_protection=False)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        manager = StreamableHTTPSessionManager(
            app=self.server,
            json_response=True,
            stateless=True,
            security_settings=self.security,
            max_request_body_size=self.max_body_bytes,
        )
        async with manager.run():
            await manager.handle_request(scope, receive, send)


async def serve_stdio(backend: MemoryBackend, *, version: str = "") -> None:
    """Serve the tools over this process's stdin and stdout until the client closes them."""
    server = build_server(lambda _ctx: backend, version=version)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())
