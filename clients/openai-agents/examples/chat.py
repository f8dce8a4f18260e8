"""A chat in the terminal whose history is om's memory: `python examples/chat.py` with `OM_BASE_URL`,
`OM_API_KEY` and `OPENAI_API_KEY` set (the thread and user ids are the first two arguments).

`chat` is what the example does, with the model passed in: tests/adapters/test_openai_agents.py runs it
against a real om server with a scripted model.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterable

from agents import Agent, Model, Runner

from om_openai_agents import OMSession


async def chat(
    lines: Iterable[str], *, thread_id: str, user_id: str, model: str | Model = "gpt-4o-mini"
) -> list[str]:
    """Run the agent once per line, every run in the same om thread; the replies, in order."""
    agent = Agent(name="assistant", instructions="You are a helpful assistant. Be brief.", model=model)
    replies: list[str] = []
    async with OMSession(thread_id, resource_id=user_id) as session:
        for line in lines:
            result = await Runner.run(agent, line, session=session)
            replies.append(str(result.final_output))
    return replies


def main() -> None:
    thread_id = sys.argv[1] if len(sys.argv) > 1 else "chat-1"
    user_id = sys.argv[2] if len(sys.argv) > 2 else "user-1"
    for line in sys.stdin:
        (reply,) = asyncio.run(chat([line.strip()], thread_id=thread_id, user_id=user_id))
        print(reply)


if __name__ == "__main__":
    main()
