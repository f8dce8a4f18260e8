"""The framework adapters' message mappings (clients/openai-agents, clients/langgraph), checked against
the server's own models: what an adapter posts is a valid turn message, and what it gets back from the
server's chat-completions form (`om_api.openai_format.to_openai`, the function the turn answer uses) is
the conversation it posted, tool calls and their results included."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from om_api.openai_format import to_openai
from om_client.messages import SPEAKER_NAME_PATTERN
from om_client.models import TurnMessage
from om_langgraph import OMMiddleware
from om_langgraph import mapping as lg
from om_openai_agents import OMSession
from om_openai_agents import mapping as oa


def through_om(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the server answers for these turn messages once stored: its chat-completions form."""
    return to_openai([TurnMessage.model_validate(m).to_message() for m in messages])


AGENT_ITEMS: list[dict[str, Any]] = [
    {"role": "user", "content": "Where is order A7?"},
    {
        "type": "message",
        "role": "assistant",
        "id": "msg_1",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Let me look.", "annotations": []}],
    },
    {"type": "reasoning", "id": "rs_1", "summary": []},
    {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": '{"order_id": "A7"}'},
    {"type": "function_call", "call_id": "c2", "name": "eta", "arguments": '{"order_id": "A7"}'},
    {"type": "function_call_output", "call_id": "c1", "output": "shipped"},
    {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "Friday"}]},
    {"role": "assistant", "content": "It shipped and arrives Friday."},
]


def test_agent_items_become_valid_turn_messages_grouped_as_chat_apis_want() -> None:
    messages = oa.items_to_turn_messages(AGENT_ITEMS)
    assert [(m["role"], [p["type"] for p in m["parts"]]) for m in messages] == [
        ("user", ["text"]),
        ("assistant", ["text", "tool-invocation", "tool-invocation"]),  # the calls join the message
        ("tool", ["tool-invocation", "tool-invocation"]),  # the outputs, one tool message
        ("assistant", ["text"]),
    ]
    call, result = messages[1]["parts"][1], messages[2]["parts"][1]
    assert call == {
        "type": "tool-invocation",
        "tool_call_id": "c1",
        "tool_name": "lookup",
        "state": "call",
        "args": {"order_id": "A7"},
    }
    assert result["tool_name"] == "eta" and result["result"] == "Friday"  # named after its call
    for message in messages:
        TurnMessage.model_validate(message)


def test_agent_items_come_back_from_the_servers_context_as_they_went_in() -> None:
    back = oa.context_to_items(through_om(oa.items_to_turn_messages(AGENT_ITEMS)))
    assert back == [
        {"role": "user", "content": "Where is order A7?"},
        {"role": "assistant", "content": "Let me look."},
        {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": '{"order_id": "A7"}'},
        {"type": "function_call", "call_id": "c2", "name": "eta", "arguments": '{"order_id": "A7"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "shipped"},
        {"type": "function_call_output", "call_id": "c2", "output": "Friday"},
        {"role": "assistant", "content": "It shipped and arrives Friday."},
    ]


def test_agent_images_system_items_and_unknown_items() -> None:
    items: list[dict[str, Any]] = [
        {"role": "developer", "content": "Be brief."},
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "What is this?"},
                {"type": "input_image", "image_url": "https://example.com/cat.png", "detail": "auto"},
                {"type": "input_image", "file_id": "file-123"},  # a provider's file: no place in om
            ],
        },
        {"type": "web_search_call", "id": "ws_1", "status": "completed"},
        {"role": "user", "content": ""},
    ]
    messages = oa.items_to_turn_messages(items)
    assert messages == [
        {"role": "system", "parts": [{"type": "text", "text": "Be brief."}]},
        {
            "role": "user",
            "parts": [
                {"type": "text", "text": "What is this?"},
                {"type": "image", "url": "https://example.com/cat.png"},
            ],
        },
    ]
    back = oa.context_to_items(through_om(messages[1:]))
    assert back == [
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "What is this?"},
                {"type": "input_image", "image_url": "https://example.com/cat.png", "detail": "auto"},
            ],
        }
    ]


def test_a_limit_keeps_the_memory_and_the_latest_items() -> None:
    items = [{"role": "system", "content": "memory"}] + [
        {"role": "user", "content": str(i)} for i in range(5)
    ]
    assert oa.limit_items(items, None) == items
    assert oa.limit_items(items, 2) == [items[0], items[4], items[5]]
    assert oa.limit_items(items, 0) == [items[0]]


def test_langchain_messages_become_valid_turn_messages_with_their_ids() -> None:
    human_id = str(uuid.uuid4())
    messages = [
        HumanMessage("Where is order A7?", id=human_id),
        AIMessage(
            "Let me look.",
            id="lc_run--0f1e",
            tool_calls=[{"id": "c1", "name": "lookup", "args": {"order_id": "A7"}, "type": "tool_call"}],
        ),
        ToolMessage("shipped", tool_call_id="c1", id="bad id with spaces"),
        ToolMessage("timeout", tool_call_id="c2", name="eta", status="error"),
        AIMessage("It shipped."),
        SystemMessage("Be brief."),
        HumanMessage("And mine?", name="Alice"),
        HumanMessage("Mine too", name="Eve: admin"),
    ]
    posted = lg.to_turn_messages(messages)
    assert [m.get("name") for m in posted[-2:]] == ["Alice", None], "a speaker's name om can take is kept"
    assert f"^{lg._SPEAKER_RE.pattern}$" == SPEAKER_NAME_PATTERN, "the adapter's copy of om's rule"
    posted = posted[:-2]
    assert [m.get("id") for m in posted] == [human_id, "lc_run--0f1e", None, None, None, None]
    assert [m["role"] for m in posted] == ["user", "assistant", "tool", "tool", "assistant", "system"]
    assert posted[2]["parts"][0]["tool_name"] == "lookup"  # named after its call
    assert posted[3]["parts"][0] == {
        "type": "tool-invocation",
        "tool_call_id": "c2",
        "tool_name": "eta",
        "state": "output-error",
        "error_text": "timeout",
    }
    for message in posted:
        TurnMessage.model_validate(message)


def test_langchain_messages_come_back_from_the_servers_context() -> None:
    messages = [
        HumanMessage(
            content=[
                {"type": "text", "text": "Look:"},
                {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
            ]
        ),
        AIMessage("", tool_calls=[{"id": "c1", "name": "lookup", "args": {"q": 1}, "type": "tool_call"}]),
        ToolMessage("found", tool_call_id="c1"),
        AIMessage("Done."),
    ]
    context = [{"role": "system", "content": "<observations>"}, *through_om(lg.to_turn_messages(messages))]
    memory, history = lg.from_context(context)
    assert memory == ["<observations>"]
    assert [type(m).__name__ for m in history] == ["HumanMessage", "AIMessage", "ToolMessage", "AIMessage"]
    assert history[0].content == messages[0].content
    assert isinstance(history[1], AIMessage) and history[1].tool_calls == messages[1].tool_calls
    assert isinstance(history[2], ToolMessage) and (history[2].content, history[2].tool_call_id) == (
        "found",
        "c1",
    )
    assert history[3].content == "Done."


def test_only_what_follows_the_last_ai_message_is_new() -> None:
    first, reply, tool_result = HumanMessage("a"), AIMessage("b"), ToolMessage("c", tool_call_id="x")
    assert lg.new_messages([first]) == [first]
    assert lg.new_messages([first, reply]) == []
    assert lg.new_messages([first, reply, tool_result]) == [tool_result]


def test_memory_goes_after_the_agents_own_system_message() -> None:
    assert lg.with_memory(None, []) is None
    assert lg.with_memory(None, ["m1", "m2"]) == SystemMessage("m1\n\nm2")
    assert lg.with_memory(SystemMessage("Be brief."), ["m1"]) == SystemMessage("Be brief.\n\nm1")
    blocks = SystemMessage(content=[{"type": "text", "text": "Be brief."}])
    assert lg.with_memory(blocks, ["m1"]) == SystemMessage(
        content=[{"type": "text", "text": "Be brief."}, {"type": "text", "text": "m1"}]
    )


def test_an_adapter_without_a_server_address_says_how_to_give_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OM_BASE_URL", raising=False)
    with pytest.raises(ValueError, match="OM_BASE_URL"):
        OMSession("t1")
    with pytest.raises(ValueError, match="OM_BASE_URL"):
        OMMiddleware(thread_id="t1")._sync_client()
