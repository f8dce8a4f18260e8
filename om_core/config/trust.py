"""What a tenant key may write into OM configuration, and the operator's limits on it.

Thread and resource overrides come from whoever holds a tenant key, so they are untrusted input, while
the server's own configuration (`OM_CONFIG`) and settings are the operator's. Every option of the
configuration model is classified here, in one table (`OPTION_RULES`), by who may set it and within which
bounds; a test walks the model and fails on an option that is not classified, so a new option cannot open
a door silently.

The same check runs twice: where a key writes a config (the API answers 422 naming the option) and where
a config is used (`EngineCore.config_for`), so a config stored before a rule existed, or written around
the API, cannot reach a sink either: its memory-model calls are refused, saying why, in their failed
events. The rules compare the tenant's effective config with the operator's: a value the operator's
config already has is always allowed, so the operator's own choices never lock a tenant out.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from om_core.config.options import ObservationalMemoryConfig, ResolvedConfig, TokenRange
from om_core.errors import OMConfigError
from om_core.models import allowlist
from om_core.models.selection import ModelSpec, model_ids

__all__ = [
    "OPERATOR_ONLY_PROVIDER_OPTIONS",
    "OPTION_RULES",
    "MemoryPolicy",
    "Rule",
    "check",
    "models_of",
    "refusal",
]

#: How an option may be set by a tenant key:
#: - `tenant`: any value the configuration model accepts;
#: - `model`: a model `OM_MEMORY_MODELS` allows (self-hosted providers only when named);
#: - `floor`: at least `OM_MEMORY_MIN_TOKENS` (a trigger or batch size: lower means more model calls);
#: - `buffer-floor`: the buffering interval it resolves to is at least `OM_MEMORY_MIN_BUFFER_TOKENS`;
#: - `cap`: at most `OM_MEMORY_MAX_OUTPUT_TOKENS`;
#: - `provider-options`: any entry but those in `OPERATOR_ONLY_PROVIDER_OPTIONS` (only the provider
#:   translations of `om_core.models.routing` reach litellm, and they name no host, key or header);
#: - `code-names`: extractor definitions, whose code (`use`, `onExtracted`) is a name the operator
#:   registered (`om_core.extractors.registry`), never an import path, and whose schemas are data;
#: - `schema`: a JSON Schema, checked as data (local references only, linear-time patterns, bounded).
Rule = Literal["tenant", "model", "floor", "buffer-floor", "cap", "provider-options", "code-names", "schema"]

_PHASE_RULES: dict[str, Rule] = {
    "model": "model",
    "instruction": "tenant",
    "extract": "code-names",
    "modelSettings": "tenant",
    "modelSettings.temperature": "tenant",
    "modelSettings.maxOutputTokens": "cap",
    "providerOptions": "provider-options",
    "bufferActivation": "tenant",
    "activateAfterIdle": "tenant",
    "activateOnProviderChange": "tenant",
    "blockAfter": "tenant",
}

#: Every option of `ObservationalMemoryConfig` by its dotted camelCase path.
OPTION_RULES: dict[str, Rule] = {
    "enabled": "tenant",
    "model": "model",
    "scope": "tenant",
    "activateAfterIdle": "tenant",
    "activateOnProviderChange": "tenant",
    "shareTokenBudget": "tenant",
    "temporalMarkers": "tenant",
    "retrieval": "tenant",
    "retrieval.vector": "tenant",
    "retrieval.scope": "tenant",
    "retrieval.instructions": "tenant",
    "obscureThreadIds": "tenant",
    "observation": "tenant",
    **{f"observation.{path}": rule for path, rule in _PHASE_RULES.items()},
    "observation.threadTitle": "tenant",
    "observation.manageWorkingMemory": "tenant",
    "observation.observeAttachments": "tenant",
    "observation.messageTokens": "floor",
    "observation.maxTokensPerBatch": "floor",
    "observation.bufferTokens": "buffer-floor",
    "observation.bufferOnIdle": "tenant",
    "observation.previousObserverTokens": "tenant",
    "reflection": "tenant",
    **{f"reflection.{path}": rule for path, rule in _PHASE_RULES.items()},
    "reflection.observationTokens": "floor",
    "workingMemory": "tenant",
    "workingMemory.enabled": "tenant",
    "workingMemory.scope": "tenant",
    "workingMemory.template": "tenant",
    "workingMemory.schema": "schema",
    "workingMemory.agentManaged": "tenant",
    "workingMemory.useStateSignals": "tenant",
}

#: Entries of a phase's `providerOptions` that name a host, a key, a header, a price or a passthrough:
#: `litellm` is handed to litellm verbatim (`api_base`, `api_key`, `extra_headers`, per-token prices),
#: `openai.serviceTier` picks a price tier.
OPERATOR_ONLY_PROVIDER_OPTIONS: tuple[tuple[str, ...], ...] = (("litellm",), ("openai", "serviceTier"))

_PHASES = ("observation", "reflection")


@dataclass(frozen=True)
class MemoryPolicy:
    """The operator's bounds on what a tenant's config may ask of the memory models (server settings).

    `models` are `OM_MEMORY_MODELS` glob patterns (empty: any hosted model). The floors keep a tenant from
    asking for a model call on nearly every turn; the cap bounds each call's output. `tenant_passthrough`
    lets tenant configs set `OPERATOR_ONLY_PROVIDER_OPTIONS` too: for a server whose every key holder is
    trusted as its operator. The `request_*` fields bound what one turn may choose on top
    (`om_core.config.request_choice`)."""

    models: tuple[str, ...] = ()
    min_tokens: int = 1_000
    min_buffer_tokens: int = 200
    max_output_tokens: int = 100_000
    tenant_passthrough: bool = False
    #: `OM_REQUEST_MODELS`: the models a turn may choose for its own background work (`memory_options`);
    #: empty: none. `OM_REQUEST_EXTRACTORS`: whether a turn may choose extractors (`request_choice`).
    request_models: tuple[str, ...] = ()
    request_extractors: bool = False


def check(config: ObservationalMemoryConfig, base: ObservationalMemoryConfig, policy: MemoryPolicy) -> None:
    """Raise `OMConfigError` naming the first option of `config` (a tenant's effective config) that the
    operator's `policy` does not allow; `base` is the operator's own config, whose values always pass."""
    tenant, operator = config.resolve(), base.resolve()
    _check_operator_only(config, base, policy)
    _check_models(config, operator, policy)
    _check_floors(tenant, operator, policy)
    _check_caps(tenant, operator, policy)


def refusal(
    config: ObservationalMemoryConfig, base: ObservationalMemoryConfig, policy: MemoryPolicy
) -> str | None:
    """`check` as a reason to refuse a stored config's model calls (None: allowed)."""
    try:
        check(config, base, policy)
    except OMConfigError as exc:
        return (
            f"this thread's stored config breaks the server's policy and its memory-model calls are refused: "
            f"{exc}. Fix it with PUT .../config"
        )
    return None


def _check_operator_only(
    config: ObservationalMemoryConfig, base: ObservationalMemoryConfig, policy: MemoryPolicy
) -> None:
    if policy.tenant_passthrough:
        return
    tenant, operator = config.resolve(), base.resolve()
    for phase in _PHASES:
        mine = getattr(tenant, phase).provider_options
        theirs = getattr(operator, phase).provider_options
        for keys in OPERATOR_ONLY_PROVIDER_OPTIONS:
            if _dig(mine, keys) != _dig(theirs, keys):
                raise OMConfigError(
                    "OPERATOR_ONLY_OPTION",
                    f"{phase}.providerOptions.{'.'.join(keys)}",
                    "names a host, key, header, price or litellm passthrough, which only the server's "
                    "operator sets (in OM_CONFIG); remove it",
                )


def _check_models(config: ObservationalMemoryConfig, operator: ResolvedConfig, policy: MemoryPolicy) -> None:
    allowed = set(models_of(operator.observation.model)) | set(models_of(operator.reflection.model))
    tenant = config.resolve()
    for phase in _PHASES:
        field = _model_field(config, phase)
        for model in models_of(getattr(tenant, phase).model):
            if model in allowed:
                continue
            reason = allowlist.refusal(policy.models, model, setting="OM_MEMORY_MODELS")
            if reason is not None:
                raise OMConfigError("MODEL_NOT_ALLOWED", field, reason, model)


def _model_field(config: ObservationalMemoryConfig, phase: str) -> str:
    """Where the model a phase resolves to was written: the top level, the phase, or the other phase
    (a phase without a model of its own takes the other's)."""
    if config.model is not None:
        return "model"
    other = "reflection" if phase == "observation" else "observation"
    return f"{phase}.model" if getattr(config, phase).model is not None else f"{other}.model"


def _check_floors(tenant: ResolvedConfig, operator: ResolvedConfig, policy: MemoryPolicy) -> None:
    floors = (
        (
            "observation.messageTokens",
            _low(tenant.observation.message_tokens),
            _low(operator.observation.message_tokens),
        ),
        (
            "observation.maxTokensPerBatch",
            tenant.observation.max_tokens_per_batch,
            operator.observation.max_tokens_per_batch,
        ),
        (
            "reflection.observationTokens",
            tenant.reflection.observation_tokens,
            operator.reflection.observation_tokens,
        ),
    )
    for path, value, own in floors:
        if value < policy.min_tokens and value != own:
            raise OMConfigError(
                "BELOW_SERVER_MINIMUM",
                path,
                f"is below the server's minimum of {policy.min_tokens} tokens (OM_MEMORY_MIN_TOKENS); "
                "a lower value asks for a model call on nearly every turn",
                value,
            )
    interval, own_interval = tenant.observation.buffer_tokens, operator.observation.buffer_tokens
    if interval is not None and interval < policy.min_buffer_tokens and interval != own_interval:
        raise OMConfigError(
            "BELOW_SERVER_MINIMUM",
            "observation.bufferTokens",
            f"buffering would run every {interval} tokens, below the server's minimum of "
            f"{policy.min_buffer_tokens} (OM_MEMORY_MIN_BUFFER_TOKENS): raise observation.bufferTokens or "
            "observation.messageTokens, or set bufferTokens to false",
            interval,
        )


def _check_caps(tenant: ResolvedConfig, operator: ResolvedConfig, policy: MemoryPolicy) -> None:
    for phase in _PHASES:
        value = getattr(tenant, phase).max_output_tokens
        own = getattr(operator, phase).max_output_tokens
        if value is not None and value > policy.max_output_tokens and value != own:
            raise OMConfigError(
                "ABOVE_SERVER_MAXIMUM",
                f"{phase}.modelSettings.maxOutputTokens",
                f"is above the server's maximum of {policy.max_output_tokens} (OM_MEMORY_MAX_OUTPUT_TOKENS)",
                value,
            )


def models_of(spec: ModelSpec) -> Iterator[str]:
    """Every router id a model selection may call: a model, each of a fallback chain (with or without its
    own `maxRetries`), each tier."""
    return model_ids(spec)


def _low(tokens: int | TokenRange) -> int:
    return tokens.min if isinstance(tokens, TokenRange) else tokens


def _dig(tree: Any, keys: tuple[str, ...]) -> Any:
    for key in keys:
        if not isinstance(tree, Mapping):
            return None
        tree = tree.get(key)
    return tree
