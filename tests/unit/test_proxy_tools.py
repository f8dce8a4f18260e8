"""The pieces of the proxy's recall tool loop that need no server: which tools each actor call offers,
how a reply's calls are sorted, and that every outcome of a tool becomes a tool message's content.
(The loop itself, through the `openai` package: tests/integration/test_proxy_recall_loop.py.)"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from om_api.proxy.tools import (
    InternalTool,
    InternalTools,
    answered_round,
    round_call,
    summed_usage,
)
from om_core.recall import RECALL_TOOL

WEATHER = {"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}
MESSAGES = [{"role": "user", "content": "hi"}]


def _tools(run: Any = lambda arguments: {"count": 0}) -> InternalTools:
    return InternalTools((InternalTool(RECALL_TOOL, run, input_errors=(ValueError,)),))


def _call(name: str, arguments: str = "{}", call_id: str | None = "c1") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def test_while_rounds_remain_recall_follows_the_callers_tools() -> None:
    call = {"model": "m", "messages": [], "tools": [WEATHER], "tool_choice": "auto"}
    sent = round_call(call, MESSAGES, _tools(), offer=True)
    assert [t["function"]["name"] for t in sent["tools"]] == ["weather", "recall"]
    assert sent["messages"] == MESSAGES and sent["tool_choice"] == "auto"
    assert call["tools"] == [WEATHER], "the request's call is not changed"


def test_the_final_call_keeps_only_the_callers_tools() -> None:
    call = {"model": "m", "messages": [], "tools": [WEATHER], "tool_choice": "required"}
    sent = round_call(call, MESSAGES, _tools(), offer=False)
    assert sent["tools"] == [WEATHER] and sent["tool_choice"] == "required"


def test_the_final_call_without_caller_tools_sends_no_tool_fields() -> None:
    call = {"model": "m", "messages": [], "tool_choice": "required", "parallel_tool_calls": True}
    sent = round_call(call, MESSAGES, _tools(), offer=False)
    assert not {"tools", "tool_choice", "parallel_tool_calls"} & set(sent)


def test_a_tool_choice_naming_recall_is_dropped_from_the_final_call() -> None:
    forced = {"type": "function", "function": {"name": "recall"}}
    call = {"model": "m", "messages": [], "tools": [WEATHER], "tool_choice": forced}
    assert "tool_choice" not in round_call(call, MESSAGES, _tools(), offer=False)
    assert round_call(call, MESSAGES, _tools(), offer=True)["tool_choice"] == forced


def test_without_internal_tools_the_call_is_the_callers() -> None:
    call = {"model": "m", "messages": [], "tools": [WEATHER]}
    assert round_call(call, MESSAGES, None, offer=True) == {**call, "messages": MESSAGES}


def test_calls_are_sorted_into_ours_and_the_callers_and_ours_get_an_id() -> None:
    ours, theirs = _tools().split(
        [_call("weather"), _call("recall", call_id=None), _call("recall", call_id="r")]
    )
    assert [c["function"]["name"] for c in theirs] == ["weather"]
    assert ours[0]["id"].startswith("call_") and ours[1]["id"] == "r"


def test_a_caller_tool_of_either_kind_named_recall_conflicts() -> None:
    custom = {"type": "custom", "custom": {"name": "recall"}}
    assert _tools().conflict([WEATHER, custom]) == (1, "recall")
    assert _tools().conflict([WEATHER]) is None


def test_every_outcome_is_a_tool_message_content() -> None:
    got: list[Mapping[str, Any]] = []

    def run(arguments: Mapping[str, Any]) -> dict[str, Any]:
        got.append(arguments)
        if arguments.get("page") == 99:
            raise ValueError("page must be between -50 and 50")
        if arguments.get("boom"):
            raise RuntimeError("database gone")
        return {"count": 1, "messages": "ü"}

    tools = _tools(run)
    assert json.loads(tools.call("recall", '{"cursor": "m1"}')) == {"count": 1, "messages": "ü"}
    assert json.loads(tools.call("recall", "")) == {"count": 1, "messages": "ü"}, "no arguments: {}"
    assert json.loads(tools.call("recall", '{"page": 99}')) == {"error": "page must be between -50 and 50"}
    assert "failed on the server" in json.loads(tools.call("recall", '{"boom": true}'))["error"]
    assert "one JSON object" in json.loads(tools.call("recall", "[1]"))["error"]
    assert "not valid JSON" in json.loads(tools.call("recall", "{"))["error"]
    assert "no tool named" in json.loads(tools.call("weather", "{}"))["error"]
    assert got == [{"cursor": "m1"}, {}, {"page": 99}, {"boom": True}]


def test_an_answered_round_pairs_each_call_with_its_result() -> None:
    calls = [_call("recall", call_id="a"), _call("recall", call_id="b")]
    assert answered_round("", calls, ["1", "2"]) == [
        {"role": "assistant", "content": None, "tool_calls": calls},
        {"role": "tool", "tool_call_id": "a", "content": "1"},
        {"role": "tool", "tool_call_id": "b", "content": "2"},
    ]


def test_usage_is_summed_and_missing_counts_are_zero() -> None:
    usages = [{"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}, None, {"prompt_tokens": 1}]
    assert summed_usage(usages) == {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 5}
