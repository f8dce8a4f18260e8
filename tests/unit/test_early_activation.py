"""Early activation helpers (§4.7, §13.7)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from om_core.messages import Message, Part, text_message
from om_core.policy.early_activation import (
    auto_ttl_ms,
    last_activity_at,
    last_actor_model,
    provider_changed,
    resolve_ttl_ms,
    split_model,
    ttl_expired,
)

FIVE_MIN = 300_000
ONE_HOUR = 3_600_000
NOW = datetime(2026, 4, 20, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("provider", "model_id", "options", "ttl"),
    [
        ("anthropic", "claude-sonnet-4", None, FIVE_MIN),
        ("anthropic", "claude-sonnet-4", {"anthropic": {"cacheControl": {"ttl": "1h"}}}, ONE_HOUR),
        ("anthropic", "claude-sonnet-4", {"anthropic": {"cache_control": {"ttl": "1h"}}}, ONE_HOUR),
        ("anthropic", "claude-sonnet-4", {"anthropic": {"cacheControl": {"ttl": "5m"}}}, FIVE_MIN),
        ("google", "gemini-2.5-pro", {"anthropic": {"cacheControl": {"ttl": "1h"}}}, 86_400_000),
        ("openrouter", "mistralai/ministral-8b", None, FIVE_MIN),
        ("xai", "grok-4-1-fast", None, FIVE_MIN),
        ("mistral", "mistral-large", None, FIVE_MIN),
        (None, "whatever", None, FIVE_MIN),
        ("deepseek", "deepseek-reasoner", None, ONE_HOUR),
        ("google", "gemini-2.5-flash", None, 86_400_000),
        ("gemini", "gemini-2.5-pro", None, 86_400_000),
        ("groq", "llama-3.3-70b", None, 7_200_000),
        ("openai", "gpt-4o", None, FIVE_MIN),
        ("openai", "gpt-5", None, FIVE_MIN),
        ("openai", "gpt-5-mini", None, FIVE_MIN),
        ("openai", "gpt-5.1", None, FIVE_MIN),
        ("openai", "gpt-5.4-pro", None, FIVE_MIN),
        ("openai", "gpt-5.5", None, ONE_HOUR),
        ("openai", "gpt-5.10", None, ONE_HOUR),
        ("openai", "o3", None, ONE_HOUR),
        ("OpenAI.responses", "GPT-4o", None, FIVE_MIN),
        ("openai", "gpt-4o", {"openai": {"promptCacheRetention": "24h"}}, ONE_HOUR),
        ("openai", "o3", {"openai": {"promptCacheRetention": "in_memory"}}, FIVE_MIN),
    ],
)
def test_auto_ttl(provider: str | None, model_id: str, options: dict[str, Any] | None, ttl: int) -> None:
    assert auto_ttl_ms(provider, model_id, options) == ttl


@pytest.mark.parametrize(
    ("setting", "actor", "options", "ttl"),
    [
        (None, "openai/gpt-4o", None, None),
        (600_000, "openai/gpt-4o", None, 600_000),
        ("auto", "google/gemini-2.5-flash", None, 86_400_000),
        ("auto", "openai/gpt-4o", {"openai": {"promptCacheRetention": "24h"}}, ONE_HOUR),
        ("auto", "gpt-4o", None, FIVE_MIN),  # bare ID: provider unknown
        ("auto", None, None, FIVE_MIN),
    ],
)
def test_resolve_ttl(
    setting: Any, actor: str | None, options: dict[str, Any] | None, ttl: int | None
) -> None:
    assert resolve_ttl_ms(setting, actor, options) == ttl


@pytest.mark.parametrize(
    ("model", "parts"),
    [
        ("openai/gpt-4o", ("openai", "gpt-4o")),
        ("gpt-4o", (None, "gpt-4o")),
        ("openrouter/google/gemini-2.5-flash", ("openrouter", "google/gemini-2.5-flash")),
    ],
)
def test_split_model(model: str, parts: tuple[str | None, str]) -> None:
    assert split_model(model) == parts


@pytest.mark.parametrize(
    ("actor", "last", "changed"),
    [
        ("openai/gpt-4o", "anthropic/claude-sonnet-4", True),
        ("openai/gpt-4o", "gpt-4o", False),
        ("openai/gpt-4o", "gpt-4o-mini", True),
        ("openai/gpt-4o", "openai/gpt-4o", False),
        ("openai/gpt-4o", "openai/gpt-4o-mini", True),
        ("gpt-4o", "gpt-4o", False),
        (None, "openai/gpt-4o", False),
        ("openai/gpt-4o", None, False),
    ],
)
def test_provider_changed(actor: str | None, last: str | None, changed: bool) -> None:
    assert provider_changed(actor, last) is changed


def assistant(message_id: str, parts: list[Part], **extra: Any) -> Message:
    return Message(id=message_id, role="assistant", parts=parts, created_at=NOW - timedelta(hours=1), **extra)


def test_last_model_from_latest_step_start_of_newest_assistant_message() -> None:
    older = assistant("a1", [Part(type="step-start", model="anthropic/claude-sonnet-4")])
    newest = assistant(
        "a2",
        [
            Part(type="step-start", model="openai/gpt-4o"),
            Part(type="text", text="hi"),
            Part(type="step-start", model="openai/gpt-5-mini"),
        ],
        metadata={"provider": "google", "modelId": "gemini-2.5-flash"},
    )
    user = text_message("u1", "user", "later")
    assert last_actor_model([older, newest, user]) == "openai/gpt-5-mini"


def test_last_model_falls_back_to_metadata_then_older_messages() -> None:
    with_metadata = assistant(
        "a1", [Part(type="text", text="x")], metadata={"provider": "google", "modelId": "g"}
    )
    assert last_actor_model([with_metadata]) == "google/g"
    bare = assistant("a2", [Part(type="text", text="x")], metadata={"modelId": "gpt-4o"})
    assert last_actor_model([bare]) == "gpt-4o"
    nameless = assistant("a3", [Part(type="text", text="y")])
    assert last_actor_model([with_metadata, nameless]) == "google/g"
    assert last_actor_model([nameless]) is None
    assert last_actor_model([]) is None


def test_last_activity_ignores_trailing_data_parts() -> None:
    text_time = NOW - timedelta(minutes=6)
    message = assistant(
        "a1",
        [
            Part(type="text", text="done", created_at=text_time),
            Part(type="data-om-observation-end", data={}, created_at=NOW - timedelta(seconds=5)),
        ],
    )
    assert last_activity_at([message, text_message("u", "user", "next", created_at=NOW)]) == text_time


def test_last_activity_falls_back_to_the_message_time() -> None:
    message = assistant("a1", [Part(type="text", text="done")])
    assert last_activity_at([message]) == message.created_at
    only_markers = assistant("a2", [Part(type="data-om-status", data={})])
    assert last_activity_at([only_markers]) == only_markers.created_at
    assert last_activity_at([text_message("u", "user", "hello")]) is None


@pytest.mark.parametrize(
    ("ttl", "idle", "expected"),
    [
        (FIVE_MIN, timedelta(minutes=6), (True, 360_000)),
        (FIVE_MIN, timedelta(minutes=5), (True, 300_000)),
        (FIVE_MIN, timedelta(minutes=4, seconds=59), (False, 299_000)),
        (None, timedelta(hours=3), (False, 10_800_000)),
    ],
)
def test_ttl_expired(ttl: int | None, idle: timedelta, expected: tuple[bool, int]) -> None:
    assert ttl_expired(ttl, NOW - idle, NOW) == expected


def test_ttl_cannot_expire_without_activity() -> None:
    assert ttl_expired(FIVE_MIN, None, NOW) == (False, None)


def test_step_zero_idle_activation_scenario() -> None:  # §13.4 case 10
    last = assistant("a1", [Part(type="text", text="ok", created_at=NOW - timedelta(minutes=6))])
    ttl = resolve_ttl_ms(300_000, "anthropic/claude-sonnet-4", None)
    expired, idle_ms = ttl_expired(ttl, last_activity_at([last]), NOW)
    assert (expired, idle_ms) == (True, 360_000)
