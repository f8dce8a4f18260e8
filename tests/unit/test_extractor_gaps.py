"""The last extractor gaps to the original (issue 33), on the real engine over SQLite with the model
boundary scripted:

- a structured (schema) extractor's values are in `extractedValues` of the cycle's own end event, for a
  background cycle too (`data-om-buffering-end`), persisted before the chunk is activated;
- reflection extractors run when a resource's SHARED log is reflected (resource scope), for the thread
  whose request reflected it;
- the built-in values (current task, suggested response, title) are reported in `extractedValues` and
  kept under `extracted.<slug>`;
- an `onExtracted` callback can send a signal: a `data-om-signal` event written and published with the
  values; a signal breaking a bound is that extractor's failure, and its value and signals are dropped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine

from om_core.config.options import ObservationalMemoryConfig
from om_core.engine import EngineSettings, MemoryEngine
from om_core.engine import events as ev
from om_core.engine.tasks import BufferReflection, new_cycle_id
from om_core.extractors import registry
from om_core.extractors.definition import ExtractedContext
from om_core.extractors.signals import MAX_CONTENTS_CHARS, MAX_SIGNALS_PER_RUN
from om_core.messages import text_message
from om_core.store import history, records
from om_core.store.outbox import list_events
from om_core.store.payloads import PAYLOAD_TYPES
from om_core.store.types import StoredEvent
from tests.support.fake_models import FakeCompletion, user_text
from tests.unit.test_event_payloads import problems

T0 = datetime(2026, 3, 3, 9, 0, tzinfo=UTC)
LINES = "\n".join(f"* 🟡 (09:{i:02d}) User mentioned harbor number {i} and its lantern" for i in range(12))


@dataclass
class Models:
    """The model boundary: Observer (single- or multi-thread), Reflector and structured replies."""

    hints: str = (
        "<current-task>Plan the harbor trip</current-task>\n"
        "<suggested-response>Ask the date</suggested-response>"
    )
    observer_extra: str = ""
    reflector_reply: str = ""
    structured_reply: str = "{}"
    calls: list[str] = field(default_factory=list)

    def complete(self, model: Any, *, system: str, user: Any, **kwargs: Any) -> Any:
        text = user_text(user)
        if "## Observations to Reflect On" in text:
            self.calls.append("reflector")
            reply = self.reflector_reply
        elif "## Structured Extraction Request" in text:
            self.calls.append("structured")
            reply = self.structured_reply
        else:
            self.calls.append("observer")
            found = re.findall(r'<thread id="([^"]+)">', text.split("## New Message History")[-1])
            ids = list(dict.fromkeys(found))
            if ids:
                body = f"Date: Mar 3, 2026\n{LINES}\n{self.hints}\n{self.observer_extra}"
                blocks = [f'<thread id="{i}">\n{body}\n</thread>' for i in ids]
                reply = "<observations>\n" + "\n".join(blocks) + "\n</observations>"
            else:
                reply = (
                    f"<observations>\nDate: Mar 3, 2026\n{LINES}\n</observations>\n{self.hints}\n"
                    f"{self.observer_extra}"
                )
        return FakeCompletion(reply, len(text) // 4, len(reply) // 4, 0.0, str(model))

    def accepts_images(self, model: str) -> bool | None:
        return None


class Recorder:
    def __init__(self) -> None:
        self.published: list[StoredEvent] = []

    def publish(self, events: Sequence[StoredEvent]) -> None:
        self.published.extend(events)


def _engine(
    db: Engine, models: Models, options: dict[str, Any], recorder: Recorder | None = None
) -> MemoryEngine:
    config = ObservationalMemoryConfig.parse(options)
    return MemoryEngine(db, models=models, config=config, publisher=recorder, settings=EngineSettings())  # type: ignore[arg-type]


def _talk(om: MemoryEngine, thread: str, resource: str, n: int = 6) -> None:
    for i in range(n):
        role = "user" if i % 2 == 0 else "assistant"
        text = f"Message {i} in {thread}: harbors, lanterns and copper kettles " * 4
        om.ingest_turn(
            thread, resource, [text_message(f"{thread}-m{i}", role, text, T0 + timedelta(minutes=i))]
        )


def _events(db: Engine, thread: str, kind: str) -> list[StoredEvent]:
    return [e for e in list_events(db, thread_id=thread, limit=10_000) if e.type == kind]


def _meta(db: Engine, thread: str) -> dict[str, Any]:
    row = history.get_thread(db, thread)
    assert row is not None
    return row.om_metadata


PROFILE = {"type": "object", "properties": {"city": {"type": "string"}}}


def test_a_buffered_cycle_reports_its_structured_values_on_buffering_end_before_activation(
    sqlite_engine: Engine,
) -> None:
    models = Models(structured_reply=json.dumps({"profile": {"city": "Porto"}}))
    om = _engine(
        sqlite_engine,
        models,
        {
            "observation": {
                "messageTokens": 2000,
                "bufferTokens": 200,
                "extract": [{"name": "profile", "instructions": "Where the user lives.", "schema": PROFILE}],
            }
        },
    )
    _talk(om, "t-buf", "res-buf", n=4)
    [end, *_] = _events(sqlite_engine, "t-buf", ev.BUFFERING_END)
    assert end.payload["extractedValues"]["profile"] == {"city": "Porto"}
    head = records.get_head(sqlite_engine, "thread:t-buf")
    assert head is not None and head.chunks and not head.active_observations.strip(), "still buffered"
    assert _meta(sqlite_engine, "t-buf")["extracted"]["profile"] == {"city": "Porto"}, "persisted already"
    assert not _events(sqlite_engine, "t-buf", ev.EXTRACTION_END)


def test_reflection_extractors_run_when_a_resources_shared_log_is_reflected(sqlite_engine: Engine) -> None:
    models = Models(
        reflector_reply=(
            "<observations>\nDate: Mar 3, 2026\n* 🟡 (09:00) User talked about harbors\n</observations>\n"
            "<mood>curious</mood>"
        ),
        structured_reply=json.dumps({"topics": ["harbors"]}),
    )
    om = _engine(
        sqlite_engine,
        models,
        {
            "scope": "resource",
            "obscureThreadIds": False,
            "observation": {"messageTokens": 200},
            "reflection": {
                "observationTokens": 100_000,
                "extract": [
                    {"name": "mood", "instructions": "The user's mood."},
                    {
                        "name": "topics",
                        "instructions": "Topics.",
                        "schema": {"type": "array", "items": {"type": "string"}},
                    },
                ],
            },
        },
    )
    _talk(om, "t-ra", "res-shared")
    _talk(om, "t-rb", "res-shared")
    shared = records.get_head(sqlite_engine, "resource:res-shared")
    assert shared is not None and "harbor number" in shared.active_observations
    assert om.reflect_now("t-rb").applied
    assert "reflector" in models.calls and "structured" in models.calls
    reflected = records.get_head(sqlite_engine, "resource:res-shared")
    assert reflected is not None and "curious" not in reflected.active_observations
    assert _meta(sqlite_engine, "t-rb")["extracted"]["mood"] == "curious"
    assert _meta(sqlite_engine, "t-rb")["extracted"]["topics"] == ["harbors"]
    assert "mood" not in _meta(sqlite_engine, "t-ra").get("extracted", {}), "only the reflecting thread"
    [end] = [
        e
        for e in _events(sqlite_engine, "t-rb", ev.OBSERVATION_END)
        if e.payload["operationType"] == "reflection"
    ]
    assert end.payload["extractedValues"]["mood"] == "curious"
    assert end.payload["extractedValues"]["topics"] == ["harbors"]


def test_built_in_values_are_reported_and_kept_under_extracted(sqlite_engine: Engine) -> None:
    models = Models(observer_extra="<thread-title>Harbor trip</thread-title>")
    om = _engine(
        sqlite_engine,
        models,
        {"observation": {"messageTokens": 200, "bufferTokens": False, "threadTitle": True}},
    )
    _talk(om, "t-built", "res-built")
    [end, *_] = _events(sqlite_engine, "t-built", ev.OBSERVATION_END)
    expected = {
        "current-task": "Plan the harbor trip",
        "suggested-response": "Ask the date",
        "thread-title": "Harbor trip",
    }
    assert end.payload["extractedValues"] == expected
    meta = _meta(sqlite_engine, "t-built")
    assert meta["extracted"] == expected
    assert meta["currentTask"] == "Plan the harbor trip", "the compatibility field is kept"


def test_the_title_is_no_built_in_value_without_thread_title(sqlite_engine: Engine) -> None:
    models = Models(observer_extra="<thread-title>Harbor trip</thread-title>")
    om = _engine(sqlite_engine, models, {"observation": {"messageTokens": 200, "bufferTokens": False}})
    _talk(om, "t-notitle", "res-notitle")
    [end, *_] = _events(sqlite_engine, "t-notitle", ev.OBSERVATION_END)
    assert "thread-title" not in end.payload["extractedValues"]
    assert end.payload["extractedValues"]["current-task"] == "Plan the harbor trip"


def _announce(ctx: ExtractedContext) -> Any:
    assert ctx.send_signal is not None
    ctx.send_signal({"type": "user-message", "contents": f"Project status extracted: {ctx.current}"})
    return str(ctx.current).strip().lower()


def _flood(ctx: ExtractedContext) -> Any:
    assert ctx.send_signal is not None
    for i in range(MAX_SIGNALS_PER_RUN + 1):
        ctx.send_signal({"type": "user-message", "contents": f"flood {i}"})
    return None


def _huge(ctx: ExtractedContext) -> Any:
    assert ctx.send_signal is not None
    ctx.send_signal({"type": "user-message", "contents": "x" * (MAX_CONTENTS_CHARS + 1)})
    return None


def _host(ctx: ExtractedContext) -> Any:
    assert ctx.send_signal is not None
    ctx.send_signal({"type": "user-message", "contents": "hi", "url": "http://169.254.169.254/"})
    return None


@pytest.fixture
def signalling() -> Iterator[None]:
    names = {"announce": _announce, "flood": _flood, "huge": _huge, "host": _host}
    for name, callback in names.items():
        registry.register_callback(name, callback)
    try:
        yield
    finally:
        for name in names:
            registry.unregister_callback(name)


def test_on_extracted_sends_a_signal_written_and_published_with_the_values(
    sqlite_engine: Engine, signalling: None
) -> None:
    models = Models(
        observer_extra=(
            "<status>  SHIPPING Friday </status>\n<flooded>a</flooded>\n<huge>b</huge>\n<host>c</host>\n"
            "<mood>calm</mood>"
        )
    )
    recorder = Recorder()
    om = _engine(
        sqlite_engine,
        models,
        {
            "observation": {
                "messageTokens": 200,
                "bufferTokens": False,
                "extract": [
                    {"name": "status", "instructions": "Project status.", "onExtracted": "announce"},
                    {"name": "flooded", "instructions": "x.", "onExtracted": "flood"},
                    {"name": "huge", "instructions": "x.", "onExtracted": "huge"},
                    {"name": "host", "instructions": "x.", "onExtracted": "host"},
                    {"name": "mood", "instructions": "Mood."},
                ],
            }
        },
        recorder,
    )
    _talk(om, "t-sig", "res-sig")
    [end, *_] = _events(sqlite_engine, "t-sig", ev.OBSERVATION_END)
    ends = _events(sqlite_engine, "t-sig", ev.OBSERVATION_END)
    signals = _events(sqlite_engine, "t-sig", ev.SIGNAL)
    assert len(signals) == len(ends), (
        "one signal per observation cycle, from the one callback that kept its value"
    )
    signals = [s for s in signals if s.payload["cycleId"] == end.cycle_id]
    assert [(s.payload["slug"], s.payload["type"], s.payload["contents"]) for s in signals] == [
        ("status", "user-message", "Project status extracted: SHIPPING Friday")
    ]
    [signal] = signals
    assert signal.payload["cycleId"] == end.cycle_id and signal.id > end.id
    assert problems(dict(signal.payload), PAYLOAD_TYPES[ev.SIGNAL.value]) == []
    assert signal.id in {e.id for e in recorder.published}, "published like every event (SSE, webhooks)"
    # The value the callback returned is the one persisted and reported.
    assert end.payload["extractedValues"]["status"] == "shipping friday"
    assert _meta(sqlite_engine, "t-sig")["extracted"]["status"] == "shipping friday"
    # A signal breaking a bound is its extractor's failure: its value and signals dropped, others kept.
    failures = {f["slug"]: f["error"] for f in end.payload["extractionFailures"]}
    assert f"at most {MAX_SIGNALS_PER_RUN} signals" in failures["flooded"]
    assert f"at most {MAX_CONTENTS_CHARS} characters" in failures["huge"]
    assert "only `type` and `contents`" in failures["host"]
    assert {"flooded", "huge", "host"}.isdisjoint(end.payload["extractedValues"])
    assert end.payload["extractedValues"]["mood"] == "calm"


def test_a_buffered_reflection_of_a_shared_log_runs_reflection_extractors(sqlite_engine: Engine) -> None:
    models = Models(
        reflector_reply=(
            "<observations>\nDate: Mar 3, 2026\n* 🟡 (09:00) User talked about harbors\n</observations>\n"
            "<mood>curious</mood>"
        )
    )
    om = _engine(
        sqlite_engine,
        models,
        {
            "scope": "resource",
            "obscureThreadIds": False,
            "observation": {"messageTokens": 200},
            "reflection": {
                "observationTokens": 100_000,
                "bufferActivation": 0.5,
                "extract": [{"name": "mood", "instructions": "The user's mood."}],
            },
        },
    )
    _talk(om, "t-ba", "res-buffered")
    shared = records.get_head(sqlite_engine, "resource:res-buffered")
    assert shared is not None and shared.active_observations
    task = BufferReflection("t-ba", shared.id, new_cycle_id("buffer-refl"), key="resource:res-buffered")
    assert om.run_task(task)
    stored = records.get_head(sqlite_engine, "resource:res-buffered")
    assert stored is not None and stored.buffered_reflection and "curious" not in stored.buffered_reflection
    assert _meta(sqlite_engine, "t-ba")["extracted"]["mood"] == "curious", "persisted before activation"
    [end] = [
        e
        for e in _events(sqlite_engine, "t-ba", ev.BUFFERING_END)
        if e.payload["operationType"] == "reflection"
    ]
    assert end.payload["extractedValues"] == {"mood": "curious"}
