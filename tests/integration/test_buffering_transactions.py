"""A buffered observation's transactions (issue 18, worker CPU): the snapshot it reads and the start it
writes share one transaction, the chunk's commit is the second, and a redelivered cycle that already
ended writes nothing and calls no model. Counted on both databases with SQLAlchemy's own events, so the
count is what reached the database, not what the code meant to do."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

from sqlalchemy import Engine, event, func, select

from om_core.engine import BufferObservation, MemoryEngine
from om_core.engine import events as ev
from om_core.store import records, schema
from tests.integration.test_engine_inprocess import make, play, small_config


@contextlib.contextmanager
def transactions(db: Engine) -> Iterator[dict[str, int]]:
    counts = {"begin": 0, "commit": 0, "rollback": 0, "checkout": 0}

    def bump(name: str) -> Any:
        return lambda *_: counts.__setitem__(name, counts[name] + 1)

    listeners = [(db, name, bump(name)) for name in ("begin", "commit", "rollback")]
    listeners.append((db.pool, "checkout", bump("checkout")))  # type: ignore[arg-type]
    for target, name, fn in listeners:
        event.listen(target, name, fn)
    try:
        yield counts
    finally:
        for target, name, fn in listeners:
            event.remove(target, name, fn)


def _events(db: Engine, cycle_id: str) -> list[str]:
    E = schema.events
    with db.connect() as conn:
        return list(conn.execute(select(E.c.type).where(E.c.cycle_id == cycle_id).order_by(E.c.id)).scalars())


def _task(thread_id: str) -> BufferObservation:
    cycle_id = f"buffer-obs-{uuid.uuid4().hex[:8]}"
    return BufferObservation(thread_id, cycle_id, pending_tokens=0, skip_minimum=True)


def _thread_ready(db: Engine) -> tuple[MemoryEngine, Any, str]:
    om, fake = make(db, config=small_config(bufferTokens=0.5))
    thread_id = f"t-{uuid.uuid4().hex[:10]}"
    play(om, thread_id, 12)
    return om, fake, thread_id


def test_a_buffered_observation_reads_and_starts_in_one_transaction_and_commits_in_a_second(
    engine: Engine,
) -> None:
    om, fake, thread_id = _thread_ready(engine)
    task = BufferObservation(
        thread_id, f"buffer-obs-{uuid.uuid4().hex[:8]}", pending_tokens=0, skip_minimum=True
    )
    calls = len(fake.calls)
    with transactions(engine) as counts:
        assert om.run_task(task) is True
    assert len(fake.calls) == calls + 1
    assert counts["begin"] == 2 and counts["commit"] == 2 and counts["rollback"] == 0, counts
    assert _events(engine, task.cycle_id) == [ev.BUFFERING_START, ev.BUFFERING_END]
    head = records.get_head(engine, f"thread:{thread_id}")
    assert head is not None and not head.is_buffering_observation
    assert [c.cycle_id for c in head.chunks].count(task.cycle_id) == 1


def test_a_redelivered_ended_cycle_writes_no_second_start_and_calls_no_model(engine: Engine) -> None:
    om, fake, thread_id = _thread_ready(engine)
    task = BufferObservation(
        thread_id, f"buffer-obs-{uuid.uuid4().hex[:8]}", pending_tokens=0, skip_minimum=True
    )
    assert om.run_task(task) is True
    calls = len(fake.calls)
    with transactions(engine) as counts:
        assert om.run_task(task) is False
    assert len(fake.calls) == calls, "an ended cycle must not call the model again"
    assert counts["begin"] == 1, counts  # the snapshot's transaction, and nothing written in it
    assert _events(engine, task.cycle_id) == [ev.BUFFERING_START, ev.BUFFERING_END]
    E = schema.events
    with engine.connect() as conn:
        starts = conn.execute(
            select(func.count()).where(E.c.cycle_id == task.cycle_id, E.c.type == ev.BUFFERING_START)
        ).scalar()
    assert starts == 1


def test_a_buffering_op_with_nothing_to_observe_writes_nothing(engine: Engine) -> None:
    om, fake, thread_id = _thread_ready(engine)
    first = BufferObservation(
        thread_id, f"buffer-obs-{uuid.uuid4().hex[:8]}", pending_tokens=0, skip_minimum=True
    )
    assert om.run_task(first) is True
    calls = len(fake.calls)
    again = BufferObservation(
        thread_id, f"buffer-obs-{uuid.uuid4().hex[:8]}", pending_tokens=0, skip_minimum=True
    )
    assert om.run_task(again) is False  # every message is buffered already
    assert len(fake.calls) == calls
    assert _events(engine, again.cycle_id) == []
    head = records.get_head(engine, f"thread:{thread_id}")
    assert head is not None and not head.is_buffering_observation


@contextlib.contextmanager
def statements(db: Engine) -> Iterator[list[str]]:
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        seen.append(" ".join(statement.split()))

    event.listen(db, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(db, "before_cursor_execute", record)


def test_a_stored_chunk_updates_the_head_row_twice_and_leaves_the_flag_off_and_the_boundary_set(
    engine: Engine,
) -> None:
    """The start sets `is_buffering_observation`; the chunk's commit writes its coverage, the flag off and
    the pacing boundary in one UPDATE of the head row (`append_chunk(live=...)`), not in two."""
    om, _fake, thread_id = _thread_ready(engine)
    task = _task(thread_id)
    with statements(engine) as seen:
        assert om.run_task(task) is True
    updates = [s for s in seen if s.startswith("UPDATE om_records")]
    assert len(updates) == 2, updates
    assert "is_buffering_observation" in updates[1] and "last_buffered_at_tokens" in updates[1]
    head = records.get_head(engine, f"thread:{thread_id}")
    assert head is not None and not head.is_buffering_observation
    E = schema.events
    with engine.connect() as conn:
        end = conn.execute(
            select(E.c.payload).where(E.c.cycle_id == task.cycle_id, E.c.type == ev.BUFFERING_END)
        ).scalar_one()
    assert head.last_buffered_at_tokens == end["tokensBuffered"] > 0
