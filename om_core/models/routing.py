"""From the router IDs users write (`google/gemini-2.5-flash`) to the names litellm expects.

Configs and the docs name models the way the model router does: `provider/model`. litellm spells some
providers differently (`gemini/…` for Google AI Studio), so every call goes through one mapping table.
The original provider string is kept alongside, because other rules key on it: the idle-TTL table
(§4.7), provider-change detection, and which `providerOptions` entry applies to a call.

Provider options arrive in the router's camelCase shape (`{"google": {"thinkingConfig":
{"thinkingBudget": 215}}}`); they are translated to litellm's OpenAI-style parameters (`thinking`,
`reasoning_effort`, …) where litellm supports them for that model, and dropped with a debug log
otherwise, so an option meant for one provider never breaks a call to another.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "LOCAL_PROVIDER",
    "PROVIDERS",
    "ProviderRoute",
    "RoutedModel",
    "litellm_params_for",
    "route",
    "split_router_id",
    "to_litellm_model",
]

log = logging.getLogger(__name__)

#: The offline model provider registered with litellm by `om_local.extractive`.
LOCAL_PROVIDER = "om-local"

OptionTranslator = Callable[[Mapping[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class ProviderRoute:
    """How one router provider maps onto litellm.

    `env_vars`: any one of them being set gives litellm a key (first = the one we tell users to set).
    `option_keys`: the `providerOptions` entries that apply to this provider.
    """

    provider: str
    litellm_prefix: str
    env_vars: tuple[str, ...]
    option_keys: tuple[str, ...]
    translate: OptionTranslator


@dataclass(frozen=True)
class RoutedModel:
    """One router ID resolved for a call."""

    router_id: str
    provider: str | None
    model_id: str
    litellm_model: str
    route: ProviderRoute | None

    @property
    def is_local(self) -> bool:
        return self.provider == LOCAL_PROVIDER


def split_router_id(router_id: str) -> tuple[str | None, str]:
    """`"openrouter/mistralai/x"` -> `("openrouter", "mistralai/x")`; a bare ID has no provider."""
    text = router_id.strip()
    provider, sep, model_id = text.partition("/")
    if not sep or not provider or not model_id:
        return None, text
    return provider, model_id


# --- provider option translation ------------------------------------------------------------------------


def _reasoning_effort(options: Mapping[str, Any], out: dict[str, Any]) -> set[str]:
    effort = options.get("reasoningEffort", options.get("reasoning_effort"))
    reasoning = options.get("reasoning")
    if effort is None and isinstance(reasoning, Mapping):
        effort = reasoning.get("effort")
    if isinstance(effort, str):
        out["reasoning_effort"] = effort
    return {"reasoningEffort", "reasoning_effort", "reasoning"}


def _thinking_budget(budget: object) -> dict[str, Any] | None:
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
        return None
    return {"type": "enabled", "budget_tokens": budget}


def _translate_google(options: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    handled = _reasoning_effort(options, out)
    config = options.get("thinkingConfig")
    if isinstance(config, Mapping):
        thinking = _thinking_budget(config.get("thinkingBudget"))
        if thinking is not None:
            out["thinking"] = thinking
        level = config.get("thinkingLevel")
        if isinstance(level, str):
            out.setdefault("reasoning_effort", level.lower())
        _log_dropped("google.thinkingConfig", config, {"thinkingBudget", "thinkingLevel"})
    _log_dropped("google", options, handled | {"thinkingConfig"})
    return out


def _translate_anthropic(options: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    handled = _reasoning_effort(options, out)
    thinking = options.get("thinking")
    if isinstance(thinking, Mapping) and thinking.get("type") == "enabled":
        converted = _thinking_budget(thinking.get("budgetTokens", thinking.get("budget_tokens")))
        if converted is not None:
            out["thinking"] = converted
    _log_dropped("anthropic", options, handled | {"thinking"})
    return out


_OPENAI_NAMES = {
    "textVerbosity": "verbosity",
    "serviceTier": "service_tier",
    "promptCacheKey": "prompt_cache_key",
    "promptCacheRetention": "prompt_cache_retention",
    "user": "user",
}


def _translate_openai(options: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    handled = _reasoning_effort(options, out)
    for ours, theirs in _OPENAI_NAMES.items():
        if ours in options and options[ours] is not None:
            out[theirs] = options[ours]
    _log_dropped("openai", options, handled | set(_OPENAI_NAMES))
    return out


def _translate_effort_only(options: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    handled = _reasoning_effort(options, out)
    _log_dropped("provider", options, handled)
    return out


def _translate_nothing(options: Mapping[str, Any]) -> dict[str, Any]:
    _log_dropped(LOCAL_PROVIDER, options, set())
    return {}


def _log_dropped(where: str, options: Mapping[str, Any], handled: set[str]) -> None:
    dropped = sorted(str(key) for key in options if key not in handled)
    if dropped:
        log.debug("provider options %s.%s have no litellm equivalent; dropped", where, dropped)


def _route(
    provider: str, prefix: str, env_vars: tuple[str, ...], keys: tuple[str, ...], translate: OptionTranslator
) -> ProviderRoute:
    return ProviderRoute(provider, prefix, env_vars, keys, translate)


_GEMINI_ENV = ("GEMINI_API_KEY", "GOOGLE_API_KEY")

#: Router provider -> litellm. Providers not listed pass through unchanged (litellm may still know them).
PROVIDERS: dict[str, ProviderRoute] = {
    entry.provider: entry
    for entry in (
        _route("google", "gemini", _GEMINI_ENV, ("google", "gemini"), _translate_google),
        _route("gemini", "gemini", _GEMINI_ENV, ("google", "gemini"), _translate_google),
        _route("openai", "openai", ("OPENAI_API_KEY",), ("openai",), _translate_openai),
        _route("anthropic", "anthropic", ("ANTHROPIC_API_KEY",), ("anthropic",), _translate_anthropic),
        _route("deepseek", "deepseek", ("DEEPSEEK_API_KEY",), ("deepseek",), _translate_effort_only),
        _route("xai", "xai", ("XAI_API_KEY",), ("xai",), _translate_effort_only),
        _route("groq", "groq", ("GROQ_API_KEY",), ("groq",), _translate_effort_only),
        _route("openrouter", "openrouter", ("OPENROUTER_API_KEY",), ("openrouter",), _translate_effort_only),
        _route("mistral", "mistral", ("MISTRAL_API_KEY",), ("mistral",), _translate_effort_only),
        _route("cerebras", "cerebras", ("CEREBRAS_API_KEY",), ("cerebras",), _translate_effort_only),
        _route(LOCAL_PROVIDER, LOCAL_PROVIDER, (), (LOCAL_PROVIDER,), _translate_nothing),
    )
}


def route(router_id: str) -> RoutedModel:
    """Resolve a router ID. Unknown providers and bare IDs are handed to litellm as written."""
    provider, model_id = split_router_id(router_id)
    known = PROVIDERS.get(provider.lower()) if provider else None
    if known is None:
        if provider:
            log.debug(
                "provider %r is not in the routing table; passing %r to litellm as is", provider, router_id
            )
        return RoutedModel(router_id.strip(), provider, model_id, router_id.strip(), None)
    return RoutedModel(router_id.strip(), provider, model_id, f"{known.litellm_prefix}/{model_id}", known)


def to_litellm_model(router_id: str) -> str:
    """The litellm model name for a router ID (`google/gemini-2.5-flash` -> `gemini/gemini-2.5-flash`)."""
    return route(router_id).litellm_model


def litellm_params_for(
    routed: RoutedModel,
    provider_options: Mapping[str, Any] | None,
    supported: Callable[[RoutedModel], list[str] | None] | None = None,
) -> dict[str, Any]:
    """The extra litellm keyword arguments that `provider_options` asks for on this model.

    Only the entries keyed by this model's provider apply (an option block for Google is ignored on an
    OpenAI call). A `"litellm"` entry is an escape hatch passed through verbatim. Translated params that
    litellm does not support for the model are dropped with a debug log; `supported` is injectable for
    tests and defaults to `litellm.get_supported_openai_params`.
    """
    if not provider_options:
        return {}
    params: dict[str, Any] = {}
    if routed.route is not None:
        for key in routed.route.option_keys:
            block = provider_options.get(key)
            if isinstance(block, Mapping):
                params.update(routed.route.translate(block))
    if params:
        allowed = (supported or _litellm_supported_params)(routed)
        if allowed is not None:
            for name in sorted(set(params) - set(allowed)):
                log.debug("litellm does not support %r for %s; dropped", name, routed.litellm_model)
                del params[name]
    raw = provider_options.get("litellm")
    if isinstance(raw, Mapping):
        params.update(raw)
    return params


def _litellm_supported_params(routed: RoutedModel) -> list[str] | None:
    import litellm

    prefix, _, model = routed.litellm_model.partition("/")
    try:
        names = litellm.get_supported_openai_params(model=model or prefix, custom_llm_provider=prefix or None)
    except Exception:  # litellm raises for models it cannot place; then we cannot judge either
        return None
    return list(names) if names is not None else None
