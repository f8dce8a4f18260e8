"""The engine's use-cases in one process, on Postgres and SQLite, with a traceable fake model.

The fake replaces only the remote model (the boundary we cannot reach here); everything else is real:
storage, the policy, prompts, parsers, token counting.
"""

from __future__ import annotations

import itertools
import uuid
from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine

from om_core.config.options import ObservationalMemoryConfig
from om_core.engine import BufferObservation, EngineSettings, MemoryEngine
from om_core.messages import text_message
from om_core.observer.prompt import PREVIOUS_OBSERVATIONS_HEADING
from om_core.store import records
from tests.support.fake_models import FakeModels
from tests.support.invariants import check_thread

T0 = datetime(2026, 3, 3, 9, 0, tzinfo=UTC)
WORDS = [
    "harbor",
    "lantern",
    "copper",
    "meadow",
    "signal",
    "orchard",
    "velvet",
    "canyon",
    "ember",
    "quartz",
    "willow",
    "falcon",
]


def chatter(i: int, words: int = 60) -> str:
    return f"Message {i} says " + " ".join(WORDS[(i * 7 + k * k) % len(WORDS)] for k in range(words))


def small_config(**observation: object) -> ObservationalMemoryConfig:
    return ObservationalMemoryConfig.parse(
        {"observation": {"messageTokens": 3000, **observation}, "reflection": {"observationTokens": 2000}}
    )


def make(
    db: Engine,
    config: ObservationalMemoryConfig | None = None,
    models: FakeModels | None = None,
    **settings: object,
) -> tuple[MemoryEngine, FakeModels]:
    fake = models or FakeModels()
    engine = MemoryEngine(
        db, models=fake, config=config or small_config(), settings=EngineSettings(**settings)
    )  # type: ignore[arg-type]
    return engine, fake


def play(engine: MemoryEngine, thread_id: str, turns: int, start: int = 0) -> list:
    results = []
    for i in range(start, start + turns):
        role = "user" if i % 2 == 0 else "assistant"
        message = text_message(f"m{i}", role, chatter(i), T0 + timedelta(minutes=i))
        results.append(engine.ingest_turn(thread_id, "res-1", [message]))
    return results


def new_thread() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def test_a_long_conversation_keeps_every_message_covered_exactly_once(engine: Engine) -> None:
    om, _ = make(engine)
    thread_id = new_thread()
    results = play(om, thread_id, 160)
    report = check_thread(engine, thread_id)
    assert report.violations == []
    assert report.cursor > 0 and report.generations >= 1
    # Raw history stays bounded by blockAfter (1.2 × 3000) once the cycle runs.
    assert max(r.status["windows"]["active"]["messages"]["tokens"] for r in results[40:]) <= 3600
    assert not any(r.degraded for r in results)


def test_the_observation_block_is_byte_identical_between_activations(engine: Engine) -> None:
    om, _ = make(engine)
    thread_id = new_thread()
    results = play(om, thread_id, 80)
    stable_pairs = [
        (a, b)
        for a, b in itertools.pairwise(results)
        if a.record_id == b.record_id
        and a.status["windows"]["active"]["observations"]["tokens"]
        == b.status["windows"]["active"]["observations"]["tokens"]
        and a.context.observation_block
    ]
    assert stable_pairs, "the scenario must contain turns without activation"
    for a, b in stable_pairs:
        assert a.context.observation_block == b.context.observation_block
        assert a.system_messages[: a.context.stable_count] == b.system_messages[: b.context.stable_count]


def test_a_single_message_larger_than_the_threshold_is_observed(engine: Engine) -> None:
    om, fake = make(engine, config=small_config(bufferTokens=False))
    thread_id = new_thread()
    huge = text_message("big", "user", chatter(1, words=4000), T0)
    om.ingest_turn(thread_id, "res-1", [text_message("m0", "user", "hello", T0 - timedelta(minutes=1))])
    result = om.ingest_turn(thread_id, "res-1", [huge])
    assert any(kind == "observer" for kind, _ in fake.calls)
    assert result.status["windows"]["active"]["messages"]["tokens"] < 3000
    assert check_thread(engine, thread_id).violations == []


def test_a_failing_model_never_removes_anything_from_the_context(engine: Engine) -> None:
    om, fake = make(engine, config=small_config(bufferTokens=False))
    thread_id = new_thread()
    play(om, thread_id, 10)
    fake.fail_next = 1000
    results = play(om, thread_id, 50, start=10)
    degraded = [r for r in results if r.degraded]
    assert degraded, "the threshold must have been crossed while the model was down"
    last = results[-1]
    # Nothing was observed while the model was down, so every message is still there, raw, in order.
    assert [m.id for m in last.messages] == [f"m{i}" for i in range(60)][-len(last.messages) :]
    assert {m.id for m in last.messages} >= {f"m{i}" for i in range(10, 60)}
    assert check_thread(engine, thread_id).violations == []
    fake.fail_next = 0
    recovered = play(om, thread_id, 1, start=60)[-1]
    assert not recovered.degraded
    assert check_thread(engine, thread_id).violations == []


def test_a_redelivered_buffer_task_is_applied_once(engine: Engine) -> None:
    om, fake = make(engine, config=small_config(bufferTokens=0.5))
    thread_id = new_thread()
    play(om, thread_id, 12)
    head = records.get_head(engine, f"thread:{thread_id}")
    assert head is not None
    task = BufferObservation(thread_id, "buffer-obs-redelivered", pending_tokens=0, skip_minimum=True)
    play(om, thread_id, 2, start=12)
    first = om.run_task(task)
    calls = len(fake.calls)
    second = om.run_task(task)
    assert first is True and second is False
    assert len(fake.calls) == calls, "a finished cycle must not call the model again"
    chunks = records.get_head(engine, f"thread:{thread_id}").chunks  # type: ignore[union-attr]
    assert [c.cycle_id for c in chunks].count("buffer-obs-redelivered") == 1


def test_a_message_sent_twice_is_stored_once(engine: Engine) -> None:
    om, _ = make(engine)
    thread_id = new_thread()
    message = text_message("dup", "user", "hello there", T0)
    om.ingest_turn(thread_id, "res-1", [message])
    result = om.ingest_turn(thread_id, "res-1", [message])
    assert [m.id for m in result.messages] == ["dup"]
    assert len(result.messages[0].parts) == 1


def test_a_reflection_that_does_not_shrink_the_log_creates_no_generation(engine: Engine) -> None:
    class Stubborn(FakeModels):
        def complete(self, model, *, system, user, **kw):  # type: ignore[no-untyped-def]
            reply = super().complete(model, system=system, user=user, **kw)
            if "## Observations to Reflect On" in user:
                section = user.split("## Observations to Reflect On", 1)[1].split("\n## ", 1)[0]
                padded = f"{section.strip()}\n* 🔴 (10:00) padding to make it bigger"
                text = f"<observations>\n{padded}\n</observations>"
                return type(reply)(text, reply.input_tokens, len(text) // 4, 0.0, reply.model)
            return reply

    om, fake = make(engine, models=Stubborn())
    thread_id = new_thread()
    play(om, thread_id, 120)
    head = records.get_head(engine, f"thread:{thread_id}")
    assert head is not None and head.generation_count == 0
    reflector_calls = sum(1 for kind, _ in fake.calls if kind == "reflector")
    assert reflector_calls >= 1
    # Suppression: the ladder is not re-run on the identical input every turn.
    play(om, thread_id, 4, start=120)
    again = sum(1 for kind, _ in fake.calls if kind == "reflector")
    assert again - reflector_calls <= 4 * 4
    assert check_thread(engine, thread_id).violations == []


def test_a_backlog_larger_than_the_observer_input_cap_is_split_into_several_calls(engine: Engine) -> None:
    om, fake = make(engine, config=small_config(bufferTokens=False), observer_input_cap_tokens=800)
    thread_id = new_thread()
    # The threshold (3000) is crossed with a backlog several times the input cap (800).
    for i in range(60):
        message = text_message(
            f"m{i}", "user" if i % 2 == 0 else "assistant", chatter(i), T0 + timedelta(minutes=i)
        )
        om.ingest_turn(thread_id, "res-1", [message])
    observer_inputs = [user for kind, user in fake.calls if kind == "observer"]
    assert len(observer_inputs) >= 3
    for user in observer_inputs:
        transcript = user.split("## New Message History to Observe", 1)[1].split("\n## ", 1)[0]
        assert om.counter.count_string(transcript) <= 800 + 200  # one whole message may overshoot the cap
    assert check_thread(engine, thread_id).violations == []


def test_our_own_control_text_never_becomes_an_observation(engine: Engine) -> None:
    class Echoing(FakeModels):
        def complete(self, model, *, system, user, **kw):  # type: ignore[no-untyped-def]
            reply = super().complete(model, system=system, user=user, **kw)
            if "## New Message History to Observe" not in user:
                return reply
            leaked = (
                "* 🔴 (09:00) ## Your Task\n"
                "* 🔴 (09:00) <system-reminder>continue the conversation</system-reminder>\n"
                "* 🔴 (09:00) User said: the tent has a broken zip"
            )
            text = reply.text.replace("</observations>", f"{leaked}\n</observations>")
            return type(reply)(text, reply.input_tokens, reply.output_tokens, 0.0, reply.model)

    om, _ = make(engine, config=small_config(bufferTokens=False), models=Echoing())
    thread_id = new_thread()
    play(om, thread_id, 60)
    head = records.get_head(engine, f"thread:{thread_id}")
    assert head is not None and head.active_observations
    assert "broken zip" in head.active_observations
    assert "Your Task" not in head.active_observations
    assert "system-reminder" not in head.active_observations


def test_a_chunk_buffered_in_a_turn_that_reflects_is_observed_against_the_reflected_log(
    engine: Engine,
) -> None:
    """The Observer skips what the log already says, so it must see the log its chunk will join: a turn that
    activates a reflection launches its buffering afterwards (behaviour §4.1 (b) before (e)). Observed against
    the old log, the chunk would leave out lines the reflection has just dropped."""
    om, fake = make(engine, config=small_config(bufferOnIdle=False, previousObserverTokens=False))
    thread_id = new_thread()
    turns_checked = 0
    for i in range(240):
        before = records.get_head(engine, f"thread:{thread_id}")
        calls = len(fake.calls)
        play(om, thread_id, 1, start=i)
        after = records.get_head(engine, f"thread:{thread_id}")
        assert after is not None
        if before is None or before.generation_count == after.generation_count:
            continue
        for kind, user in fake.calls[calls:]:
            if kind != "observer" or PREVIOUS_OBSERVATIONS_HEADING not in user:
                continue
            seen = _section_lines(user, PREVIOUS_OBSERVATIONS_HEADING)
            known = "\n".join([after.active_observations, *(c.observations for c in after.chunks)])
            missing = [line for line in seen if line not in known]
            assert missing == [], f"turn {i}: the buffered chunk was observed against the pre-reflection log"
            turns_checked += 1
    assert turns_checked >= 1, "no turn both reflected and buffered; the scenario needs retuning"
    assert check_thread(engine, thread_id).violations == []


def _section_lines(user: str, heading: str) -> list[str]:
    body = user.split(heading, 1)[1].split("\n## ", 1)[0]
    return [line.strip() for line in body.splitlines() if line.strip().startswith("* ")]
