"""The `observationalMemory` configuration: what users write, and what the engine runs with.

Two layers on purpose:

* `ObservationalMemoryConfig` keeps the options **as given** (camelCase or snake_case in, camelCase out),
  with `None` meaning "not set". Several defaults depend on other options (buffering is off by default in
  resource scope, `blockAfter` only exists when buffering is on, `maxOutputTokens` only for the default
  model), so "unset" has to survive until resolution.
* `ResolvedConfig` holds the numbers the engine compares against: absolute token counts, milliseconds,
  concrete models. Every rule of behaviour §2.3 is applied here exactly once, and every validation rule
  (§2.4) fails here with an `OMConfigError` naming the option's dotted path.

Parsing resolves once, so a bad config fails when it is loaded, not on the first turn that needs it.
"""

from __future__ import annotations

import copy
import difflib
import json
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    PrivateAttr,
    ValidationError,
    model_validator,
)
from pydantic.alias_generators import to_camel

from om_core.config.durations import DurationInput, parse_duration_ms
from om_core.errors import OMConfigError
from om_core.extractors.definition import parse_list
from om_core.models.selection import (
    DEFAULT_MODEL,
    ModelSpec,
    is_default_selection,
    model_spec_to_json,
    parse_model_spec,
    resolve_default_alias,
)
from om_core.tokens.rounding import round_half_up

__all__ = [
    "DEFAULT_MODEL",
    "ModelSettings",
    "OMConfigError",
    "ObservationConfig",
    "ObservationalMemoryConfig",
    "ReflectionConfig",
    "ResolvedConfig",
    "ResolvedObservation",
    "ResolvedReflection",
    "ResolvedRetrieval",
    "ResolvedWorkingMemory",
    "RetrievalConfig",
    "Scope",
    "TokenRange",
    "WorkingMemoryConfig",
    "message_threshold_max",
]

logger = logging.getLogger(__name__)

Scope = Literal["thread", "resource"]

DEFAULT_MESSAGE_TOKENS = 30_000
DEFAULT_OBSERVATION_TOKENS = 40_000
DEFAULT_BUFFER_TOKENS = 0.2
DEFAULT_BUFFER_ACTIVATION = 0.8
DEFAULT_REFLECTION_BUFFER_ACTIVATION = 0.5
DEFAULT_BLOCK_AFTER = 1.2
DEFAULT_PREVIOUS_OBSERVER_TOKENS = 2_000
DEFAULT_MAX_TOKENS_PER_BATCH = 10_000
DEFAULT_OBSERVER_TEMPERATURE = 0.3
DEFAULT_REFLECTOR_TEMPERATURE = 0.0
#: Applied only when a phase uses the default model selection (§2.3.2).
DEFAULT_MAX_OUTPUT_TOKENS = 100_000
DEFAULT_OBSERVER_PROVIDER_OPTIONS: dict[str, Any] = {"google": {"thinkingConfig": {"thinkingBudget": 215}}}
DEFAULT_REFLECTOR_PROVIDER_OPTIONS: dict[str, Any] = {"google": {"thinkingConfig": {"thinkingBudget": 1024}}}

#: `blockAfter` below this is a multiplier of the threshold, at or above it an absolute token count.
BLOCK_AFTER_ABSOLUTE_FROM = 100
#: `observation.bufferActivation` at or above this is the number of tokens to keep, not a ratio.
BUFFER_ACTIVATION_ABSOLUTE_FROM = 1_000


# --------------------------------------------------------------------------------------------------
# What users write
# --------------------------------------------------------------------------------------------------


def _validate_model_spec(value: object) -> ModelSpec | None:
    # The field path is unknown here; `_config_error_from` prefixes it from pydantic's error location.
    return None if value is None else parse_model_spec(value, "")


def _dump_model_spec(value: ModelSpec | None) -> Any:
    return None if value is None else model_spec_to_json(value)


#: A phase model as given: router ID, `"default"`, fallback chain, or `ModelByInputTokens` (or its JSON).
ModelOption: TypeAlias = Annotated[
    ModelSpec | None,
    PlainValidator(_validate_model_spec),
    PlainSerializer(_dump_model_spec, when_used="json"),
]
Number: TypeAlias = int | float


#: What an `extract` list holds, for the OpenAPI document: the one place a config names code, by name only.
EXTRACT_DESCRIPTION = (
    "Extractor definitions (name, instructions, schema, ...). Code is named, never imported: `use` names a "
    "Python extractor and `onExtracted` a callback that the operator registered from an OM_PLUGINS module "
    "(for every tenant or for yours); an import path such as 'module:function' is refused."
)


class _ConfigModel(BaseModel):
    """Shared behaviour: camelCase or snake_case keys, strict types (no `"5"` → 5, no `true` → 1),
    frozen values, and unknown or doubled keys rejected with a message that names them."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True, strict=True
    )

    @model_validator(mode="before")
    @classmethod
    def _reject_unknown_and_doubled_keys(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            _check_keys(cls, data)
        return data

    @classmethod
    def field_for_key(cls, key: object) -> str | None:
        """The Python field name a user key (camelCase alias or snake_case name) refers to."""
        if not isinstance(key, str):
            return None
        if key in cls.model_fields:
            return key
        for name, info in cls.model_fields.items():
            if info.alias == key:
                return name
        return None

    @classmethod
    def public_keys(cls) -> list[str]:
        return [info.alias or name for name, info in cls.model_fields.items()]


def _check_keys(cls: type[_ConfigModel], data: Mapping[Any, Any]) -> None:
    seen: dict[str, object] = {}
    for key in data:
        name = cls.field_for_key(key)
        if name is None:
            valid = cls.public_keys()
            close = difflib.get_close_matches(to_camel(str(key)), valid, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise OMConfigError("UNKNOWN_OPTION", str(key), f"unknown option; {hint}valid options: {valid}")
        if name in seen:
            raise OMConfigError(
                "DUPLICATE_OPTION",
                cls.model_fields[name].alias or name,
                f"given twice (as {seen[name]!r} and {key!r}); use one spelling",
            )
        seen[name] = key


class ModelSettings(_ConfigModel):
    """Per-phase generation settings; unset values get the phase's defaults at resolution."""

    temperature: Number | None = Field(default=None, ge=0)
    max_output_tokens: int | None = Field(default=None, gt=0)


class RetrievalConfig(_ConfigModel):
    """Object form of `retrieval`; `retrieval: true` means this with all defaults."""

    vector: bool = False
    scope: Scope = "resource"
    instructions: str | None = None


class WorkingMemoryConfig(_ConfigModel):
    """The `workingMemory` block (§8.7): a small Markdown or JSON document per resource or thread that
    the actor (`agentManaged`), the Observer (`observation.manageWorkingMemory`) or the API keeps current.
    `None` means "not set" where the default depends on `observation.manageWorkingMemory`."""

    enabled: bool = False
    scope: Scope = "resource"
    template: str | None = None
    #: A JSON Schema object; exclusive with `template`. Named apart from pydantic's `schema` method.
    json_schema: dict[str, Any] | None = Field(default=None, alias="schema")
    agent_managed: bool | None = None
    use_state_signals: bool | None = None


class ObservationConfig(_ConfigModel):
    """The `observation` block (Observer settings). Rule-bearing values stay raw until resolution."""

    model: ModelOption = None
    instruction: str | None = None
    thread_title: bool = False
    #: Extractor definitions (behaviour §8.2) as JSON objects, checked by `om_core.extractors.definition`.
    extract: list[dict[str, Any]] = Field(default_factory=list, description=EXTRACT_DESCRIPTION)
    manage_working_memory: bool = False
    observe_attachments: bool | Literal["auto"] | list[str] = True
    message_tokens: int = Field(default=DEFAULT_MESSAGE_TOKENS, gt=0)
    max_tokens_per_batch: int = Field(default=DEFAULT_MAX_TOKENS_PER_BATCH, gt=0)
    model_settings: ModelSettings = Field(default_factory=ModelSettings)
    provider_options: dict[str, Any] | None = None
    buffer_tokens: Number | Literal[False] | None = None
    buffer_on_idle: bool = False
    buffer_activation: Number | None = None
    activate_after_idle: DurationInput = None
    activate_on_provider_change: bool | None = None
    block_after: Number | None = None
    previous_observer_tokens: Number | bool = DEFAULT_PREVIOUS_OBSERVER_TOKENS


class ReflectionConfig(_ConfigModel):
    """The `reflection` block (Reflector settings)."""

    model: ModelOption = None
    instruction: str | None = None
    extract: list[dict[str, Any]] = Field(default_factory=list, description=EXTRACT_DESCRIPTION)
    observation_tokens: int = Field(default=DEFAULT_OBSERVATION_TOKENS, gt=0)
    model_settings: ModelSettings = Field(default_factory=ModelSettings)
    provider_options: dict[str, Any] | None = None
    buffer_activation: Number | None = None
    activate_after_idle: DurationInput = None
    activate_on_provider_change: bool = False
    block_after: Number | None = None


class ObservationalMemoryConfig(_ConfigModel):
    """The whole `observationalMemory` option. Build it with `parse()`; read it through `resolve()`."""

    enabled: bool = True
    model: ModelOption = None
    scope: Scope = "thread"
    activate_after_idle: DurationInput = None
    activate_on_provider_change: bool = False
    share_token_budget: bool = False
    temporal_markers: bool = False
    retrieval: bool | RetrievalConfig = False
    #: Unset means "as the Memory facade does": hashed thread IDs in resource scope only.
    obscure_thread_ids: bool | None = None
    observation: ObservationConfig = Field(default_factory=ObservationConfig)
    reflection: ReflectionConfig = Field(default_factory=ReflectionConfig)
    working_memory: WorkingMemoryConfig = Field(default_factory=WorkingMemoryConfig)

    _resolved: ResolvedConfig | None = PrivateAttr(default=None)

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise _config_error_from(exc) or exc from None

    @model_validator(mode="after")
    def _resolve_once(self) -> ObservationalMemoryConfig:
        # Pydantic runs this validator twice when the custom __init__ is involved; resolve only once.
        if self._resolved is None:
            self._resolved = _resolve(self)
        return self

    @classmethod
    def parse(
        cls, value: bool | Mapping[str, Any] | ObservationalMemoryConfig | None
    ) -> ObservationalMemoryConfig:
        """Accept what users put under `observationalMemory`: `true`, `false`/absent, or an object
        (enabled unless it says `enabled: false`). Rule violations raise `OMConfigError`; a value of the
        wrong type raises pydantic's `ValidationError`."""
        if value is None or value is False:
            return cls(enabled=False)
        if value is True:
            return cls()
        if isinstance(value, ObservationalMemoryConfig):
            return value
        if not isinstance(value, Mapping):
            raise OMConfigError(
                "CONFIG_INVALID", "observationalMemory", "expected true, false or an options object", value
            )
        try:
            return cls.model_validate(dict(value))
        except ValidationError as exc:
            raise _config_error_from(exc) or exc from None

    @classmethod
    def parse_json(cls, text: str | bytes) -> ObservationalMemoryConfig:
        """`parse()` for a JSON document (`true`, `false`, `null` or an object)."""
        return cls.parse(json.loads(text))

    def resolve(self) -> ResolvedConfig:
        """The values the engine runs with (computed and validated once, at parse time)."""
        if self._resolved is None:  # only reachable through model_construct(), which skips validation
            self._resolved = _resolve(self)
        return self._resolved

    def with_overrides(self, partial: Mapping[str, Any]) -> ObservationalMemoryConfig:
        """A new config with `partial` deep-merged in (camelCase or snake_case keys) and re-validated.

        Option blocks (`observation`, `reflection`, `modelSettings`, object `retrieval`) merge key by key;
        every other value, including models and `providerOptions`, is replaced whole, because merging two
        model selectors or two provider option trees rarely means what the caller intended. A `None` in
        `partial` drops that option back to its default.
        """
        base = self.model_dump(by_alias=True, exclude_none=True)
        return type(self).parse(_merge_options(type(self), base, partial))

    def to_public_dict(self) -> dict[str, Any]:
        """camelCase, JSON-ready, unset options left out; `parse()` of it gives back an equal config."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


_NESTED_BLOCKS: dict[tuple[type[_ConfigModel], str], type[_ConfigModel]] = {
    (ObservationalMemoryConfig, "observation"): ObservationConfig,
    (ObservationalMemoryConfig, "reflection"): ReflectionConfig,
    (ObservationalMemoryConfig, "retrieval"): RetrievalConfig,
    (ObservationalMemoryConfig, "working_memory"): WorkingMemoryConfig,
    (ObservationConfig, "model_settings"): ModelSettings,
    (ReflectionConfig, "model_settings"): ModelSettings,
}


def _merge_options(
    cls: type[_ConfigModel], base: Mapping[str, Any], partial: Mapping[str, Any]
) -> dict[str, Any]:
    merged = dict(base)
    seen: dict[str, object] = {}
    for key, value in partial.items():
        name = cls.field_for_key(key)
        if name is None:
            merged[key] = value  # left for validation to reject with its path
            continue
        alias = cls.model_fields[name].alias or name
        if name in seen:
            raise OMConfigError("DUPLICATE_OPTION", alias, f"given twice (as {seen[name]!r} and {key!r})")
        seen[name] = key
        block = _NESTED_BLOCKS.get((cls, name))
        current = merged.get(alias)
        if value is None:
            merged.pop(alias, None)
        elif block is not None and isinstance(value, Mapping) and isinstance(current, Mapping):
            try:
                merged[alias] = _merge_options(block, current, value)
            except OMConfigError as exc:
                raise exc.at(alias) from None
        else:
            merged[alias] = value
    return merged


def _config_error_from(exc: ValidationError) -> OMConfigError | None:
    """Pydantic wraps errors raised inside validators; give callers our error back, with its full path."""
    for error in exc.errors():
        inner = (error.get("ctx") or {}).get("error")
        if isinstance(inner, OMConfigError):
            return inner.at(_dotted_path(error["loc"]))
    return None


def _dotted_path(loc: tuple[int | str, ...]) -> str:
    """`("observation", "ObservationConfig", "model_settings")` → `observation.modelSettings`: union
    member tags that pydantic puts into locations are not option names and are dropped."""
    path = ""
    for item in loc:
        if isinstance(item, int):
            path += f"[{item}]"
        elif item in _OPTION_NAMES:
            path = f"{path}.{to_camel(item)}" if path else to_camel(item)
    return path


_OPTION_NAMES: frozenset[str] = frozenset(
    key
    for cls in (
        ObservationalMemoryConfig,
        ObservationConfig,
        ReflectionConfig,
        ModelSettings,
        RetrievalConfig,
        WorkingMemoryConfig,
    )
    for name, info in cls.model_fields.items()
    for key in (name, info.alias or name)
)


# --------------------------------------------------------------------------------------------------
# What the engine runs with
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TokenRange:
    """Message threshold under `shareTokenBudget`: at least `min`, at most `min + observationTokens`."""

    min: int
    max: int


@dataclass(frozen=True)
class SharedScales:
    """Under `shareTokenBudget` with async buffering the message threshold moves with the observation
    log (§4.2), so the buffering interval and `blockAfter` given as shares of it move too: a ratio
    `bufferTokens` and a multiplier `blockAfter` are kept as such and applied to the threshold of the
    moment. None in a field means the option was absolute tokens, which stay fixed (and were validated
    against every threshold the range allows)."""

    buffer_ratio: float | None
    block_after_multiplier: float | None


@dataclass(frozen=True)
class ResolvedRetrieval:
    vector: bool
    scope: Scope
    instructions: str | None


@dataclass(frozen=True)
class ResolvedWorkingMemory:
    """Working memory as the engine runs it. `format` follows from the config: `json` with a schema,
    else `markdown` with `template` (the default template when none is given)."""

    enabled: bool
    scope: Scope
    format: Literal["markdown", "json"]
    template: str | None
    schema: dict[str, Any] | None
    #: The actor gets the update instruction and the `updateWorkingMemory` tool.
    agent_managed: bool
    #: Delivered as a state signal (its own system message after every other memory message) rather
    #: than with the memory's hints; either way after the stable observation prefix.
    use_state_signals: bool
    #: The Observer keeps it current through the `working-memory` extractor (§8.7).
    observer_managed: bool


#: What a disabled working memory resolves to (also the default of `ResolvedConfig.working_memory`).
WORKING_MEMORY_OFF = ResolvedWorkingMemory(
    enabled=False,
    scope="resource",
    format="markdown",
    template=None,
    schema=None,
    agent_managed=False,
    use_state_signals=False,
    observer_managed=False,
)


@dataclass(frozen=True)
class ResolvedObservation:
    model: ModelSpec
    model_is_default_selection: bool
    message_tokens: int | TokenRange
    #: Absolute tokens between buffering runs; None when async buffering is off.
    buffer_tokens: int | None
    #: As given: ratio in (0, 1] of the window to clear, or absolute tokens (>= 1000) to keep.
    buffer_activation: float | None
    #: Absolute pending tokens at which OM stops waiting for buffering.
    block_after: int | None
    #: Token budget of previous observations shown to the Observer; None = no truncation.
    previous_observer_tokens: int | None
    max_tokens_per_batch: int
    temperature: float
    max_output_tokens: int | None
    provider_options: dict[str, Any]
    instruction: str | None
    thread_title: bool
    buffer_on_idle: bool
    observe_attachments: bool | str | list[str]
    activate_after_idle: int | Literal["auto"] | None
    activate_on_provider_change: bool
    extract: list[dict[str, Any]]
    manage_working_memory: bool
    #: Set under a shared budget with async buffering; see `SharedScales`.
    shared_scales: SharedScales | None = None

    def buffer_tokens_at(self, threshold: int) -> int | None:
        """The buffering interval at this message threshold (fixed unless `shared_scales` says a ratio)."""
        ratio = self.shared_scales.buffer_ratio if self.shared_scales is not None else None
        if self.buffer_tokens is None or ratio is None:
            return self.buffer_tokens
        return max(1, round_half_up(threshold * ratio))

    def block_after_at(self, threshold: int) -> int | None:
        """`blockAfter` at this message threshold (fixed unless `shared_scales` says a multiplier)."""
        multiplier = self.shared_scales.block_after_multiplier if self.shared_scales is not None else None
        if self.block_after is None or multiplier is None:
            return self.block_after
        return round_half_up(threshold * multiplier)


@dataclass(frozen=True)
class ResolvedReflection:
    model: ModelSpec
    model_is_default_selection: bool
    observation_tokens: int
    #: Ratio of `observation_tokens` at which background reflection starts; None when async is off.
    buffer_activation: float | None
    block_after: int | None
    temperature: float
    max_output_tokens: int | None
    provider_options: dict[str, Any]
    instruction: str | None
    activate_after_idle: int | Literal["auto"] | None
    activate_on_provider_change: bool
    extract: list[dict[str, Any]]


@dataclass(frozen=True)
class ResolvedConfig:
    enabled: bool
    scope: Scope
    share_token_budget: bool
    temporal_markers: bool
    retrieval: bool
    #: Recall settings when `retrieval` is on, else None.
    retrieval_options: ResolvedRetrieval | None
    obscure_thread_ids: bool
    observation: ResolvedObservation
    reflection: ResolvedReflection
    async_observation_enabled: bool
    async_reflection_enabled: bool
    #: Options that were accepted but ignored (e.g. `blockAfter` without buffering); also logged.
    warnings: tuple[str, ...] = ()
    working_memory: ResolvedWorkingMemory = WORKING_MEMORY_OFF
    #: Why this config's memory-model calls are refused: a tenant's stored config that breaks the
    #: operator's policy (`om_core.config.trust`, checked again where the config is used). None: allowed.
    refused: str | None = None


def message_threshold_max(rc: ResolvedConfig) -> int:
    """The largest message threshold the config allows (the range's max under a shared budget)."""
    tokens = rc.observation.message_tokens
    return tokens.max if isinstance(tokens, TokenRange) else tokens


# --------------------------------------------------------------------------------------------------
# Resolution (§2.3) and validation (§2.4)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Buffering:
    buffer_tokens: int | None
    buffer_activation: float | None
    block_after: int | None
    reflection_buffer_activation: float | None
    reflection_block_after: int | None
    shared_scales: SharedScales | None = None


def _resolve(config: ObservationalMemoryConfig) -> ResolvedConfig:
    obs, refl = config.observation, config.reflection
    _check_model_conflicts(config)
    observer_choice = _first_set(config.model, obs.model, refl.model)
    reflector_choice = _first_set(config.model, refl.model, obs.model)

    top_idle = parse_duration_ms(config.activate_after_idle, "activateAfterIdle")
    observation_idle = (
        top_idle
        if obs.activate_after_idle is None
        else parse_duration_ms(obs.activate_after_idle, "observation.activateAfterIdle")
    )
    reflection_idle = parse_duration_ms(refl.activate_after_idle, "reflection.activateAfterIdle")
    previous_observer_tokens = _resolve_previous_observer_tokens(obs.previous_observer_tokens)

    warnings: list[str] = []
    working_memory = _resolve_working_memory(config.working_memory, obs.manage_working_memory)
    if obs.manage_working_memory and not working_memory.enabled:
        warnings.append(
            "observation.manageWorkingMemory=True is ignored because workingMemory.enabled is not true"
        )
    async_enabled = _async_buffering_enabled(config)
    message_tokens: int | TokenRange = (
        TokenRange(obs.message_tokens, obs.message_tokens + refl.observation_tokens)
        if config.share_token_budget
        else obs.message_tokens
    )
    if async_enabled:
        buffering = _resolve_buffering(config, message_tokens)
    else:
        buffering = _Buffering(None, None, None, None, None)
        warnings += _ignored_buffering_options(config)
    _check_block_after_has_buffering(buffering)
    for warning in warnings:
        logger.warning("observationalMemory: %s", warning)

    _check_extractors(obs.extract, refl.extract)
    observation = ResolvedObservation(
        model=resolve_default_alias(observer_choice),
        model_is_default_selection=is_default_selection(observer_choice),
        message_tokens=message_tokens,
        buffer_tokens=buffering.buffer_tokens,
        buffer_activation=buffering.buffer_activation,
        block_after=buffering.block_after,
        previous_observer_tokens=previous_observer_tokens,
        max_tokens_per_batch=obs.max_tokens_per_batch,
        temperature=_temperature(obs.model_settings, DEFAULT_OBSERVER_TEMPERATURE),
        max_output_tokens=_max_output_tokens(obs.model_settings, observer_choice),
        provider_options=_provider_options(obs.provider_options, DEFAULT_OBSERVER_PROVIDER_OPTIONS),
        instruction=obs.instruction,
        thread_title=obs.thread_title,
        buffer_on_idle=obs.buffer_on_idle,
        observe_attachments=_copy_attachment_filter(obs.observe_attachments),
        activate_after_idle=observation_idle,
        activate_on_provider_change=(
            config.activate_on_provider_change
            if obs.activate_on_provider_change is None
            else obs.activate_on_provider_change
        ),
        extract=copy.deepcopy(obs.extract),
        manage_working_memory=obs.manage_working_memory,
        shared_scales=buffering.shared_scales,
    )
    reflection = ResolvedReflection(
        model=resolve_default_alias(reflector_choice),
        model_is_default_selection=is_default_selection(reflector_choice),
        observation_tokens=refl.observation_tokens,
        buffer_activation=buffering.reflection_buffer_activation,
        block_after=buffering.reflection_block_after,
        temperature=_temperature(refl.model_settings, DEFAULT_REFLECTOR_TEMPERATURE),
        max_output_tokens=_max_output_tokens(refl.model_settings, reflector_choice),
        provider_options=_provider_options(refl.provider_options, DEFAULT_REFLECTOR_PROVIDER_OPTIONS),
        instruction=refl.instruction,
        activate_after_idle=reflection_idle,
        activate_on_provider_change=refl.activate_on_provider_change,
        extract=copy.deepcopy(refl.extract),
    )
    return ResolvedConfig(
        enabled=config.enabled,
        scope=config.scope,
        share_token_budget=config.share_token_budget,
        # Markers are OM's own messages: with OM off nothing of OM is written, markers included.
        temporal_markers=config.temporal_markers and config.enabled,
        retrieval=config.retrieval is not False,
        retrieval_options=_resolve_retrieval(config.retrieval),
        obscure_thread_ids=(
            config.scope == "resource" if config.obscure_thread_ids is None else config.obscure_thread_ids
        ),
        observation=observation,
        reflection=reflection,
        async_observation_enabled=buffering.buffer_tokens is not None,
        async_reflection_enabled=buffering.reflection_buffer_activation is not None,
        warnings=tuple(warnings),
        working_memory=working_memory,
    )


def _check_extractors(observation: list[dict[str, Any]], reflection: list[dict[str, Any]]) -> None:
    """Extractor definitions follow §8.2 (`EXTRACTOR_*` codes), checked where the configuration is written."""
    parse_list(observation, field="observation.extract", resolve_use=False)
    parse_list(reflection, field="reflection.extract", resolve_use=False)


def _check_model_conflicts(config: ObservationalMemoryConfig) -> None:
    if config.model is None:
        return
    phases = (
        ("observation", config.observation.model, "MODEL_CONFLICT_OBSERVATION"),
        ("reflection", config.reflection.model, "MODEL_CONFLICT_REFLECTION"),
    )
    for phase, phase_model, code in phases:
        if phase_model is not None:
            raise OMConfigError(
                code,
                f"{phase}.model",
                f"cannot be combined with the top-level model ({model_spec_to_json(config.model)!r}); "
                f"set either the top-level model or per-phase models",
                model_spec_to_json(phase_model),
            )


def _first_set(*choices: ModelSpec | None) -> ModelSpec | None:
    return next((choice for choice in choices if choice is not None), None)


def _resolve_previous_observer_tokens(value: float | bool) -> int | None:
    if value is False:
        return None
    if isinstance(value, bool) or not math.isfinite(value) or value < 0:
        raise OMConfigError(
            "PREVIOUS_OBSERVER_TOKENS_INVALID",
            "observation.previousObserverTokens",
            "must be a finite number >= 0 (0 omits previous observations) or false (no truncation)",
            value,
        )
    return round_half_up(value)


def _explicit_async_options(config: ObservationalMemoryConfig) -> list[str]:
    """The buffering options the user set themselves (a `bufferTokens: false` is not one of them)."""
    obs, refl = config.observation, config.reflection
    explicit = []
    if obs.buffer_tokens is not None and obs.buffer_tokens is not False:
        explicit.append("observation.bufferTokens")
    if obs.buffer_activation is not None:
        explicit.append("observation.bufferActivation")
    if refl.buffer_activation is not None:
        explicit.append("reflection.bufferActivation")
    return explicit


def _async_buffering_enabled(config: ObservationalMemoryConfig) -> bool:
    """Buffering is on unless `bufferTokens: false`, and off by default in resource scope, as the
    reference documents. Unlike the reference (`RESOURCE_SCOPE_NO_ASYNC`), asking for it explicitly in
    resource scope turns it on: each thread buffers its own messages and activation joins them to the
    resource's log under the same storage rules as thread scope."""
    if config.observation.buffer_tokens is False:
        return False
    if config.scope != "resource":
        return True
    return bool(_explicit_async_options(config))


def _ignored_buffering_options(config: ObservationalMemoryConfig) -> list[str]:
    obs, refl = config.observation, config.reflection
    given = {
        "observation.bufferActivation": obs.buffer_activation,
        "observation.blockAfter": obs.block_after,
        "reflection.bufferActivation": refl.buffer_activation,
        "reflection.blockAfter": refl.block_after,
    }
    ignored = [
        f"{field}={value!r} is ignored because async buffering is disabled"
        for field, value in given.items()
        if value is not None
    ]
    if obs.buffer_on_idle:
        # Buffering at the end of a turn is async buffering: with it off there is nothing to run.
        ignored.append(
            "observation.bufferOnIdle=True is ignored because async buffering is disabled "
            "(observation.bufferTokens is false): turn it on, or drop bufferOnIdle"
        )
    return ignored


def _resolve_buffering(config: ObservationalMemoryConfig, message_tokens: int | TokenRange) -> _Buffering:
    obs, refl = config.observation, config.reflection
    window = message_tokens.max if isinstance(message_tokens, TokenRange) else message_tokens
    raw_buffer = DEFAULT_BUFFER_TOKENS if obs.buffer_tokens is None else obs.buffer_tokens
    raw_block_after = DEFAULT_BLOCK_AFTER if obs.block_after is None else obs.block_after
    if isinstance(message_tokens, TokenRange):
        return _shared_budget_buffering(config, message_tokens, raw_buffer, raw_block_after)
    return _Buffering(
        buffer_tokens=_resolve_buffer_tokens(raw_buffer, window),
        buffer_activation=_resolve_buffer_activation(
            DEFAULT_BUFFER_ACTIVATION if obs.buffer_activation is None else obs.buffer_activation,
            obs.message_tokens,
        ),
        block_after=_resolve_block_after(
            raw_block_after,
            obs.message_tokens,
            field="observation.blockAfter",
            threshold_name="observation.messageTokens",
            code="BLOCK_AFTER_BELOW_THRESHOLD",
        ),
        reflection_buffer_activation=_resolve_reflection_buffer_activation(
            DEFAULT_REFLECTION_BUFFER_ACTIVATION if refl.buffer_activation is None else refl.buffer_activation
        ),
        reflection_block_after=_resolve_block_after(
            DEFAULT_BLOCK_AFTER if refl.block_after is None else refl.block_after,
            refl.observation_tokens,
            field="reflection.blockAfter",
            threshold_name="reflection.observationTokens",
            code="REFLECTION_BLOCK_AFTER_BELOW_THRESHOLD",
        ),
    )


def _shared_budget_buffering(
    config: ObservationalMemoryConfig, budget: TokenRange, raw_buffer: float, raw_block_after: float
) -> _Buffering:
    """Buffering under a shared budget: the threshold ranges over `[min, max]`, so every option must hold
    at each threshold of the range. A ratio `bufferTokens` and a multiplier `blockAfter` scale with the
    threshold (`SharedScales`); absolute tokens stay fixed, so they are checked against the whole range:
    an interval below `min`, a `blockAfter` above `max`. The resolved fixed values are those at `max`."""
    plain = _resolve_buffering(config, budget.min)
    ratio = float(raw_buffer) if 0 < raw_buffer < 1 else None
    multiplier = float(raw_block_after) if 1 <= raw_block_after < BLOCK_AFTER_ABSOLUTE_FROM else None
    block_after = _resolve_block_after(
        raw_block_after,
        budget.max,
        field="observation.blockAfter",
        threshold_name="the shared budget (observation.messageTokens + reflection.observationTokens)",
        code="BLOCK_AFTER_BELOW_THRESHOLD",
    )
    return _Buffering(
        buffer_tokens=round_half_up(budget.max * ratio) if ratio is not None else plain.buffer_tokens,
        buffer_activation=plain.buffer_activation,
        block_after=block_after,
        reflection_buffer_activation=plain.reflection_buffer_activation,
        reflection_block_after=plain.reflection_block_after,
        shared_scales=SharedScales(ratio, multiplier),
    )


def _resolve_buffer_tokens(raw: float, message_tokens: int) -> int:
    """A ratio in (0, 1) is a share of the message window; anything else is taken as absolute tokens."""
    resolved = round_half_up(message_tokens * raw) if 0 < raw < 1 else round_half_up(raw)
    if resolved <= 0:
        raise OMConfigError(
            "BUFFER_TOKENS_NOT_POSITIVE",
            "observation.bufferTokens",
            f"resolves to {resolved} tokens; use a ratio in (0, 1), absolute tokens >= 1, or false",
            raw,
        )
    if resolved >= message_tokens:
        raise OMConfigError(
            "BUFFER_TOKENS_TOO_LARGE",
            "observation.bufferTokens",
            f"resolves to {resolved} tokens, which is not below observation.messageTokens ({message_tokens})",
            raw,
        )
    return resolved


def _resolve_buffer_activation(raw: float, message_tokens: int) -> float:
    field = "observation.bufferActivation"
    if raw <= 0:
        raise OMConfigError(
            "BUFFER_ACTIVATION_NOT_POSITIVE",
            field,
            "must be a ratio in (0, 1] or tokens to keep >= 1000",
            raw,
        )
    if 1 < raw < BUFFER_ACTIVATION_ABSOLUTE_FROM:
        raise OMConfigError(
            "BUFFER_ACTIVATION_DEAD_ZONE",
            field,
            "values between 1 and 1000 are neither a ratio (0, 1] nor an absolute retention (>= 1000)",
            raw,
        )
    if raw >= BUFFER_ACTIVATION_ABSOLUTE_FROM and raw >= message_tokens:
        raise OMConfigError(
            "BUFFER_ACTIVATION_RETENTION_TOO_LARGE",
            field,
            f"tokens to keep must be below observation.messageTokens ({message_tokens})",
            raw,
        )
    return float(raw)


def _resolve_reflection_buffer_activation(raw: float) -> float:
    if not 0 < raw <= 1:
        raise OMConfigError(
            "REFLECTION_BUFFER_ACTIVATION_RANGE",
            "reflection.bufferActivation",
            "must be a ratio in (0, 1] of reflection.observationTokens",
            raw,
        )
    return float(raw)


def _resolve_block_after(raw: float, threshold: int, *, field: str, threshold_name: str, code: str) -> int:
    """`[1, 100)` multiplies the threshold (1.0 = exactly the threshold); `>= 100` is absolute and must
    exceed the threshold; below 1 the value is taken literally as tokens, which is always too low."""
    if raw >= BLOCK_AFTER_ABSOLUTE_FROM:
        absolute = round_half_up(raw)
        if absolute <= threshold:
            raise OMConfigError(
                code,
                field,
                f"an absolute value must be greater than {threshold_name} ({threshold}); "
                "or use a multiplier in [1, 100)",
                raw,
            )
        return absolute
    if raw >= 1:
        return round_half_up(threshold * raw)
    raise OMConfigError(
        code,
        field,
        f"is below {threshold_name} ({threshold}); use a multiplier in [1, 100) or absolute tokens "
        f"greater than {threshold}",
        raw,
    )


def _check_block_after_has_buffering(buffering: _Buffering) -> None:
    """Invariant guard: the resolver drops `blockAfter` with buffering, so these only fire on a bug."""
    if buffering.block_after is not None and buffering.buffer_tokens is None:
        raise OMConfigError(
            "BLOCK_AFTER_WITHOUT_BUFFERING",
            "observation.blockAfter",
            "needs async buffering (observation.bufferTokens)",
            buffering.block_after,
        )
    if buffering.reflection_block_after is not None and buffering.reflection_buffer_activation is None:
        raise OMConfigError(
            "REFLECTION_BLOCK_AFTER_WITHOUT_BUFFERING",
            "reflection.blockAfter",
            "needs async reflection (reflection.bufferActivation)",
            buffering.reflection_block_after,
        )


def _temperature(settings: ModelSettings, default: float) -> float:
    return default if settings.temperature is None else float(settings.temperature)


def _max_output_tokens(settings: ModelSettings, choice: ModelSpec | None) -> int | None:
    if settings.max_output_tokens is not None:
        return settings.max_output_tokens
    return DEFAULT_MAX_OUTPUT_TOKENS if is_default_selection(choice) else None


def _provider_options(given: dict[str, Any] | None, default: dict[str, Any]) -> dict[str, Any]:
    return copy.deepcopy(default if given is None else given)


def _copy_attachment_filter(value: bool | str | list[str]) -> bool | str | list[str]:
    return list(value) if isinstance(value, list) else value


def _resolve_retrieval(value: bool | RetrievalConfig) -> ResolvedRetrieval | None:
    if value is False:
        return None
    options = RetrievalConfig() if value is True else value
    return ResolvedRetrieval(vector=options.vector, scope=options.scope, instructions=options.instructions)


def _resolve_working_memory(given: WorkingMemoryConfig, manage_working_memory: bool) -> ResolvedWorkingMemory:
    """§8.7 defaults: `agentManaged` is true unless the Observer manages the memory; `useStateSignals` is
    true when it does. A schema must be a valid JSON Schema of an object (the memory is one document)."""
    if given.template is not None and given.json_schema is not None:
        raise OMConfigError(
            "WORKING_MEMORY_TEMPLATE_AND_SCHEMA",
            "workingMemory.schema",
            "give either a Markdown template or a JSON schema, not both (remove workingMemory.template)",
        )
    if given.template is not None and not given.template.strip():
        raise OMConfigError(
            "WORKING_MEMORY_TEMPLATE_EMPTY",
            "workingMemory.template",
            "is empty; give the Markdown the memory starts from, or leave the option out for the default",
            given.template,
        )
    if given.json_schema is not None:
        _check_working_memory_schema(given.json_schema)
    if not given.enabled:
        return WORKING_MEMORY_OFF
    observer_managed = manage_working_memory
    return ResolvedWorkingMemory(
        enabled=True,
        scope=given.scope,
        format="json" if given.json_schema is not None else "markdown",
        template=given.template,
        schema=copy.deepcopy(given.json_schema),
        agent_managed=(not observer_managed) if given.agent_managed is None else given.agent_managed,
        use_state_signals=observer_managed if given.use_state_signals is None else given.use_state_signals,
        observer_managed=observer_managed,
    )


def _check_working_memory_schema(value: dict[str, Any]) -> None:
    """A tenant's schema is data (om_core.tenancy.json_schema): local references only, RE2 patterns,
    bounded."""
    from om_core.tenancy.json_schema import SchemaRefused, check_schema

    try:
        check_schema(value)
    except SchemaRefused as exc:
        raise OMConfigError(
            "WORKING_MEMORY_SCHEMA_INVALID", exc.field("workingMemory.schema"), exc.detail
        ) from None
    if value.get("type") != "object":
        raise OMConfigError(
            "WORKING_MEMORY_SCHEMA_INVALID",
            "workingMemory.schema",
            'must describe one JSON object (`"type": "object"` with its `properties`)',
            value.get("type"),
        )
