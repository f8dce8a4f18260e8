"""Early activation (§4.7): activate buffered work before its token threshold when the actor's prompt
cache is cold anyway (idle past the provider's cache TTL) or about to be invalidated (another
provider/model answers next), so the next uncached prompt is the smaller, compressed one.

Pure helpers: the caller passes the message history, the actor's model and `now`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Literal

from om_core.messages import Message, ensure_utc

MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS

#: Cache TTLs assumed by `"auto"`, per provider family.
SHORT_TTL_MS = 5 * MINUTE_MS
OPENAI_EXTENDED_TTL_MS = HOUR_MS
GEMINI_TTL_MS = 24 * HOUR_MS
DEEPSEEK_TTL_MS = HOUR_MS
GROQ_TTL_MS = 2 * HOUR_MS
ANTHROPIC_EXTENDED_TTL_MS = HOUR_MS

#: OpenAI models whose prompt cache is only kept in memory for minutes.
_OPENAI_SHORT_TTL_MODEL = re.compile(r"^gpt-4|^gpt-5(?:$|-|\.([1-4])(?:$|-))")

_ONE_MS = timedelta(milliseconds=1)


def split_model(model: str) -> tuple[str | None, str]:
    """`"provider/model-id"` → (provider, model id); a bare ID has no provider. Only the first slash
    splits, so router IDs like `openrouter/google/gemini-2.5` keep their nested model path."""
    provider, slash, model_id = model.partition("/")
    if not slash:
        return None, model
    return provider, model_id


def _openai_cache_retention(provider_options: Mapping[str, Any] | None) -> str | None:
    openai = (provider_options or {}).get("openai")
    if not isinstance(openai, Mapping):
        return None
    value = openai.get("promptCacheRetention", openai.get("prompt_cache_retention"))
    return value.lower() if isinstance(value, str) else None


def _anthropic_cache_ttl(provider_options: Mapping[str, Any] | None) -> str | None:
    """The `ttl` of Anthropic's `cacheControl` (`"5m"` or `"1h"`), as the AI SDK and litellm spell it."""
    anthropic = (provider_options or {}).get("anthropic")
    if not isinstance(anthropic, Mapping):
        return None
    control = anthropic.get("cacheControl", anthropic.get("cache_control"))
    ttl = control.get("ttl") if isinstance(control, Mapping) else None
    return ttl.lower() if isinstance(ttl, str) else None


def auto_ttl_ms(
    provider: str | None, model_id: str | None, provider_options: Mapping[str, Any] | None
) -> int:
    """The idle TTL `"auto"` means for this actor: how long its provider keeps a prompt cache warm."""
    provider_name = (provider or "").lower()
    model = (model_id or "").lower()
    if "openai" in provider_name:
        retention = _openai_cache_retention(provider_options)
        if retention == "24h":
            return OPENAI_EXTENDED_TTL_MS
        if retention == "in_memory":
            return SHORT_TTL_MS
        return SHORT_TTL_MS if _OPENAI_SHORT_TTL_MODEL.match(model) else OPENAI_EXTENDED_TTL_MS
    if "google" in provider_name or "gemini" in provider_name:
        return GEMINI_TTL_MS
    if "deepseek" in provider_name:
        return DEEPSEEK_TTL_MS
    if "groq" in provider_name:
        return GROQ_TTL_MS
    if "anthropic" in provider_name and _anthropic_cache_ttl(provider_options) == "1h":
        return ANTHROPIC_EXTENDED_TTL_MS  # the extended cache (beyond the spec's table, which predates it)
    # anthropic, xai / grok, openrouter and anything unknown keep caches for minutes.
    return SHORT_TTL_MS


def resolve_ttl_ms(
    setting: int | Literal["auto"] | None,
    actor_model: str | None,
    provider_options: Mapping[str, Any] | None,
) -> int | None:
    """The effective idle TTL for one call: off (None), a fixed duration, or `"auto"` per actor model."""
    if setting is None:
        return None
    if setting == "auto":
        provider, model_id = split_model(actor_model) if actor_model else (None, None)
        return auto_ttl_ms(provider, model_id, provider_options)
    return setting


def _last_assistant(messages: Sequence[Message]) -> Message | None:
    return next((m for m in reversed(messages) if m.role == "assistant"), None)


def last_activity_at(messages: Sequence[Message]) -> datetime | None:
    """When the actor last produced something: its last non-`data-*` part (OM's own markers are
    appended later and must not keep a thread "warm"); no assistant message means no activity."""
    message = _last_assistant(messages)
    if message is None:
        return None
    content = [part for part in message.parts if not part.is_data]
    if not content:
        return message.created_at
    return message.part_time(content[-1])


def _model_from_metadata(metadata: Mapping[str, Any]) -> str | None:
    model = metadata.get("model")
    if isinstance(model, str) and model:
        return model
    model_id = metadata.get("modelId", metadata.get("model_id"))
    if not isinstance(model_id, str) or not model_id:
        return None
    provider = metadata.get("provider")
    return f"{provider}/{model_id}" if isinstance(provider, str) and provider else model_id


def last_actor_model(messages: Sequence[Message]) -> str | None:
    """The model that produced the latest assistant step: the newest assistant message that names one,
    by its latest `step-start.model`, else `provider`/`modelId` (or `model`) in its metadata."""
    for message in reversed(messages):
        if message.role != "assistant":
            continue
        step_models = [p.model for p in message.parts if p.type == "step-start" and p.model]
        if step_models:
            return step_models[-1]
        from_metadata = _model_from_metadata(message.metadata)
        if from_metadata is not None:
            return from_metadata
    return None


def provider_changed(actor: str | None, last: str | None) -> bool:
    """True when a different provider/model answers next. A bare ID on either side (older history)
    compares model IDs only, so a missing provider prefix is not mistaken for a switch."""
    if actor is None or last is None or actor == last:
        return False
    if "/" in actor and "/" in last:
        return True
    return split_model(actor)[1] != split_model(last)[1]


def ttl_expired(ttl_ms: int | None, last_activity: datetime | None, now: datetime) -> tuple[bool, int | None]:
    """(expired, idle milliseconds). Idle time is reported whenever the last activity is known."""
    if last_activity is None:
        return False, None
    idle_ms = (ensure_utc(now) - ensure_utc(last_activity)) // _ONE_MS
    return (ttl_ms is not None and idle_ms >= ttl_ms), idle_ms
