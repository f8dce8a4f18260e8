"""Regression tests for Observational Memory bugs reported against the original (`@mastra/memory`), which
om avoids by design. Each test is named after the behaviour it holds, and fails if the original's
behaviour comes back.

Everything is real but the model: a `MemoryEngine` on SQLite with the inline executor, the Observer and
Reflector reached through `ModelClient` and litellm, where a recording provider
(`tests/support/recording_provider.py`) keeps each call's messages and answers like the offline model.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine

from om_core.config.options import ObservationalMemoryConfig
from om_core.engine import MemoryEngine, TurnResult
from om_core.engine.events import ACTIVATION, OBSERVATION_END
from om_core.messages import Message, text_message
from om_core.models.client import ModelClient
from om_core.observer.prompt import NEW_HISTORY_HEADING, YOUR_TASK_HEADING
from om_core.store import history, records
from om_core.working_memory import document as wm
from tests.support import recording_provider
from tests.support.invariants import check_thread

T0 = datetime(2026, 3, 3, 9, 0, tzinfo=UTC)
WORDS = ("harbor", "lantern", "copper", "meadow", "signal", "orchard", "velvet", "canyon", "ember", "quartz")
THRESHOLD = 1000


def words(count: int, seed: int = 0) -> str:
    return " ".join(WORDS[(seed * 7 + k * k) % len(WORDS)] for k in range(count))


def new_thread() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def recording_model() -> str:
    """A recording model of its own per test, so the calls of two tests never mix."""
    return f"{recording_provider.PROVIDER}/bugs-{uuid.uuid4().hex[:8]}"


def engine_for(db: Engine, model: str, **observation: Any) -> MemoryEngine:
    config = ObservationalMemoryConfig.parse(
        {
            "model": model,
            "observation": {"messageTokens": THRESHOLD, **observation},
            "reflection": {"observationTokens": 50_000},
        }
    )
    return MemoryEngine(db, models=ModelClient(), config=config)


def history_section(call: list[dict[str, Any]]) -> str:
    """The transcript the Observer was given: its user message between the history and task headings."""
    user = recording_provider.user_content(call)
    assert isinstance(user, str)
    start, end = user.index(NEW_HISTORY_HEADING), user.index(YOUR_TASK_HEADING)
    assert start < end, "the task comes after the history, never before it"
    return user[start:end]


def events_of(result: TurnResult, kind: str) -> list[dict[str, Any]]:
    return [e.payload for e in result.events if e.type == kind]


# ------------------------------------------------------------------------- one large message never observed


@pytest.mark.parametrize("size", [1_100, 3_000], ids=["below-blockAfter", "above-blockAfter"])
def test_one_message_larger_than_the_threshold_is_observed_not_skipped(
    sqlite_engine: Engine, size: int
) -> None:
    """The original (mastra#16523) never observed a thread whose first message alone exceeded
    `messageTokens`: its blocking path was gated on the loop's step 0 and its buffering only took input
    below the threshold, so the message fell between them and its pending tokens grew forever.

    om's policy decides on tokens, not on steps: a single message past `blockAfter` is observed in its
    own turn, one between the threshold and `blockAfter` is buffered in its turn and activated at the
    next. Either way the message reaches the Observer, its parts are covered by the cursor, its fact is
    in the log and it leaves the raw context."""
    model = recording_model()
    om = engine_for(sqlite_engine, model)
    thread = new_thread()
    big = text_message("big", "user", f"My locker code is 4417. Here is the document: {words(size)}", T0)
    om.ingest_turn(thread, "res-1", [big])
    reply = om.ingest_turn(
        thread, "res-1", [text_message("reply", "assistant", "Got it.", T0 + timedelta(minutes=1))]
    )

    calls = recording_provider.calls(model)
    assert any("My locker code is 4417" in history_section(call) for call in calls), "the Observer saw it"
    head = records.get_head(sqlite_engine, f"thread:{thread}")
    assert head is not None
    with sqlite_engine.connect() as conn:
        stored = history.load_parts(conn, thread)
    big_seqs = [p.seq for m in stored if m.id == "big" for p in m.parts]
    assert big_seqs and head.last_observed_seq >= max(s for s in big_seqs if s is not None)
    assert "4417" in head.active_observations
    assert [m.id for m in reply.messages] == ["reply"], "the large message left the raw context"
    assert reply.status["windows"]["active"]["messages"]["tokens"] < THRESHOLD
    assert check_thread(sqlite_engine, thread).violations == []


# ---------------------------------------------------------------- our control text stored as a user priority


def echo_context(result: TurnResult, turn: int) -> list[Message]:
    """What a backend that keeps om's context as its chat history posts back: every memory message (the
    preamble, the log's pieces and tags, the hints) and the continuation reminder, as user messages."""
    texts = [*result.context.system_messages, result.context.continuation_reminder]
    at = T0 + timedelta(minutes=turn)
    return [text_message(f"echo-{turn}-{k}", "user", text, at) for k, text in enumerate(texts) if text]


def test_the_observers_control_prompt_is_never_stored_as_a_user_priority(sqlite_engine: Engine) -> None:
    """The original (mastra#22195) sent its Observer the control prompt (prior observations, "## Your
    Task", "Extract new observations...") as a user message of its own before the history, and let
    runtime `system-reminder` messages into the history: the Observer recorded "User's current priority
    is to extract new observations" as a durable fact and current task, which later runs reinforced.

    om sends one system prompt and one user message whose task comes after the history, and the history
    holds only conversation: its own memory messages and continuation reminder, even when a backend
    posts them back as user messages every turn, are left out of the transcript
    (`om_core.context.own_messages`). So neither the log nor the current task ever holds our words."""
    model = recording_model()
    om = engine_for(sqlite_engine, model, bufferTokens=False, messageTokens=600)
    thread = new_thread()
    result = om.ingest_turn(thread, "res-1", [text_message("m0", "user", "Hello, I plan a trip.", T0)])
    for turn in range(1, 14):
        role = "user" if turn % 2 == 0 else "assistant"
        said = text_message(
            f"m{turn}", role, f"About the trip ({turn}): {words(40, turn)}", T0 + timedelta(minutes=turn)
        )
        result = om.ingest_turn(thread, "res-1", [*echo_context(result, turn), said])

    calls = recording_provider.calls(model)
    assert len(calls) >= 2, "the scenario observed more than once, so echoed memory had a chance to return"
    for call in calls:
        assert [m["role"] for m in call] == ["system", "user"], "the control prompt is no message of its own"
        section = history_section(call)
        for ours in ("Continue the conversation naturally", "hold your memory", "<current-task>", "Date: "):
            assert ours not in section, f"{ours!r} reached the Observer as conversation"
    head = records.get_head(sqlite_engine, f"thread:{thread}")
    thread_row = history.get_thread(sqlite_engine, thread)
    assert head is not None and thread_row is not None
    task = str(thread_row.om_metadata.get("currentTask") or "")
    control = ("extract new observations", "continue the conversation naturally", "most recent message")
    for stored in (head.active_observations, task):
        lowered = stored.lower()
        assert not any(words in lowered for words in control), stored
        assert "<current-task>" not in stored and "your memory" not in lowered, stored
    assert "About the trip" in head.active_observations, "the real conversation was observed"


# ------------------------------------------------------------- a working-memory state signal observed again


def test_a_working_memory_state_signal_is_not_observed_again_and_overwritten(sqlite_engine: Engine) -> None:
    """The original (mastra#21961) delivered Observer-managed working memory as a state signal that then
    sat among the messages to observe: the Observer summarised it as if the user had just said it, and
    the working-memory extractor wrote that (normalised, shortened) copy back over the stored memory.

    om delivers the working memory as a system message of the context only. A backend that posts it back
    (here as a user message, the worst case, with the rest of the context) has it stored but never shown
    to the Observer, so no observation repeats it and the memory keeps the API's version and content."""
    model = recording_model()
    config = ObservationalMemoryConfig.parse(
        {
            "model": model,
            "observation": {"messageTokens": 600, "bufferTokens": False, "manageWorkingMemory": True},
            "reflection": {"observationTokens": 50_000},
            "workingMemory": {"enabled": True, "scope": "thread"},
        }
    )
    assert config.resolve().working_memory.use_state_signals, (
        "the original's default with manageWorkingMemory"
    )
    om = MemoryEngine(sqlite_engine, models=ModelClient(), config=config)
    thread = new_thread()
    result = om.ingest_turn(thread, "res-1", [text_message("m0", "user", "Hello, I plan a trip.", T0)])
    row = history.get_thread(sqlite_engine, thread)
    assert row is not None
    cfg = om.thread_config(thread)
    target = wm.target_for_thread(row, cfg)
    content = "# User Information\n- **First Name**: Ada\n- **Location**: London, near the river Thames"
    om.write_working_memory(target, cfg, content, by="api")
    for turn in range(1, 12):
        role = "user" if turn % 2 == 0 else "assistant"
        said = text_message(
            f"m{turn}", role, f"About the trip ({turn}): {words(40, turn)}", T0 + timedelta(minutes=turn)
        )
        result = om.ingest_turn(thread, "res-1", [*echo_context(result, turn), said])
        assert any("<working-memory>" in text for text in result.context.system_messages)

    calls = recording_provider.calls(model)
    assert calls, "the Observer ran while the memory was being posted back"
    assert not any("<working-memory>" in history_section(call) for call in calls)
    head = records.get_head(sqlite_engine, f"thread:{thread}")
    assert head is not None
    assert "working memory" not in head.active_observations.lower()
    assert "First Name" not in head.active_observations and "Thames" not in head.active_observations
    memory = wm.read(sqlite_engine, target, cfg)
    assert (memory.version, memory.updated_by, memory.content) == (1, "api", content)


# ------------------------------------------------------------------- a partial activation reported as success


def buffer_chunks(om: MemoryEngine, thread: str, turns: int) -> None:
    for i in range(turns):
        role = "user" if i % 2 == 0 else "assistant"
        om.ingest_turn(
            thread,
            "res-1",
            [text_message(f"m{i}", role, f"fact {i}: {words(120, i)}", T0 + timedelta(minutes=i))],
        )


def burst(messages: int) -> list[Message]:
    at = T0 + timedelta(hours=1)
    return [
        text_message(f"b{j}", "user" if j % 2 == 0 else "assistant", f"burst {j}: {words(150, j)}", at)
        for j in range(messages)
    ]


def test_a_partial_activation_is_reported_as_partial_and_the_rest_is_observed(sqlite_engine: Engine) -> None:
    """The original (mastra#19767) returned success as soon as one buffered chunk activated, without
    checking whether the chunks covered the pending tail: the next model call was built on a context
    still over the threshold, and nothing said the activation had been partial.

    om activates chunks until the window is under the threshold or none is left, then, still at or past
    `blockAfter`, observes the rest in the same turn; every activation marker says what it left behind
    (`remainingChunks`, `remainingTokens`, `partial`). A burst larger than the buffered chunks cover gets
    markers saying `partial: true`, then an observation of the rest, and a window under the threshold; an
    activation that covers the tail says `partial: false`."""
    om = engine_for(sqlite_engine, recording_model(), bufferTokens=0.2)

    covered = new_thread()
    buffer_chunks(om, covered, 6)
    small = om.ingest_turn(covered, "res-1", burst(6))
    complete = events_of(small, ACTIVATION.value)
    assert complete and all(m["partial"] is False for m in complete), complete
    assert all(m["remainingTokens"] < THRESHOLD for m in complete)

    behind = new_thread()
    buffer_chunks(om, behind, 6)
    big = om.ingest_turn(behind, "res-1", burst(14))
    markers = events_of(big, ACTIVATION.value)
    assert markers, "the buffered chunks were activated"
    assert all(m["partial"] is True and m["remainingTokens"] >= THRESHOLD for m in markers), markers
    assert all(m["remainingChunks"] == 0 for m in markers), "every buffered chunk was used first"
    kinds = [e.type for e in big.events]
    assert OBSERVATION_END.value in kinds[kinds.index(ACTIVATION.value) :], "the rest was observed"
    assert big.status["windows"]["active"]["messages"]["tokens"] < THRESHOLD
    assert check_thread(sqlite_engine, behind).violations == []
