"""`temporalMarkers: true` through the engine (behaviour §4.9, §10.1, §10.2, §13.8): the stored marker message
before the user message, the `data-system-reminder` event in the turn, the outbox and the published
stream, once per marker, and nothing under ten minutes.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine

from om_core.config.options import ObservationalMemoryConfig
from om_core.engine import EngineSettings, MemoryEngine
from om_core.messages import text_message
from om_core.store import history
from om_core.store.outbox import list_events
from om_core.store.types import StoredEvent
from tests.support.fake_models import FakeModels

T0 = datetime(2026, 4, 20, 13, 0, tzinfo=UTC)
REMINDER = "data-system-reminder"


class Recorder:
    """The engine's publisher port, recording what a live stream would receive."""

    def __init__(self) -> None:
        self.published: list[StoredEvent] = []

    def publish(self, events: Sequence[StoredEvent]) -> None:
        self.published.extend(events)


def engine_with_markers(db: Engine, recorder: Recorder, *, enabled: bool = True) -> MemoryEngine:
    config = ObservationalMemoryConfig.parse({"temporalMarkers": enabled})
    settings = EngineSettings(timezone="America/Los_Angeles")
    return MemoryEngine(db, models=FakeModels(), config=config, publisher=recorder, settings=settings)  # type: ignore[arg-type]


def new_thread() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def stored_ids(db: Engine, thread_id: str) -> list[str]:
    with db.connect() as conn:
        return [m.id for m in history.last_messages(conn, thread_id, limit=50)]


def reminders_in(events: Sequence[StoredEvent]) -> list[StoredEvent]:
    return [e for e in events if e.type == REMINDER]


def test_a_gap_of_two_hours_stores_a_marker_before_the_message_and_reports_it_once(engine: Engine) -> None:
    recorder = Recorder()
    om = engine_with_markers(engine, recorder)
    thread_id = new_thread()
    om.ingest_turn(thread_id, "res-1", [text_message("u0", "user", "Plan my trip to Lisbon", T0)])
    om.ingest_turn(
        thread_id, "res-1", [text_message("a0", "assistant", "Sure, when?", T0 + timedelta(minutes=1))]
    )
    back = T0 + timedelta(minutes=1, hours=2, seconds=30)
    turn = om.ingest_turn(thread_id, "res-1", [text_message("u1", "user", "Next Friday", back)])

    ids = stored_ids(engine, thread_id)
    marker_id = ids[ids.index("u1") - 1]
    assert marker_id.startswith("__temporal_gap_"), ids
    shown = [m.id for m in turn.messages]
    assert shown.index(marker_id) == shown.index("u1") - 1, "the actor sees the marker right before u1"
    marker = next(m for m in turn.messages if m.id == marker_id)
    assert marker.role == "user"
    assert marker.parts[0].text == (
        '<system-reminder type="temporal-gap" precedesMessageId="u1">'
        "2 hours later — 04/20/2026, 8:01 AM PDT</system-reminder>"
    )
    assert marker.created_at == back - timedelta(milliseconds=1)

    [event] = reminders_in(turn.events)
    assert event.payload["message"] == "2 hours later — 04/20/2026, 8:01 AM PDT"
    assert event.payload["gapText"] == "2 hours later"
    assert event.payload["precedesMessageId"] == "u1"
    assert event.payload["reminderType"] == "temporal-gap"
    assert event.payload["systemReminder"]["message"] == event.payload["message"]
    assert turn.events.index(event) == 0, "the reminder comes before the turn's status"
    assert [e.id for e in reminders_in(recorder.published)] == [event.id], "published to live streams"
    assert [e.id for e in reminders_in(list_events(engine, thread_id=thread_id, after_id=0))] == [event.id]

    again = om.ingest_turn(thread_id, "res-1", [text_message("u1", "user", "Next Friday", back)])
    assert reminders_in(again.events) == []
    assert stored_ids(engine, thread_id) == ids, "a retried message gets no second marker"
    assert len(reminders_in(list_events(engine, thread_id=thread_id, after_id=0))) == 1


def test_a_gap_under_ten_minutes_stores_no_marker_and_reports_nothing(engine: Engine) -> None:
    recorder = Recorder()
    om = engine_with_markers(engine, recorder)
    thread_id = new_thread()
    om.ingest_turn(thread_id, "res-1", [text_message("u0", "user", "hi", T0)])
    om.ingest_turn(thread_id, "res-1", [text_message("a0", "assistant", "hello", T0 + timedelta(minutes=1))])
    soon = T0 + timedelta(minutes=10, seconds=59)  # 9 min 59 s after the reply
    turn = om.ingest_turn(thread_id, "res-1", [text_message("u1", "user", "still there?", soon)])
    assert stored_ids(engine, thread_id) == ["u0", "a0", "u1"]
    assert reminders_in(turn.events) == [] and reminders_in(recorder.published) == []
    later = soon + timedelta(minutes=10)
    turn = om.ingest_turn(thread_id, "res-1", [text_message("u2", "user", "hello?", later)])
    [event] = reminders_in(turn.events)
    assert event.payload["gapText"] == "10 minutes later"


def test_markers_are_off_unless_configured(engine: Engine) -> None:
    recorder = Recorder()
    om = engine_with_markers(engine, recorder, enabled=False)
    thread_id = new_thread()
    om.ingest_turn(thread_id, "res-1", [text_message("u0", "user", "hi", T0)])
    turn = om.ingest_turn(thread_id, "res-1", [text_message("u1", "user", "back", T0 + timedelta(days=3))])
    assert stored_ids(engine, thread_id) == ["u0", "u1"]
    assert reminders_in(turn.events) == []
