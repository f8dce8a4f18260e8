"""The MCP tools (om_api/mcp/tools.py, serving.py) without a server: every tool's arguments are bounded in
its schema and checked before a backend sees them, a refusal says what to fix, and the SDK's own client,
connected in-process to the server `serving.build_server` makes, lists the tools and gets each call's
answer from the backend as structured content (or an error result the model can read)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
import typer.main
from mcp import Client
from typer.testing import CliRunner

from om_api.mcp import tools
from om_api.mcp.serving import build_server
from om_api.mcp.tools import (
    MAX_QUERY_CHARS,
    MAX_TURN_MESSAGES,
    TOOLS,
    ListThreadsArgs,
    ObservationsArgs,
    PostTurnArgs,
    SearchArgs,
    ThreadArgs,
    ToolFailure,
    UpdateWorkingMemoryArgs,
    parse_arguments,
)
from om_app import cli

EXPECTED = {
    "search_memory",
    "recall",
    "get_observations",
    "get_working_memory",
    "update_working_memory",
    "list_threads",
    "post_turn",
}


class RecordingBackend:
    """Answers every tool with what it was called with; `fail` makes the next call a refusal."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.fail: str | None = None

    def _answer(self, name: str, args: Any) -> dict[str, Any]:
        self.calls.append((name, args))
        if self.fail is not None:
            raise ToolFailure(self.fail)
        return {"tool": name}

    async def search(self, args: SearchArgs) -> dict[str, Any]:
        return self._answer("search", args)

    async def recall(self, thread_id: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return self._answer("recall", (thread_id, arguments))

    async def observations(self, args: ObservationsArgs) -> dict[str, Any]:
        return self._answer("observations", args)

    async def get_working_memory(self, args: ThreadArgs) -> dict[str, Any]:
        return self._answer("get_working_memory", args)

    async def update_working_memory(self, args: UpdateWorkingMemoryArgs) -> dict[str, Any]:
        return self._answer("update_working_memory", args)

    async def list_threads(self, args: ListThreadsArgs) -> dict[str, Any]:
        return self._answer("list_threads", args)

    async def post_turn(self, args: PostTurnArgs) -> dict[str, Any]:
        return self._answer("post_turn", args)


def _unbounded(schema: Any, defs: dict[str, Any], path: str = "") -> list[str]:
    """Every string without maxLength (enums and patterns with a length cap aside), array without
    maxItems, or object open to any property, anywhere in the schema."""
    found: list[str] = []
    if isinstance(schema, dict):
        if "$ref" in schema:
            return _unbounded(defs[schema["$ref"].rsplit("/", 1)[-1]], defs, path)
        kind = schema.get("type")
        if kind == "string" and "enum" not in schema and "maxLength" not in schema:
            found.append(path or "<root>")
        if kind == "array" and "maxItems" not in schema:
            found.append(path or "<root>")
        if kind == "integer" and "maximum" not in schema:
            found.append(path or "<root>")
        for key in ("anyOf", "oneOf", "allOf"):
            for index, sub in enumerate(schema.get(key, [])):
                found += _unbounded(sub, defs, f"{path}|{index}")
        for name, sub in schema.get("properties", {}).items():
            found += _unbounded(sub, defs, f"{path}.{name}")
        if isinstance(schema.get("items"), dict):
            found += _unbounded(schema["items"], defs, f"{path}[]")
    return found


def test_the_seven_tools_have_bounded_schemas_that_refuse_extra_fields() -> None:
    assert {tool.name for tool in TOOLS} == EXPECTED
    for tool in TOOLS:
        schema = tool.input_schema()
        assert schema["type"] == "object"
        assert schema.get("additionalProperties") is False, tool.name
        assert _unbounded(schema, schema.get("$defs", {})) == [], tool.name


@pytest.mark.parametrize(
    ("name", "arguments", "fragment"),
    [
        ("search_memory", {"resource_id": "u", "query": "x" * (MAX_QUERY_CHARS + 1)}, "query"),
        ("search_memory", {"resource_id": "u", "query": "code", "limit": 51}, "limit"),
        ("search_memory", {"resource_id": "../etc", "query": "code"}, "resource_id"),
        ("search_memory", {"resource_id": "u", "query": "code", "host": "evil.example"}, "host"),
        ("get_observations", {"thread_id": "t", "history_limit": 10_000}, "history_limit"),
        ("get_working_memory", {}, "thread_id"),
        ("update_working_memory", {"thread_id": "t", "content": "x" * 100_001}, "content"),
        ("list_threads", {"limit": 101}, "limit"),
        ("list_threads", {"cursor": "not a cursor!"}, "cursor"),
        (
            "post_turn",
            {"thread_id": "t", "messages": [{"role": "user", "text": "hi"}] * (MAX_TURN_MESSAGES + 1)},
            "messages",
        ),
        ("post_turn", {"thread_id": "t", "messages": [{"role": "tool", "text": "hi"}]}, "role"),
        ("post_turn", {"thread_id": "t", "messages": []}, "messages"),
        ("recall", {"thread_id": "t", "query": "q" * 2_001}, "query"),
        ("recall", {"thread_id": "t", "limit": 10**9}, "limit"),
        ("recall", {"thread_id": "t", "mode": "everything"}, "mode"),
        ("recall", {"thread_id": "t", "import": "os"}, "import"),
        ("no_such_tool", {}, "unknown tool"),
    ],
)
def test_bad_arguments_are_refused_naming_what_to_fix(
    name: str, arguments: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(ToolFailure) as refused:
        parse_arguments(name, arguments)
    assert fragment in str(refused.value)


def test_recall_passes_its_own_arguments_through_and_nothing_else() -> None:
    backend = RecordingBackend()
    answer = anyio.run(
        tools.call_tool, backend, "recall", {"thread_id": "t-1", "mode": "messages", "limit": 5, "page": -1}
    )
    assert answer == {"tool": "recall"}
    assert backend.calls == [("recall", ("t-1", {"mode": "messages", "limit": 5, "page": -1}))]


async def _session(backend: RecordingBackend) -> tuple[list[str], list[Any]]:
    calls = {
        "search_memory": {"resource_id": "user-1", "query": "locker code"},
        "recall": {"thread_id": "t-1"},
        "get_observations": {"thread_id": "t-1"},
        "get_working_memory": {"thread_id": "t-1"},
        "update_working_memory": {"thread_id": "t-1", "content": "# Profile", "expected_version": 0},
        "list_threads": {},
        "post_turn": {"thread_id": "t-1", "messages": [{"role": "user", "text": "hello"}]},
    }
    async with Client(build_server(lambda _ctx: backend)) as client:
        listed = await client.list_tools()
        results = [await client.call_tool(name, arguments) for name, arguments in calls.items()]
        backend.fail = "thread_not_found: thread 't-1' does not exist for this API key"
        results.append(await client.call_tool("get_observations", {"thread_id": "t-1"}))
        results.append(await client.call_tool("list_threads", {"limit": 0}))
    return [tool.name for tool in listed.tools], results


def test_the_sdk_client_lists_the_tools_and_calls_each_in_process() -> None:
    backend = RecordingBackend()
    names, results = anyio.run(_session, backend)
    assert set(names) == EXPECTED
    answered = results[:7]
    assert all(not r.is_error for r in answered)
    assert [r.structured_content for r in answered] == [
        {"tool": t}
        for t in (
            "search",
            "recall",
            "observations",
            "get_working_memory",
            "update_working_memory",
            "list_threads",
            "post_turn",
        )
    ]
    assert answered[0].content[0].text == '{"tool":"search"}'
    refused, invalid = results[7], results[8]
    assert refused.is_error and "does not exist" in refused.content[0].text
    # Invalid arguments never reach the backend: 8 calls recorded, not 9.
    assert invalid.is_error and "limit" in invalid.content[0].text
    assert len(backend.calls) == 8


def test_the_api_starts_without_loading_the_sdk(tmp_path: Path) -> None:
    """`create_app` routes `/mcp` without importing the SDK: it loads on the first `/mcp` request."""
    script = (
        "import sys\n"
        "from om_api.app import create_app\n"
        "from om_api.settings import ApiSettings\n"
        f"settings = ApiSettings(database_url='sqlite:///{tmp_path}/om.db', auth='none')\n"
        "create_app(settings)\n"
        "print(sorted(m for m in sys.modules if m == 'mcp' or m.startswith(('mcp.', 'mcp_types'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_om_mcp_takes_the_server_and_key_as_options_or_from_the_environment() -> None:
    command = typer.main.get_command(cli.app).commands["mcp"]  # type: ignore[attr-defined]
    given = command.make_context("mcp", ["--base-url", "http://127.0.0.1:8088", "--api-key", "omk_x"])
    assert given.params == {"base_url": "http://127.0.0.1:8088", "api_key": "omk_x"}
    env = {"OM_BASE_URL": "http://om.internal:8088", "OM_API_KEY": "omk_y"}
    result = CliRunner().invoke(cli.app, ["mcp", "--base-url", "ftp://x"], env=env)
    assert result.exit_code == 2 and "http(s) URL" in result.output
    params = [p for p in command.params if p.name in ("base_url", "api_key")]
    assert {p.name: p.envvar for p in params} == {"base_url": "OM_BASE_URL", "api_key": "OM_API_KEY"}
