"""The OpenAI-compatible proxy against a real server, driven by the `openai` package: a chat backend that
only changes its base URL gets memory applied, its replies stored once, streaming included. The actor is
`om-actor/echo` behind litellm (tests/support/fake_actor.py), which logs the context it was given."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionChunk

from om_api.client import OMClient
from om_api.openai_format import from_openai, split_instructions, to_openai
from tests.support.api_server import ApiServer, api_server, new_id, om, tenant_key
from tests.support.conversation import generate

__all__ = ["api_server", "om", "tenant_key"]  # fixtures used below

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

CYCLE = {"observation": {"messageTokens": 1500}, "reflection": {"observationTokens": 600}}
INSTRUCTIONS = {"role": "system", "content": "You are a friendly assistant. Answer briefly."}


def actor_calls(server: ApiServer) -> list[list[dict[str, Any]]]:
    path = server.log_path.parent / "actor.jsonl"
    lines = Path(path).read_text().splitlines() if path.exists() else []
    return [json.loads(line)["messages"] for line in lines]


def stored_messages(client: OMClient, thread_id: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    before: int | None = None
    while True:
        page = client.messages(thread_id, limit=50, before_seq=before)
        out = [(m.role, "".join(p.text or "" for p in m.parts)) for m in page.messages] + out
        if page.next_before_seq is None:
            return out
        before = page.next_before_seq


def test_an_openai_client_gets_memory_and_its_replies_are_stored_once(
    om: OMClient, api_server: ApiServer, tenant_key: str
) -> None:
    thread, resource = new_id("proxy"), new_id("user")
    om.set_config(thread, CYCLE, resource_id=resource)
    chat = openai.OpenAI(
        base_url=api_server.base_url + "/v1",
        api_key=tenant_key,
        default_headers={"X-OM-Thread-Id": thread, "X-OM-Resource-Id": resource},
    )
    user_texts = [
        m.parts[0].text or "" for m in generate(seed=8, target_tokens=9_000).turns() if m.role == "user"
    ]
    history: list[dict[str, Any]] = [INSTRUCTIONS]
    calls_before = len(actor_calls(api_server))
    for text in user_texts:
        history.append({"role": "user", "content": text})
        completion = chat.chat.completions.create(model="om-actor/echo", messages=history)  # type: ignore[arg-type]
        reply = completion.choices[0].message.content or ""
        assert reply.startswith("Noted: " + " ".join(text.split()[:3]))
        assert completion.model == "om-actor/echo" and completion.usage is not None
        history.append({"role": "assistant", "content": reply})

    stored = stored_messages(om, thread)
    assert stored == [(m["role"], m["content"]) for m in history[1:]], "each message stored once, in order"

    calls = actor_calls(api_server)[calls_before:]
    assert len(calls) == len(user_texts)
    last = calls[-1]
    assert last[0] == INSTRUCTIONS, "the caller's instructions come first"
    assert any(m["role"] == "system" and "<observations>" in m["content"] for m in last), "memory is applied"
    chat_messages = [m for m in last if m["role"] != "system"]
    assert len(chat_messages) < len(history) - 1, "observed messages are replaced by the observations"
    assert chat_messages[-1] == history[-2], "the newest user message is sent as written"
    assert "memory=yes" in history[-1]["content"]
    assert "memory=no" in history[2]["content"]

    history.append({"role": "user", "content": "Please stream the next answer."})
    stream = chat.chat.completions.create(model="om-actor/echo", messages=history, stream=True)  # type: ignore[arg-type]
    streamed = "".join(
        chunk.choices[0].delta.content or ""
        for chunk in stream
        if isinstance(chunk, ChatCompletionChunk) and chunk.choices
    )
    assert streamed.startswith("Noted: Please stream the next answer.")
    assert stored_messages(om, thread)[-2:] == [
        ("user", "Please stream the next answer."),
        ("assistant", streamed),
    ]


def test_the_thread_can_come_from_metadata(om: OMClient, api_server: ApiServer, tenant_key: str) -> None:
    thread, resource = new_id("meta"), new_id("door-user")
    chat = openai.OpenAI(base_url=api_server.base_url + "/v1", api_key=tenant_key)
    chat.chat.completions.create(
        model="om-actor/echo",
        messages=[{"role": "user", "content": "remember the blue door"}],
        metadata={"thread_id": thread, "resource_id": resource},
    )
    assert stored_messages(om, thread)[0] == ("user", "remember the blue door")
    assert om.threads(resource).threads[0].thread_id == thread


@pytest.mark.parametrize(
    ("headers", "model", "field"),
    [
        ({}, "om-actor/echo", "metadata.thread_id"),
        ({"X-OM-Thread-Id": "t-1"}, "openai/gpt-4o", "model"),
    ],
)
def test_the_proxy_says_what_to_fix(
    api_server: ApiServer, tenant_key: str, headers: dict[str, str], model: str, field: str
) -> None:
    chat = openai.OpenAI(base_url=api_server.base_url + "/v1", api_key=tenant_key, default_headers=headers)
    with pytest.raises(openai.UnprocessableEntityError) as refused:
        chat.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}])
    assert refused.value.body is not None
    assert refused.value.response.json()["error"]["field"] == field


def test_the_proxy_needs_an_om_key(api_server: ApiServer) -> None:
    chat = openai.OpenAI(base_url=api_server.base_url + "/v1", api_key="sk-not-an-om-key", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        chat.chat.completions.create(
            model="om-actor/echo",
            messages=[{"role": "user", "content": "hi"}],
            extra_headers={"X-OM-Thread-Id": "t-1"},
        )


# ------------------------------------------------------------------- the format conversion, without a server

CONVERSATION: list[dict[str, Any]] = [
    {"role": "user", "content": "What is the weather in Porto?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call-1",
                "type": "function",
                "function": {"name": "weather", "arguments": '{"city": "Porto"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call-1", "content": "18C and sunny"},
    {"role": "assistant", "content": "It is 18C and sunny."},
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "And this?"},
            {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
        ],
    },
]


def test_a_resent_history_maps_to_the_same_ids_and_a_new_message_to_a_new_one() -> None:
    now = datetime.now(UTC)
    first = from_openai(CONVERSATION[:3], created_at=now)
    again = from_openai(CONVERSATION, created_at=now)
    assert [m.id for m in again[:3]] == [m.id for m in first]
    assert len({m.id for m in again}) == len(again)
    same_text_elsewhere = from_openai(
        [{"role": "user", "content": "hi"}, {"role": "user", "content": "hi"}], created_at=now
    )
    assert same_text_elsewhere[0].id != same_text_elsewhere[1].id, "ids follow the conversation, not the text"


def test_messages_round_trip_through_the_stored_model() -> None:
    stored = from_openai(CONVERSATION, created_at=datetime.now(UTC))
    assert [m.role for m in stored] == ["user", "assistant", "tool", "assistant", "user"]
    assert stored[1].parts[0].args == {"city": "Porto"} and stored[2].parts[0].tool_name == "weather"
    back = to_openai(stored)
    assert back[0] == CONVERSATION[0]
    assert back[1]["tool_calls"][0]["function"] == {"name": "weather", "arguments": '{"city": "Porto"}'}
    assert back[2] == {"role": "tool", "tool_call_id": "call-1", "content": "18C and sunny"}
    assert back[3] == CONVERSATION[3]
    assert back[4]["content"][1] == {"type": "image_url", "image_url": {"url": "https://x/y.png"}}


def test_a_tool_result_without_its_call_keeps_a_call_rebuilt_from_it() -> None:
    """Chat APIs refuse a tool message that answers no call, but dropping it would hide the result from
    the actor: the call is rebuilt from what the result holds (id and tool name)."""
    stored = from_openai(CONVERSATION, created_at=datetime.now(UTC))
    sent = to_openai(stored[2:])
    assert [m["role"] for m in sent] == ["assistant", "tool", "assistant", "user"]
    assert sent[0]["tool_calls"][0]["id"] == "call-1"
    assert sent[0]["tool_calls"][0]["function"]["name"] == "weather"
    assert sent[1] == {"role": "tool", "tool_call_id": "call-1", "content": "18C and sunny"}


def test_instructions_are_split_from_the_conversation() -> None:
    instructions, conversation = split_instructions(
        [
            {"role": "system", "content": "be brief"},
            {"role": "developer", "content": "no emoji"},
            *CONVERSATION,
        ]
    )
    assert [m["role"] for m in instructions] == ["system", "developer"]
    assert conversation == CONVERSATION
