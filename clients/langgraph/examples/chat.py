"""A chat in the terminal whose memory is om: `python examples/chat.py` with `OM_BASE_URL`, `OM_API_KEY`
and `OPENAI_API_KEY` set (and `langchain-openai` installed); the thread and user ids are the arguments.

`build_agent` and `ask` are what the example does, with the model passed in:
tests/adapters/test_langgraph.py runs them against a real om server with a fake chat model.
"""

from __future__ import annotations

import sys
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel

from om_langgraph import OMMiddleware


def build_agent(model: str | BaseChatModel = "openai:gpt-4o-mini") -> Any:
    """A compiled agent graph whose every model call goes through om (no checkpointer: om is the memory)."""
    return create_agent(
        model,
        tools=[],
        system_prompt="You are a helpful assistant. Be brief.",
        middleware=[OMMiddleware(actor_model="openai/gpt-4o-mini")],
    )


def ask(agent: Any, text: str, *, thread_id: str, user_id: str) -> str:
    """One turn: only the new message goes in; om supplies the rest."""
    config = {"configurable": {"thread_id": thread_id, "resource_id": user_id}}
    result = agent.invoke({"messages": [{"role": "user", "content": text}]}, config=config)
    return str(result["messages"][-1].content)


def main() -> None:
    thread_id = sys.argv[1] if len(sys.argv) > 1 else "chat-1"
    user_id = sys.argv[2] if len(sys.argv) > 2 else "user-1"
    agent = build_agent()
    for line in sys.stdin:
        print(ask(agent, line.strip(), thread_id=thread_id, user_id=user_id))


if __name__ == "__main__":
    main()
