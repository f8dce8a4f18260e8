"""The model list form with per-entry retries, `[{"model": ..., "maxRetries": ...}]` (issue 33).

Parsed and bounded in the config (a tenant's key writes it), checked against the operator's model
allow-list like any other model, and honoured by `ModelClient`: the first model is retried at most its
`maxRetries` times, then the next one is tried. Failures are injected at the litellm boundary.
"""

from __future__ import annotations

# Imported before litellm: the package pins litellm to its bundled price table (no download at import).
import om_core.models  # noqa: F401

# isort: split
from typing import Any

import pytest

from om_core.config import trust
from om_core.config.options import ObservationalMemoryConfig
from om_core.errors import OMConfigError
from om_core.models.client import ModelClient
from om_core.models.retry import RetryPolicy
from om_core.models.selection import (
    MAX_CHAIN_MODELS,
    MAX_RETRIES_PER_MODEL,
    ModelByInputTokens,
    ModelWithRetries,
    parse_model_spec,
    primary_model,
    resolve_model,
)
from tests.unit.test_models_client import KEYS, _install, _rate_limit, _response, _Sleeps

CHAIN = [{"model": "openai/gpt-5-mini", "maxRetries": 2}, "anthropic/claude-haiku-4-5"]


def test_the_list_form_parses_and_round_trips_through_the_config() -> None:
    config = ObservationalMemoryConfig.parse({"observation": {"model": CHAIN}})
    resolved = config.resolve()
    assert resolved.observation.model == [
        ModelWithRetries("openai/gpt-5-mini", 2),
        "anthropic/claude-haiku-4-5",
    ]
    # The Reflector without a model of its own takes the Observer's, retries included.
    assert resolved.reflection.model == resolved.observation.model
    dumped = config.to_public_dict()
    assert dumped["observation"]["model"] == [
        {"model": "openai/gpt-5-mini", "maxRetries": 2},
        "anthropic/claude-haiku-4-5",
    ]
    assert ObservationalMemoryConfig.parse(dumped) == config


def test_snake_case_a_missing_count_and_a_lone_entry_are_accepted() -> None:
    assert parse_model_spec([{"model": "a/b", "max_retries": 3}], "model") == [ModelWithRetries("a/b", 3)]
    assert parse_model_spec([{"model": "a/b"}], "model") == [ModelWithRetries("a/b", 0)]
    assert parse_model_spec({"model": "a/b", "maxRetries": 1}, "model") == [ModelWithRetries("a/b", 1)]
    tiers = parse_model_spec({"upTo": {"1000": [{"model": "a/b", "maxRetries": 1}, "c/d"]}}, "model")
    assert isinstance(tiers, ModelByInputTokens)
    assert resolve_model(tiers, 10) == [ModelWithRetries("a/b", 1), "c/d"]
    assert primary_model(resolve_model(tiers, 10)) == "a/b"


@pytest.mark.parametrize(
    ("spec", "code", "field"),
    [
        ([{"model": "a/b", "maxRetries": MAX_RETRIES_PER_MODEL + 1}], "MODEL_RETRIES_OUT_OF_RANGE", "[0]"),
        ([{"model": "a/b", "maxRetries": -1}], "MODEL_RETRIES_OUT_OF_RANGE", "[0]"),
        ([{"model": "a/b", "maxRetries": "2"}], "MODEL_RETRIES_OUT_OF_RANGE", "[0]"),
        ([{"model": "a/b", "maxRetries": True}], "MODEL_RETRIES_OUT_OF_RANGE", "[0]"),
        ([{"model": "a/b", "maxRetries": 2.5}], "MODEL_RETRIES_OUT_OF_RANGE", "[0]"),
        ([{"model": "", "maxRetries": 1}], "MODEL_SPEC_INVALID", "[0].model"),
        ([{"model": "a/b", "apiBase": "http://10.0.0.1"}], "MODEL_SPEC_INVALID", "[0]"),
        ([f"p/m{i}" for i in range(MAX_CHAIN_MODELS + 1)], "MODEL_CHAIN_TOO_LONG", ""),
    ],
    ids=["too-many", "negative", "string", "bool", "fraction", "empty-model", "extra-key", "long-chain"],
)
def test_out_of_bounds_entries_are_refused_naming_the_field(spec: Any, code: str, field: str) -> None:
    with pytest.raises(OMConfigError) as caught:
        ObservationalMemoryConfig.parse({"model": spec})
    assert caught.value.code == code
    assert caught.value.field.startswith("model" + field)


def test_a_listed_model_is_still_checked_against_the_operators_allow_list() -> None:
    base = ObservationalMemoryConfig.parse({"model": "openai/gpt-5-mini"})
    policy = trust.MemoryPolicy(models=("openai/*",))
    allowed = base.with_overrides({"model": [{"model": "openai/gpt-4o", "maxRetries": 3}]})
    trust.check(allowed, base, policy)
    for model in ("anthropic/claude-opus-4", "ollama/llama3"):
        tenant = base.with_overrides({"model": ["openai/gpt-4o", {"model": model, "maxRetries": 1}]})
        with pytest.raises(OMConfigError) as caught:
            trust.check(tenant, base, policy)
        assert caught.value.code == "MODEL_NOT_ALLOWED", model
    # A self-hosted provider is refused even with no allow-list at all.
    tenant = base.with_overrides({"model": [{"model": "ollama/llama3", "maxRetries": 1}]})
    with pytest.raises(OMConfigError):
        trust.check(tenant, base, trust.MemoryPolicy())


def test_the_first_model_is_retried_its_own_count_then_the_next_is_tried(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sleeps = _Sleeps()
    client = ModelClient(RetryPolicy(max_retries=8, sleep=sleeps, rng=lambda: 0.5), environ=KEYS)
    fake = _install(
        monkeypatch,
        {"openai/gpt-5-mini": [_rate_limit()], "anthropic/claude-haiku-4-5": [_response("second")]},
    )
    chain = resolve_model(parse_model_spec(CHAIN, "model"), 100)
    completion = client.complete(chain, system="s", user="u")
    assert completion.text == "second"
    assert completion.model == "anthropic/claude-haiku-4-5"
    # 1 + maxRetries (2) on the first model, not the process's 1 + 8.
    assert fake.models() == ["openai/gpt-5-mini"] * 3 + ["anthropic/claude-haiku-4-5"]
    assert completion.attempts == 4
    assert sleeps.delays == [1, 2]


def test_max_retries_zero_moves_on_at_the_first_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    client = ModelClient(RetryPolicy(sleep=_Sleeps(), rng=lambda: 0.5), environ=KEYS)
    fake = _install(
        monkeypatch,
        {"openai/gpt-5-mini": [_rate_limit()], "anthropic/claude-haiku-4-5": [_response("second")]},
    )
    chain = [ModelWithRetries("openai/gpt-5-mini", 0), ModelWithRetries("anthropic/claude-haiku-4-5", 0)]
    assert client.complete(chain, system="s", user="u").text == "second"
    assert fake.models() == ["openai/gpt-5-mini", "anthropic/claude-haiku-4-5"]
