"""`OMMiddleware` (clients/langgraph) in a compiled `create_agent` graph, against a real om server: the
model sees om's context (memory in the system message, then the unobserved messages) instead of the
graph's state, every message of the loop is stored in om (tool calls and results included), async runs
work too, and a tenant's agent never reaches another's thread. The chat model is LangChain's fake; the
agent graph, the middleware protocol and om are real."""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool

from om_client import AsyncOMClient, OMClient
from om_langgraph import OMMiddleware
from tests.adapters.fake_chat_model import RecordingChatModel
from tests.support.api_server import ApiServer, new_id

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.timeout(120)]

EXAMPLE = Path(__file__).resolve().parents[2] / "clients" / "langgraph" / "examples" / "chat.py"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("om_langgraph_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def shown(messages: list[BaseMessage]) -> list[tuple[str, Any]]:
    return [(m.type, m.content) for m in messages]


def stored(om: OMClient, thread_id: str) -> list[tuple[str, list[dict[str, Any]]]]:
    page = om.messages(thread_id, limit=100)
    return [
        (m.role, [p.model_dump(exclude_none=True, exclude={"seq", "created_at"}) for p in m.parts])
        for m in sorted(page.messages, key=lambda m: m.max_seq or 0)
    ]


def test_the_example_agent_remembers_through_om(
    stack: ApiServer, key: str, om: OMClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OM_BASE_URL", stack.base_url)
    monkeypatch.setenv("OM_API_KEY", key)
    example = load_example()
    model = RecordingChatModel(responses=[AIMessage("Nice to meet you, Dana."), AIMessage("You are Dana.")])
    agent = example.build_agent(model)
    thread, user = new_id("lg"), new_id("user")
    assert example.ask(agent, "Hi, I'm Dana", thread_id=thread, user_id=user) == "Nice to meet you, Dana."
    # A new invocation without a checkpointer: the graph state holds only the new message.
    assert example.ask(agent, "What is my name?", thread_id=thread, user_id=user) == "You are Dana."

    prompt = ("system", "You are a helpful assistant. Be brief.")
    assert shown(model.seen[0]) == [prompt, ("human", "Hi, I'm Dana")]
    assert shown(model.seen[1]) == [
        prompt,
        ("human", "Hi, I'm Dana"),
        ("ai", "Nice to meet you, Dana."),
        ("human", "What is my name?"),
    ]
    assert [(role, parts[0]["text"]) for role, parts in stored(om, thread)] == [
        ("user", "Hi, I'm Dana"),
        ("assistant", "Nice to meet you, Dana."),
        ("user", "What is my name?"),
        ("assistant", "You are Dana."),
    ]
    assert om.thread(thread).resource_id == user


@tool
def lookup_order(order_id: str) -> str:
    """The shipping state of an order."""
    return f"order {order_id}: shipped"


def tool_agent(model: RecordingChatModel, middleware: OMMiddleware) -> Any:
    return create_agent(
        model, tools=[lookup_order], system_prompt="Help with orders.", middleware=[middleware]
    )


def tool_script() -> RecordingChatModel:
    asks = AIMessage("", tool_calls=[{"id": "call_1", "name": "lookup_order", "args": {"order_id": "A7"}}])
    return RecordingChatModel(responses=[asks, AIMessage("It has shipped.")])


def test_the_tool_loop_is_stored_and_the_model_sees_it_from_om(
    stack: ApiServer, key: str, om: OMClient
) -> None:
    thread, model = new_id("lg"), tool_script()
    agent = tool_agent(model, OMMiddleware(om, thread_id=thread, actor_model="openai/gpt-4o-mini"))
    result = agent.invoke({"messages": [HumanMessage("Where is order A7?")]})
    assert result["messages"][-1].content == "It has shipped."

    call_part = {
        "type": "tool-invocation",
        "tool_call_id": "call_1",
        "tool_name": "lookup_order",
        "state": "call",
        "args": {"order_id": "A7"},
    }
    result_part = {k: v for k, v in call_part.items() if k != "args"} | {
        "state": "result",
        "result": "order A7: shipped",
    }
    assert stored(om, thread) == [
        ("user", [{"type": "text", "text": "Where is order A7?"}]),
        ("assistant", [call_part]),
        ("tool", [result_part]),
        ("assistant", [{"type": "text", "text": "It has shipped."}]),
    ]
    second = model.seen[1]  # the call after the tool ran: its history came from om
    assert isinstance(second[2], AIMessage) and second[2].tool_calls[0]["args"] == {"order_id": "A7"}
    assert isinstance(second[3], ToolMessage) and second[3].tool_call_id == "call_1"
    assert second[3].content == "order A7: shipped"


def test_observations_go_into_the_system_message_and_replace_what_they_cover(
    stack: ApiServer, key: str, om: OMClient
) -> None:
    thread = new_id("lg")
    said = "I live in Lisbon and I keep three beehives on my roof."
    model = RecordingChatModel(responses=[AIMessage("Noted."), AIMessage("In Lisbon.")])
    agent = create_agent(model, system_prompt="Be brief.", middleware=[OMMiddleware(om, thread_id=thread)])
    agent.invoke({"messages": [HumanMessage(said)]})
    om.set_config(thread, {"observation": {"messageTokens": 10, "bufferTokens": False}})
    assert om.observe(thread, wait=True).applied
    # Back to a threshold the next question stays under, so it is shown as a message, not observed.
    om.set_config(thread, {"observation": {"messageTokens": 30_000, "bufferTokens": False}})
    agent.invoke({"messages": [HumanMessage("Where do I live?")]})

    system, *rest = model.seen[1]
    assert isinstance(system, SystemMessage) and isinstance(system.content, str)
    assert system.content.startswith("Be brief.\n\n") and "Lisbon" in system.content
    assert ("human", said) not in shown(rest), "an observed message is shown again beside its observation"
    assert shown(rest)[-1] == ("human", "Where do I live?")


def test_an_async_run_uses_the_async_client(stack: ApiServer, key: str, om: OMClient) -> None:
    thread, model = new_id("lg"), tool_script()

    async def main() -> Any:
        async with AsyncOMClient(stack.base_url, key) as aom:
            agent = tool_agent(model, OMMiddleware(async_client=aom))
            config = {"configurable": {"thread_id": thread}}
            return await agent.ainvoke({"messages": [HumanMessage("Where is order A7?")]}, config=config)

    assert asyncio.run(main())["messages"][-1].content == "It has shipped."
    assert [role for role, _ in stored(om, thread)] == ["user", "assistant", "tool", "assistant"]


def test_another_tenant_with_the_same_thread_id_sees_nothing(
    stack: ApiServer, key: str, other_key: str, om: OMClient
) -> None:
    thread = new_id("lg")
    om.post_turn(thread, [{"role": "user", "text": "My PIN is 4321"}])
    model = RecordingChatModel(responses=[AIMessage("Hello.")])
    with OMClient(stack.base_url, other_key) as intruder:
        agent = create_agent(model, middleware=[OMMiddleware(intruder, thread_id=thread)])
        agent.invoke({"messages": [HumanMessage("What is my PIN?")]})
    assert shown(model.seen[0]) == [("human", "What is my PIN?")]
    assert [parts[0]["text"] for _, parts in stored(om, thread)] == ["My PIN is 4321"]


def test_a_run_without_a_thread_id_is_refused_with_what_to_do(om: OMClient) -> None:
    agent = create_agent(RecordingChatModel(responses=[AIMessage("x")]), middleware=[OMMiddleware(om)])
    with pytest.raises(ValueError, match="configurable"):
        agent.invoke({"messages": [HumanMessage("hi")]})
