"""Which models `GET /v1/models` lists for an allow-list (`om_api.routes.models.allowed_models`), without
a server: the same rule as the proxy's check (`om_core.models.allowlist.refusal`)."""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from om_api.routes.models import allowed_models
from om_core.models.allowlist import refusal


def names(patterns: tuple[str, ...]) -> list[str]:
    return [model for model, _owner in allowed_models(patterns)]


def test_an_unset_list_lists_hosted_models_and_never_a_self_hosted_one() -> None:
    listed = names(())
    assert "openai/gpt-4o" in listed and len(listed) > 100
    self_hosted = {"ollama", "ollama_chat", "hosted_vllm", "lm_studio"}
    assert not [m for m in listed if m.split("/", 1)[0] in self_hosted]
    assert names(("*",)) == listed, "a bare * does not allow a self-hosted provider either"


def test_patterns_list_what_they_match_and_a_named_self_hosted_provider() -> None:
    listed = names(("openai/gpt-4o", "ollama/*", "my-gateway/some-model"))
    assert "openai/gpt-4o" in listed and "my-gateway/some-model" in listed
    assert not [m for m in listed if m.startswith("openai/") and m != "openai/gpt-4o"]
    assert [m for m in listed if m.startswith("ollama/")], "naming the provider allows it"
    assert dict(allowed_models(("openai/gpt-4o",))) == {"openai/gpt-4o": "openai"}


def test_every_listed_model_is_one_the_proxy_accepts() -> None:
    patterns = ("openai/gpt-4o-mini*", "anthropic/claude-3-5*", "ollama/llama3*", "gpt-4o")
    listed = names(patterns)
    assert len(listed) >= 4
    assert [m for m in listed if refusal(list(patterns), m) is not None] == []
