"""A model and extractor choice made per request: the service's equivalent of the original's dynamic model
(a function of the request context that returns the Observer's or Reflector's model) and dynamic
extractors.

A turn may send `memory_options` (`{"model": ..., "observation": {"model": ..., "extract": [...]},
"reflection": {...}}`); it applies to the memory-model calls of the background work that turn starts, over
the thread's own config. The field comes from a tenant key, so it is untrusted twice over: only these
options may be chosen (`normalize`), every model must match the operator's per-request patterns
(`OM_REQUEST_MODELS`; none set: no per-request model) as well as what a tenant's config may choose
(`OM_MEMORY_MODELS`, self-hosted providers only when named), and extractors may be chosen only when the
operator allows it (`OM_REQUEST_EXTRACTORS`), naming only code the operator registered (`check`).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from om_core.config import trust
from om_core.config.options import ObservationalMemoryConfig, ResolvedConfig
from om_core.config.trust import MemoryPolicy
from om_core.errors import OMConfigError
from om_core.extractors.registry import check_tenant_overrides
from om_core.models import allowlist
from om_core.models.selection import model_ids, parse_model_spec

__all__ = [
    "FIELD",
    "MAX_CHOICE_BYTES",
    "ChosenConfigs",
    "check",
    "check_request",
    "encode",
    "merged",
    "normalize",
]

#: The request field, for error paths.
FIELD = "memory_options"
#: Largest `memory_options` a request may send, as JSON (extractor definitions carry schemas).
MAX_CHOICE_BYTES = 16_384
_PHASES = ("observation", "reflection")
_PHASE_KEYS = ("model", "extract")


def normalize(value: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The choice as phase blocks (`{"observation": {"model": ...}, ...}`): a top-level `model` becomes
    each phase's unless the phase names its own. Raises `OMConfigError` naming the field for anything
    else a request may not choose, or for a choice larger than `MAX_CHOICE_BYTES`."""
    if not isinstance(value, Mapping):
        raise OMConfigError("REQUEST_OPTIONS_INVALID", FIELD, "expected an object", value)
    if len(json.dumps(value, default=str)) > MAX_CHOICE_BYTES:
        raise OMConfigError(
            "REQUEST_OPTIONS_TOO_LARGE", FIELD, f"is larger than {MAX_CHOICE_BYTES} bytes as JSON"
        )
    out: dict[str, dict[str, Any]] = {}
    for key, block in value.items():
        if key == "model":
            continue
        chosen = _phase_block(str(key), block)
        if chosen:
            out[key] = chosen
    top = value.get("model")
    if top is not None:
        for phase in _PHASES:
            out.setdefault(phase, {}).setdefault("model", copy.deepcopy(top))
    for phase, block in out.items():
        if "model" in block:
            parse_model_spec(block["model"], f"{FIELD}.{phase}.model")  # the shape, bounds included
    return out


def _phase_block(key: str, block: object) -> dict[str, Any]:
    if key not in _PHASES:
        raise _not_choosable(key)
    if not isinstance(block, Mapping):
        raise OMConfigError("REQUEST_OPTIONS_INVALID", f"{FIELD}.{key}", "expected an object", block)
    for name in block:
        if name not in _PHASE_KEYS:
            raise _not_choosable(f"{key}.{name}")
    return {name: copy.deepcopy(block[name]) for name in _PHASE_KEYS if block.get(name) is not None}


def check(choice: Mapping[str, Mapping[str, Any]], policy: MemoryPolicy) -> None:
    """Raise `OMConfigError` when the operator's per-request rules refuse `choice` (normalized). The
    config rules (`trust.check` of the merged config, registered code names) are checked by the caller
    on the config the choice makes."""
    for phase, block in choice.items():
        if "model" in block:
            field = f"{FIELD}.{phase}.model"
            for model in model_ids(parse_model_spec(block["model"], field)):
                reason = _request_refusal(policy, model)
                if reason is not None:
                    raise OMConfigError("MODEL_NOT_ALLOWED", field, reason, model)
        if "extract" in block and not policy.request_extractors:
            raise OMConfigError(
                "REQUEST_EXTRACTORS_NOT_ALLOWED",
                f"{FIELD}.{phase}.extract",
                "this server takes no extractors per request (OM_REQUEST_EXTRACTORS is off): set them in "
                "the thread's or resource's config instead (PUT .../config)",
            )


def merged(
    config: ObservationalMemoryConfig, choice: Mapping[str, Mapping[str, Any]]
) -> ObservationalMemoryConfig:
    """`config` with the choice applied. A top-level model of `config` moves to the phases first, so a
    phase's chosen model replaces it there without the two conflicting."""
    base = config.model_dump(by_alias=True, exclude_none=True)
    top = base.pop("model", None)
    for phase in _PHASES:
        block = dict(base.get(phase) or {})
        if top is not None and "model" not in block:
            block["model"] = top
        block.update(choice.get(phase, {}))
        base[phase] = block
    return ObservationalMemoryConfig.parse(base)


def check_request(
    base: ObservationalMemoryConfig,
    overrides: Mapping[str, Any] | None,
    choice: Mapping[str, Mapping[str, Any]],
    policy: MemoryPolicy,
    tenant: str | None,
) -> None:
    """Raise `OMConfigError` (the API's 422, naming the field) when a turn's `memory_options`
    (normalized) are not the operator's to give: the per-request rules (`check`), then the config they
    make over the thread's `overrides` under the operator's policy (`trust.check`, against the operator's
    `base`), and any code they name (registered for `tenant`)."""
    check(choice, policy)
    effective = base.with_overrides(overrides) if overrides else base
    try:
        trust.check(merged(effective, choice), base, policy)
        check_tenant_overrides(dict(choice), tenant)
    except OMConfigError as exc:
        raise exc.at(FIELD) from None


class ChosenConfigs:
    """The resolved configs requests' choices make over threads' configs, as one process keeps them: a
    config resolves once per (overrides, choice), and a config that breaks the operator's policy resolves
    with `refused` set (a thread config changed since the turn checked the choice). Bounded: each request
    may choose anew."""

    MAX_ENTRIES = 1024

    def __init__(self) -> None:
        self._cache: dict[str, ResolvedConfig] = {}

    def resolve(
        self,
        base: ObservationalMemoryConfig,
        overrides: Mapping[str, Any] | None,
        choice: str,
        policy: MemoryPolicy,
    ) -> ResolvedConfig:
        """`base` with `overrides`, then `choice` (`encode`d), resolved."""
        key = repr((sorted(overrides.items()) if overrides else None, choice))
        cached = self._cache.get(key)
        if cached is None:
            effective = base.with_overrides(overrides) if overrides else base
            config = merged(effective, json.loads(choice))
            cached = config.resolve()
            refused = trust.refusal(config, base, policy)
            if refused is not None:
                cached = replace(cached, refused=refused)
            if len(self._cache) >= self.MAX_ENTRIES:
                self._cache.clear()
            self._cache[key] = cached
        return cached


def encode(choice: Mapping[str, Mapping[str, Any]] | None) -> str:
    """The canonical JSON text a task carries ("" for none)."""
    return json.dumps(choice, sort_keys=True, separators=(",", ":")) if choice else ""


def _request_refusal(policy: MemoryPolicy, model: str) -> str | None:
    if not policy.request_models:
        return (
            f"model {model!r} cannot be chosen per request: this server allows no per-request memory model "
            "(the operator sets OM_REQUEST_MODELS); leave memory_options.model out, or set the model in the "
            "thread's config"
        )
    return allowlist.refusal(policy.request_models, model, setting="OM_REQUEST_MODELS")


def _not_choosable(path: str) -> OMConfigError:
    return OMConfigError(
        "REQUEST_OPTION_NOT_ALLOWED",
        f"{FIELD}.{path}",
        "a turn may choose only model, observation.model, observation.extract, reflection.model and "
        "reflection.extract; set other options in the thread's config (PUT .../config)",
    )
