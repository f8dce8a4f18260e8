"""Lazy migration through the engine: a long history arriving in one request is observed in capped
batches, the first turn waiting for one of them only (`engine.backlog`).

The executor here queues background work instead of running it (as Celery would run it on a worker), so
the test can see what the turn itself waited for, then drain the queue as the workers would.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine

from om_core import queries
from om_core.config.options import ObservationalMemoryConfig
from om_core.engine import EngineSettings, MemoryEngine
from om_core.engine.backlog import NOTE_ID
from om_core.engine.tasks import InlineExecutor, Observe, Task
from om_core.messages import Message, text_message
from om_core.store import records
from tests.support.fake_models import FakeModels
from tests.support.invariants import check_thread

T0 = datetime(2026, 3, 3, 9, 0, tzinfo=UTC)
WORDS = ["harbor", "lantern", "copper", "meadow", "signal", "orchard", "velvet", "canyon", "ember", "quartz"]
CAP = 2000  # Observer input cap: the imported history is several batches


class Workers(InlineExecutor):
    """Runs what a turn waits for at once; queues what it submits, for the test to drain later."""

    def __init__(self) -> None:
        super().__init__()
        self.queued: list[Task] = []

    def submit(self, task: Task) -> None:
        self.queued.append(task)

    def drain(self) -> None:
        while self.queued:
            self.run(self.queued.pop(0), 30.0)


def chatter(i: int, words: int = 60) -> str:
    return f"Message {i} says " + " ".join(WORDS[(i * 7 + k * k) % len(WORDS)] for k in range(words))


def imported_history(count: int) -> list[Message]:
    return [
        text_message(f"m{i}", "user" if i % 2 == 0 else "assistant", chatter(i), T0 + timedelta(minutes=i))
        for i in range(count)
    ]


def make(db: Engine, cap: int = CAP) -> tuple[MemoryEngine, FakeModels, Workers]:
    fake, workers = FakeModels(), Workers()
    config = ObservationalMemoryConfig.parse({"observation": {"messageTokens": 3000}})
    om = MemoryEngine(
        db,
        models=fake,
        config=config,
        executor=workers,
        settings=EngineSettings(observer_input_cap_tokens=cap),
    )  # type: ignore[arg-type]
    return om, fake, workers


def observer_calls(fake: FakeModels) -> int:
    return sum(1 for kind, _ in fake.calls if kind == "observer")


def test_an_imported_history_is_observed_in_batches_without_the_first_turn_waiting_for_all(
    engine: Engine,
) -> None:
    om, fake, workers = make(engine)
    thread_id = f"t-{uuid.uuid4().hex[:10]}"
    history = imported_history(300)  # about 21k tokens: ten or more Observer calls of at most 2000

    first = om.ingest_turn(thread_id, "res-1", history)

    assert first.blocked
    assert observer_calls(fake) == 1, "the turn waits for the oldest batch only"
    assert [t.trigger for t in workers.queued if isinstance(t, Observe)] == ["backlog"]
    note, *recent = first.messages
    assert note.id == NOTE_ID and "still being added to memory" in (note.parts[0].text or "")
    assert recent[-1].id == "m299", "the newest messages stay"
    left_out = note.metadata["omBacklog"]["messages"]
    assert left_out > 100 and len(recent) < 60
    assert first.context.observation_block, "the first batch is already in memory"

    workers.drain()
    assert observer_calls(fake) >= 10, "the rest was observed in capped batches in the background"
    after = om.ingest_turn(
        thread_id, "res-1", [text_message("u-next", "user", "Where were we?", T0 + timedelta(days=1))]
    )
    assert all(m.id != NOTE_ID for m in after.messages)
    assert after.status["windows"]["active"]["messages"]["tokens"] < 3600, "within blockAfter"
    head = records.get_head(engine, f"thread:{thread_id}")
    assert head is not None and "Message 0 says" in head.active_observations + after.context.observation_block
    assert check_thread(engine, thread_id).violations == []


def test_a_history_within_one_batch_is_observed_in_the_turn_as_before(engine: Engine) -> None:
    om, fake, workers = make(engine, cap=8000)
    thread_id = f"t-{uuid.uuid4().hex[:10]}"
    first = om.ingest_turn(thread_id, "res-1", imported_history(60))  # about 4.2k tokens, one batch
    assert first.blocked and observer_calls(fake) == 1
    assert not [t for t in workers.queued if isinstance(t, Observe)]
    assert all(m.id != NOTE_ID for m in first.messages)
    assert check_thread(engine, thread_id).violations == []


def test_a_history_stored_while_om_was_off_is_observed_in_batches_once_it_is_on(engine: Engine) -> None:
    om, fake, workers = make(engine)
    thread_id = f"t-{uuid.uuid4().hex[:10]}"
    om.ingest_turn(thread_id, "res-1", [])  # creates the thread, so its config can be set
    queries.set_config_overrides(om, thread_id, {"enabled": False})
    for message in imported_history(300):
        om.ingest_turn(thread_id, "res-1", [message])
    assert observer_calls(fake) == 0, "nothing observed while OM is off"
    queries.set_config_overrides(om, thread_id, {"enabled": True})

    first = om.ingest_turn(
        thread_id, "res-1", [text_message("u-on", "user", "Hello again", T0 + timedelta(days=1))]
    )

    assert first.blocked and observer_calls(fake) == 1
    assert first.messages[0].id == NOTE_ID and first.messages[-1].id == "u-on"
    workers.drain()
    assert check_thread(engine, thread_id).violations == []
    assert records.get_head(engine, f"thread:{thread_id}").last_observed_seq > 250  # type: ignore[union-attr]
