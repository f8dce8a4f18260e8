"""A tool call and its result are never split by a cut (behaviour §4.10), through the engine.

Each test drives `MemoryEngine` on Postgres and SQLite with the fake model at the model boundary, then
reads where the cursor and the chunks stopped and what the actor is shown (`TurnResult.messages` and its
chat-completions form).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine

from om_api.openai_format import to_openai
from om_core.config.options import ObservationalMemoryConfig
from om_core.context.tool_exchanges import REPEATED_CALLS_KEY
from om_core.engine import BufferObservation, EngineSettings, MemoryEngine
from om_core.messages import Message, Part, text_message
from om_core.store import records
from tests.support.fake_models import FakeModels
from tests.support.invariants import check_thread

T0 = datetime(2026, 3, 3, 9, 0, tzinfo=UTC)
WORDS = ["harbor", "lantern", "copper", "meadow", "signal", "orchard", "velvet", "canyon", "ember", "quartz"]


def chatter(i: int, words: int = 60) -> str:
    return f"Message {i} says " + " ".join(WORDS[(i * 7 + k * k) % len(WORDS)] for k in range(words))


def engine_for(db: Engine, **observation: object) -> tuple[MemoryEngine, FakeModels]:
    config = ObservationalMemoryConfig.parse(
        {"observation": {"messageTokens": 3000, **observation}, "reflection": {"observationTokens": 20000}}
    )
    fake = FakeModels()
    return MemoryEngine(db, models=fake, config=config, settings=EngineSettings()), fake  # type: ignore[arg-type]


def new_thread() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def history(om: MemoryEngine, thread_id: str, count: int, words: int = 60) -> None:
    for i in range(count):
        role = "user" if i % 2 == 0 else "assistant"
        om.ingest_turn(
            thread_id, "res-1", [text_message(f"m{i}", role, chatter(i, words), T0 + timedelta(minutes=i))]
        )


def calling(message_id: str, minute: int, *call_ids: str) -> Message:
    parts = [Part(type="text", text=f"Let me look that up. {chatter(minute, 20)}")]
    parts += [
        Part(
            type="tool-invocation",
            tool_call_id=c,
            tool_name="search",
            state="call",
            args={"q": f"{c} {minute}"},
        )
        for c in call_ids
    ]
    return Message(id=message_id, role="assistant", parts=parts, created_at=T0 + timedelta(minutes=minute))


def answering(message_id: str, minute: int, call_id: str, words: int = 40) -> Message:
    result = {"hits": chatter(minute, words)}
    part = Part(
        type="tool-invocation", tool_call_id=call_id, tool_name="search", state="result", result=result
    )
    return Message(id=message_id, role="tool", parts=[part], created_at=T0 + timedelta(minutes=minute))


def tool_seqs(messages: list[Message], call_id: str) -> dict[str, int]:
    """state -> seq of the parts of one exchange among `messages`."""
    return {
        str(p.state): int(p.seq or 0)
        for m in messages
        for p in m.parts
        if p.type == "tool-invocation" and p.tool_call_id == call_id
    }


def assert_every_result_follows_its_call(sent: list[dict[str, Any]]) -> None:
    called: set[str] = set()
    for entry in sent:
        for call in entry.get("tool_calls") or []:
            called.add(call["id"])
        if entry["role"] == "tool":
            assert entry["tool_call_id"] in called, f"orphan tool result {entry['tool_call_id']} in {sent}"


def cursor_of(db: Engine, thread_id: str) -> int:
    head = records.get_head(db, f"thread:{thread_id}")
    assert head is not None
    return head.last_observed_seq


def test_a_blocking_cut_moves_before_a_call_whose_result_is_kept_raw(engine: Engine) -> None:
    """Synchronous observation keeps the newest message (here the tool result) raw; the cut that would
    observe its call right before it moves back, so call and result reach the actor together."""
    om, fake = engine_for(engine, bufferTokens=False)
    thread_id = new_thread()
    history(om, thread_id, 28)
    before = len(fake.calls)
    result = om.ingest_turn(
        thread_id, "res-1", [calling("a-call", 40, "c1"), answering("t-res", 41, "c1", words=1200)]
    )
    assert len(fake.calls) > before, "the turn must have crossed the threshold and observed"
    cursor = cursor_of(engine, thread_id)
    seqs = tool_seqs(result.messages, "c1")
    assert set(seqs) == {"call", "result"}, f"call and result must both be raw: {result.messages}"
    assert cursor < seqs["call"] < seqs["result"]
    assert cursor > 0
    assert_every_result_follows_its_call(to_openai(result.messages))
    assert check_thread(engine, thread_id).violations == []


def test_a_chunk_never_holds_a_call_whose_result_has_not_arrived(engine: Engine) -> None:
    """Buffering stops before an open call even when the newest message is another call's result
    (OpenAI style: two calls, one answered): the old rule looked only at the newest message."""
    om, _ = engine_for(engine, bufferTokens=0.2)
    thread_id = new_thread()
    history(om, thread_id, 6)
    om.ingest_turn(thread_id, "res-1", [calling("a-call", 10, "c1", "c2"), answering("t-c1", 11, "c1")])
    assert om.buffer_observation(BufferObservation(thread_id, "buffer-obs-open", 0, skip_minimum=True))
    head = records.get_head(engine, f"thread:{thread_id}")
    assert head is not None and [c.cycle_id for c in head.chunks] == ["buffer-obs-open"]
    status = om.ingest_turn(thread_id, "res-1", [])
    call_seq = tool_seqs(status.messages, "c1")["call"]
    assert head.chunks[0].to_seq < call_seq, "the chunk must stop before the calls still waiting"
    # Once c2 is answered, the whole exchange can be buffered.
    om.ingest_turn(thread_id, "res-1", [answering("t-c2", 12, "c2")])
    assert om.buffer_observation(BufferObservation(thread_id, "buffer-obs-closed", 0, skip_minimum=True))
    head = records.get_head(engine, f"thread:{thread_id}")
    assert head is not None and head.chunks[-1].cycle_id == "buffer-obs-closed"
    assert head.chunks[-1].to_seq >= tool_seqs(status.messages, "c1")["result"]
    assert check_thread(engine, thread_id).violations == []


def test_a_result_arriving_after_its_call_was_observed_is_shown_with_its_call(engine: Engine) -> None:
    """A call the conversation moved past (a user message followed it) no longer holds cuts back, so it
    is observed; when its result arrives after all, the actor sees the call again right before it."""
    om, _ = engine_for(engine, bufferTokens=False)
    thread_id = new_thread()
    history(om, thread_id, 4)
    om.ingest_turn(thread_id, "res-1", [calling("a-call", 10, "c9")])
    om.ingest_turn(
        thread_id,
        "res-1",
        [text_message("u-moved-on", "user", "Never mind that.", T0 + timedelta(minutes=11))],
    )
    om.ingest_turn(
        thread_id, "res-1", [text_message("u-big", "user", chatter(12, 2800), T0 + timedelta(minutes=12))]
    )
    cursor = cursor_of(engine, thread_id)
    late = om.ingest_turn(thread_id, "res-1", [answering("t-late", 13, "c9")])
    seqs = tool_seqs(late.messages, "c9")
    assert seqs["call"] <= cursor < seqs["result"], "the call was observed, the result is new"
    shown = [m for m in late.messages if REPEATED_CALLS_KEY in m.metadata]
    assert [m.metadata[REPEATED_CALLS_KEY] for m in shown] == [["c9"]]
    assert late.messages.index(shown[0]) < [m.id for m in late.messages].index("t-late")
    sent = to_openai(late.messages)
    assert_every_result_follows_its_call(sent)
    assert any(entry["role"] == "tool" and entry["tool_call_id"] == "c9" for entry in sent)
    call = next(c for e in sent for c in e.get("tool_calls") or [] if c["id"] == "c9")
    assert '"q": "c9 10"' in call["function"]["arguments"], "the call is shown with its real arguments"
    assert check_thread(engine, thread_id).violations == []
