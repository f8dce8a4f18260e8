"""The MCP server against a real `om` API process (Postgres, Redis, inline executor), driven by the MCP
SDK's own client in real sessions: over streamable HTTP at `/mcp` with an API key (the initialize
handshake desktop clients speak today, and the SDK's default negotiation), and through `om mcp` over stdio
pointed at the same server. Each session initializes, lists the tools and calls every one of them, and
what the tools answer is what the REST API holds for the key's tenant."""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from om_api.client import OMClient
from tests.support.api_server import REPO, ApiServer, api_server, new_id, om, tenant_key

__all__ = ["api_server", "om", "tenant_key"]  # fixtures used below

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

TOOLS = {
    "search_memory",
    "recall",
    "get_observations",
    "get_working_memory",
    "update_working_memory",
    "list_threads",
    "post_turn",
}
CODE = "ZX-55120-QP"
CONFIG = {"retrieval": True, "workingMemory": {"enabled": True}}


def http_session(server: ApiServer, key: str, *, mode: str = "auto") -> Client:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60)
    return Client(streamable_http_client(f"{server.base_url}/mcp", http_client=http), mode=mode)


def desktop_config() -> dict[str, Any]:
    """The `mcpServers` entry of the desktop configuration in docs/guide/mcp.md."""
    page = (REPO / "docs" / "guide" / "mcp.md").read_text()
    (block,) = re.findall(r"```json\n(.*?)```", page, re.DOTALL)
    entry: dict[str, Any] = json.loads(block)["mcpServers"]["om"]
    return entry


def stdio_session(server: ApiServer, key: str) -> Client:
    """`om mcp` started as the documented desktop configuration says, with this server and key."""
    entry = desktop_config()
    assert entry["command"] == "om" and entry["args"] == ["mcp"]
    env = {**entry["env"], "OM_BASE_URL": server.base_url, "OM_API_KEY": key}
    env["PYTHONPATH"] = os.environ.get("PYTHONPATH", str(REPO))
    # The venv's `om`, the executable `pip install` puts on the PATH.
    command = str(Path(sys.executable).parent / entry["command"])
    return Client(StdioServerParameters(command=command, args=entry["args"], env=env, cwd=REPO))


async def _eventually(call: Callable[[], Awaitable[Any]], ok: Callable[[Any], bool], what: str) -> Any:
    end = time.monotonic() + 60
    while True:
        result = await call()
        if ok(result):
            return result
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}: {result}")
        await anyio.sleep(0.1)


async def _use_every_tool(client: Client, thread: str, user: str) -> dict[str, Any]:
    """Initialize (on entering), list the tools, call each one; the structured answers by tool."""
    out: dict[str, Any] = {}
    async with client:
        out["server"] = client.server_info.name if client.server_info else None
        out["tools"] = {tool.name for tool in (await client.list_tools()).tools}

        async def call(name: str, arguments: dict[str, Any]) -> Any:
            result = await client.call_tool(name, arguments)
            assert not result.is_error, (name, result.content)
            return result.structured_content

        turn = {
            "thread_id": thread,
            "resource_id": user,
            "messages": [
                {"id": "m1", "role": "user", "text": f"My locker code is {CODE}, remember it."},
                {"id": "m2", "role": "assistant", "text": "Noted, I will remember your locker code."},
            ],
            "context": "messages",
        }
        out["post_turn"] = await call("post_turn", turn)
        out["list_threads"] = await call("list_threads", {"resource_id": user})
        out["get_observations"] = await call("get_observations", {"thread_id": thread})
        before = await call("get_working_memory", {"thread_id": thread})
        out["update_working_memory"] = await call(
            "update_working_memory",
            {"thread_id": thread, "content": "# Notes\n- prefers tea", "expected_version": before["version"]},
        )
        out["get_working_memory"] = await call("get_working_memory", {"thread_id": thread})
        out["search_memory"] = await _eventually(
            lambda: call("search_memory", {"resource_id": user, "query": CODE}),
            lambda found: found["count"] >= 1,
            "the thread to be indexed",
        )
        out["recall"] = await call("recall", {"thread_id": thread, "cursor": "m1", "limit": 5, "page": 1})
        stale = await client.call_tool(
            "update_working_memory", {"thread_id": thread, "content": "lost update", "expected_version": 0}
        )
        out["stale_write"] = stale.content[0].text if stale.is_error else None
    return out


def _check(out: dict[str, Any], om: OMClient, thread: str, user: str) -> None:
    assert out["server"] == "om"
    assert out["tools"] == TOOLS
    posted = out["post_turn"]
    assert posted["thread_id"] == thread and posted["resource_id"] == user
    assert [m["id"] for m in posted["context"]["messages"]] == ["m1", "m2"]
    assert [t["thread_id"] for t in out["list_threads"]["items"]] == [thread]
    assert out["get_observations"]["thread_id"] == thread
    written = out["update_working_memory"]
    assert written["content"] == "# Notes\n- prefers tea" and written["version"] == 1
    assert out["get_working_memory"]["version"] == 1
    hits = out["search_memory"]["results"]
    assert hits[0]["thread_id"] == thread and CODE in hits[0]["text"]
    assert "[m2]" in out["recall"]["messages"]
    assert out["stale_write"] is not None and "version_conflict" in out["stale_write"]
    # What the tools wrote is what the REST API reads for the same key.
    assert sorted(m.id for m in om.messages(thread).items) == ["m1", "m2"]


def test_streamable_http_session_calls_every_tool(
    api_server: ApiServer, tenant_key: str, om: OMClient
) -> None:
    thread, user = new_id("t"), new_id("user")
    om.set_resource_config(user, CONFIG)
    om.set_config(thread, CONFIG, resource_id=user)
    out = anyio.run(_use_every_tool, http_session(api_server, tenant_key, mode="legacy"), thread, user)
    _check(out, om, thread, user)


def test_the_sdk_default_negotiation_works_too(api_server: ApiServer, tenant_key: str, om: OMClient) -> None:
    thread = new_id("t")
    om.post_turn(thread, [{"id": "m1", "role": "user", "text": "hello"}])

    async def session() -> tuple[str, set[str], Any]:
        async with http_session(api_server, tenant_key) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            listed = await client.call_tool("list_threads", {})
            return client.protocol_version, names, listed.structured_content

    version, names, listed = anyio.run(session)
    assert names == TOOLS and version
    assert [t["thread_id"] for t in listed["items"]] == [thread], "the call ran as the key's tenant"


def test_om_mcp_over_stdio_calls_every_tool_through_the_server(
    api_server: ApiServer, tenant_key: str, om: OMClient
) -> None:
    thread, user = new_id("t"), new_id("user")
    om.set_resource_config(user, CONFIG)
    om.set_config(thread, CONFIG, resource_id=user)
    out = anyio.run(_use_every_tool, stdio_session(api_server, tenant_key), thread, user)
    _check(out, om, thread, user)
