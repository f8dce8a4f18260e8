"""Configuration parsing, resolution and validation (behaviour §2, tests §13.1) and duration parsing."""

from __future__ import annotations

import json
import logging
import pickle
from typing import Any

import pytest
from pydantic import ValidationError

from om_core.config.durations import parse_duration_ms
from om_core.config.options import (
    ObservationalMemoryConfig,
    OMConfigError,
    ResolvedConfig,
    ResolvedRetrieval,
    TokenRange,
    message_threshold_max,
)
from om_core.models.selection import DEFAULT_MODEL, ModelByInputTokens


def resolve(value: Any) -> ResolvedConfig:
    return ObservationalMemoryConfig.parse(value).resolve()


def config_error(value: Any) -> OMConfigError:
    with pytest.raises(OMConfigError) as info:
        ObservationalMemoryConfig.parse(value)
    return info.value


def assert_names_field(error: OMConfigError, field: str) -> None:
    assert error.field == field
    assert field in str(error)


# --------------------------------------------------------------------------------------------------
# §13.1.1 defaults
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [True, {}, {"enabled": True}])
def test_defaults(value: Any) -> None:
    rc = resolve(value)
    obs, refl = rc.observation, rc.reflection
    assert rc.enabled is True
    assert rc.scope == "thread"
    assert obs.model == DEFAULT_MODEL == "google/gemini-2.5-flash"
    assert refl.model == DEFAULT_MODEL
    assert obs.model_is_default_selection and refl.model_is_default_selection
    assert obs.message_tokens == 30000
    assert refl.observation_tokens == 40000
    assert obs.buffer_tokens == 6000
    assert obs.buffer_activation == 0.8
    assert obs.block_after == 36000
    assert refl.buffer_activation == 0.5
    assert refl.block_after == 48000
    assert obs.previous_observer_tokens == 2000
    assert obs.max_tokens_per_batch == 10000
    assert obs.temperature == 0.3
    assert refl.temperature == 0.0
    assert obs.max_output_tokens == 100000
    assert refl.max_output_tokens == 100000
    assert obs.provider_options == {"google": {"thinkingConfig": {"thinkingBudget": 215}}}
    assert refl.provider_options == {"google": {"thinkingConfig": {"thinkingBudget": 1024}}}
    assert rc.async_observation_enabled and rc.async_reflection_enabled
    assert obs.observe_attachments is True
    assert obs.activate_after_idle is None and refl.activate_after_idle is None
    assert obs.activate_on_provider_change is False and refl.activate_on_provider_change is False
    assert (obs.thread_title, obs.buffer_on_idle, obs.manage_working_memory) == (False, False, False)
    assert (rc.share_token_budget, rc.temporal_markers, rc.retrieval) == (False, False, False)
    assert rc.retrieval_options is None
    assert rc.obscure_thread_ids is False
    assert obs.extract == [] and refl.extract == []
    assert rc.warnings == ()
    assert message_threshold_max(rc) == 30000


# --------------------------------------------------------------------------------------------------
# §13.1.2–5 models
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "code", "field"),
    [
        (
            {"model": "openai/gpt-5-mini", "observation": {"model": "x/y"}},
            "MODEL_CONFLICT_OBSERVATION",
            "observation.model",
        ),
        (
            {"model": "openai/gpt-5-mini", "reflection": {"model": "x/y"}},
            "MODEL_CONFLICT_REFLECTION",
            "reflection.model",
        ),
        (
            {"model": "default", "observation": {"model": "default"}},
            "MODEL_CONFLICT_OBSERVATION",
            "observation.model",
        ),
    ],
)
def test_top_level_model_conflicts_with_phase_models(value: Any, code: str, field: str) -> None:
    error = config_error(value)
    assert error.code == code
    assert_names_field(error, field)


def test_reflection_model_is_the_observer_fallback_and_gets_no_default_max_output() -> None:
    rc = resolve({"reflection": {"model": "openai/gpt-5-mini"}})
    assert rc.observation.model == "openai/gpt-5-mini"
    assert rc.reflection.model == "openai/gpt-5-mini"
    assert rc.observation.max_output_tokens is None
    assert rc.reflection.max_output_tokens is None
    assert not rc.observation.model_is_default_selection


def test_observation_model_is_the_reflector_fallback() -> None:
    rc = resolve({"observation": {"model": "a/obs"}})
    assert (rc.observation.model, rc.reflection.model) == ("a/obs", "a/obs")


def test_per_phase_models_are_independent() -> None:
    rc = resolve({"observation": {"model": "a/obs"}, "reflection": {"model": "b/refl"}})
    assert (rc.observation.model, rc.reflection.model) == ("a/obs", "b/refl")


@pytest.mark.parametrize(
    "selector",
    [
        ModelByInputTokens({10000: "a/small", 40000: "b/large"}),
        {"upTo": {"10000": "a/small", "40000": "b/large"}},
    ],
)
def test_model_by_input_tokens_counts_as_default_selection(selector: Any) -> None:
    rc = resolve({"observation": {"model": selector}})
    assert rc.observation.model == ModelByInputTokens({10000: "a/small", 40000: "b/large"})
    assert rc.observation.model_is_default_selection
    assert rc.observation.max_output_tokens == 100000


def test_model_default_string_means_the_default_model() -> None:
    rc = resolve({"model": "default"})
    assert rc.observation.model == rc.reflection.model == DEFAULT_MODEL
    assert rc.observation.max_output_tokens == rc.reflection.max_output_tokens == 100000


def test_explicit_max_output_tokens_always_wins() -> None:
    rc = resolve(
        {
            "model": "openai/gpt-5-mini",
            "observation": {"modelSettings": {"maxOutputTokens": 5000, "temperature": 0.7}},
            "reflection": {"modelSettings": {"maxOutputTokens": 7000}},
        }
    )
    assert rc.observation.max_output_tokens == 5000
    assert rc.observation.temperature == 0.7
    assert rc.reflection.max_output_tokens == 7000
    assert rc.reflection.temperature == 0.0


def test_fallback_chain_is_kept_in_order_with_default_resolved() -> None:
    rc = resolve({"model": ["openai/gpt-5-mini", "default"]})
    assert rc.observation.model == ["openai/gpt-5-mini", DEFAULT_MODEL]
    assert rc.observation.max_output_tokens is None


@pytest.mark.parametrize(
    ("model", "field"),
    [
        ({"upTo": {}}, "observation.model.upTo"),
        ({"upTo": {"abc": "x/y"}}, "observation.model.upTo.abc"),
        ({"upTo": {"0": "x/y"}}, "observation.model.upTo.0"),
        (["a/b", 7], "observation.model[1]"),
        ("", "observation.model"),
    ],
)
def test_invalid_model_specs_name_the_path(model: Any, field: str) -> None:
    error = config_error({"observation": {"model": model}})
    assert error.code.startswith(("MODEL_BY_INPUT_TOKENS_", "MODEL_SPEC_INVALID"))
    assert_names_field(error, field)


def test_provider_options_replace_the_defaults() -> None:
    rc = resolve({"observation": {"providerOptions": {"openai": {"reasoningEffort": "low"}}}})
    assert rc.observation.provider_options == {"openai": {"reasoningEffort": "low"}}
    assert rc.reflection.provider_options == {"google": {"thinkingConfig": {"thinkingBudget": 1024}}}


# --------------------------------------------------------------------------------------------------
# §13.1.6 shared budget
# --------------------------------------------------------------------------------------------------


def test_shared_budget_with_buffering_scales_interval_and_block_after_with_the_threshold() -> None:
    rc = resolve(
        {
            "shareTokenBudget": True,
            "observation": {"messageTokens": 20000, "bufferTokens": 0.2, "blockAfter": 1.5},
            "reflection": {"observationTokens": 80000},
        }
    )
    assert rc.async_observation_enabled and rc.async_reflection_enabled
    assert rc.observation.message_tokens == TokenRange(min=20000, max=100000)
    assert rc.observation.buffer_tokens_at(100000) == 20000
    assert rc.observation.buffer_tokens_at(20000) == 4000
    assert rc.observation.block_after_at(100000) == 150000
    assert rc.observation.block_after_at(20000) == 30000
    assert rc.observation.buffer_activation == 0.8


def test_shared_budget_keeps_absolute_values_fixed_and_checks_them_against_the_range() -> None:
    base = {"shareTokenBudget": True, "reflection": {"observationTokens": 80000}}
    rc = resolve(
        {**base, "observation": {"messageTokens": 20000, "bufferTokens": 5000, "blockAfter": 120000}}
    )
    assert rc.observation.buffer_tokens_at(20000) == rc.observation.buffer_tokens_at(100000) == 5000
    assert rc.observation.block_after_at(20000) == rc.observation.block_after_at(100000) == 120000
    error = config_error({**base, "observation": {"messageTokens": 20000, "blockAfter": 90000}})
    assert error.code == "BLOCK_AFTER_BELOW_THRESHOLD"
    assert "shared budget" in str(error)
    error = config_error({**base, "observation": {"messageTokens": 20000, "bufferTokens": 25000}})
    assert error.code == "BUFFER_TOKENS_TOO_LARGE"


def test_without_a_shared_budget_the_interval_and_block_after_are_fixed() -> None:
    rc = resolve({"observation": {"messageTokens": 20000}})
    assert rc.observation.buffer_tokens_at(5000) == rc.observation.buffer_tokens == 4000
    assert rc.observation.block_after_at(5000) == rc.observation.block_after == 24000


def test_shared_budget_with_sync_observation_is_a_range() -> None:
    rc = resolve(
        {
            "shareTokenBudget": True,
            "observation": {"messageTokens": 20000, "bufferTokens": False},
            "reflection": {"observationTokens": 80000},
        }
    )
    assert rc.share_token_budget
    assert rc.observation.message_tokens == TokenRange(min=20000, max=100000)
    assert message_threshold_max(rc) == 100000
    assert rc.observation.block_after is None
    assert rc.observation.buffer_activation is None
    assert rc.observation.buffer_tokens is None
    assert rc.reflection.buffer_activation is None
    assert rc.reflection.block_after is None
    assert not rc.async_observation_enabled and not rc.async_reflection_enabled


def test_shared_budget_in_resource_scope_is_sync_by_default() -> None:
    rc = resolve({"shareTokenBudget": True, "scope": "resource"})
    assert rc.observation.message_tokens == TokenRange(30000, 70000)


# --------------------------------------------------------------------------------------------------
# §13.1.7 bufferTokens
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("buffer_tokens", "message_tokens", "resolved"),
    [
        (0.99, 30000, 29700),
        (0.2, 30000, 6000),
        (0.25, 20000, 5000),
        (5000, 30000, 5000),
        (1, 30000, 1),  # >= 1 is absolute
        (0.5, 30001, 15001),  # 15000.5 rounds half up, not to even
        (29999, 30000, 29999),
    ],
)
def test_buffer_tokens_resolution(buffer_tokens: float, message_tokens: int, resolved: int) -> None:
    rc = resolve({"observation": {"messageTokens": message_tokens, "bufferTokens": buffer_tokens}})
    assert rc.observation.buffer_tokens == resolved


@pytest.mark.parametrize(
    ("buffer_tokens", "code"),
    [
        (30000, "BUFFER_TOKENS_TOO_LARGE"),
        (45000, "BUFFER_TOKENS_TOO_LARGE"),
        (0, "BUFFER_TOKENS_NOT_POSITIVE"),
        (-0.5, "BUFFER_TOKENS_NOT_POSITIVE"),
        (-100, "BUFFER_TOKENS_NOT_POSITIVE"),
        (0.00001, "BUFFER_TOKENS_NOT_POSITIVE"),  # resolves to 0 tokens
    ],
)
def test_buffer_tokens_errors(buffer_tokens: float, code: str) -> None:
    error = config_error({"observation": {"messageTokens": 30000, "bufferTokens": buffer_tokens}})
    assert error.code == code
    assert_names_field(error, "observation.bufferTokens")
    assert repr(buffer_tokens) in str(error)


def test_buffer_tokens_false_disables_all_async_buffering() -> None:
    rc = resolve({"observation": {"bufferTokens": False}})
    assert not rc.async_observation_enabled and not rc.async_reflection_enabled
    obs, refl = rc.observation, rc.reflection
    assert (obs.buffer_tokens, obs.buffer_activation, obs.block_after) == (None, None, None)
    assert (refl.buffer_activation, refl.block_after) == (None, None)
    assert obs.message_tokens == 30000


# --------------------------------------------------------------------------------------------------
# §13.1.8 bufferActivation
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("activation", "code"),
    [
        (500, "BUFFER_ACTIVATION_DEAD_ZONE"),
        (1.01, "BUFFER_ACTIVATION_DEAD_ZONE"),
        (999, "BUFFER_ACTIVATION_DEAD_ZONE"),
        (30000, "BUFFER_ACTIVATION_RETENTION_TOO_LARGE"),
        (40000, "BUFFER_ACTIVATION_RETENTION_TOO_LARGE"),
        (0, "BUFFER_ACTIVATION_NOT_POSITIVE"),
        (-0.2, "BUFFER_ACTIVATION_NOT_POSITIVE"),
    ],
)
def test_buffer_activation_errors(activation: float, code: str) -> None:
    error = config_error({"observation": {"messageTokens": 30000, "bufferActivation": activation}})
    assert error.code == code
    assert_names_field(error, "observation.bufferActivation")


@pytest.mark.parametrize("activation", [4000, 1000, 29999, 1, 0.5, 0.01])
def test_buffer_activation_accepted_values_are_kept_as_given(activation: float) -> None:
    rc = resolve({"observation": {"messageTokens": 30000, "bufferActivation": activation}})
    assert rc.observation.buffer_activation == activation


# --------------------------------------------------------------------------------------------------
# §13.1.9 blockAfter
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("block_after", "message_tokens", "resolved"),
    [
        (1.5, 20000, 30000),
        (1.0, 30000, 30000),  # multiplier 1 = exactly the threshold
        (1.2, 30000, 36000),
        (99, 1000, 99000),
        (30001, 30000, 30001),
        (150, 100, 150),
    ],
)
def test_block_after_resolution(block_after: float, message_tokens: int, resolved: int) -> None:
    rc = resolve(
        {"observation": {"messageTokens": message_tokens, "blockAfter": block_after, "bufferTokens": 0.2}}
    )
    assert rc.observation.block_after == resolved


@pytest.mark.parametrize("block_after", [150, 30000, 0.9, 0.5, 0, -2])
def test_block_after_below_threshold(block_after: float) -> None:
    error = config_error({"observation": {"messageTokens": 30000, "blockAfter": block_after}})
    assert error.code == "BLOCK_AFTER_BELOW_THRESHOLD"
    assert_names_field(error, "observation.blockAfter")


@pytest.mark.parametrize(
    ("block_after", "resolved"), [(None, 48000), (1.5, 60000), (1.0, 40000), (40001, 40001)]
)
def test_reflection_block_after(block_after: float | None, resolved: int) -> None:
    rc = resolve({"reflection": {"blockAfter": block_after}})
    assert rc.reflection.block_after == resolved


@pytest.mark.parametrize("block_after", [40000, 500, 0.9])
def test_reflection_block_after_below_threshold(block_after: float) -> None:
    error = config_error({"reflection": {"blockAfter": block_after}})
    assert error.code == "REFLECTION_BLOCK_AFTER_BELOW_THRESHOLD"
    assert_names_field(error, "reflection.blockAfter")


def test_block_after_without_buffering_is_dropped_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="om_core.config.options"):
        rc = resolve(
            {"observation": {"bufferTokens": False, "blockAfter": 1.5}, "reflection": {"blockAfter": 2}}
        )
    assert rc.observation.block_after is None
    assert rc.reflection.block_after is None
    assert any("observation.blockAfter" in w for w in rc.warnings)
    assert any("reflection.blockAfter" in w for w in rc.warnings)
    assert "observation.blockAfter" in caplog.text


# --------------------------------------------------------------------------------------------------
# §13.1.10 resource scope
# --------------------------------------------------------------------------------------------------


def test_resource_scope_disables_buffering_silently() -> None:
    rc = resolve({"scope": "resource"})
    assert rc.scope == "resource"
    assert not rc.async_observation_enabled and not rc.async_reflection_enabled
    assert rc.observation.buffer_tokens is None
    assert rc.observation.block_after is None
    assert rc.reflection.buffer_activation is None
    assert rc.warnings == ()


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ({"observation": {"bufferTokens": 0.25}}, "observation.bufferTokens"),
        ({"observation": {"bufferActivation": 0.5}}, "observation.bufferActivation"),
        ({"reflection": {"bufferActivation": 0.5}}, "reflection.bufferActivation"),
    ],
)
def test_resource_scope_turns_buffering_on_only_when_asked(value: dict[str, Any], field: str) -> None:
    # The reference refuses these (RESOURCE_SCOPE_NO_ASYNC); om buffers in resource scope on request.
    assert resolve({"scope": "resource", **value}).async_observation_enabled, field
    assert not resolve({"scope": "resource"}).async_observation_enabled
    assert resolve({"scope": "thread", **value}).async_observation_enabled


def test_resource_scope_accepts_explicit_buffer_tokens_false() -> None:
    rc = resolve({"scope": "resource", "observation": {"bufferTokens": False}})
    assert not rc.async_observation_enabled


# --------------------------------------------------------------------------------------------------
# §13.1.11 previousObserverTokens, §13.1.12 reflection.bufferActivation
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [-1, float("inf"), float("-inf"), float("nan"), True])
def test_previous_observer_tokens_invalid(value: Any) -> None:
    error = config_error({"observation": {"previousObserverTokens": value}})
    assert error.code == "PREVIOUS_OBSERVER_TOKENS_INVALID"
    assert_names_field(error, "observation.previousObserverTokens")


@pytest.mark.parametrize(("value", "resolved"), [(False, None), (0, 0), (5000, 5000), (2500.5, 2501)])
def test_previous_observer_tokens_valid(value: Any, resolved: int | None) -> None:
    assert (
        resolve({"observation": {"previousObserverTokens": value}}).observation.previous_observer_tokens
        == resolved
    )


@pytest.mark.parametrize("value", [1.5, 0, -0.1, 2])
def test_reflection_buffer_activation_range(value: float) -> None:
    error = config_error({"reflection": {"bufferActivation": value}})
    assert error.code == "REFLECTION_BUFFER_ACTIVATION_RANGE"
    assert_names_field(error, "reflection.bufferActivation")


@pytest.mark.parametrize("value", [1, 0.25])
def test_reflection_buffer_activation_valid(value: float) -> None:
    assert resolve({"reflection": {"bufferActivation": value}}).reflection.buffer_activation == value


# --------------------------------------------------------------------------------------------------
# §13.1.13 durations
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("5m", 300000),
        ("1hr", 3600000),
        ("1.5 h", 5400000),
        ("250ms", 250),
        ("30 seconds", 30000),
        (300000, 300000),
        (0, 0),
        (1500.5, 1501),
        ("  2 MINUTES ", 120000),
        ("10S", 10000),
        ("1 msec", 1),
        ("3 hrs", 10800000),
        ("2min", 120000),
        ("auto", "auto"),
        (False, None),
        (None, None),
    ],
)
def test_parse_duration(value: Any, expected: int | str | None) -> None:
    assert parse_duration_ms(value, "activateAfterIdle") == expected


@pytest.mark.parametrize(
    "value", ["10x", -5, "5", "m", "-5m", "5 m s", "", "1,5h", float("inf"), float("nan"), True, [5]]
)
def test_parse_duration_errors_name_the_field(value: Any) -> None:
    with pytest.raises(OMConfigError) as info:
        parse_duration_ms(value, "reflection.activateAfterIdle")
    assert info.value.code == "ACTIVATE_AFTER_IDLE_INVALID"
    assert_names_field(info.value, "reflection.activateAfterIdle")


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ({"activateAfterIdle": "10x"}, "activateAfterIdle"),
        ({"observation": {"activateAfterIdle": -5}}, "observation.activateAfterIdle"),
        ({"reflection": {"activateAfterIdle": "soon"}}, "reflection.activateAfterIdle"),
    ],
)
def test_config_duration_errors_name_the_field_path(value: dict[str, Any], field: str) -> None:
    error = config_error(value)
    assert error.code == "ACTIVATE_AFTER_IDLE_INVALID"
    assert_names_field(error, field)


# --------------------------------------------------------------------------------------------------
# §13.1.14 inheritance
# --------------------------------------------------------------------------------------------------


def test_idle_inheritance_with_phase_overrides() -> None:
    rc = resolve(
        {
            "activateAfterIdle": "5m",
            "observation": {"activateAfterIdle": False},
            "reflection": {"activateAfterIdle": "10m"},
        }
    )
    assert rc.observation.activate_after_idle is None
    assert rc.reflection.activate_after_idle == 600000


def test_idle_top_level_only_reaches_observation() -> None:
    rc = resolve({"activateAfterIdle": "5m"})
    assert rc.observation.activate_after_idle == 300000
    assert rc.reflection.activate_after_idle is None


def test_idle_auto_is_passed_through() -> None:
    rc = resolve({"activateAfterIdle": "auto", "reflection": {"activateAfterIdle": "auto"}})
    assert rc.observation.activate_after_idle == "auto"
    assert rc.reflection.activate_after_idle == "auto"


def test_phase_idle_value_wins_over_top_level() -> None:
    rc = resolve({"activateAfterIdle": "5m", "observation": {"activateAfterIdle": 1000}})
    assert rc.observation.activate_after_idle == 1000


@pytest.mark.parametrize(
    ("value", "observation", "reflection"),
    [
        ({"activateOnProviderChange": True}, True, False),
        (
            {"activateOnProviderChange": True, "observation": {"activateOnProviderChange": False}},
            False,
            False,
        ),
        ({"observation": {"activateOnProviderChange": True}}, True, False),
        ({"reflection": {"activateOnProviderChange": True}}, False, True),
    ],
)
def test_provider_change_inheritance(value: dict[str, Any], observation: bool, reflection: bool) -> None:
    rc = resolve(value)
    assert rc.observation.activate_on_provider_change is observation
    assert rc.reflection.activate_on_provider_change is reflection


# --------------------------------------------------------------------------------------------------
# §13.1.15 enabling
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "enabled"),
    [
        (True, True),
        ({}, True),
        ({"enabled": True}, True),
        ({"enabled": False, "observation": {"messageTokens": 5000}}, False),
        (False, False),
        (None, False),
    ],
)
def test_enabling(value: Any, enabled: bool) -> None:
    config = ObservationalMemoryConfig.parse(value)
    assert config.enabled is enabled
    assert config.resolve().enabled is enabled


def test_parse_returns_an_existing_config_unchanged() -> None:
    config = ObservationalMemoryConfig.parse({"scope": "resource"})
    assert ObservationalMemoryConfig.parse(config) is config


@pytest.mark.parametrize("value", [1, "yes", [True]])
def test_parse_rejects_other_top_level_values(value: Any) -> None:
    error = config_error(value)
    assert error.code == "CONFIG_INVALID"


@pytest.mark.parametrize(
    ("text", "enabled"), [("true", True), ("false", False), ("null", False), ('{"scope": "resource"}', True)]
)
def test_parse_json(text: str, enabled: bool) -> None:
    assert ObservationalMemoryConfig.parse_json(text).enabled is enabled


# --------------------------------------------------------------------------------------------------
# Other options
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("retrieval", "expected"),
    [
        (False, None),
        (True, ResolvedRetrieval(vector=False, scope="resource", instructions=None)),
        ({"vector": True}, ResolvedRetrieval(vector=True, scope="resource", instructions=None)),
        (
            {"scope": "thread", "instructions": "Prefer recent threads."},
            ResolvedRetrieval(vector=False, scope="thread", instructions="Prefer recent threads."),
        ),
    ],
)
def test_retrieval(retrieval: Any, expected: ResolvedRetrieval | None) -> None:
    rc = resolve({"retrieval": retrieval})
    assert rc.retrieval is (expected is not None)
    assert rc.retrieval_options == expected


@pytest.mark.parametrize(
    ("value", "obscured"),
    [
        ({}, False),
        ({"scope": "resource"}, True),
        ({"scope": "resource", "obscureThreadIds": False}, False),
        ({"obscureThreadIds": True}, True),
    ],
)
def test_obscure_thread_ids(value: dict[str, Any], obscured: bool) -> None:
    assert resolve(value).obscure_thread_ids is obscured


@pytest.mark.parametrize("attachments", [True, False, "auto", ["image/*", "application/pdf"], []])
def test_observe_attachments(attachments: Any) -> None:
    assert (
        resolve({"observation": {"observeAttachments": attachments}}).observation.observe_attachments
        == attachments
    )


def test_pass_through_options() -> None:
    extractor = {"name": "User profile", "instructions": "Stable profile facts."}
    rc = resolve(
        {
            "temporalMarkers": True,
            "observation": {
                "instruction": "Focus on health.",
                "threadTitle": True,
                "bufferOnIdle": True,
                "manageWorkingMemory": True,
                "maxTokensPerBatch": 5000,
                "extract": [extractor],
            },
            "reflection": {"instruction": "Group health facts.", "extract": [extractor]},
        }
    )
    assert rc.temporal_markers
    obs = rc.observation
    assert (obs.instruction, obs.thread_title, obs.buffer_on_idle) == ("Focus on health.", True, True)
    assert (obs.manage_working_memory, obs.max_tokens_per_batch) == (True, 5000)
    assert obs.extract == [extractor]
    assert rc.reflection.instruction == "Group health facts."
    assert rc.reflection.extract == [extractor]


# --------------------------------------------------------------------------------------------------
# Key spelling, unknown keys, wrong types
# --------------------------------------------------------------------------------------------------

_CAMEL = {
    "model": "openai/gpt-5-mini",
    "activateAfterIdle": "5m",
    "activateOnProviderChange": True,
    "temporalMarkers": True,
    "obscureThreadIds": True,
    "retrieval": {"vector": True},
    "observation": {
        "messageTokens": 20000,
        "bufferTokens": 4000,
        "bufferActivation": 0.7,
        "blockAfter": 1.5,
        "previousObserverTokens": 1000,
        "maxTokensPerBatch": 8000,
        "threadTitle": True,
        "bufferOnIdle": True,
        "observeAttachments": ["image/*"],
        "modelSettings": {"temperature": 0.5, "maxOutputTokens": 9000},
        "providerOptions": {"google": {"thinkingConfig": {"thinkingBudget": 1}}},
        "activateAfterIdle": "1h",
        "activateOnProviderChange": False,
        "manageWorkingMemory": True,
    },
    "reflection": {
        "observationTokens": 50000,
        "bufferActivation": 0.4,
        "blockAfter": 60001,
        "modelSettings": {"maxOutputTokens": 8000},
        "activateAfterIdle": 1000,
        "activateOnProviderChange": True,
    },
}

_SNAKE = {
    "model": "openai/gpt-5-mini",
    "activate_after_idle": "5m",
    "activate_on_provider_change": True,
    "temporal_markers": True,
    "obscure_thread_ids": True,
    "retrieval": {"vector": True},
    "observation": {
        "message_tokens": 20000,
        "buffer_tokens": 4000,
        "buffer_activation": 0.7,
        "block_after": 1.5,
        "previous_observer_tokens": 1000,
        "max_tokens_per_batch": 8000,
        "thread_title": True,
        "buffer_on_idle": True,
        "observe_attachments": ["image/*"],
        "model_settings": {"temperature": 0.5, "max_output_tokens": 9000},
        "provider_options": {"google": {"thinkingConfig": {"thinkingBudget": 1}}},
        "activate_after_idle": "1h",
        "activate_on_provider_change": False,
        "manage_working_memory": True,
    },
    "reflection": {
        "observation_tokens": 50000,
        "buffer_activation": 0.4,
        "block_after": 60001,
        "model_settings": {"max_output_tokens": 8000},
        "activate_after_idle": 1000,
        "activate_on_provider_change": True,
    },
}


def test_camel_and_snake_case_are_equivalent() -> None:
    camel = ObservationalMemoryConfig.parse(_CAMEL)
    snake = ObservationalMemoryConfig.parse(_SNAKE)
    assert camel == snake
    assert camel.resolve() == snake.resolve()
    assert (
        camel.to_public_dict()
        == snake.to_public_dict()
        == ObservationalMemoryConfig.parse(_CAMEL).to_public_dict()
    )
    rc = camel.resolve()
    assert rc.observation.buffer_tokens == 4000
    assert rc.observation.block_after == 30000
    assert rc.observation.activate_after_idle == 3600000
    assert rc.reflection.block_after == 60001
    # provider option keys are passed through untouched, never re-cased
    assert rc.observation.provider_options == {"google": {"thinkingConfig": {"thinkingBudget": 1}}}


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ({"messageTokens": 1000}, "messageTokens"),
        ({"observation": {"bufferToken": 0.2}}, "observation.bufferToken"),
        ({"observation": {"modelSettings": {"temprature": 0.1}}}, "observation.modelSettings.temprature"),
        ({"reflection": {"model_settings": {"topP": 0.1}}}, "reflection.modelSettings.topP"),
        ({"retrieval": {"vectr": True}}, "retrieval.vectr"),
        ({"hooks": {}}, "hooks"),
    ],
)
def test_unknown_keys_are_rejected_with_their_path(value: dict[str, Any], field: str) -> None:
    error = config_error(value)
    assert error.code == "UNKNOWN_OPTION"
    assert_names_field(error, field)
    assert "valid options" in str(error)


def test_unknown_key_error_suggests_the_closest_option() -> None:
    error = config_error({"observation": {"bufferToken": 0.2}})
    assert "did you mean 'bufferTokens'" in str(error)


def test_the_same_option_in_both_spellings_is_rejected() -> None:
    error = config_error({"observation": {"messageTokens": 1000, "message_tokens": 2000}})
    assert error.code == "DUPLICATE_OPTION"
    assert_names_field(error, "observation.messageTokens")


@pytest.mark.parametrize(
    "value",
    [
        {"observation": {"messageTokens": "30000"}},
        {"observation": {"messageTokens": True}},
        {"observation": {"messageTokens": 0}},
        {"observation": {"bufferTokens": True}},
        {"observation": {"bufferTokens": "0.2"}},
        {"scope": "global"},
        {"temporalMarkers": "yes"},
        {"observation": {"observeAttachments": "images"}},
        {"observation": {"modelSettings": {"temperature": -1}}},
        {"observation": "fast"},
    ],
)
def test_wrong_types_raise_validation_errors_naming_the_field(value: dict[str, Any]) -> None:
    with pytest.raises(ValidationError) as info:
        ObservationalMemoryConfig.parse(value)
    first_key = next(iter(value))
    assert first_key in str(info.value)


def test_direct_construction_also_raises_config_errors() -> None:
    with pytest.raises(OMConfigError) as info:
        ObservationalMemoryConfig(observation={"bufferTokens": 0})
    assert info.value.code == "BUFFER_TOKENS_NOT_POSITIVE"


def test_config_is_frozen() -> None:
    config = ObservationalMemoryConfig.parse(True)
    with pytest.raises(ValidationError):
        config.scope = "resource"  # type: ignore[misc]


# --------------------------------------------------------------------------------------------------
# Public dict and overrides
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        True,
        _CAMEL,
        {"observation": {"model": {"upTo": {"10000": "a/x", "40000": ["b/y", "c/z"]}}}},
        {"shareTokenBudget": True, "observation": {"bufferTokens": False}},
        {"scope": "resource", "retrieval": True},
    ],
)
def test_public_dict_is_camel_case_json_and_round_trips(value: Any) -> None:
    config = ObservationalMemoryConfig.parse(value)
    public = config.to_public_dict()
    assert json.loads(json.dumps(public)) == public
    assert ObservationalMemoryConfig.parse(public) == config
    assert ObservationalMemoryConfig.parse(public).resolve() == config.resolve()
    assert all("_" not in key for key in public["observation"])


def test_public_dict_omits_unset_options() -> None:
    public = ObservationalMemoryConfig.parse({"observation": {"bufferTokens": 0.25}}).to_public_dict()
    assert public["observation"]["bufferTokens"] == 0.25
    assert "bufferActivation" not in public["observation"]
    assert "model" not in public


def test_with_overrides_deep_merges_blocks() -> None:
    base = ObservationalMemoryConfig.parse(
        {
            "observation": {"messageTokens": 20000, "instruction": "Keep dates."},
            "reflection": {"observationTokens": 50000},
        }
    )
    merged = base.with_overrides({"observation": {"message_tokens": 40000}, "temporal_markers": True})
    rc = merged.resolve()
    assert rc.observation.message_tokens == 40000
    assert rc.observation.buffer_tokens == 8000
    assert rc.observation.instruction == "Keep dates."
    assert rc.reflection.observation_tokens == 50000
    assert rc.temporal_markers
    assert base.resolve().observation.message_tokens == 20000  # the original is untouched


def test_with_overrides_merges_model_settings_and_replaces_models() -> None:
    base = ObservationalMemoryConfig.parse(
        {
            "observation": {
                "model": {"upTo": {"10000": "a/x", "40000": "b/y"}},
                "modelSettings": {"temperature": 0.5, "maxOutputTokens": 9000},
            }
        }
    )
    merged = base.with_overrides(
        {"observation": {"model": {"upTo": {"5000": "c/z"}}, "modelSettings": {"temperature": 0.1}}}
    )
    obs = merged.resolve().observation
    assert obs.model == ModelByInputTokens({5000: "c/z"})
    assert (obs.temperature, obs.max_output_tokens) == (0.1, 9000)


def test_with_overrides_none_restores_the_default() -> None:
    base = ObservationalMemoryConfig.parse({"observation": {"messageTokens": 20000, "bufferTokens": 0.5}})
    merged = base.with_overrides({"observation": {"messageTokens": None, "bufferTokens": None}})
    assert merged.resolve().observation.message_tokens == 30000
    assert merged.resolve().observation.buffer_tokens == 6000


def test_with_overrides_revalidates() -> None:
    base = ObservationalMemoryConfig.parse({"observation": {"bufferTokens": 5000}})
    with pytest.raises(OMConfigError) as info:
        base.with_overrides({"observation": {"messageTokens": 5000}})
    assert info.value.code == "BUFFER_TOKENS_TOO_LARGE"


def test_with_overrides_can_disable_async_and_enable_shared_budget() -> None:
    base = ObservationalMemoryConfig.parse({})
    rc = base.with_overrides({"shareTokenBudget": True, "observation": {"bufferTokens": False}}).resolve()
    assert rc.observation.message_tokens == TokenRange(30000, 70000)


@pytest.mark.parametrize(
    ("partial", "code", "field"),
    [
        ({"observation": {"nope": 1}}, "UNKNOWN_OPTION", "observation.nope"),
        (
            {"observation": {"bufferTokens": 1000, "buffer_tokens": 2000}},
            "DUPLICATE_OPTION",
            "observation.bufferTokens",
        ),
    ],
)
def test_with_overrides_rejects_bad_keys(partial: dict[str, Any], code: str, field: str) -> None:
    with pytest.raises(OMConfigError) as info:
        ObservationalMemoryConfig.parse({}).with_overrides(partial)
    assert info.value.code == code
    assert_names_field(info.value, field)


def test_config_error_is_a_value_error_with_code_field_and_value() -> None:
    error = config_error({"observation": {"bufferActivation": 500}})
    assert isinstance(error, ValueError)
    assert (error.code, error.field, error.value) == (
        "BUFFER_ACTIVATION_DEAD_ZONE",
        "observation.bufferActivation",
        500,
    )
    assert "500" in str(error)


@pytest.mark.parametrize(
    "error",
    [
        OMConfigError("BUFFER_TOKENS_TOO_LARGE", "observation.bufferTokens", "too large", 30000),
        OMConfigError("UNKNOWN_OPTION", "observation.nope", "unknown option"),
    ],
)
def test_config_errors_survive_pickling(error: OMConfigError) -> None:
    clone = pickle.loads(pickle.dumps(error))
    assert (clone.code, clone.field, clone.value, str(clone)) == (
        error.code,
        error.field,
        error.value,
        str(error),
    )
