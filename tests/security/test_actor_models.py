"""Self-hosted providers are not callable by default: a caller choosing `ollama/...` or `hosted_vllm/...`
would make the server call its own machine or internal network. The operator allows one by naming its
provider in OM_ACTOR_MODELS (`hosted_vllm/*`); `*` is not enough.

The proxy tests run the real app in-process (SQLite, auth off: the model check comes before anything is
stored) with `HOSTED_VLLM_API_BASE` pointing at a loopback listener, so "nothing called" is observed, and
the positive control (the operator named the provider) shows the listener does receive the call.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from om_api.app import create_app
from om_api.settings import ApiSettings
from om_core.models import allowlist
from om_core.models.allowlist import SELF_HOSTED_PROVIDERS, refusal, self_hosted_provider
from om_core.store.db import make_engine
from om_core.store.migrate import upgrade
from tests.support.listener import REPLY, Listener, listening

SELF_HOSTED = ["ollama/llama3", "ollama_chat/llama3", "hosted_vllm/llama-3", "lm_studio/qwen", "llamafile/x"]
HOSTED = ["openai/gpt-4o", "gpt-4o", "anthropic/claude-sonnet-4-5", "gemini/gemini-2.5-flash"]


@pytest.mark.parametrize("model", SELF_HOSTED)
@pytest.mark.parametrize("patterns", [[], ["*"], ["*/*"], ["*llama*", "*qwen*", "*/x"]], ids=str)
def test_a_self_hosted_model_needs_a_pattern_that_names_its_provider(model: str, patterns: list[str]) -> None:
    reason = refusal(patterns, model)
    assert reason is not None
    provider = model.split("/")[0]
    assert f"{provider}/*" in reason and "OM_ACTOR_MODELS" in reason


@pytest.mark.parametrize("model", SELF_HOSTED)
def test_naming_the_provider_allows_it(model: str) -> None:
    provider = model.split("/")[0]
    assert refusal([f"{provider}/*"], model) is None
    assert refusal([model], model) is None
    assert refusal(["openai/*"], model) is not None


@pytest.mark.parametrize("model", HOSTED)
def test_a_hosted_model_is_allowed_when_no_pattern_is_set(model: str) -> None:
    assert self_hosted_provider(model) is None
    assert refusal([], model) is None
    assert refusal(["*"], model) is None
    reason = refusal(["om-actor/*"], model)
    assert reason is not None and "OM_ACTOR_MODELS=om-actor/*" in reason


def test_a_provider_litellm_places_on_an_internal_address_counts_as_self_hosted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Providers missing from the list are still caught by the endpoint litellm resolves for them."""
    monkeypatch.setattr(allowlist, "SELF_HOSTED_PROVIDERS", frozenset())
    assert self_hosted_provider("ollama/llama3") == "ollama"  # litellm's default: localhost:11434
    assert self_hosted_provider("llamafile/x") == "llamafile"  # 127.0.0.1:8080
    for address in ("http://10.1.2.3/v1", "http://192.168.0.7:8000/v1", "http://169.254.169.254/v1"):
        monkeypatch.setenv("HOSTED_VLLM_API_BASE", address)
        assert self_hosted_provider("hosted_vllm/x") == "hosted_vllm", address
    monkeypatch.setenv("HOSTED_VLLM_API_BASE", "https://vllm.example.com/v1")
    assert self_hosted_provider("hosted_vllm/x") is None
    assert self_hosted_provider("openai/gpt-4o") is None


def test_every_provider_whose_litellm_code_defaults_to_a_loopback_host_is_listed() -> None:
    """A litellm release adding a provider with a localhost default fails here until it is listed."""
    import litellm

    providers = {str(getattr(p, "value", p)) for p in litellm.provider_list}
    loopback = re.compile(r"""["']https?://(?:localhost|127\.0\.0\.1|0\.0\.0\.0)\b""")
    llms = Path(litellm.__file__).parent / "llms"
    found: set[str] = set()
    for source in llms.rglob("*.py"):
        provider = source.relative_to(llms).parts[0]
        code = [
            line
            for line in source.read_text(errors="replace").splitlines()
            if not line.lstrip().startswith("#")
        ]
        if provider in providers and any(loopback.search(line) for line in code):
            found.add(provider)
    assert {"ollama", "llamafile"} <= found, "the scan finds the known ones"
    assert found <= SELF_HOSTED_PROVIDERS, found - SELF_HOSTED_PROVIDERS


@pytest.fixture
def vllm(monkeypatch: pytest.MonkeyPatch) -> Iterator[Listener]:
    """A self-hosted OpenAI-compatible server on the server's network, as litellm's `hosted_vllm` finds it."""
    with listening() as listener:
        monkeypatch.setenv("HOSTED_VLLM_API_BASE", listener.url + "/v1")
        yield listener


def _client(tmp_path: Path, actor_models: str | None) -> TestClient:
    url = f"sqlite:///{tmp_path / 'om.db'}"
    engine = make_engine(url)
    upgrade(engine)
    engine.dispose()
    settings = ApiSettings(
        database_url=url,
        auth="none",
        model="om-local/extractive",
        actor_models=actor_models,
    )
    return TestClient(create_app(settings), base_url="http://localhost")


def _ask(client: TestClient, model: str) -> tuple[int, dict[str, object]]:
    response = client.post(
        "/v1/chat/completions",
        json={"model": model, "messages": [{"role": "user", "content": "hi"}]},
        headers={"X-OM-Thread-Id": "t-self-hosted"},
    )
    return response.status_code, response.json()


@pytest.mark.parametrize("actor_models", [None, "*", "openai/*,*/llama-3"], ids=["unset", "star", "others"])
def test_the_proxy_refuses_a_self_hosted_model_and_calls_nothing(
    tmp_path: Path, vllm: Listener, actor_models: str | None
) -> None:
    with _client(tmp_path, actor_models) as client:
        status, body = _ask(client, "hosted_vllm/llama-3")
    assert status == 422, body
    error = body["error"]
    assert isinstance(error, dict) and error["field"] == "model" and error["code"] == "model_not_allowed"
    assert vllm.received == []


def test_the_operator_naming_the_provider_lets_the_call_through(tmp_path: Path, vllm: Listener) -> None:
    """Positive control: the listener does receive the call once the operator allows the provider."""
    with _client(tmp_path, "hosted_vllm/*") as client:
        status, body = _ask(client, "hosted_vllm/llama-3")
    assert status == 200, body
    assert REPLY in str(body)
    assert len(vllm.received) == 1
