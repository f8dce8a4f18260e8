"""`enabled: false` in one process, on Postgres and SQLite: OM off stores the messages and does nothing else.

A counting fake model stands in for the remote model (the boundary we cannot reach here); storage, policy,
maintenance and the inline executor are the real ones. What OM off means (behaviour §2.1, "OM off"): no model
call, no background work, no change to the record, no trigger, no event; the actor gets the plain recent
history. Turning OM on again observes the backlog, because the cursor never moved.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, func, select

from om_core import queries
from om_core.config.options import ObservationalMemoryConfig
from om_core.engine import (
    BufferObservation,
    BufferReflection,
    MemoryDisabled,
    MemoryEngine,
    Observe,
    Reflect,
    TurnResult,
    lookup_key,
    new_cycle_id,
)
from om_core.maintenance.sweep import MaintenancePolicy, run_maintenance
from om_core.messages import text_message
from om_core.store import history, records, schema
from om_core.store.outbox import list_events
from om_core.store.types import Record
from tests.support.fake_models import FakeModels
from tests.support.invariants import check_thread

T0 = datetime(2026, 3, 3, 9, 0, tzinfo=UTC)
WORDS = ["harbor", "lantern", "copper", "meadow", "signal", "orchard", "velvet", "canyon", "ember", "quartz"]


def chatter(i: int, words: int) -> str:
    return f"Message {i} says " + " ".join(WORDS[(i * 7 + k * k) % len(WORDS)] for k in range(words))


def config(*, enabled: bool, message_tokens: int = 3000, **options: Any) -> ObservationalMemoryConfig:
    return ObservationalMemoryConfig.parse(
        {
            "enabled": enabled,
            "activateAfterIdle": "5m",  # an enabled turn arms an idle trigger: a disabled one must not
            "observation": {"messageTokens": message_tokens, **options},
            "reflection": {"observationTokens": 2000},
        }
    )


def make(db: Engine, cfg: ObservationalMemoryConfig) -> tuple[MemoryEngine, FakeModels]:
    fake = FakeModels()
    return MemoryEngine(db, models=fake, config=cfg), fake  # type: ignore[arg-type]


def play(om: MemoryEngine, thread_id: str, turns: range, words: int = 60) -> list[TurnResult]:
    results = []
    for i in turns:
        role = "user" if i % 2 == 0 else "assistant"
        message = text_message(f"m{i}", role, chatter(i, words), T0 + timedelta(minutes=i))
        results.append(om.ingest_turn(thread_id, "res-1", [message]))
    return results


def new_thread() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def head(db: Engine, thread_id: str) -> Record:
    found = records.get_head(db, lookup_key(thread_id))
    assert found is not None
    return found


def trigger_count(db: Engine, thread_id: str) -> int:
    with db.connect() as conn:
        query = select(func.count()).where(schema.triggers.c.lookup_key == lookup_key(thread_id))
        return int(conn.execute(query).scalar() or 0)


def last_seq_of(db: Engine, thread_id: str, message_id: str) -> int:
    with db.connect() as conn:
        query = select(func.max(schema.parts.c.seq)).where(
            schema.parts.c.thread_id == thread_id, schema.parts.c.message_id == message_id
        )
        return int(conn.execute(query).scalar() or 0)


def test_forty_disabled_turns_call_no_model_change_no_record_and_enabling_observes_the_backlog(
    engine: Engine,
) -> None:
    om, fake = make(engine, config(enabled=False))
    thread_id = new_thread()
    first = play(om, thread_id, range(1), words=20)[0]
    record = head(engine, thread_id)
    thread = history.get_thread(engine, thread_id)
    results = [first, *play(om, thread_id, range(1, 40), words=20)]

    assert fake.calls == [], "OM off: no Observer or Reflector call"
    assert head(engine, thread_id) == record, "OM off: the record is exactly as the first turn created it"
    assert record.last_observed_seq == 0 and not record.chunks and not record.active_observations
    assert list_events(engine, thread_id=thread_id) == [], "OM off: no status or other OM event"
    assert trigger_count(engine, thread_id) == 0, "OM off: no idle trigger armed"
    after = history.get_thread(engine, thread_id)
    assert thread is not None and after is not None and after.om_metadata == thread.om_metadata
    for n, result in enumerate(results, start=1):
        # The plain history: every message so far, in order, and no memory around it.
        assert [m.id for m in result.messages] == [f"m{i}" for i in range(n)]
        assert result.system_messages == [] and result.continuation_reminder == ""
        assert result.events == [] and not result.blocked and not result.degraded
    assert results[-1].messages[-1].parts[0].text == chatter(39, 20)

    queries.set_config_overrides(om, thread_id, {"enabled": True})
    enabled = play(om, thread_id, range(40, 120))
    observed = head(engine, thread_id)
    assert observed.last_observed_seq >= last_seq_of(engine, thread_id, "m39"), (
        "the backlog stored while OM was off was observed once OM was on"
    )
    assert any(kind == "observer" for kind, _ in fake.calls)
    assert list_events(engine, thread_id=thread_id), "OM on again: events are written"
    report = check_thread(engine, thread_id)
    assert report.violations == [], "every part is covered exactly once, backlog included"
    assert not any(r.degraded for r in enabled)


def test_the_disabled_context_is_the_newest_history_within_the_message_budget(engine: Engine) -> None:
    om, fake = make(engine, config(enabled=False, message_tokens=1000))
    thread_id = new_thread()
    results = play(om, thread_id, range(40))
    last = results[-1]
    ids = [m.id for m in last.messages]
    assert 1 < len(ids) < 40, "bounded, and more than the newest message"
    assert ids == [f"m{i}" for i in range(40 - len(ids), 40)], "a contiguous run of the newest messages"
    assert last.status["windows"]["active"]["messages"]["tokens"] <= 1000
    one_more = play(om, thread_id, range(40 - len(ids) - 1, 40 - len(ids)))[-1]
    assert one_more.status["windows"]["active"]["messages"]["tokens"] > 0
    assert fake.calls == []


def test_switching_off_after_observing_shows_plain_history_and_keeps_the_memory(engine: Engine) -> None:
    om, fake = make(engine, config(enabled=True, bufferTokens=False))
    thread_id = new_thread()
    play(om, thread_id, range(60))
    observed = head(engine, thread_id)
    assert observed.last_observed_seq > 0 and observed.active_observations
    calls = len(fake.calls)

    queries.set_config_overrides(om, thread_id, {"enabled": False})
    result = play(om, thread_id, range(60, 61))[0]
    assert result.system_messages == [], "no observation block: OM is off"
    seqs = [p.seq for m in result.messages for p in m.parts if p.seq is not None]
    assert min(seqs) <= observed.last_observed_seq, "the plain history, not only what follows the cursor"
    assert result.messages[-1].id == "m60"
    assert len(fake.calls) == calls and head(engine, thread_id) == observed, "the memory is kept as it was"


def test_work_queued_before_switching_off_does_nothing_and_manual_work_is_refused(engine: Engine) -> None:
    om, fake = make(engine, config(enabled=True, bufferTokens=0.2))
    thread_id = new_thread()
    play(om, thread_id, range(30))
    before = head(engine, thread_id)
    assert before.active_observations, "there is something to reflect"
    calls = len(fake.calls)

    queries.set_config_overrides(om, thread_id, {"enabled": False})
    play(om, thread_id, range(30, 80))  # a backlog past the threshold, for the manual observation below
    tasks = [
        BufferObservation(thread_id, new_cycle_id("buffer-obs"), 10_000, skip_minimum=True),
        Observe(thread_id, new_cycle_id("observe")),
        Reflect(thread_id, new_cycle_id("reflect")),
        BufferReflection(thread_id, before.id, new_cycle_id("buffer-refl")),
    ]
    assert [om.run_task(task) for task in tasks] == [False] * 4
    with pytest.raises(MemoryDisabled, match="enabled: true"):
        om.observe_now(thread_id)
    with pytest.raises(MemoryDisabled):
        om.reflect_now(thread_id)
    assert len(fake.calls) == calls and head(engine, thread_id) == before

    queries.set_config_overrides(om, thread_id, {"enabled": True})
    assert om.observe_now(thread_id).applied, "the same manual call works once OM is on"
    assert len(fake.calls) > calls


def test_maintenance_fires_no_idle_activation_and_no_rebuffering_for_a_disabled_thread(
    sqlite_engine: Engine,
) -> None:
    om, fake = make(sqlite_engine, config(enabled=True, bufferTokens=0.2))
    thread_id = new_thread()
    # A chunk at ~600 tokens (the buffer interval), stored by the last turn; the idle TTL (5m; the messages
    # are dated in the past) would activate it at the next turn or the next maintenance pass.
    play(om, thread_id, range(9))
    buffered = head(sqlite_engine, thread_id)
    assert buffered.chunks and buffered.last_observed_seq == 0
    assert trigger_count(sqlite_engine, thread_id) == 1, "the enabled turns armed the idle trigger"
    calls = len(fake.calls)

    queries.set_config_overrides(om, thread_id, {"enabled": False})
    later = datetime.now(UTC) + timedelta(hours=1)
    report = run_maintenance(om, MaintenancePolicy(rebuffer_after_s=0), now=later)
    assert report.triggers_claimed == 1, "the due trigger was handed to the pass"
    assert report.activated == [] and thread_id not in report.rebuffered
    assert head(sqlite_engine, thread_id) == buffered and len(fake.calls) == calls

    queries.set_config_overrides(om, thread_id, {"enabled": True})
    assert om.on_idle(thread_id, now=later), "the same idle check activates once OM is on"
    assert head(sqlite_engine, thread_id).last_observed_seq > 0
