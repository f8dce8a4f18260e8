"""`om mcp`: om's memory tools over stdio, for desktop MCP clients (Claude Desktop and the like).

The client starts `om mcp` as a child process and speaks MCP on its stdin and stdout; every tool call is
an API call to the server at `OM_BASE_URL` with `OM_API_KEY` (`om_api.mcp.remote`), so this process holds
no database or model access of its own and the server decides what the key may see. Nothing but MCP
messages may go to stdout: diagnostics go to stderr.
"""

from __future__ import annotations

import asyncio
import sys
from importlib.metadata import version
from typing import Annotated

import typer

BASE_URL_HELP = "The om server's URL (OM_BASE_URL), e.g. http://127.0.0.1:8088"
API_KEY_HELP = "An API key of the tenant whose memory the tools read and write (OM_API_KEY)"


def mcp(
    base_url: Annotated[str, typer.Option("--base-url", envvar="OM_BASE_URL", help=BASE_URL_HELP)],
    api_key: Annotated[
        str | None, typer.Option("--api-key", envvar="OM_API_KEY", help=API_KEY_HELP, show_default=False)
    ] = None,
) -> None:
    """Serve om's memory tools over MCP on stdin/stdout (for desktop MCP clients), through a server."""
    if not base_url.startswith(("http://", "https://")):
        typer.echo(f"error: OM_BASE_URL must be an http(s) URL, not {base_url[:100]!r}", err=True)
        raise typer.Exit(2)
    asyncio.run(_serve(base_url, api_key))


async def _serve(base_url: str, api_key: str | None) -> None:
    from om_api.mcp.remote import RemoteBackend
    from om_api.mcp.serving import serve_stdio
    from om_client import AsyncOMClient

    print(f"om mcp: serving the memory tools of {base_url} on stdio", file=sys.stderr)
    async with AsyncOMClient(base_url, api_key) as client:
        await serve_stdio(RemoteBackend(client), version=version("om"))
