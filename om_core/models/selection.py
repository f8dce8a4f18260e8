"""Which model an Observer or Reflector call uses.

A model is named by a router ID string (`"provider/model"`), by an ordered fallback chain of such IDs, or
by a `ModelByInputTokens` selector that picks a tier from the size of the call's input. The config stores
these as given; the engine asks the selector per call because the input size is only known then.

JSON form of a selector (how configs and stored snapshots carry it): `{"upTo": {"10000": "a/b", ...}}`.
An entry of a fallback chain may also be the original's `ModelWithRetries`, `{"model": "a/b",
"maxRetries": 2}`: that model is retried at most `maxRetries` times on a transient failure before the
chain moves to the next entry (an entry without it follows the process's retry policy). A chain and an
entry's retries are bounded (`MAX_CHAIN_MODELS`, `MAX_RETRIES_PER_MODEL`): a tenant's config writes them,
and each retry is a paid request.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

from pydantic import GetCoreSchemaHandler
from pydantic_core import CoreSchema, core_schema

from om_core.errors import OMConfigError, OMModelTierExceeded

DEFAULT_MODEL = "google/gemini-2.5-flash"
#: The string users write to ask for the default model explicitly; it still counts as default selection.
DEFAULT_MODEL_ALIAS = "default"

_UP_TO_KEYS = ("upTo", "up_to")
_RETRIES_KEYS = ("maxRetries", "max_retries")
#: Most models in one fallback chain (each may be called after the previous one failed).
MAX_CHAIN_MODELS = 8
#: Most retries one chain entry may ask for (`maxRetries`): the process's own policy allows 8.
MAX_RETRIES_PER_MODEL = 10

__all__ = [
    "DEFAULT_MODEL",
    "DEFAULT_MODEL_ALIAS",
    "MAX_CHAIN_MODELS",
    "MAX_RETRIES_PER_MODEL",
    "CallModel",
    "FallbackEntry",
    "ModelByInputTokens",
    "ModelSpec",
    "ModelSpecJSON",
    "ModelWithRetries",
    "OMModelTierExceeded",
    "UpTo",
    "is_default_selection",
    "model_ids",
    "model_spec_to_json",
    "parse_model_spec",
    "primary_model",
    "resolve_default_alias",
    "resolve_model",
]


class ModelByInputTokens:
    """Picks a model by the number of input tokens of one call.

    Keys are inclusive upper bounds: the smallest threshold that is >= the input size wins. Declaration
    order does not matter. Above the largest threshold there is deliberately no fallback: the user chose
    the tiers, and silently sending a huge input to the largest tier's model could blow its context.
    """

    __slots__ = ("_models", "_thresholds")

    def __init__(self, up_to: UpTo, *, field: str = "upTo") -> None:
        if not isinstance(up_to, Mapping):
            raise OMConfigError(
                "MODEL_SPEC_INVALID", field, "upTo must map token thresholds to models", up_to
            )
        if not up_to:
            raise OMConfigError(
                "MODEL_BY_INPUT_TOKENS_EMPTY", field, "at least one threshold is required", dict(up_to)
            )
        tiers: dict[int, ModelSpec] = {}
        for key, model in up_to.items():
            threshold = _parse_threshold(key, field)
            if threshold in tiers:
                raise OMConfigError(
                    "MODEL_BY_INPUT_TOKENS_INVALID_KEY",
                    f"{field}.{key}",
                    f"threshold {threshold} is given more than once",
                    key,
                )
            tiers[threshold] = _parse_tier_model(model, f"{field}.{key}")
        self._thresholds: list[int] = sorted(tiers)
        self._models: list[ModelSpec] = [tiers[t] for t in self._thresholds]

    @classmethod
    def from_json(cls, value: Mapping[str, Any], field: str = "model") -> ModelByInputTokens:
        """Build from the `{"upTo": {...}}` JSON form (keys may be strings)."""
        present = [key for key in _UP_TO_KEYS if key in value]
        extra = sorted(str(key) for key in value if key not in _UP_TO_KEYS)
        if len(present) != 1 or extra:
            raise OMConfigError(
                "MODEL_SPEC_INVALID",
                field,
                'a model selector object must have exactly one key, "upTo"',
                dict(value),
            )
        return cls(value[present[0]], field=f"{field}.upTo" if field else "upTo")

    def get_thresholds(self) -> list[int]:
        """Ascending thresholds (a copy; tracing metadata records them next to the chosen one)."""
        return list(self._thresholds)

    @property
    def tiers(self) -> list[tuple[int, ModelSpec]]:
        """`(threshold, model)` pairs in ascending threshold order."""
        return list(zip(self._thresholds, self._models, strict=True))

    def select(self, input_tokens: int) -> tuple[int, ModelSpec]:
        """The chosen `(threshold, model)` for a call of `input_tokens` input tokens."""
        index = bisect.bisect_left(self._thresholds, input_tokens)
        if index == len(self._thresholds):
            raise OMModelTierExceeded(input_tokens, self._thresholds[-1])
        return self._thresholds[index], self._models[index]

    def resolve(self, input_tokens: int) -> ModelSpec:
        """The model for a call of `input_tokens` input tokens; raises `OMModelTierExceeded` above the
        largest threshold."""
        return self.select(input_tokens)[1]

    def to_json(self) -> dict[str, dict[str, ModelSpecJSON]]:
        return {"upTo": {str(t): model_spec_to_json(m) for t, m in self.tiers}}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ModelByInputTokens):
            return NotImplemented
        return self.tiers == other.tiers

    __hash__ = None  # type: ignore[assignment]  # mutable-looking value object; never a dict key

    def __repr__(self) -> str:
        inner = ", ".join(f"{t}: {m!r}" for t, m in self.tiers)
        return f"ModelByInputTokens(up_to={{{inner}}})"

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        """Lets pydantic models hold a selector: accepts an instance or the JSON form, dumps the JSON form."""

        def validate(value: Any) -> ModelByInputTokens:
            if isinstance(value, ModelByInputTokens):
                return value
            if isinstance(value, Mapping):
                return cls.from_json(value, field="")
            raise ValueError('expected a ModelByInputTokens or {"upTo": {...}}')

        return core_schema.no_info_plain_validator_function(
            validate,
            serialization=core_schema.plain_serializer_function_ser_schema(
                lambda value: value.to_json(), when_used="json"
            ),
        )


@dataclass(frozen=True)
class ModelWithRetries:
    """One entry of a fallback chain with its own retry count (the original's `ModelWithRetries`):
    `model` is tried, and retried at most `max_retries` times on a transient failure, before the chain
    moves on. JSON form: `{"model": "a/b", "maxRetries": 2}`."""

    model: str
    max_retries: int

    @classmethod
    def from_json(cls, value: Mapping[str, Any], field: str) -> ModelWithRetries:
        retries_keys = [key for key in _RETRIES_KEYS if key in value]
        extra = sorted(str(key) for key in value if key != "model" and key not in _RETRIES_KEYS)
        if extra or len(retries_keys) > 1:
            raise OMConfigError(
                "MODEL_SPEC_INVALID",
                field,
                'a chain entry object takes "model" and "maxRetries" only',
                dict(value),
            )
        model = value.get("model")
        if not isinstance(model, str) or not model.strip():
            raise OMConfigError(
                "MODEL_SPEC_INVALID", f"{field}.model", 'expected a model ID ("provider/model")', model
            )
        retries = value[retries_keys[0]] if retries_keys else 0
        if (
            not isinstance(retries, int)
            or isinstance(retries, bool)
            or not 0 <= retries <= MAX_RETRIES_PER_MODEL
        ):
            raise OMConfigError(
                "MODEL_RETRIES_OUT_OF_RANGE",
                f"{field}.maxRetries",
                f"must be a whole number from 0 to {MAX_RETRIES_PER_MODEL} (retries of this model before "
                "the next one of the chain)",
                retries,
            )
        return cls(model.strip(), retries)

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "maxRetries": self.max_retries}


#: One entry of a fallback chain.
FallbackEntry: TypeAlias = str | ModelByInputTokens | ModelWithRetries
#: How a phase's model is configured: router ID, selector, or ordered fallback chain (first = primary).
ModelSpec: TypeAlias = str | ModelByInputTokens | list[FallbackEntry]
ModelSpecJSON: TypeAlias = str | dict[str, Any] | list[Any]
#: The model of one call: a router id, or an ordered fallback chain whose entries may carry their own
#: retry count.
CallModel: TypeAlias = str | list[str | ModelWithRetries]
#: The `upTo` mapping; keys are token thresholds and may be strings when they come from JSON.
UpTo: TypeAlias = (
    Mapping[int, ModelSpec] | Mapping[str, ModelSpec] | Mapping[float, ModelSpec] | Mapping[Any, Any]
)


def parse_model_spec(value: object, field: str) -> ModelSpec:
    """Validate a model spec given in Python or JSON form; `field` names the option in errors."""
    if isinstance(value, list | tuple):
        if not value:
            raise OMConfigError(
                "MODEL_SPEC_INVALID", field, "a fallback chain needs at least one model", value
            )
        if len(value) > MAX_CHAIN_MODELS:
            raise OMConfigError(
                "MODEL_CHAIN_TOO_LONG",
                field,
                f"a fallback chain holds at most {MAX_CHAIN_MODELS} models, got {len(value)}",
                len(value),
            )
        return [_parse_fallback_entry(entry, f"{field}[{i}]") for i, entry in enumerate(value)]
    entry = _parse_fallback_entry(value, field)
    # One model with its retries, given alone, is a chain of one.
    return [entry] if isinstance(entry, ModelWithRetries) else entry


def model_spec_to_json(spec: ModelSpec | ModelWithRetries) -> ModelSpecJSON:
    if isinstance(spec, ModelByInputTokens | ModelWithRetries):
        return spec.to_json()
    if isinstance(spec, list):
        return [model_spec_to_json(entry) for entry in spec]
    return spec


def model_ids(spec: ModelSpec | ModelWithRetries) -> Iterator[str]:
    """Every router id a model selection may call: a model, each of a fallback chain, each tier."""
    if isinstance(spec, str):
        yield spec
    elif isinstance(spec, ModelWithRetries):
        yield spec.model
    elif isinstance(spec, ModelByInputTokens):
        for _threshold, tier in spec.tiers:
            yield from model_ids(tier)
    else:
        for entry in spec:
            yield from model_ids(entry)


def resolve_model(spec: ModelSpec | ModelWithRetries, input_tokens: int) -> CallModel:
    """A concrete model (or fallback chain) for one call: tiers resolved by input size, "default" mapped;
    a chain entry with its own `maxRetries` stays one (the model client reads its retries)."""
    if isinstance(spec, ModelByInputTokens):
        return resolve_model(spec.resolve(input_tokens), input_tokens)
    if isinstance(spec, ModelWithRetries):
        return [spec]
    if isinstance(spec, list):
        chain: list[str | ModelWithRetries] = []
        for item in spec:
            resolved = resolve_model(item, input_tokens)
            chain.extend(resolved if isinstance(resolved, list) else [resolved])
        return chain
    return DEFAULT_MODEL if spec in ("default", "", None) else str(spec)


def primary_model(model: CallModel) -> str:
    """The first model a call tries (capability decisions follow it)."""
    first = model[0] if isinstance(model, list) else model
    return first.model if isinstance(first, ModelWithRetries) else first


def is_default_selection(spec: ModelSpec | None) -> bool:
    """Unset, `"default"` and selectors count as the default selection (they get the default
    `maxOutputTokens`); a user-named model or chain does not, because its output limit is unknown to us."""
    return spec is None or spec == DEFAULT_MODEL_ALIAS or isinstance(spec, ModelByInputTokens)


def resolve_default_alias(spec: ModelSpec | None) -> ModelSpec:
    """Replace unset and every `"default"` (also inside chains and selector tiers) by `DEFAULT_MODEL`."""
    if spec is None or spec == DEFAULT_MODEL_ALIAS:
        return DEFAULT_MODEL
    if isinstance(spec, str):
        return spec
    if isinstance(spec, list):
        return [_resolve_entry(entry) for entry in spec]
    return _resolve_selector(spec)


def _resolve_entry(entry: FallbackEntry) -> FallbackEntry:
    if isinstance(entry, ModelByInputTokens):
        return _resolve_selector(entry)
    if isinstance(entry, ModelWithRetries):
        return (
            entry
            if entry.model != DEFAULT_MODEL_ALIAS
            else ModelWithRetries(DEFAULT_MODEL, entry.max_retries)
        )
    return DEFAULT_MODEL if entry == DEFAULT_MODEL_ALIAS else entry


def _resolve_selector(selector: ModelByInputTokens) -> ModelByInputTokens:
    return ModelByInputTokens({t: resolve_default_alias(m) for t, m in selector.tiers})


def _parse_fallback_entry(value: object, field: str) -> FallbackEntry:
    if isinstance(value, ModelByInputTokens | ModelWithRetries):
        return value
    if isinstance(value, str):
        if not value.strip():
            raise OMConfigError("MODEL_SPEC_INVALID", field, "model ID must not be empty", value)
        return value.strip()
    if isinstance(value, Mapping):
        if "model" in value:
            return ModelWithRetries.from_json(value, field)
        return ModelByInputTokens.from_json(value, field)
    raise OMConfigError(
        "MODEL_SPEC_INVALID",
        field,
        'expected "provider/model", a list of models (fallback chain, entries may be {"model": ..., '
        '"maxRetries": ...}) or {"upTo": {...}}',
        value,
    )


def _parse_tier_model(value: object, field: str) -> ModelSpec:
    spec = parse_model_spec(value, field)
    nested = spec if isinstance(spec, list) else [spec]
    if any(isinstance(entry, ModelByInputTokens) for entry in nested):
        raise OMConfigError(
            "MODEL_SPEC_INVALID", field, "a ModelByInputTokens tier cannot itself be a selector", value
        )
    return spec


def _parse_threshold(key: object, field: str) -> int:
    """Keys may arrive as strings from JSON. A fractional key is floored: for whole token counts
    `n <= 10000.5` and `n <= 10000` select the same calls."""
    number: float | None = None
    if isinstance(key, int | float) and not isinstance(key, bool):
        number = key
    elif isinstance(key, str):
        try:
            number = float(key.strip())
        except ValueError:
            number = None
    if number is None or not math.isfinite(number) or number <= 0:
        raise OMConfigError(
            "MODEL_BY_INPUT_TOKENS_INVALID_KEY",
            f"{field}.{key}",
            "thresholds must be finite numbers > 0 (input-token upper bounds)",
            key,
        )
    return math.floor(number)
