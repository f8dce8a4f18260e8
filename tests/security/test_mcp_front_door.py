"""The MCP endpoint's front door (om_api/mcp/endpoint.py): `/mcp` is behind the same key as `/v1/`.

A request without a key, or with an unknown one, is a 401 before the MCP SDK sees it; a key's session
sees only its tenant's memory through every tool (another tenant's thread and resource ids answer "not
found" and change nothing); arguments past their bounds are refused with a message naming the argument,
and a body past `OM_MAX_REQUEST_BYTES` with a 413; and `/mcp` requests draw from the tenant's rate limit.
"""

from __future__ import annotations

import json
import traceback
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from sqlalchemy import Engine
from starlette.testclient import TestClient

from om_api.app import create_app
from om_api.client import OMClient
from om_api.settings import ApiSettings
from om_core.store.db import make_engine
from om_core.store.migrate import upgrade
from om_core.tenancy import access
from tests.support.api_server import ApiServer, api_server, new_id, om, tenant_key

__all__ = ["api_server", "om", "tenant_key"]  # fixtures used below

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

SECRET = "the vault code is 80417"
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
LIST_TOOLS = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}


def _session(server: ApiServer, key: str) -> Client:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60)
    return Client(streamable_http_client(f"{server.base_url}/mcp", http_client=http), mode="legacy")


@pytest.fixture
def victim(om: OMClient) -> dict[str, str]:
    """Tenant A's thread, with a secret in its messages and its working memory, retrieval on."""
    thread, user = new_id("t"), new_id("user")
    config = {"retrieval": True, "workingMemory": {"enabled": True}}
    om.set_resource_config(user, config)
    om.set_config(thread, config, resource_id=user)
    om.post_turn(thread, [{"id": "s1", "role": "user", "text": f"Remember: {SECRET}."}], resource_id=user)
    om._request("PUT", f"/v1/threads/{thread}/working-memory", json={"content": f"# Notes\n- {SECRET}"})
    return {"thread": thread, "user": user}


def test_no_key_or_an_unknown_key_is_401_before_any_tool(api_server: ApiServer) -> None:
    url = f"{api_server.base_url}/mcp"
    for headers in ({}, {"Authorization": "Bearer omk_000000000000_" + "x" * 40}, {"X-API-Key": "nope"}):
        for method in ("POST", "GET", "DELETE"):
            body = json.dumps(LIST_TOOLS) if method == "POST" else None
            response = httpx.request(
                method, url, headers={**MCP_HEADERS, **headers}, content=body, timeout=30
            )
            assert response.status_code == 401, (method, headers, response.text)
            assert response.headers["WWW-Authenticate"] == "Bearer"
            assert response.json()["error"]["code"] == "unauthorized"
            assert "om keys create" in response.json()["error"]["message"]

    statuses: list[int] = []

    async def record(response: httpx2.Response) -> None:
        statuses.append(response.status_code)

    async def connect_without_key() -> str:
        http = httpx2.AsyncClient(timeout=30, event_hooks={"response": [record]})
        try:
            async with Client(streamable_http_client(url, http_client=http), mode="legacy") as client:
                await client.list_tools()
        except Exception as exc:  # the SDK's own error, inside its task groups' exception groups
            return "".join(traceback.format_exception(exc))
        return "connected"

    # The SDK's client gets no session: its first request is answered 401, and nothing else is.
    assert "MCPError" in anyio.run(connect_without_key)
    assert statuses and set(statuses) == {401}


async def _probe_as_other(client: Client, thread: str, user: str, own_thread: str) -> dict[str, Any]:
    calls: dict[str, dict[str, Any]] = {
        "search_memory": {"resource_id": user, "query": "vault code"},
        "search_in_thread": {"resource_id": user, "thread_id": thread, "query": "vault code"},
        "recall": {"thread_id": thread},
        "recall_threads": {"thread_id": thread, "mode": "threads"},
        "get_observations": {"thread_id": thread, "history_limit": 5},
        "get_working_memory": {"thread_id": thread},
        "update_working_memory": {"thread_id": thread, "content": "# Notes\n- overwritten"},
        "list_threads_of_resource": {"resource_id": user},
        # From its own thread, reading the other tenant's thread by id.
        "recall_cross": {"thread_id": own_thread, "threadId": thread},
    }
    tool_of = {
        "search_in_thread": "search_memory",
        "recall_threads": "recall",
        "list_threads_of_resource": "list_threads",
        "recall_cross": "recall",
    }
    out: dict[str, Any] = {}
    async with client:
        await client.call_tool(
            "post_turn",
            {
                "thread_id": own_thread,
                "resource_id": f"{own_thread}-user",
                "messages": [{"id": "o1", "role": "user", "text": "my own thread"}],
            },
        )
        for label, arguments in calls.items():
            result = await client.call_tool(tool_of.get(label, label), arguments)
            out[label] = (result.is_error, result.content[0].text if result.content else "")
        listed = await client.call_tool("list_threads", {})
        out["list_threads"] = listed.structured_content
        # Ids are each tenant's own: posting under the other tenant's ids makes a thread of its own.
        posted = await client.call_tool(
            "post_turn",
            {
                "thread_id": thread,
                "resource_id": user,
                "messages": [{"id": "x1", "role": "user", "text": "injected"}],
                "context": "messages",
            },
        )
        out["post_turn"] = posted.structured_content
    return out


def test_another_tenant_sees_and_changes_nothing_through_any_tool(
    api_server: ApiServer, om: OMClient, victim: dict[str, str], pg_engine: Engine
) -> None:
    other_key = access.create_key(pg_engine, f"intruder-{uuid.uuid4().hex[:8]}", "test").secret
    own = new_id("mine")
    # The intruder's own thread, whose recall reads across its own resource.
    with OMClient(api_server.base_url, other_key) as intruder:
        intruder.set_config(own, {"retrieval": {"scope": "resource"}}, resource_id=f"{own}-user")
    out = anyio.run(_probe_as_other, _session(api_server, other_key), victim["thread"], victim["user"], own)

    for label, answer in out.items():
        if label in ("list_threads", "post_turn"):
            continue
        is_error, text = answer
        assert is_error, (label, text)
        assert "not_found" in text or "does not exist" in text, (label, text)
        assert SECRET not in text and "80417" not in text, label
    assert [t["thread_id"] for t in out["list_threads"]["items"]] == [own]
    context = out["post_turn"]["context"]
    assert [m["id"] for m in context["messages"]] == ["x1"] and SECRET not in json.dumps(out["post_turn"])

    # Nothing of tenant A changed: its messages and its working memory are as it left them.
    assert [m.id for m in om.messages(victim["thread"]).items] == ["s1"]
    memory = om._request("GET", f"/v1/threads/{victim['thread']}/working-memory")
    assert memory["content"] == f"# Notes\n- {SECRET}" and memory["version"] == 1


async def _oversized(client: Client) -> dict[str, str]:
    calls = {
        "query": ("search_memory", {"resource_id": "u", "query": "x" * 2_001}),
        "messages": (
            "post_turn",
            {"thread_id": "t", "messages": [{"role": "user", "text": "hi"}] * 21},
        ),
        "text": ("post_turn", {"thread_id": "t", "messages": [{"role": "user", "text": "x" * 100_001}]}),
        "content": ("update_working_memory", {"thread_id": "t", "content": "x" * 100_001}),
        "history_limit": ("get_observations", {"thread_id": "t", "history_limit": 1_000_000}),
        "thread_id": ("get_working_memory", {"thread_id": "t" * 256}),
        "recall": ("recall", {"thread_id": "t", "cursor": "c" * 2_001}),
    }
    out: dict[str, str] = {}
    async with client:
        for label, (tool, arguments) in calls.items():
            result = await client.call_tool(tool, arguments)
            assert result.is_error, label
            out[label] = result.content[0].text
    return out


def test_oversized_arguments_are_refused_naming_the_argument(api_server: ApiServer, tenant_key: str) -> None:
    refused = anyio.run(_oversized, _session(api_server, tenant_key))
    for label, text in refused.items():
        fragment = "cursor" if label == "recall" else label
        assert text.startswith("invalid arguments: ") and fragment in text, (label, text)

    # A body past the server's limit never reaches the SDK.
    big = {**LIST_TOOLS, "params": {"pad": "x" * 8_100_000}}
    response = httpx.post(
        f"{api_server.base_url}/mcp",
        headers={**MCP_HEADERS, "Authorization": f"Bearer {tenant_key}"},
        content=json.dumps(big),
        timeout=60,
    )
    assert response.status_code == 413 and "OM_MAX_REQUEST_BYTES" in response.text


@pytest.fixture
def limited(postgres_url: str, pg_engine: Engine) -> Iterator[TestClient]:
    settings = ApiSettings(
        database_url=postgres_url,
        auth="keys",
        executor="inline",
        model="om-local/extractive",
        tenant_rate_limit=0.2,
        tenant_rate_burst=3,
    )
    with TestClient(create_app(settings)) as client:
        yield client


def test_mcp_requests_draw_from_the_tenants_rate_limit(limited: TestClient, pg_engine: Engine) -> None:
    key = access.create_key(pg_engine, f"burst-{uuid.uuid4().hex[:8]}", "test").secret
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {key}"}
    statuses = [limited.post("/mcp", headers=headers, json=LIST_TOOLS).status_code for _ in range(5)]
    assert statuses[:3] == [200, 200, 200] and statuses[-1] == 429, statuses
    listed = limited.post("/mcp", headers={**MCP_HEADERS, "Authorization": f"Bearer {key}"}, json=LIST_TOOLS)
    assert listed.status_code == 429 and listed.json()["error"]["code"] == "rate_limited"
    # `/v1/` shares the bucket: the same tenant is refused there too.
    assert limited.get("/v1/usage", headers={"Authorization": f"Bearer {key}"}).status_code == 429


@pytest.fixture
def local_api(tmp_path: Path) -> Iterator[TestClient]:
    """The API as `om up` runs it: no keys, loopback names only."""
    url = f"sqlite:///{tmp_path / 'om.db'}"
    engine = make_engine(url)
    upgrade(engine)
    engine.dispose()
    settings = ApiSettings(database_url=url, auth="none", model="om-local/extractive")
    with TestClient(create_app(settings), base_url="http://localhost") as client:
        yield client


def test_without_keys_mcp_answers_loopback_names_only(local_api: TestClient) -> None:
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {
            "name": "post_turn",
            "arguments": {"thread_id": "local", "messages": [{"id": "m1", "role": "user", "text": "hi"}]},
        },
    }
    for host in ("rebind.attacker.example:8088", "192.168.1.20:8088"):
        refused = local_api.post("/mcp", headers={**MCP_HEADERS, "Host": host}, json=call)
        assert refused.status_code == 421 and refused.json()["error"]["code"] == "misdirected_request"
    cross_site = {**MCP_HEADERS, "Host": "127.0.0.1:8088", "Origin": "http://attacker.example"}
    assert local_api.post("/mcp", headers=cross_site, json=call).status_code == 403
    assert local_api.get("/v1/threads/local/messages", headers={"Host": "127.0.0.1:8088"}).status_code == 404

    answered = local_api.post("/mcp", headers={**MCP_HEADERS, "Host": "127.0.0.1:8088"}, json=call)
    assert answered.status_code == 200, answered.text
    assert answered.json()["result"]["structuredContent"]["thread_id"] == "local"
    stored = local_api.get("/v1/threads/local/messages", headers={"Host": "127.0.0.1:8088"})
    assert [m["id"] for m in stored.json()["items"]] == ["m1"]
