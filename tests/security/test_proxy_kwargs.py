"""Every keyword litellm knows, sent as a proxy request field: none outside the allow-list reaches the call.

The names come from the installed litellm itself, so a release that adds a keyword is tested the day it
is installed: the signatures of `litellm.completion` / `litellm.acompletion` / `get_optional_params`,
litellm's own lists (`all_litellm_params`, `OPENAI_CHAT_COMPLETION_PARAMS`, the endpoint- and
credential-bearing ones) and every `kwargs.get("...")` / `kwargs.pop("...")` / `kwargs["..."]` in
`litellm/main.py` (undocumented switches such as `_skip_mcp_handler`). Each is sent alone, plain and
streamed, to the real app on the test Postgres; `litellm.acompletion` is replaced by a recorder that keeps
the keywords it got and answers through the fake actor (`om-actor/echo`), so the full route runs.
"""

from __future__ import annotations

import ast
import inspect
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine
from starlette.testclient import TestClient

from om_api.app import create_app
from om_api.proxy.params import CALL_KWARGS, FORWARDED_FIELDS, OWN_FIELDS, SERVER_SET_KWARGS
from om_api.settings import ApiSettings
from om_core.tenancy import access

pytestmark = [pytest.mark.postgres]

ATTACKER_URL = "http://127.0.0.1:9/v1"
PROXY_TIMEOUT_S = 123.0

#: Valid OpenAI values for the forwarded fields (any other name gets ATTACKER_URL).
SAMPLES: dict[str, Any] = {
    "temperature": 0.5,
    "top_p": 0.9,
    "n": 1,
    "seed": 7,
    "presence_penalty": 0.1,
    "frequency_penalty": 0.1,
    "logit_bias": {"50256": -100},
    "logprobs": False,
    "top_logprobs": 2,
    "max_tokens": 50,
    "max_completion_tokens": 50,
    "stop": ["END"],
    "tools": [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}],
    "tool_choice": "auto",
    "parallel_tool_calls": True,
    "functions": [{"name": "weather", "parameters": {"type": "object"}}],
    "function_call": "auto",
    "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "object"}}},
    "reasoning_effort": "low",
    "verbosity": "low",
    "modalities": ["text"],
    "audio": {"voice": "alloy", "format": "wav"},
    "prediction": {"type": "content", "content": "maybe"},
    "web_search_options": {"search_context_size": "low"},
    "stream_options": {"include_usage": False},
    "user": "user-1",
    "safety_identifier": "user-hash-1",
    "prompt_cache_key": "cache-1",
    "metadata": {"resource_id": "user-1"},
}


def _kwargs_read_by(module: Any) -> set[str]:
    """String keys the module reads from a `kwargs` mapping."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(inspect.getsource(module))):
        key: ast.expr | None = None
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("get", "pop")
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "kwargs"
            and node.args
        ):
            key = node.args[0]
        elif (
            isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "kwargs"
        ):
            key = node.slice
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            names.add(key.value)
    return names


def _parameters(function: Any) -> set[str]:
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {p.name for p in inspect.signature(function).parameters.values() if p.kind in kinds}


def litellm_keywords() -> set[str]:
    """Every keyword the installed litellm accepts or reads on a completion call."""
    import litellm
    import litellm.main
    from litellm.constants import OPENAI_CHAT_COMPLETION_PARAMS
    from litellm.types import utils

    names = _parameters(litellm.completion) | _parameters(litellm.acompletion)
    names |= _parameters(litellm.utils.get_optional_params)
    names |= set(utils.all_litellm_params) | set(OPENAI_CHAT_COMPLETION_PARAMS)
    names |= set(utils.API_KEY_UPSTREAM_PARAMS) | set(utils.server_owned_wif_litellm_params)
    names |= _kwargs_read_by(litellm.main)
    names |= {"extra_body", "headers", "litellm_not_yet_invented", "x_unknown_field"}
    return names - {"model", "messages"}


KEYWORDS = sorted(litellm_keywords())


class Recorder:
    """Stands in for `litellm.acompletion`: keeps each call's keywords, answers with the fake actor."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.calls: list[dict[str, Any]] = []

    async def __call__(self, **kwargs: Any) -> Any:
        self.calls.append(dict(kwargs))
        stream = bool(kwargs.get("stream"))
        answer: dict[str, Any] = {"model": kwargs["model"], "messages": kwargs["messages"], "stream": stream}
        if stream:
            answer["stream_options"] = {"include_usage": True}
        return await self.real(**answer)


@pytest.fixture(scope="module")
def app_client(postgres_url: str, pg_engine: Engine) -> Iterator[TestClient]:
    settings = ApiSettings(
        database_url=postgres_url,
        auth="keys",
        executor="inline",
        model="om-local/extractive",
        actor_models="om-actor/*",
        plugins="tests.support.fake_actor",
        proxy_timeout_s=PROXY_TIMEOUT_S,
    )
    with TestClient(create_app(settings)) as client:
        yield client


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    import litellm

    recording = Recorder(litellm.acompletion)
    monkeypatch.setattr(litellm, "acompletion", recording)
    return recording


@pytest.fixture(scope="module")
def key(pg_engine: Engine) -> str:
    return access.create_key(pg_engine, f"kwargs-{uuid.uuid4().hex[:8]}", "kwargs").secret


def _send(client: TestClient, key: str, name: str, value: Any, stream: bool) -> tuple[int, dict[str, Any]]:
    body = {
        "model": "om-actor/echo",
        "messages": [{"role": "user", "content": f"probe {name}"}],
        "stream": stream,
        name: value,
    }
    headers = {"Authorization": f"Bearer {key}", "X-OM-Thread-Id": f"kw-{uuid.uuid4().hex[:12]}"}
    response = client.post("/v1/chat/completions", json=body, headers=headers)
    if response.status_code != 200:
        return response.status_code, response.json()
    if not stream:
        return 200, response.json()
    events = [line.removeprefix("data: ") for line in response.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]", response.text
    assert not any("error" in json.loads(e) for e in events[:-1]), response.text
    return 200, {}


def test_the_enumeration_holds_litellms_dangerous_keywords() -> None:
    """So the sweep below cannot pass by enumerating nothing."""
    expected = {"api_base", "base_url", "api_key", "custom_llm_provider", "extra_headers", "headers"}
    expected |= {"timeout", "num_retries", "max_retries", "mock_response", "litellm_metadata", "model_list"}
    expected |= {"_skip_mcp_handler", "extra_body", "client", "ssl_verify"}
    assert expected <= set(KEYWORDS)
    assert len(KEYWORDS) > 400


def test_every_forwarded_field_is_an_openai_parameter_and_none_is_litellms_own() -> None:
    from litellm.constants import OPENAI_CHAT_COMPLETION_PARAMS
    from litellm.types import utils

    openai_params = set(OPENAI_CHAT_COMPLETION_PARAMS)
    assert openai_params >= FORWARDED_FIELDS, FORWARDED_FIELDS - openai_params
    assert not FORWARDED_FIELDS & set(utils.all_litellm_params)
    assert not FORWARDED_FIELDS & set(utils.API_KEY_UPSTREAM_PARAMS)
    assert not CALL_KWARGS & {"api_base", "base_url", "api_key", "headers", "extra_headers", "extra_body"}


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_no_keyword_outside_the_allow_list_reaches_litellm(
    app_client: TestClient, key: str, recorder: Recorder, stream: bool
) -> None:
    accepted: list[str] = []
    for name in KEYWORDS:
        value = stream if name == "stream" else SAMPLES.get(name, ATTACKER_URL)
        before = len(recorder.calls)
        status, body = _send(app_client, key, name, value, stream)
        if name in FORWARDED_FIELDS | OWN_FIELDS:
            assert status == 200, (name, body)
            assert len(recorder.calls) == before + 1, name
            call = recorder.calls[-1]
            if name in FORWARDED_FIELDS and name not in ("stream", "stream_options"):
                assert call[name] == value, f"{name} was not forwarded as given"
            accepted.append(name)
        else:
            assert status == 422, (name, status, body)
            assert body["error"]["field"] == name, body
            assert len(recorder.calls) == before, f"{name} was refused but litellm was still called"

    assert accepted, "the sweep reached litellm at least once"
    reached = set().union(*(call.keys() for call in recorder.calls))
    assert reached <= CALL_KWARGS, reached - CALL_KWARGS
    for call in recorder.calls:
        assert call["timeout"] == PROXY_TIMEOUT_S
        assert call["stream"] is stream
        assert "metadata" not in call
        if stream:
            assert call["stream_options"]["include_usage"] is True, "the server meters every stream"


def test_the_server_sets_the_timeout_whatever_the_request_says(
    app_client: TestClient, key: str, recorder: Recorder
) -> None:
    status, body = _send(app_client, key, "timeout", 0.001, False)
    assert status == 422 and body["error"]["field"] == "timeout"
    status, _ = _send(app_client, key, "temperature", 0.2, False)
    assert status == 200
    assert recorder.calls[-1]["timeout"] == PROXY_TIMEOUT_S
    assert set(SERVER_SET_KWARGS) <= set(recorder.calls[-1])


def test_the_first_refused_field_is_named(app_client: TestClient, key: str, recorder: Recorder) -> None:
    body = {
        "model": "om-actor/echo",
        "messages": [{"role": "user", "content": "hi"}],
        "temperature": 0.1,
        "api_key": "sk-x",
        "api_base": ATTACKER_URL,
    }
    headers = {"Authorization": f"Bearer {key}"}  # no thread id: the field is refused before that is read
    response = app_client.post("/v1/chat/completions", json=body, headers=headers)
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["field"] == "api_key"
    assert "temperature" in error["message"], "the message lists what is forwarded"
    assert recorder.calls == []
