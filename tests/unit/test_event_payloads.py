"""Every event OM publishes has the payload its type says (`om_core.store.payloads`).

A real in-process engine on SQLite (fake model at the model boundary) plays a conversation that buffers,
activates, observes, reflects, retitles, inserts temporal markers, fails a cycle, edits a log line and
writes a working memory; every event it published, and every event in its outbox, is checked against the
`TypedDict` of its event type: each required key present, no key the type does not declare, each value of
the declared type. Structured extraction needs an operator's extractor, so its three events are built by
the same builders the extraction task calls and checked the same way.

The checker is written here rather than taken from pydantic: pydantic refuses `typing.TypedDict` before
Python 3.12, and the types must stay plain `typing` ones for the core.
"""

from __future__ import annotations

import hashlib
import types
import typing
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, NotRequired, TypedDict, Union, get_args, get_origin

import pytest
from sqlalchemy import Engine

from om_core.config.options import ObservationalMemoryConfig
from om_core.engine import EngineSettings, MemoryEngine
from om_core.engine import events as ev
from om_core.engine.log_edit import is_structural
from om_core.engine.tasks import lookup_key
from om_core.messages import text_message
from om_core.store import history, records
from om_core.store.outbox import list_events
from om_core.store.payloads import PAYLOAD_TYPES
from om_core.store.types import StoredEvent
from om_core.working_memory import document as wm
from tests.support.fake_models import FakeModels

T0 = datetime(2026, 4, 20, 13, 0, tzinfo=UTC)


def problems(value: object, expected: Any, where: str = "payload") -> list[str]:
    """Why `value` is not an `expected` (a type annotation); empty when it is."""
    if expected is Any:
        return []
    if isinstance(expected, typing.NewType):
        return problems(value, expected.__supertype__, where)
    if typing.is_typeddict(expected):
        return _object_problems(value, expected, where)
    origin, args = get_origin(expected), get_args(expected)
    if origin is NotRequired:
        return problems(value, args[0], where)
    if origin in (Union, types.UnionType):
        options = [problems(value, option, where) for option in args]
        return [] if any(not found for found in options) else [f"{where}: {value!r} is not {expected}"]
    if origin is Literal:
        return [] if value in args else [f"{where}: {value!r} is not one of {args}"]
    if origin in (list, dict):
        return _container_problems(value, origin, args[-1], where)
    return _scalar_problems(value, expected, where)


def _object_problems(value: object, expected: Any, where: str) -> list[str]:
    if not isinstance(value, Mapping):
        return [f"{where}: expected an object, got {value!r}"]
    # Not `__required_keys__`: under `from __future__ import annotations` (as in om_core) Python 3.11
    # cannot see `NotRequired` in the string annotations when it builds the class.
    hints = typing.get_type_hints(expected, include_extras=True)
    required = [k for k, hint in hints.items() if expected.__total__ and get_origin(hint) is not NotRequired]
    found = [f"{where}.{key}: missing" for key in required if key not in value]
    found += [f"{where}.{key}: not declared by {expected.__name__}" for key in value if key not in hints]
    for key, item in value.items():
        if key in hints:
            found += problems(item, hints[key], f"{where}.{key}")
    return found


def _container_problems(value: object, origin: type, item_type: Any, where: str) -> list[str]:
    if not isinstance(value, origin):
        return [f"{where}: expected a {origin.__name__}, got {value!r}"]
    items = enumerate(value) if isinstance(value, list) else value.items()  # type: ignore[attr-defined]
    return [p for key, item in items for p in problems(item, item_type, f"{where}[{key!r}]")]


def _scalar_problems(value: object, expected: Any, where: str) -> list[str]:
    if expected is type(None):
        return [] if value is None else [f"{where}: expected null, got {value!r}"]
    if expected in (int, float):
        ok = isinstance(value, int if expected is int else int | float) and not isinstance(value, bool)
        return [] if ok else [f"{where}: expected {expected.__name__}, got {value!r}"]
    return [] if isinstance(value, expected) else [f"{where}: expected {expected.__name__}, got {value!r}"]


def check(event_type: str, payload: Mapping[str, Any]) -> list[str]:
    payload_type = PAYLOAD_TYPES.get(event_type)
    if payload_type is None:
        return [f"{event_type}: no payload type in PAYLOAD_TYPES"]
    return [f"{event_type} {p}" for p in problems(payload, payload_type)]


class Recorder:
    """The engine's publisher port: what a live stream would receive."""

    def __init__(self) -> None:
        self.published: list[StoredEvent] = []

    def publish(self, events: Sequence[StoredEvent]) -> None:
        self.published.extend(events)


def test_the_checker_refuses_a_missing_key_an_extra_key_and_a_wrong_value() -> None:
    class Sample(TypedDict):
        a: int
        b: NotRequired[str | None]

    assert problems({"a": 1, "b": None}, Sample) == []
    assert problems({"b": "x"}, Sample) == ["payload.a: missing"]
    assert problems({"a": 1, "c": 2}, Sample) == ["payload.c: not declared by Sample"]
    assert problems({"a": True}, Sample) == ["payload.a: expected int, got True"]


def test_every_event_type_has_a_payload_type() -> None:
    written = {kind.value for kind in ev.EventType} | {wm.WORKING_MEMORY_EVENT}
    assert written <= set(PAYLOAD_TYPES), written - set(PAYLOAD_TYPES)


#: What the played conversation must publish (all but the extraction events, checked below, and signals,
#: checked in tests/unit/test_extractor_gaps.py).
PLAYED = {kind.value for kind in ev.EventType} - {
    ev.EXTRACTION_START.value,
    ev.EXTRACTION_END.value,
    ev.EXTRACTION_FAILED.value,
    ev.SIGNAL.value,
} | {wm.WORKING_MEMORY_EVENT}


def play(om: MemoryEngine, thread: str, turns: range) -> None:
    """Turns two hours apart (each gets a temporal marker), of about 250 tokens each."""
    for i in turns:
        words = " ".join(f"fact{i}-{k} about the harbor lantern" for k in range(25))
        role = "user" if i % 2 == 0 else "assistant"
        om.ingest_turn(thread, "res-1", [text_message(f"m{i}", role, words, T0 + timedelta(hours=2 * i))])


def test_every_event_a_conversation_publishes_has_the_payload_of_its_type(sqlite_engine: Engine) -> None:
    recorder, fake = Recorder(), FakeModels(thread_title="The harbor lantern")
    config = ObservationalMemoryConfig.parse(
        {
            "observation": {"messageTokens": 1500, "bufferTokens": 300, "threadTitle": True},
            "reflection": {"observationTokens": 600},
            "temporalMarkers": True,
            "workingMemory": {"enabled": True, "scope": "thread", "template": "# Notes\n- Place:"},
        }
    )
    om = MemoryEngine(
        sqlite_engine, models=fake, config=config, publisher=recorder, settings=EngineSettings()
    )  # type: ignore[arg-type]
    thread = f"t-{uuid.uuid4().hex[:8]}"
    play(om, thread, range(14))
    om.observe_now(thread)
    om.reflect_now(thread)

    head = records.get_head(sqlite_engine, lookup_key(thread))
    assert head is not None
    lines = head.active_observations.split("\n")
    index = next(i for i, line in enumerate(lines) if not is_structural(line))
    om.edit_observation_line(thread, index, hashlib.sha256(lines[index].encode()).hexdigest(), "* corrected")

    stored_thread = history.get_thread(sqlite_engine, thread)
    assert stored_thread is not None
    cfg = om.config_for(stored_thread.effective_overrides)
    om.write_working_memory(
        wm.target_for_thread(stored_thread, cfg), cfg, "# Notes\n- Place: harbor", by="api"
    )

    fake.fail_next = 1000  # the model is down: buffering fails
    play(om, thread, range(14, 18))

    # Without buffering, a turn past the threshold observes while it waits: that fails too.
    blocking = MemoryEngine(
        sqlite_engine,
        models=fake,  # type: ignore[arg-type]
        config=ObservationalMemoryConfig.parse(
            {"observation": {"messageTokens": 1500, "bufferTokens": False}}
        ),
        publisher=recorder,
        settings=EngineSettings(),
    )
    other = f"t-{uuid.uuid4().hex[:8]}"
    play(blocking, other, range(10))

    outbox = [e for t in (thread, other) for e in list_events(sqlite_engine, thread_id=t, limit=10_000)]
    seen = {e.type for e in recorder.published} | {e.type for e in outbox}
    assert seen >= PLAYED, f"the conversation did not publish {sorted(PLAYED - seen)}"
    found = [p for e in [*recorder.published, *outbox] for p in check(e.type, e.payload)]
    assert found == []


def test_the_extraction_events_have_the_payloads_of_their_types() -> None:
    moment = datetime(2026, 4, 20, 13, 0, tzinfo=UTC)
    usage = ev.usage_fields(120, 30, 0.002, "openai/gpt-4o-mini")
    start = ev.start(
        ev.EXTRACTION_START,
        cycle_id="x-1",
        operation=ev.Operation.OBSERVATION,
        started_at=moment,
        tokens=120,
        record_id="r-1",
        thread_id=None,
        config={},
    )
    end = ev.extraction_end(
        cycle_id="x-1",
        source="observer",
        source_cycle_id="c-1",
        started_at=moment,
        completed_at=moment + timedelta(seconds=2),
        record_id="r-1",
        thread_id=None,
        usage=usage,
        extraction={"extractedValues": {"mood": "calm"}, "extractionFailures": [{"slug": "x", "error": "y"}]},
    )
    failed = ev.failed(
        ev.EXTRACTION_FAILED,
        cycle_id="x-1",
        operation=ev.Operation.OBSERVATION,
        started_at=moment,
        failed_at=moment + timedelta(seconds=1),
        tokens_attempted=120,
        error="the model is unavailable",
        record_id="r-1",
        thread_id=None,
        usage=usage,
        retrying=True,
        error_code="MODEL_UNAVAILABLE",
    )
    for event in (start, end, failed):
        assert check(event.type, event.payload) == []


@pytest.mark.parametrize("event_type", sorted(PAYLOAD_TYPES))
def test_a_payload_with_a_key_its_type_does_not_declare_is_refused(event_type: str) -> None:
    assert check(event_type, {"notAKey": 1})[-1].endswith(
        "payload.notAKey: not declared by " + PAYLOAD_TYPES[event_type].__name__
    )
