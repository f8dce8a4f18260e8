"""`OMSession` (clients/openai-agents) under the Agents SDK's own runner, against a real om server: the
runner's history is om's context, what a run adds is stored in om, a tool call survives the round trip,
om's observations lead the history once made, and a tenant's session never reaches another's thread.
The model is scripted (`scripted_agents_model`); the runner, the session protocol and om are real."""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from agents import Agent, Runner, function_tool, set_tracing_disabled

from om_client import AsyncOMClient, OMClient
from om_openai_agents import OMSession, OMSessionUnsupported
from tests.adapters.scripted_agents_model import ScriptedModel, call, say
from tests.support.api_server import ApiServer, new_id

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.timeout(120)]

set_tracing_disabled(True)  # the SDK's traces go to OpenAI's servers; none are reachable here

EXAMPLE = Path(__file__).resolve().parents[2] / "clients" / "openai-agents" / "examples" / "chat.py"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("om_openai_agents_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(stack: ApiServer, key: str, scenario: Callable[[AsyncOMClient], Awaitable[None]]) -> None:
    """Run an async scenario with its own async client (the suite has no async test plugin)."""

    async def main() -> None:
        async with AsyncOMClient(stack.base_url, key, timeout=60) as client:
            await scenario(client)

    asyncio.run(main())


def stored(om: OMClient, thread_id: str) -> list[tuple[str, list[dict[str, Any]]]]:
    page = om.messages(thread_id, limit=100)
    return [
        (m.role, [p.model_dump(exclude_none=True, exclude={"seq", "created_at"}) for p in m.parts])
        for m in sorted(page.messages, key=lambda m: m.max_seq or 0)
    ]


def texts(items: list[dict[str, Any]]) -> list[tuple[Any, Any]]:
    """(role or item type, content or output) of each item."""
    return [(item.get("role", item.get("type")), item.get("content", item.get("output"))) for item in items]


def test_the_example_chat_remembers_through_om(
    stack: ApiServer, key: str, om: OMClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OM_BASE_URL", stack.base_url)
    monkeypatch.setenv("OM_API_KEY", key)
    model = ScriptedModel(say("Nice to meet you, Dana."), say("You are Dana."))
    thread = new_id("agents")
    replies = asyncio.run(
        load_example().chat(
            ["Hi, I'm Dana", "What is my name?"], thread_id=thread, user_id=new_id("user"), model=model
        )
    )
    assert replies == ["Nice to meet you, Dana.", "You are Dana."]
    assert texts(model.inputs[0]) == [("user", "Hi, I'm Dana")]
    assert texts(model.inputs[1]) == [
        ("user", "Hi, I'm Dana"),
        ("assistant", "Nice to meet you, Dana."),
        ("user", "What is my name?"),
    ]
    assert [(role, parts[0]["text"]) for role, parts in stored(om, thread)] == [
        ("user", "Hi, I'm Dana"),
        ("assistant", "Nice to meet you, Dana."),
        ("user", "What is my name?"),
        ("assistant", "You are Dana."),
    ]


@function_tool
def lookup_order(order_id: str) -> str:
    """The shipping state of an order."""
    return f"order {order_id}: shipped"


def test_a_tool_call_and_its_output_are_stored_and_come_back(
    stack: ApiServer, key: str, om: OMClient
) -> None:
    thread = new_id("agents")
    model = ScriptedModel(call("call_1", "lookup_order", order_id="A7"), say("It has shipped."), say("Yes."))
    agent = Agent(name="shop", instructions="Help with orders.", model=model, tools=[lookup_order])

    async def scenario(aom: AsyncOMClient) -> None:
        session = OMSession(thread, aom, actor_model="openai/gpt-4o-mini")
        await Runner.run(agent, "Where is order A7?", session=session)
        await Runner.run(agent, "Has it?", session=session)

    run(stack, key, scenario)

    call_part = {
        "type": "tool-invocation",
        "tool_call_id": "call_1",
        "tool_name": "lookup_order",
        "state": "call",
        "args": {"order_id": "A7"},
    }
    result_part = {**call_part, "state": "result", "result": "order A7: shipped"}
    del result_part["args"]
    assert stored(om, thread)[:4] == [
        ("user", [{"type": "text", "text": "Where is order A7?"}]),
        ("assistant", [call_part]),
        ("tool", [result_part]),
        ("assistant", [{"type": "text", "text": "It has shipped."}]),
    ]
    second = model.inputs[2]  # the second run's only model call
    assert {"type": "function_call", "call_id": "call_1", "name": "lookup_order"}.items() <= second[1].items()
    assert second[2] == {"type": "function_call_output", "call_id": "call_1", "output": "order A7: shipped"}
    assert texts(second)[3:] == [("assistant", "It has shipped."), ("user", "Has it?")]


def test_observations_lead_the_history_and_replace_what_they_cover(
    stack: ApiServer, key: str, om: OMClient
) -> None:
    thread = new_id("agents")
    said = "I live in Lisbon and I keep three beehives on my roof."
    agent = Agent(name="assistant", model=ScriptedModel(say("Noted: Lisbon, bees.")))
    got: dict[str, list[dict[str, Any]]] = {}

    async def scenario(aom: AsyncOMClient) -> None:
        session = OMSession(thread, aom)
        await Runner.run(agent, said, session=session)
        # Observe once a few tokens wait (the default waits for tens of thousands).
        await aom.set_config(thread, {"observation": {"messageTokens": 10, "bufferTokens": False}})
        observed = await aom.observe(thread, wait=True)
        assert observed.applied, observed
        got["all"] = [dict(i) for i in await session.get_items()]
        got["none"] = [dict(i) for i in await session.get_items(limit=0)]

    run(stack, key, scenario)
    items = got["all"]
    memory = [i for i in items if i.get("role") == "system"]
    assert items[: len(memory)] == memory and "Lisbon" in " ".join(str(i["content"]) for i in memory)
    assert ("user", said) not in texts(items), "an observed message is shown again beside its observation"
    assert got["none"] == memory


def test_another_tenant_with_the_same_session_id_sees_nothing(
    stack: ApiServer, key: str, other_key: str
) -> None:
    thread = new_id("agents")

    async def scenario(aom: AsyncOMClient) -> None:
        await OMSession(thread, aom).add_items([{"role": "user", "content": "My PIN is 4321"}])
        async with OMSession(thread, base_url=stack.base_url, api_key=other_key) as intruder:
            assert await intruder.get_items() == []
            await intruder.clear_session()  # erases only the intruder's own (empty) thread
        mine = [dict(i) for i in await OMSession(thread, aom).get_items()]
        assert texts(mine) == [("user", "My PIN is 4321")]

    run(stack, key, scenario)


def test_pop_item_is_refused_and_clear_session_erases_the_thread(stack: ApiServer, key: str) -> None:
    async def scenario(aom: AsyncOMClient) -> None:
        session = OMSession(new_id("agents"), aom)
        await session.add_items([{"role": "user", "content": "hello"}])
        with pytest.raises(OMSessionUnsupported, match="clear_session"):
            await session.pop_item()
        await session.clear_session()
        assert await session.get_items() == []
        await session.clear_session()  # a thread already gone is fine

    run(stack, key, scenario)
