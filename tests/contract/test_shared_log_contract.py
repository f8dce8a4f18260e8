"""The storage contract of resource scope's shared log, on a real Postgres and on SQLite alike: a batch
commits all of its threads or none, each fenced like a thread-scope observation, and activation of a
thread's chunks moves its cursor while the text joins the resource's log."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine

from om_core.store import history, records
from om_core.store.outbox import list_events
from om_core.store.types import Chunk, ChunkInput, NewEvent, Record, ThreadObservation

T0 = datetime(2026, 3, 3, 9, 0, tzinfo=UTC)


def setup(engine: Engine, threads: int = 2) -> tuple[str, list[Record], Record]:
    resource = f"user-{uuid.uuid4().hex[:10]}"
    cursors: list[Record] = []
    with engine.begin() as conn:
        for k in range(threads):
            thread_id = f"{resource}-t{k}"
            history.ensure_thread(conn, thread_id, resource)
            cursors.append(
                records.initialize(
                    conn,
                    lookup_key=f"thread:{thread_id}",
                    scope="thread",
                    thread_id=thread_id,
                    resource_id=resource,
                    config={},
                    observed_timezone="UTC",
                )
            )
        log = records.initialize(
            conn,
            lookup_key=f"resource:{resource}",
            scope="resource",
            thread_id=None,
            resource_id=resource,
            config={},
            observed_timezone="UTC",
        )
    return resource, cursors, log


def entry(cursor: Record, from_seq: int, to_seq: int, text: str) -> ThreadObservation:
    assert cursor.thread_id is not None
    return ThreadObservation(
        cursor_record_id=cursor.id,
        thread_id=cursor.thread_id,
        label=cursor.thread_id,
        from_seq=from_seq,
        to_seq=to_seq,
        observations=text,
        token_count=7,
        observed_message_tokens=100,
        last_observed_at=T0 + timedelta(minutes=to_seq),
        thread_metadata={"currentTask": f"task of {cursor.thread_id}"},
    )


def compose(text: str, e: ThreadObservation) -> str:
    section = f'<thread id="{e.label}">\n{e.observations}\n</thread>'
    return f"{text}\n\n{section}" if text else section


def commit(engine: Engine, log: Record, entries: list[ThreadObservation]) -> records.WriteResult:
    def events(updated: dict[str, Record]) -> list[tuple[Record, list[NewEvent]]]:
        return [
            (r, [NewEvent("data-om-observation-end", {"seqRange": [0, 0]}, "cycle-1")])
            for r in updated.values()
        ]

    with engine.begin() as conn:
        result, _ = records.commit_thread_observations(
            conn, log.lookup_key, entries, compose=compose, events=events
        )
    return result


def head(engine: Engine, key: str) -> Record:
    found = records.get_head(engine, key)
    assert found is not None
    return found


def test_a_batch_moves_every_threads_cursor_and_writes_each_section_once(engine: Engine) -> None:
    _resource, (a, b), log = setup(engine)
    result = commit(engine, log, [entry(a, 0, 4, "* a said hi"), entry(b, 0, 6, "* b said bye")])
    assert result.applied
    stored = head(engine, log.lookup_key)
    assert stored.active_observations.count("* a said hi") == 1
    assert stored.active_observations.count("* b said bye") == 1
    assert stored.observation_token_count == 14
    assert head(engine, a.lookup_key).last_observed_seq == 4
    assert head(engine, b.lookup_key).last_observed_seq == 6
    assert head(engine, a.lookup_key).active_observations == "", "a thread's record holds no text"
    for cursor in (a, b):
        assert cursor.thread_id is not None
        ends = list_events(engine, thread_id=cursor.thread_id, types=["data-om-observation-end"])
        assert len(ends) == 1, "each thread's end event is written with the commit"
        thread = history.get_thread(engine, cursor.thread_id)
        assert thread is not None and thread.om_metadata["currentTask"] == f"task of {cursor.thread_id}"


def test_one_moved_cursor_refuses_the_whole_batch(engine: Engine) -> None:
    _resource, (a, b), log = setup(engine)
    assert commit(engine, log, [entry(b, 0, 3, "* b first")]).applied
    refused = commit(engine, log, [entry(a, 0, 4, "* a said hi"), entry(b, 0, 6, "* b again")])
    assert not refused.applied and refused.reason == "conflict"
    stored = head(engine, log.lookup_key)
    assert "* a said hi" not in stored.active_observations, "nothing of a refused batch is written"
    assert head(engine, a.lookup_key).last_observed_seq == 0
    assert head(engine, b.lookup_key).last_observed_seq == 3
    covered = commit(engine, log, [entry(b, 3, 3, "* b nothing new")])
    assert not covered.applied and covered.reason == "covered"


def test_a_chunk_reaching_past_the_batch_refuses_it(engine: Engine) -> None:
    _resource, (a, _b), log = setup(engine)
    chunk = ChunkInput(
        cycle_id="buf-1",
        observations="* a buffered",
        token_count=3,
        message_ids=["m1"],
        message_tokens=50,
        from_seq=0,
        to_seq=8,
        last_observed_at=T0,
    )
    with engine.begin() as conn:
        appended, _ = records.append_chunk(conn, a.id, chunk)
    assert appended.persisted
    refused = commit(engine, log, [entry(a, 0, 4, "* a partly")])
    assert not refused.applied and refused.reason == "conflict"


def test_activation_with_a_shared_log_moves_the_cursor_and_joins_the_log(engine: Engine) -> None:
    _resource, (a, _b), log = setup(engine)
    chunk = ChunkInput(
        cycle_id="buf-1",
        observations="* a buffered",
        token_count=3,
        message_ids=["m1"],
        message_tokens=50,
        from_seq=0,
        to_seq=8,
        last_observed_at=T0,
    )
    with engine.begin() as conn:
        records.append_chunk(conn, a.id, chunk)

    def joined(text: str, c: Chunk) -> str:
        return f'{text}\n<thread id="a">\n{c.observations}\n</thread>'.strip()

    with engine.begin() as conn:
        result, _ = records.activate(
            conn,
            a.id,
            choose_count=lambda chunks: len(chunks),
            pending_tokens=None,
            shared_log=records.SharedLog(log.lookup_key, joined),
        )
    assert result.activated
    assert head(engine, a.lookup_key).last_observed_seq == 8
    assert head(engine, a.lookup_key).active_observations == ""
    assert head(engine, a.lookup_key).chunks == ()
    stored = head(engine, log.lookup_key)
    assert stored.active_observations == '<thread id="a">\n* a buffered\n</thread>'
    assert stored.observation_token_count == 3
