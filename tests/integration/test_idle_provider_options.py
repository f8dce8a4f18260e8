"""`activateAfterIdle: "auto"` with the actor's provider options (§4.7), through the engine: the idle
trigger a turn arms is due when the actor's prompt cache expires by its provider options, and a turn
after an idle pause activates by that TTL, not the provider's default.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine, select

from om_core.config.options import ObservationalMemoryConfig
from om_core.engine import BufferObservation, EngineSettings, MemoryEngine, lookup_key
from om_core.messages import text_message
from om_core.store import records, schema
from om_core.store.outbox import list_events
from tests.support.fake_models import FakeModels

T0 = datetime(2026, 5, 4, 9, 0, tzinfo=UTC)
CLAUDE = "anthropic/claude-sonnet-4-5"
ONE_HOUR_CACHE = {"anthropic": {"cacheControl": {"type": "ephemeral", "ttl": "1h"}}}


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def engine_for(db: Engine, clock: Clock) -> MemoryEngine:
    config = ObservationalMemoryConfig.parse(
        {"activateAfterIdle": "auto", "observation": {"messageTokens": 3000, "bufferTokens": 0.2}}
    )
    return MemoryEngine(db, models=FakeModels(), config=config, settings=EngineSettings(), clock=clock)  # type: ignore[arg-type]


def new_thread() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def idle_trigger(db: Engine, thread_id: str) -> tuple[datetime | None, dict[str, Any]]:
    T = schema.triggers
    with db.connect() as conn:
        row = conn.execute(
            select(T.c.due_at, T.c.payload).where(T.c.lookup_key == lookup_key(thread_id))
        ).first()
    assert row is not None, "the turn must arm an idle trigger"
    return row[0], dict(row[1] or {})


def exchange(
    om: MemoryEngine, thread_id: str, options: dict[str, Any] | None, model: str = CLAUDE
) -> datetime:
    """A question and its answer; returns the answer's time (the thread's last activity)."""
    answered = T0 + timedelta(minutes=1)
    om.ingest_turn(thread_id, "res-1", [text_message("u0", "user", "What is a tide table?", T0)])
    om.ingest_turn(
        thread_id,
        "res-1",
        [text_message("a0", "assistant", "A list of high and low water times.", answered)],
        actor_model=model,
        provider_options=options,
    )
    return answered


def test_the_idle_trigger_is_due_when_the_actors_prompt_cache_expires(engine: Engine) -> None:
    clock = Clock(T0 + timedelta(minutes=1))
    om = engine_for(engine, clock)
    cases = [
        (CLAUDE, ONE_HOUR_CACHE, timedelta(hours=1)),
        (CLAUDE, None, timedelta(minutes=5)),
        (CLAUDE, {"anthropic": {"cacheControl": {"type": "ephemeral", "ttl": "5m"}}}, timedelta(minutes=5)),
        ("openai/gpt-4o", {"openai": {"promptCacheRetention": "24h"}}, timedelta(hours=1)),
        ("openai/gpt-4o", None, timedelta(minutes=5)),
    ]
    for model, options, ttl in cases:
        thread_id = new_thread()
        answered = exchange(om, thread_id, options, model)
        due, payload = idle_trigger(engine, thread_id)
        assert due == answered + ttl, (model, options)
        assert payload["providerOptions"] == options, "beat resolves the TTL with the same options"


def test_an_idle_pause_activates_by_the_ttl_of_the_actors_provider_options(engine: Engine) -> None:
    """Ten minutes after the answer: past Anthropic's default 5-minute cache, within its 1-hour one. The
    turn with the 1-hour options keeps the buffered chunk waiting; without options it activates it."""
    activated: dict[str, bool] = {}
    for label, options in (("1h", ONE_HOUR_CACHE), ("default", None)):
        clock = Clock(T0 + timedelta(minutes=1))
        om = engine_for(engine, clock)
        thread_id = new_thread()
        exchange(om, thread_id, options)
        assert om.buffer_observation(
            BufferObservation(thread_id, f"buffer-obs-{label}", 0, skip_minimum=True)
        )
        clock.now = T0 + timedelta(minutes=11)
        om.ingest_turn(
            thread_id,
            "res-1",
            [text_message("u1", "user", "And a spring tide?", clock.now)],
            actor_model=CLAUDE,
            provider_options=options,
        )
        events = list_events(engine, thread_id=thread_id, types=["data-om-activation"])
        activated[label] = any(e.payload.get("triggeredBy") == "ttl" for e in events)
        head = records.get_head(engine, lookup_key(thread_id))
        assert head is not None and (len(head.chunks) == 0) == activated[label]
    assert activated == {"1h": False, "default": True}
