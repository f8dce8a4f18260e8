"""The two examples of docs/guide/frameworks.md, run as the page shows them (placeholders substituted as
tests/integration/test_readme.py does) against a real om server, with a scripted model standing in for
`my_model` / `my_chat_model`: the second run answers from what om kept of the first."""

from __future__ import annotations

import pytest
from agents import set_tracing_disabled
from langchain_core.messages import AIMessage

from om_client import OMClient
from tests.adapters.fake_chat_model import RecordingChatModel
from tests.adapters.scripted_agents_model import ScriptedModel, say
from tests.integration.test_readme import run_snippet, snippet, threads_of
from tests.support.api_server import ApiServer

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.timeout(120)]

set_tracing_disabled(True)  # the SDK's traces go to OpenAI's servers; none are reachable here

CONVERSATION = [
    ("user", "Hi, I'm Dana"),
    ("assistant", "Nice to meet you, Dana."),
    ("user", "What is my name?"),
    ("assistant", "You are Dana."),
]


def stored(om: OMClient, thread_id: str) -> list[tuple[str, str | None]]:
    messages = sorted(om.messages(thread_id).messages, key=lambda m: m.max_seq or 0)
    return [(m.role, m.parts[0].text) for m in messages]


def test_the_agents_sdk_example_remembers_through_om(stack: ApiServer, key: str, om: OMClient) -> None:
    model = ScriptedModel(say("Nice to meet you, Dana."), say("You are Dana."))
    ids: dict[str, str] = {}
    namespace = run_snippet(snippet("OMSession"), stack, key, ids, my_model=model)
    assert namespace["__printed__"] == "Nice to meet you, Dana. / You are Dana.\n"
    assert [(i.get("role"), i.get("content")) for i in model.inputs[1]] == CONVERSATION[:3]
    (thread,) = threads_of(ids)
    assert stored(om, thread) == CONVERSATION


def test_the_langgraph_example_remembers_through_om(stack: ApiServer, key: str, om: OMClient) -> None:
    model = RecordingChatModel(responses=[AIMessage("Nice to meet you, Dana."), AIMessage("You are Dana.")])
    ids: dict[str, str] = {}
    namespace = run_snippet(snippet("OMMiddleware"), stack, key, ids, my_chat_model=model)
    assert namespace["__printed__"] == "You are Dana.\n"
    assert [(m.type, m.content) for m in model.seen[1]] == [
        ("system", "Be brief."),
        ("human", "Hi, I'm Dana"),
        ("ai", "Nice to meet you, Dana."),
        ("human", "What is my name?"),
    ]
    (thread,) = threads_of(ids)
    assert stored(om, thread) == CONVERSATION
    assert om.thread(thread).resource_id == ids["user-52"]
