"""A provider change is detected from the model recorded on stored assistant messages (issue 33).

A caller that never sends `actor_model` with its replies, but stores them with the model that wrote them
(`provider`/`modelId` in the message's metadata, or a `step-start` part's `model`), still gets
`activateOnProviderChange`: the next turn whose `actor_model` differs activates the buffered chunks, and
the activation names both models. Driven through `MemoryEngine` on SQLite with the inline executor; the
Observer is the fake model.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine

from om_core.config.options import ObservationalMemoryConfig
from om_core.engine import MemoryEngine, TurnResult, lookup_key
from om_core.engine import events as ev
from om_core.messages import Message, Part, text_message
from om_core.store import history, records
from om_core.tenancy.scoped_ids import StoredId
from tests.support.fake_models import FakeModels

T0 = datetime(2026, 3, 3, 9, 0, tzinfo=UTC)
WORDS = ("harbor", "lantern", "copper", "meadow", "signal")


def config() -> ObservationalMemoryConfig:
    return ObservationalMemoryConfig.parse(
        {
            "model": "fake/observer",
            "activateOnProviderChange": True,
            "observation": {"messageTokens": 6000, "bufferTokens": 0.2},
            "reflection": {"observationTokens": 50_000},
        }
    )


def reply(i: int, *, metadata: dict[str, Any] | None = None, step_model: str | None = None) -> Message:
    text = f"Reply {i}: " + " ".join(f"{w}{i}" for w in WORDS * 30)
    message = text_message(f"m{i}", "assistant", text, T0 + timedelta(minutes=i))
    parts = ([Part(type="step-start", model=step_model)] if step_model else []) + message.parts
    return message.model_copy(update={"metadata": metadata or {}, "parts": parts})


def ask(i: int) -> Message:
    text = f"Question {i}: " + " ".join(f"{w}{i}" for w in WORDS * 30)
    return text_message(f"m{i}", "user", text, T0 + timedelta(minutes=i))


def buffered(om: MemoryEngine, thread: StoredId, **reply_fields: Any) -> None:
    """Turns that store replies naming their model (and no `actor_model`) until a chunk is buffered."""
    for i in range(0, 16, 2):
        om.ingest_turn(thread, thread, [ask(i), reply(i + 1, **reply_fields)])
        head = records.get_head(om.db, lookup_key(thread))
        if head is not None and head.chunks:
            return
    raise AssertionError("no chunk was buffered")


def activations(result: TurnResult) -> list[dict[str, Any]]:
    return [e.payload for e in result.events if e.type == ev.ACTIVATION]


@pytest.mark.parametrize(
    "reply_fields",
    [
        {"metadata": {"provider": "openai", "modelId": "gpt-4o"}},
        {"metadata": {"model": "openai/gpt-4o"}},
        {"step_model": "openai/gpt-4o"},
    ],
    ids=["provider-modelId", "model", "step-start"],
)
def test_the_model_on_stored_replies_is_what_a_new_actor_model_is_compared_with(
    sqlite_engine: Engine, reply_fields: dict[str, Any]
) -> None:
    om = MemoryEngine(sqlite_engine, models=FakeModels(), config=config())  # type: ignore[arg-type]
    thread = StoredId(f"t-{uuid.uuid4().hex[:8]}")
    buffered(om, thread, **reply_fields)
    row = history.get_thread(sqlite_engine, thread)
    assert row is not None and row.last_actor_model == "openai/gpt-4o", "recorded from the replies"

    result = om.ingest_turn(thread, thread, [ask(40)], actor_model="anthropic/claude-sonnet-4-5")

    fired = activations(result)
    assert fired and {a["triggeredBy"] for a in fired} == {"provider_change"}
    assert fired[0]["previousModel"] == "openai/gpt-4o"
    assert fired[0]["currentModel"] == "anthropic/claude-sonnet-4-5"


def test_a_reply_in_the_same_turn_is_the_previous_model(sqlite_engine: Engine) -> None:
    """The reply stored by this very turn is the newest assistant step: the next one is compared with it,
    not with an older recorded model."""
    om = MemoryEngine(sqlite_engine, models=FakeModels(), config=config())  # type: ignore[arg-type]
    thread = StoredId(f"t-{uuid.uuid4().hex[:8]}")
    buffered(om, thread, metadata={"model": "openai/gpt-4o"})
    # The reply of this turn was written by Anthropic, and Anthropic answers next: no change.
    same = om.ingest_turn(
        thread,
        thread,
        [reply(41, metadata={"model": "anthropic/claude-sonnet-4-5"}), ask(42)],
        actor_model="anthropic/claude-sonnet-4-5",
    )
    assert [a for a in activations(same) if a["triggeredBy"] == "provider_change"] == []


def test_the_same_model_on_the_replies_activates_nothing(sqlite_engine: Engine) -> None:
    om = MemoryEngine(sqlite_engine, models=FakeModels(), config=config())  # type: ignore[arg-type]
    thread = StoredId(f"t-{uuid.uuid4().hex[:8]}")
    buffered(om, thread, metadata={"provider": "openai", "modelId": "gpt-4o"})
    result = om.ingest_turn(thread, thread, [ask(40)], actor_model="openai/gpt-4o")
    assert [a for a in activations(result) if a["triggeredBy"] == "provider_change"] == []
    head = records.get_head(sqlite_engine, lookup_key(thread))
    assert head is not None and head.chunks, "the chunks still wait for the threshold"
