"""The proxy's recall tool loop, driven by the `openai` package: when the thread's config turns `retrieval`
on, the proxy offers `recall` to the actor model, answers the model's recall calls itself and calls it
again, so the caller gets only the final answer (streamed or not), with usage summed over the rounds.

The real app runs in-process on the test Postgres (the `openai` client talks to it through Starlette's
test client). The actor is a scripted litellm custom provider (`om-script/loop`): each test says what it
replies to each request, and every request it gets is kept, tools included, so a test can check exactly
what the proxy sent. The recall executor is a fake set on the engine (`engine.recall`, the entry point
`om_api.proxy.tools.recall_tools_for` calls), recording the arguments it got.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import openai
import pytest
from litellm.llms.custom_llm import CustomLLM
from litellm.types.utils import (
    ChatCompletionMessageToolCall,
    Choices,
    Function,
    GenericStreamingChunk,
    ModelResponse,
    Usage,
)
from litellm.types.utils import Message as LiteMessage
from openai.types.chat import ChatCompletionChunk
from sqlalchemy import Engine
from starlette.testclient import TestClient

from om_api.app import create_app
from om_api.settings import ApiSettings
from om_core.recall import RecallInvalid
from om_core.tenancy import access
from om_core.tenancy.scoped_ids import scoped_id

pytestmark = [pytest.mark.postgres]

PROVIDER = "om-script"
MODEL = f"{PROVIDER}/loop"
PROMPT_TOKENS, COMPLETION_TOKENS = 7, 3  # every scripted reply's usage
PROMPT_PRICE, COMPLETION_PRICE = 0.000001, 0.000002
ROUNDS = 2  # OM_PROXY_TOOL_ROUNDS of the app under test
RECALLED = {"messages": "**user (2026-11-30 10:00:00Z)** [m1]:\n  [p0] the door code is 4417", "count": 1}
WEATHER = {"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}


@dataclass
class Reply:
    content: str | None = None
    #: (id, name, arguments as JSON)
    calls: list[tuple[str, str, str]] = field(default_factory=list)


Script = Callable[[dict[str, Any]], Reply]


def _tool_names(request: Mapping[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in request.get("tools") or []]


class ScriptedActor(CustomLLM):
    """Replies what `script` says for each request; keeps every request (messages, tools, tool_choice)."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[dict[str, Any]] = []
        self.script: Script = lambda request: Reply("hello")

    def _next(self, messages: list[Any], kwargs: Mapping[str, Any], stream: bool) -> Reply:
        optional = kwargs.get("optional_params") or {}
        request = {
            "messages": json.loads(json.dumps([dict(m) for m in messages], default=str)),
            "tools": optional.get("tools"),
            "tool_choice": optional.get("tool_choice"),
            "stream": stream,
        }
        self.requests.append(request)
        return self.script(request)

    async def acompletion(  # type: ignore[override]
        self, model: str, messages: list[Any], *args: Any, **kwargs: Any
    ) -> ModelResponse:
        reply = self._next(messages, kwargs, stream=False)
        response = kwargs["model_response"]
        assert isinstance(response, ModelResponse)
        response.id = f"scripted-{uuid.uuid4().hex}"
        response.created = int(time.time())
        calls = [
            ChatCompletionMessageToolCall(id=i, type="function", function=Function(name=n, arguments=a))
            for i, n, a in reply.calls
        ]
        response.choices = [
            Choices(
                finish_reason="tool_calls" if calls else "stop",
                index=0,
                message=LiteMessage(content=reply.content, role="assistant", tool_calls=calls or None),
            )
        ]
        response.usage = Usage(  # type: ignore[attr-defined]
            prompt_tokens=PROMPT_TOKENS,
            completion_tokens=COMPLETION_TOKENS,
            total_tokens=PROMPT_TOKENS + COMPLETION_TOKENS,
        )
        return response

    async def astreaming(  # type: ignore[override]
        self, model: str, messages: list[Any], *args: Any, **kwargs: Any
    ) -> Any:
        reply = self._next(messages, kwargs, stream=True)
        chunks: list[GenericStreamingChunk] = []
        words = (reply.content or "").split(" ") if reply.content else []
        for i, word in enumerate(words):
            text = word if i == len(words) - 1 else word + " "
            chunks.append(GenericStreamingChunk(text=text, is_finished=False, finish_reason="", usage=None))
        for index, (call_id, name, arguments) in enumerate(reply.calls):
            half = len(arguments) // 2  # arguments arrive in two fragments, as providers send them
            for n, piece in enumerate((arguments[:half], arguments[half:])):
                chunks.append(
                    GenericStreamingChunk(
                        text="",
                        is_finished=False,
                        finish_reason="",
                        usage=None,
                        index=0,
                        tool_use={
                            "id": call_id if n == 0 else None,
                            "type": "function",
                            "function": {"name": name if n == 0 else None, "arguments": piece},
                            "index": index,
                        },
                    )
                )
        chunks.append(
            GenericStreamingChunk(
                text="",
                is_finished=True,
                finish_reason="tool_calls" if reply.calls else "stop",
                usage={
                    "prompt_tokens": PROMPT_TOKENS,
                    "completion_tokens": COMPLETION_TOKENS,
                    "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS,
                },
                index=0,
            )
        )
        for chunk in chunks:
            yield chunk


ACTOR = ScriptedActor()


def _register() -> None:
    import litellm

    if not any(entry.get("provider") == PROVIDER for entry in litellm.custom_provider_map):
        litellm.custom_provider_map = [
            *litellm.custom_provider_map,
            {"provider": PROVIDER, "custom_handler": ACTOR},
        ]
    litellm.register_model(
        {
            MODEL: {
                "input_cost_per_token": PROMPT_PRICE,
                "output_cost_per_token": COMPLETION_PRICE,
                "litellm_provider": PROVIDER,
                "mode": "chat",
                "max_input_tokens": 1_000_000,
                "max_output_tokens": 100_000,
                "max_tokens": 100_000,
            }
        }
    )


@pytest.fixture(scope="module")
def app_client(postgres_url: str, pg_engine: Engine) -> Iterator[TestClient]:
    _register()
    settings = ApiSettings(
        database_url=postgres_url,
        auth="keys",
        executor="inline",
        model="om-local/extractive",
        actor_models=f"{PROVIDER}/*",
        proxy_tool_rounds=ROUNDS,
    )
    with TestClient(create_app(settings)) as client:
        yield client


@dataclass
class FakeRecall:
    """Stands in for `MemoryEngine.recall`: records (thread id, arguments), answers `answer(arguments)`."""

    answer: Callable[[Mapping[str, Any]], dict[str, Any]] = lambda arguments: RECALLED
    got: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def __call__(self, thread_id: str, params: Mapping[str, Any]) -> dict[str, Any]:
        self.got.append((thread_id, dict(params)))
        return self.answer(params)


@dataclass
class Setup:
    http: TestClient
    chat: openai.OpenAI
    key: str
    tenant: str
    thread: str
    resource: str
    recall: FakeRecall

    def retrieval(self, value: Any = True) -> None:
        """Retrieval on for the resource: the thread does not exist yet, the first request creates it
        (so the proxy must read the thread's config after storing the turn)."""
        response = self.http.put(
            f"/v1/resources/{self.resource}/config",
            json={"overrides": {"retrieval": value}},
            headers={"Authorization": f"Bearer {self.key}"},
        )
        assert response.status_code == 200, response.text

    def stored(self) -> list[tuple[str, str]]:
        response = self.http.get(
            f"/v1/threads/{self.thread}/messages",
            params={"limit": 100},
            headers={"Authorization": f"Bearer {self.key}"},
        )
        assert response.status_code == 200, response.text
        return [
            (m["role"], "".join(p.get("text") or "" for p in m["parts"])) for m in response.json()["messages"]
        ]

    def usage(self) -> dict[str, Any]:
        response = self.http.get("/v1/usage", headers={"Authorization": f"Bearer {self.key}"})
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body


@pytest.fixture
def setup(
    app_client: TestClient, pg_engine: Engine, tenant: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Setup]:
    key = access.create_key(pg_engine, tenant, "recall-loop").secret
    thread, resource = f"loop-{uuid.uuid4().hex[:10]}", f"user-{uuid.uuid4().hex[:10]}"
    chat = openai.OpenAI(
        base_url=str(app_client.base_url) + "/v1",
        api_key=key,
        http_client=app_client,
        max_retries=0,
        default_headers={"X-OM-Thread-Id": thread, "X-OM-Resource-Id": resource},
    )
    recall = FakeRecall()
    monkeypatch.setattr(app_client.app.state.runtime.engine, "recall", recall, raising=False)  # type: ignore[attr-defined]
    ACTOR.requests.clear()
    yield Setup(app_client, chat, key, tenant, thread, resource, recall)
    ACTOR.script = lambda request: Reply("hello")


@dataclass
class Answer:
    content: str | None
    calls: list[dict[str, Any]]
    finish_reason: str | None
    usage: dict[str, Any] | None


def ask(setup: Setup, messages: list[dict[str, Any]], *, stream: bool, **fields: Any) -> Answer:
    """One request through the `openai` package; a streamed answer is put together from its chunks."""
    if not stream:
        completion = setup.chat.chat.completions.create(model=MODEL, messages=messages, **fields)  # type: ignore[call-overload]
        message = completion.choices[0].message
        return Answer(
            message.content,
            [c.model_dump(exclude_none=True) for c in message.tool_calls or []],
            completion.choices[0].finish_reason,
            completion.usage.model_dump() if completion.usage else None,
        )
    chunks = list(
        setup.chat.chat.completions.create(  # type: ignore[call-overload]
            model=MODEL, messages=messages, stream=True, stream_options={"include_usage": True}, **fields
        )
    )
    assert all(isinstance(c, ChatCompletionChunk) for c in chunks)
    assert len({c.id for c in chunks}) == 1, "every chunk of one answer carries one id"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    calls: dict[int, dict[str, Any]] = {}
    finish = None
    for chunk in chunks:
        for choice in chunk.choices:
            finish = choice.finish_reason or finish
            for fragment in choice.delta.tool_calls or []:
                call = calls.setdefault(fragment.index, {"function": {"name": "", "arguments": ""}})
                if fragment.id:
                    call["id"] = fragment.id
                if fragment.type:
                    call["type"] = fragment.type
                if fragment.function and fragment.function.name:
                    call["function"]["name"] += fragment.function.name
                if fragment.function and fragment.function.arguments:
                    call["function"]["arguments"] += fragment.function.arguments
    usages = [c.usage.model_dump() for c in chunks if c.usage is not None]
    assert len(usages) <= 1
    return Answer(text or None, [calls[i] for i in sorted(calls)], finish, usages[0] if usages else None)


def _last_is_tool_result(request: Mapping[str, Any]) -> bool:
    return request["messages"][-1]["role"] == "tool"


STREAMED = pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
QUESTION = [{"role": "user", "content": "What was the door code I gave you?"}]


@STREAMED
def test_the_proxy_answers_recall_and_the_client_gets_the_final_answer(setup: Setup, stream: bool) -> None:
    setup.retrieval()

    def script(request: dict[str, Any]) -> Reply:
        if _last_is_tool_result(request):
            result = json.loads(request["messages"][-1]["content"])
            return Reply(f"The code is {result['messages'].rsplit(' ', 1)[-1]}.")
        return Reply("Let me check.", [("call-r1", "recall", '{"cursor": "m1", "detail": "high"}')])

    ACTOR.script = script
    answer = ask(setup, QUESTION, stream=stream)

    assert setup.recall.got == [
        (scoped_id(setup.tenant, setup.thread), {"cursor": "m1", "detail": "high"})
    ], "the executor got the model's arguments, for the caller's thread"
    first, second = ACTOR.requests
    assert _tool_names(first) == ["recall"], "the recall tool is offered"
    assert second["messages"][-2] == {
        "role": "assistant",
        "content": "Let me check.",
        "tool_calls": [
            {
                "id": "call-r1",
                "type": "function",
                "function": {"name": "recall", "arguments": '{"cursor": "m1", "detail": "high"}'},
            }
        ],
    }
    assert second["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call-r1",
        "content": json.dumps(RECALLED, ensure_ascii=False),
    }
    assert answer.content == "Let me check.\n\nThe code is 4417."
    assert answer.calls == [] and answer.finish_reason == "stop"
    rounds = len(ACTOR.requests)
    assert answer.usage is not None
    assert (
        answer.usage["prompt_tokens"],
        answer.usage["completion_tokens"],
        answer.usage["total_tokens"],
    ) == (
        rounds * PROMPT_TOKENS,
        rounds * COMPLETION_TOKENS,
        rounds * (PROMPT_TOKENS + COMPLETION_TOKENS),
    ), "usage is summed over the rounds"
    metered = setup.usage()
    assert (metered["calls"], metered["prompt_tokens"], metered["completion_tokens"]) == (
        2,
        2 * PROMPT_TOKENS,
        2 * COMPLETION_TOKENS,
    ), "the key is charged every actor call"
    assert metered["cost_usd"] == pytest.approx(
        2 * (PROMPT_TOKENS * PROMPT_PRICE + COMPLETION_TOKENS * COMPLETION_PRICE)
    )

    assert setup.stored() == [
        ("user", QUESTION[0]["content"]),
        ("assistant", "Let me check.\n\nThe code is 4417."),
    ], "the recall round is not stored; the reply is stored as the client got it"
    ACTOR.script = lambda request: Reply("You are welcome.")
    history = [
        *QUESTION,
        {"role": "assistant", "content": answer.content},
        {"role": "user", "content": "Thanks"},
    ]
    ask(setup, history, stream=stream)
    assert [role for role, _ in setup.stored()] == ["user", "assistant", "user", "assistant"], (
        "the history sent back maps to the stored reply: nothing is stored twice"
    )


def test_streamed_chunks_are_valid_chat_completion_chunks_ending_with_done(setup: Setup) -> None:
    setup.retrieval()
    ACTOR.script = lambda request: (
        Reply("Found it: 4417.") if _last_is_tool_result(request) else Reply(None, [("c1", "recall", "{}")])
    )
    response = setup.http.post(
        "/v1/chat/completions",
        json={"model": MODEL, "messages": QUESTION, "stream": True},
        headers={
            "Authorization": f"Bearer {setup.key}",
            "X-OM-Thread-Id": setup.thread,
            "X-OM-Resource-Id": setup.resource,
        },
    )
    assert response.status_code == 200, response.text
    events = [line.removeprefix("data: ") for line in response.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [ChatCompletionChunk.model_validate(json.loads(event)) for event in events[:-1]]
    assert all(c.object == "chat.completion.chunk" and c.model == MODEL for c in chunks)
    assert not any(c.usage for c in chunks), "no usage chunk unless the caller asks for it"
    assert not any(choice.delta.tool_calls for c in chunks for choice in c.choices), (
        "recall calls are not shown"
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Found it: 4417."
    assert [choice.finish_reason for c in chunks for choice in c.choices if choice.finish_reason] == ["stop"]


@STREAMED
def test_after_the_last_round_the_model_must_answer_without_recall(setup: Setup, stream: bool) -> None:
    """A model that always calls recall is offered it `OM_PROXY_TOOL_ROUNDS` times, then called once more
    without it, and the client gets that answer."""
    setup.retrieval()

    def script(request: dict[str, Any]) -> Reply:
        if "recall" in _tool_names(request):
            return Reply(None, [(f"call-{len(ACTOR.requests)}", "recall", '{"page": 1}')])
        return Reply("Here is what I know.")

    ACTOR.script = script
    answer = ask(setup, QUESTION, stream=stream, tool_choice="auto")

    assert len(setup.recall.got) == ROUNDS
    assert len(ACTOR.requests) == ROUNDS + 1
    assert all(_tool_names(r) == ["recall"] for r in ACTOR.requests[:ROUNDS])
    last = ACTOR.requests[-1]
    assert last["tools"] is None and last["tool_choice"] is None, "the final call offers no tool"
    assert [m["role"] for m in last["messages"][-2 * ROUNDS :]] == ["assistant", "tool"] * ROUNDS
    assert answer.content == "Here is what I know." and answer.calls == []
    assert answer.usage is not None and answer.usage["total_tokens"] == (ROUNDS + 1) * (
        PROMPT_TOKENS + COMPLETION_TOKENS
    )


@STREAMED
def test_a_caller_tool_call_goes_to_the_caller_untouched(setup: Setup, stream: bool) -> None:
    setup.retrieval()
    ACTOR.script = lambda request: Reply(None, [("call-w", "weather", '{"city": "Porto"}')])
    answer = ask(setup, QUESTION, stream=stream, tools=[WEATHER])

    assert _tool_names(ACTOR.requests[0]) == ["weather", "recall"], "the caller's tools come first"
    assert answer.calls == [
        {
            "id": "call-w",
            "type": "function",
            "function": {"name": "weather", "arguments": '{"city": "Porto"}'},
        }
    ]
    assert answer.finish_reason == "tool_calls"
    assert len(ACTOR.requests) == 1 and setup.recall.got == []


@STREAMED
def test_a_reply_mixing_recall_and_a_caller_tool_goes_to_the_caller_without_recall(
    setup: Setup, stream: bool
) -> None:
    """The caller must answer every call of the assistant message it gets, and cannot answer recall: the
    recall call is dropped (the model may call it again once the caller's result is in)."""
    setup.retrieval()
    ACTOR.script = lambda request: Reply(
        "Checking.", [("call-r", "recall", "{}"), ("call-w", "weather", '{"city": "Porto"}')]
    )
    answer = ask(setup, QUESTION, stream=stream, tools=[WEATHER])

    assert [(c["id"], c["function"]["name"]) for c in answer.calls] == [("call-w", "weather")]
    assert answer.content == "Checking." and answer.finish_reason == "tool_calls"
    assert len(ACTOR.requests) == 1 and setup.recall.got == []


@STREAMED
def test_with_retrieval_off_no_recall_tool_is_sent(setup: Setup, stream: bool) -> None:
    ACTOR.script = lambda request: Reply("hello there")
    answer = ask(setup, QUESTION, stream=stream)
    assert answer.content == "hello there"
    assert ACTOR.requests[-1]["tools"] is None

    own_recall = {"type": "function", "function": {"name": "recall", "parameters": {"type": "object"}}}
    ask(setup, QUESTION, stream=stream, tools=[own_recall])
    assert ACTOR.requests[-1]["tools"] == [own_recall], "a caller's own recall is just its tool"


def test_a_caller_tool_named_recall_is_refused_when_retrieval_is_on(setup: Setup) -> None:
    setup.retrieval({"scope": "thread"})
    own_recall = {"type": "function", "function": {"name": "recall", "parameters": {"type": "object"}}}
    with pytest.raises(openai.BadRequestError) as refused:
        setup.chat.chat.completions.create(model=MODEL, messages=QUESTION, tools=[WEATHER, own_recall])  # type: ignore[arg-type, list-item]
    error = refused.value.response.json()["error"]
    assert error["code"] == "tool_name_reserved" and error["field"] == "tools[1]"
    assert "rename your tool" in error["message"]
    assert ACTOR.requests == []


@pytest.mark.parametrize(
    ("failure", "told"),
    [
        (RecallInvalid("page", "must be between -50 and 50"), "page: must be between -50 and 50"),
        (RuntimeError("database gone"), "recall failed on the server; answer without it"),
    ],
    ids=["bad-arguments", "server-failure"],
)
def test_a_failing_recall_becomes_a_tool_result_not_an_error(
    setup: Setup, failure: Exception, told: str
) -> None:
    setup.retrieval()

    def fail(arguments: Mapping[str, Any]) -> dict[str, Any]:
        raise failure

    setup.recall.answer = fail
    ACTOR.script = lambda request: (
        Reply("I could not look it up.")
        if _last_is_tool_result(request)
        else Reply(None, [("call-x", "recall", '{"page": 99}')])
    )
    answer = ask(setup, QUESTION, stream=False)
    assert answer.content == "I could not look it up."
    assert ACTOR.requests[1]["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call-x",
        "content": json.dumps({"error": told}),
    }


def test_arguments_that_are_not_a_json_object_are_the_models_to_fix(setup: Setup) -> None:
    setup.retrieval()
    ACTOR.script = lambda request: (
        Reply("ok") if _last_is_tool_result(request) else Reply(None, [("call-j", "recall", "{not json")])
    )
    ask(setup, QUESTION, stream=False)
    assert setup.recall.got == []
    result = json.loads(ACTOR.requests[1]["messages"][-1]["content"])
    assert result["error"].startswith("the arguments are not valid JSON")


@STREAMED
def test_an_actor_failing_after_a_recall_round_is_reported_and_the_round_is_still_counted(
    setup: Setup, stream: bool
) -> None:
    """A later round's failure is the model's (502 before a stream starts, an error event inside one);
    nothing of the reply is stored, and the round that did answer is on the bill."""
    setup.retrieval()

    def script(request: dict[str, Any]) -> Reply:
        if _last_is_tool_result(request):
            raise RuntimeError("the provider fell over")
        return Reply(None, [("call-1", "recall", "{}")])

    ACTOR.script = script
    if not stream:
        with pytest.raises(openai.InternalServerError) as failed:
            setup.chat.chat.completions.create(model=MODEL, messages=QUESTION)  # type: ignore[arg-type]
        assert failed.value.status_code == 502
    else:
        response = setup.http.post(
            "/v1/chat/completions",
            json={"model": MODEL, "messages": QUESTION, "stream": True},
            headers={
                "Authorization": f"Bearer {setup.key}",
                "X-OM-Thread-Id": setup.thread,
                "X-OM-Resource-Id": setup.resource,
            },
        )
        events = [
            line.removeprefix("data: ") for line in response.text.splitlines() if line.startswith("data: ")
        ]
        assert events[-1] == "[DONE]"
        assert json.loads(events[-2])["error"]["code"] == "actor_failed"
    assert len(ACTOR.requests) == 2
    assert setup.stored() == [("user", QUESTION[0]["content"])]
    assert setup.usage()["calls"] == 1


@STREAMED
def test_the_real_recall_reads_the_threads_stored_messages(
    app_client: TestClient, pg_engine: Engine, tenant: str, stream: bool
) -> None:
    """No fake: the proxy's loop calls the engine's own recall, which reads what earlier requests stored."""
    key = access.create_key(pg_engine, tenant, "recall-loop-real").secret
    thread, resource = f"loop-{uuid.uuid4().hex[:10]}", f"user-{uuid.uuid4().hex[:10]}"
    chat = openai.OpenAI(
        base_url=str(app_client.base_url) + "/v1",
        api_key=key,
        http_client=app_client,
        max_retries=0,
        default_headers={"X-OM-Thread-Id": thread, "X-OM-Resource-Id": resource},
    )
    setup = Setup(app_client, chat, key, tenant, thread, resource, FakeRecall())
    setup.retrieval()
    code = f"{uuid.uuid4().int % 10_000:04d}-Q"
    first = [{"role": "user", "content": f"Remember this: the storage locker code is {code}."}]
    ACTOR.requests.clear()
    ACTOR.script = lambda request: Reply("Noted.")
    assert ask(setup, first, stream=stream).content == "Noted."

    def script(request: dict[str, Any]) -> Reply:
        if _last_is_tool_result(request):
            found = re.search(r"locker code is (\S+?)\.", request["messages"][-1]["content"])
            return Reply(f"The code is {found.group(1) if found else 'unknown'}.")
        return Reply(None, [("call-1", "recall", json.dumps({"mode": "messages", "anchor": "start"}))])

    ACTOR.script = script
    ACTOR.requests.clear()
    try:
        second = [
            *first,
            {"role": "assistant", "content": "Noted."},
            {"role": "user", "content": "What was my locker code?"},
        ]
        answer = ask(setup, second, stream=stream)
    finally:
        ACTOR.script = lambda request: Reply("hello")
    assert answer.content == f"The code is {code}."
    tool_result = json.loads(ACTOR.requests[-1]["messages"][-1]["content"])
    assert code in tool_result["messages"] and tool_result["count"] >= 2


# -------------------------------------------------------------------------------------- working memory


def _memory_config(setup: Setup, working_memory: dict[str, Any]) -> None:
    response = setup.http.put(
        f"/v1/resources/{setup.resource}/config",
        json={"overrides": {"workingMemory": working_memory}},
        headers={"Authorization": f"Bearer {setup.key}"},
    )
    assert response.status_code == 200, response.text


def _memory(setup: Setup) -> dict[str, Any]:
    response = setup.http.get(
        f"/v1/threads/{setup.thread}/working-memory", headers={"Authorization": f"Bearer {setup.key}"}
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


@STREAMED
def test_the_proxy_shows_the_working_memory_and_answers_its_update_calls(setup: Setup, stream: bool) -> None:
    _memory_config(setup, {"enabled": True, "template": "# User\n- Name:\n- City:"})

    def script(request: dict[str, Any]) -> Reply:
        if _last_is_tool_result(request):
            return Reply("Nice to meet you, Dana.")
        return Reply(
            None, [("call-m", "updateWorkingMemory", json.dumps({"content": "# User\n- Name: Dana"}))]
        )

    ACTOR.script = script
    answer = ask(setup, [{"role": "user", "content": "Hi, I'm Dana"}], stream=stream)
    assert answer.content == "Nice to meet you, Dana." and answer.calls == []
    first = ACTOR.requests[0]
    assert _tool_names(first) == ["updateWorkingMemory"], "offered: the actor manages this memory"
    system = [m["content"] for m in first["messages"] if m["role"] == "system"]
    assert any("<working-memory>\n# User\n- Name:\n- City:\n</working-memory>" in m for m in system)
    result = json.loads(ACTOR.requests[1]["messages"][-1]["content"])
    assert result == {"updated": True, "version": 1}
    memory = _memory(setup)
    assert (memory["content"], memory["version"], memory["updated_by"]) == (
        "# User\n- Name: Dana",
        1,
        "actor",
    )
    assert setup.stored() == [("user", "Hi, I'm Dana"), ("assistant", "Nice to meet you, Dana.")]

    ACTOR.script = lambda request: Reply("Welcome back.")
    ask(setup, [{"role": "user", "content": "Hi again"}], stream=stream)
    again = [m["content"] for m in ACTOR.requests[-1]["messages"] if m["role"] == "system"]
    assert any("- Name: Dana" in m for m in again), "the next request shows the updated memory"


def test_a_schema_violation_goes_back_to_the_model_and_an_observer_managed_memory_offers_no_tool(
    setup: Setup,
) -> None:
    schema = {"type": "object", "properties": {"age": {"type": "integer"}}}
    _memory_config(setup, {"enabled": True, "schema": schema})
    ACTOR.script = lambda request: (
        Reply("ok")
        if _last_is_tool_result(request)
        else Reply(None, [("call-s", "updateWorkingMemory", json.dumps({"content": {"age": "old"}}))])
    )
    ask(setup, QUESTION, stream=False)
    result = json.loads(ACTOR.requests[1]["messages"][-1]["content"])
    assert "at age: 'old' is not of type 'integer'" in result["error"]
    assert _memory(setup)["version"] == 0, "nothing written"

    response = setup.http.put(
        f"/v1/resources/{setup.resource}/config",
        json={
            "overrides": {"workingMemory": {"enabled": True}, "observation": {"manageWorkingMemory": True}}
        },
        headers={"Authorization": f"Bearer {setup.key}"},
    )
    assert response.status_code == 200, response.text
    ACTOR.script = lambda request: Reply("plain")
    ask(setup, QUESTION, stream=False)
    assert ACTOR.requests[-1]["tools"] is None, "Observer-managed: the actor gets no tool"
    assert any(
        "<working-memory>" in m["content"] for m in ACTOR.requests[-1]["messages"] if m["role"] == "system"
    )
