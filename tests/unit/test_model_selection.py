"""ModelByInputTokens and model-spec parsing (behaviour §11, tests §13.15)."""

from __future__ import annotations

import json
import pickle
from typing import Any

import pytest
from pydantic import BaseModel

from om_core.errors import OMConfigError, OMModelTierExceeded
from om_core.models.selection import (
    DEFAULT_MODEL,
    ModelByInputTokens,
    ModelSpec,
    is_default_selection,
    model_spec_to_json,
    parse_model_spec,
    resolve_default_alias,
)


@pytest.fixture
def selector() -> ModelByInputTokens:
    return ModelByInputTokens({40000: "B", 10000: "A"})


def test_default_model_constant() -> None:
    assert DEFAULT_MODEL == "google/gemini-2.5-flash"


# §13.15.1
def test_thresholds_are_ascending_whatever_the_declaration_order(selector: ModelByInputTokens) -> None:
    assert selector.get_thresholds() == [10000, 40000]
    assert selector.tiers == [(10000, "A"), (40000, "B")]


# §13.15.2
@pytest.mark.parametrize(
    ("input_tokens", "expected"),
    [(0, "A"), (1, "A"), (10000, "A"), (10001, "B"), (39999, "B"), (40000, "B")],
)
def test_resolve_picks_smallest_inclusive_threshold(
    selector: ModelByInputTokens, input_tokens: int, expected: str
) -> None:
    assert selector.resolve(input_tokens) == expected


def test_select_reports_the_chosen_threshold(selector: ModelByInputTokens) -> None:
    assert selector.select(10001) == (40000, "B")


@pytest.mark.parametrize("input_tokens", [40001, 45000, 10**9])
def test_resolve_above_largest_threshold_raises_tier_exceeded(
    selector: ModelByInputTokens, input_tokens: int
) -> None:
    with pytest.raises(OMModelTierExceeded) as info:
        selector.resolve(input_tokens)
    error = info.value
    assert error.code == "MODEL_TIER_EXCEEDED"
    assert error.input_tokens == input_tokens
    assert error.largest_threshold == 40000
    assert str(input_tokens) in str(error)
    assert "40000" in str(error)
    assert isinstance(error, RuntimeError)
    assert not isinstance(error, OMConfigError)


def test_tier_exceeded_survives_pickling(selector: ModelByInputTokens) -> None:
    with pytest.raises(OMModelTierExceeded) as info:
        selector.resolve(50000)
    clone = pickle.loads(pickle.dumps(info.value))
    assert (clone.code, clone.input_tokens, clone.largest_threshold) == ("MODEL_TIER_EXCEEDED", 50000, 40000)


# §13.15.3
def test_empty_up_to_is_rejected() -> None:
    with pytest.raises(OMConfigError) as info:
        ModelByInputTokens({})
    assert info.value.code == "MODEL_BY_INPUT_TOKENS_EMPTY"
    assert "upTo" in str(info.value)


@pytest.mark.parametrize(
    "bad_key", [0, -5, "abc", "0", "-1", "", float("inf"), float("nan"), "inf", True, None]
)
def test_invalid_keys_are_rejected(bad_key: Any) -> None:
    with pytest.raises(OMConfigError) as info:
        ModelByInputTokens({bad_key: "A", 10: "B"})
    assert info.value.code == "MODEL_BY_INPUT_TOKENS_INVALID_KEY"
    assert info.value.field == f"upTo.{bad_key}"
    assert info.value.field in str(info.value)


@pytest.mark.parametrize(
    ("up_to", "thresholds"),
    [
        ({"10000": "A", "40000": "B"}, [10000, 40000]),
        ({" 500 ": "A"}, [500]),
        ({"1e4": "A"}, [10000]),
        ({10000.0: "A"}, [10000]),
        ({100.7: "A"}, [100]),  # floored: n <= 100.7 and n <= 100 select the same whole counts
    ],
)
def test_numeric_and_string_keys_are_accepted(up_to: dict[Any, str], thresholds: list[int]) -> None:
    assert ModelByInputTokens(up_to).get_thresholds() == thresholds


def test_the_same_threshold_twice_is_rejected() -> None:
    with pytest.raises(OMConfigError) as info:
        ModelByInputTokens({10000: "A", "10000": "B"})
    assert info.value.code == "MODEL_BY_INPUT_TOKENS_INVALID_KEY"


@pytest.mark.parametrize("bad_model", ["", "   ", 5, None, [], {"upTo": {1: "x"}}])
def test_tier_models_must_be_ids_or_chains(bad_model: Any) -> None:
    with pytest.raises(OMConfigError) as info:
        ModelByInputTokens({10: bad_model})
    assert info.value.code == "MODEL_SPEC_INVALID"
    assert info.value.field.startswith("upTo.10")


def test_a_tier_may_be_a_fallback_chain() -> None:
    selector = ModelByInputTokens({10: ["a/x", "b/y"]})
    assert selector.resolve(3) == ["a/x", "b/y"]


def test_json_form_round_trips(selector: ModelByInputTokens) -> None:
    as_json = selector.to_json()
    assert as_json == {"upTo": {"10000": "A", "40000": "B"}}
    assert json.loads(json.dumps(as_json)) == as_json
    assert ModelByInputTokens.from_json(as_json) == selector
    assert ModelByInputTokens.from_json({"up_to": {10000: "A", 40000: "B"}}) == selector


@pytest.mark.parametrize(
    "bad_json", [{}, {"upTo": {1: "a"}, "extra": 1}, {"upTo": {1: "a"}, "up_to": {1: "a"}}, {"tiers": {}}]
)
def test_json_form_needs_exactly_up_to(bad_json: dict[str, Any]) -> None:
    with pytest.raises(OMConfigError) as info:
        ModelByInputTokens.from_json(bad_json, field="observation.model")
    assert info.value.code == "MODEL_SPEC_INVALID"
    assert info.value.field == "observation.model"


def test_json_form_errors_carry_the_given_field_path() -> None:
    with pytest.raises(OMConfigError) as info:
        ModelByInputTokens.from_json({"upTo": {"abc": "x"}}, field="reflection.model")
    assert info.value.field == "reflection.model.upTo.abc"
    assert "reflection.model.upTo.abc" in str(info.value)


def test_equality_and_repr() -> None:
    assert ModelByInputTokens({1: "a", 2: "b"}) == ModelByInputTokens({2: "b", 1: "a"})
    assert ModelByInputTokens({1: "a"}) != ModelByInputTokens({1: "b"})
    assert "1: 'a'" in repr(ModelByInputTokens({1: "a"}))


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("openai/gpt-5-mini", "openai/gpt-5-mini"),
        ("  openai/gpt-5-mini ", "openai/gpt-5-mini"),
        ("default", "default"),
        (["a/x", "b/y"], ["a/x", "b/y"]),
        (("a/x",), ["a/x"]),
        ({"upTo": {"10": "a/x"}}, ModelByInputTokens({10: "a/x"})),
        (["a/x", {"upTo": {"10": "b/y"}}], ["a/x", ModelByInputTokens({10: "b/y"})]),
    ],
)
def test_parse_model_spec_accepts_every_form(value: Any, expected: ModelSpec) -> None:
    assert parse_model_spec(value, "model") == expected


@pytest.mark.parametrize(
    ("value", "field"),
    [("", "model"), ([], "model"), ([["a/x"]], "model[0]"), (["a/x", 3], "model[1]"), (3.5, "model")],
)
def test_parse_model_spec_rejects_malformed_specs(value: Any, field: str) -> None:
    with pytest.raises(OMConfigError) as info:
        parse_model_spec(value, "model")
    assert info.value.code == "MODEL_SPEC_INVALID"
    assert info.value.field == field


def test_model_spec_to_json_is_json_ready() -> None:
    spec: ModelSpec = ["a/x", ModelByInputTokens({10: "b/y"})]
    assert model_spec_to_json(spec) == ["a/x", {"upTo": {"10": "b/y"}}]


@pytest.mark.parametrize(
    ("spec", "is_default"),
    [
        (None, True),
        ("default", True),
        (ModelByInputTokens({10: "a/x"}), True),
        ("google/gemini-2.5-flash", False),  # named explicitly: a custom choice
        ("openai/gpt-5-mini", False),
        (["default", "a/x"], False),
    ],
)
def test_default_selection(spec: ModelSpec | None, is_default: bool) -> None:
    assert is_default_selection(spec) is is_default


@pytest.mark.parametrize(
    ("spec", "resolved"),
    [
        (None, DEFAULT_MODEL),
        ("default", DEFAULT_MODEL),
        ("a/x", "a/x"),
        (["default", "a/x"], [DEFAULT_MODEL, "a/x"]),
        (
            ModelByInputTokens({10: "default", 20: ["a/x", "default"]}),
            ModelByInputTokens({10: DEFAULT_MODEL, 20: ["a/x", DEFAULT_MODEL]}),
        ),
    ],
)
def test_resolve_default_alias(spec: ModelSpec | None, resolved: ModelSpec) -> None:
    assert resolve_default_alias(spec) == resolved


class _Holder(BaseModel):
    selector: ModelByInputTokens


def test_pydantic_models_can_hold_a_selector() -> None:
    held = _Holder.model_validate({"selector": {"upTo": {"10": "a/x"}}})
    assert held.selector == ModelByInputTokens({10: "a/x"})
    assert held.model_dump(mode="json") == {"selector": {"upTo": {"10": "a/x"}}}
