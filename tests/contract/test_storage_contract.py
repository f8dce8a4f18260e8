"""The storage contract (behaviour §3.5, §13.12), run on a real Postgres and on SQLite alike."""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine, select

from om_core.messages import Message, Part, text_message
from om_core.reflector.prompt import append_tail_after_reflection as compose_after_reflection
from om_core.reflector.prompt import replace_leading_lines
from om_core.store import history, records, schema
from om_core.store.types import ChunkInput, NewEvent, Record

T0 = datetime(2026, 3, 3, 9, 0, tzinfo=UTC)


def new_key() -> tuple[str, str]:
    thread_id = f"t-{uuid.uuid4().hex[:12]}"
    return thread_id, f"thread:{thread_id}"


def init(engine: Engine, thread_id: str, key: str) -> Record:
    with engine.begin() as conn:
        history.ensure_thread(conn, thread_id, "res-1")
        return records.initialize(
            conn,
            lookup_key=key,
            scope="thread",
            thread_id=thread_id,
            resource_id="res-1",
            config={},
            observed_timezone="UTC",
        )


def chunk(cycle: str, from_seq: int, to_seq: int, tokens: int = 1000, text: str | None = None) -> ChunkInput:
    return ChunkInput(
        cycle_id=cycle,
        observations=text or f"* 🔴 (09:00) observation of {cycle}",
        token_count=10,
        message_ids=[f"m{from_seq + 1}"],
        message_tokens=tokens,
        from_seq=from_seq,
        to_seq=to_seq,
        last_observed_at=T0 + timedelta(seconds=to_seq),
        current_task=f"task after {cycle}",
    )


def append(engine: Engine, record_id: str, c: ChunkInput) -> records.AppendResult:
    with engine.begin() as conn:
        result, _ = records.append_chunk(conn, record_id, c)
        return result


def activate(engine: Engine, record_id: str, count: int) -> records.ActivationResult:
    with engine.begin() as conn:
        result, _ = records.activate(conn, record_id, choose_count=lambda chunks: count, pending_tokens=None)
        return result


def head(engine: Engine, key: str) -> Record:
    found = records.get_head(engine, key)
    assert found is not None
    return found


def reflect(
    engine: Engine, snapshot: Record, text: str, new_id: str | None = None
) -> tuple[Record | None, bool]:
    with engine.begin() as conn:
        successor, applied, _ = records.create_reflection_generation(
            conn,
            snapshot,
            reflection=text,
            token_count=5,
            compose=compose_after_reflection,
            new_record_id_=new_id,
        )
        return successor, applied


# ----------------------------------------------------------------------------------------- messages


def count_part(part: Part) -> tuple[float, float, int]:
    return (float(len(part.text or "")), 0.0, 0)


def test_parts_get_increasing_sequence_numbers_and_retries_store_nothing(engine: Engine) -> None:
    thread_id, _ = new_key()
    first = [text_message("m1", "user", "hello", T0), text_message("m2", "assistant", "hi", T0)]
    with engine.begin() as conn:
        stored = history.append_messages(
            conn, thread_id=thread_id, resource_id="r", incoming=first, count_part=count_part
        )
    assert [p.seq for m in stored for p in m.parts] == [1, 2]
    with engine.begin() as conn:
        again = history.append_messages(
            conn, thread_id=thread_id, resource_id="r", incoming=first, count_part=count_part
        )
    assert again == []
    grown = Message(
        id="m2",
        role="assistant",
        created_at=T0,
        parts=[Part(type="text", text="hi"), Part(type="text", text="and more")],
    )
    with engine.begin() as conn:
        stored = history.append_messages(
            conn, thread_id=thread_id, resource_id="r", incoming=[grown], count_part=count_part
        )
    assert [(m.id, [p.seq for p in m.parts]) for m in stored] == [("m2", [3])]
    with engine.connect() as conn:
        tail = history.load_parts(conn, thread_id, after_seq=2)
        tokens = history.part_tokens_after(conn, thread_id, 0)
    assert [(m.id, [p.text for p in m.parts]) for m in tail] == [("m2", ["and more"])]
    assert [t.tokens for t in tokens] == [5.0, 2.0, 8.0]


def test_a_message_id_cannot_change_role(engine: Engine) -> None:
    thread_id, _ = new_key()
    with engine.begin() as conn:
        history.append_messages(
            conn,
            thread_id=thread_id,
            resource_id="r",
            incoming=[text_message("m1", "user", "x", T0)],
            count_part=count_part,
        )
    with pytest.raises(history.MessageConflict, match="cannot change role"), engine.begin() as conn:
        history.append_messages(
            conn,
            thread_id=thread_id,
            resource_id="r",
            incoming=[text_message("m1", "assistant", "y", T0)],
            count_part=count_part,
        )


def _appended_rows(engine: Engine, thread_id: str) -> dict[str, object]:
    """What an append left in the tables, as the column types read it back (the thread's `updated_at`,
    a clock reading, left out)."""
    with engine.connect() as conn:
        thread = conn.execute(
            select(
                schema.threads.c.last_seq,
                schema.threads.c.last_activity_at,
                schema.threads.c.last_actor_model,
            ).where(schema.threads.c.id == thread_id)
        ).one()
        messages = conn.execute(
            select(schema.messages)
            .where(schema.messages.c.thread_id == thread_id)
            .order_by(schema.messages.c.id)
        ).all()
        parts = conn.execute(
            select(schema.parts).where(schema.parts.c.thread_id == thread_id).order_by(schema.parts.c.seq)
        ).all()
    return {
        "thread": tuple(thread),
        "messages": [tuple(r) for r in messages],
        "parts": [tuple(r) for r in parts],
    }


def test_an_append_stores_the_same_rows_on_both_databases(pg_engine: Engine, sqlite_engine: Engine) -> None:
    """Postgres writes an append in one statement (rows as JSON), SQLite in three: every column must come
    back the same, including parts without a time, None inside tool payloads, and a thread's activity time
    and actor model, which an append that does not set them leaves as they were."""
    later = T0 + timedelta(minutes=3)
    first = [
        Message(
            id="u1",
            role="user",
            created_at=T0,
            metadata={"client": {"ua": None, "n": 1}, "tags": ["a", "ü"]},
            parts=[Part(type="text", text="Find the report 🔴"), Part(type="image", url="https://e.x/a.png")],
        ),
        Message(
            id="a1",
            role="assistant",
            created_at=T0 + timedelta(minutes=1),
            parts=[
                Part(
                    type="tool-invocation",
                    tool_call_id="c1",
                    tool_name="search",
                    state="result",
                    args={"q": "report", "page": None},
                    result=[{"title": None, "id": 7}],
                    created_at=later,
                ),
                Part(type="text", text="Found it: 42 pages."),
            ],
        ),
    ]
    grown = Message(id="u2", role="user", created_at=later, parts=[Part(type="text", text="thanks")])
    seen = []
    for engine in (pg_engine, sqlite_engine):
        thread_id, _ = new_key()
        with engine.begin() as conn:
            history.append_messages(
                conn,
                thread_id=thread_id,
                resource_id="r",
                incoming=first,
                count_part=count_part,
                actor_model="openai/gpt-4o",
            )
        with engine.begin() as conn:
            history.append_messages(
                conn, thread_id=thread_id, resource_id="r", incoming=[grown], count_part=count_part
            )
        rows = _appended_rows(engine, thread_id)
        assert rows["thread"] == (5, later, "openai/gpt-4o")
        seen.append(
            {**rows, "messages": [r[1:] for r in rows["messages"]], "parts": [r[1:] for r in rows["parts"]]}
        )
    on_postgres, on_sqlite = seen
    assert on_postgres == on_sqlite
    assert [p[1] for p in on_postgres["parts"]] == ["u1", "u1", "a1", "a1", "u2"]


# ------------------------------------------------------------------------------------------- chunks


def test_duplicate_cycle_append_is_a_no_op(engine: Engine) -> None:
    thread_id, key = new_key()
    rec = init(engine, thread_id, key)
    assert append(engine, rec.id, chunk("c1", 0, 4)).persisted
    again = append(engine, rec.id, chunk("c1", 4, 8))
    assert (again.persisted, again.reason) == (False, "duplicate")
    assert [c.cycle_id for c in head(engine, key).chunks] == ["c1"]


def test_chunk_behind_the_cursor_is_not_stored(engine: Engine) -> None:
    thread_id, key = new_key()
    rec = init(engine, thread_id, key)
    assert append(engine, rec.id, chunk("c1", 0, 4)).persisted
    activate(engine, rec.id, 1)
    covered = append(engine, rec.id, chunk("c-late", 0, 3))
    assert (covered.persisted, covered.reason) == (False, "covered")
    assert head(engine, key).chunks == ()


def test_chunk_that_does_not_continue_the_list_is_refused(engine: Engine) -> None:
    thread_id, key = new_key()
    rec = init(engine, thread_id, key)
    assert append(engine, rec.id, chunk("c1", 0, 4)).persisted
    overlapping = append(engine, rec.id, chunk("c2", 2, 6))
    gap = append(engine, rec.id, chunk("c3", 5, 9))
    assert (overlapping.reason, gap.reason) == ("stale", "stale")
    assert append(engine, rec.id, chunk("c4", 4, 9)).persisted
    assert [(c.from_seq, c.to_seq) for c in head(engine, key).chunks] == [(0, 4), (4, 9)]


def test_the_head_read_in_one_statement_equals_the_locked_read(engine: Engine) -> None:
    """`read_head` reads the head and its chunks in one statement (a union), and under a lock in two:
    every field of the record and of each chunk, and the chunks' order, must come back the same."""
    thread_id, key = new_key()
    rec = init(engine, thread_id, key)
    for name, start, end in (("c1", 0, 4), ("c2", 4, 9), ("c3", 9, 12)):
        assert append(
            engine, rec.id, chunk(name, start, end, text=f"* 🔴 (09:0{end % 10}) fact {name}")
        ).persisted
    with engine.begin() as conn:
        locked = records.read_head(conn, key, for_update=True)
        read = records.read_head(conn, key)
    assert read is not None and read == locked
    assert [c.cycle_id for c in read.chunks] == ["c1", "c2", "c3"]
    assert read.chunks[1].last_observed_at == T0 + timedelta(seconds=9)
    assert read.chunks[0].message_ids == ["m1"]


def _positions(engine: Engine, key: str) -> list[int]:
    C = schema.chunks
    with engine.connect() as conn:
        rows = conn.execute(select(C.c.position).where(C.c.lookup_key == key).order_by(C.c.position))
        return [int(p) for p in rows.scalars()]


def test_positions_continue_past_activated_chunks_and_a_refused_append_takes_none(engine: Engine) -> None:
    thread_id, key = new_key()
    rec = init(engine, thread_id, key)
    assert append(engine, rec.id, chunk("c1", 0, 4)).persisted
    assert append(engine, rec.id, chunk("c2", 4, 6)).persisted
    activate(engine, rec.id, 2)  # both leave the buffered list; their rows and positions stay
    assert append(engine, rec.id, chunk("c1", 6, 8)).reason == "duplicate"
    assert append(engine, rec.id, chunk("c3", 7, 8)).reason == "stale"
    assert append(engine, rec.id, chunk("c4", 6, 8)).persisted
    assert _positions(engine, key) == [1, 2, 3]


def _append_live(engine: Engine, record_id: str, c: ChunkInput, key: str, tokens: int) -> str | None:
    live = records.LiveFields(key, {"is_buffering_observation": False, "last_buffered_at_tokens": tokens})
    with engine.begin() as conn:
        records.set_live_head_fields(conn, key, {"is_buffering_observation": True})
        result, _ = records.append_chunk(conn, record_id, c, live=live)
    return result.reason


def test_an_append_writes_the_live_fields_on_the_head_whatever_its_outcome(engine: Engine) -> None:
    """What a buffering commit writes on the key's live head (the flag off, the pacing boundary) goes
    with the chunk's own UPDATE when it is stored and on its own when it is refused, as
    `set_live_head_fields` always did."""
    thread_id, key = new_key()
    rec = init(engine, thread_id, key)
    outcomes = [
        (chunk("c1", 0, 4), 101, None),
        (chunk("c1", 4, 8), 102, "duplicate"),
        (chunk("c2", 2, 6), 103, "stale"),
        (chunk("c3", 4, 6), 104, None),
    ]
    for c, tokens, reason in outcomes:
        assert _append_live(engine, rec.id, c, key, tokens) == reason
        after = head(engine, key)
        assert (after.is_buffering_observation, after.last_buffered_at_tokens) == (False, tokens)
    after = head(engine, key)
    assert (after.last_buffered_seq, [c.cycle_id for c in after.chunks]) == (6, ["c1", "c3"])
    assert after.last_buffered_at_time == T0 + timedelta(seconds=6)
    gone = _append_live(engine, "omrec-no-such-record", chunk("c9", 6, 9), key, 105)
    assert gone == "not-found" and head(engine, key).last_buffered_at_tokens == 105
    with pytest.raises(ValueError, match="not a hint field"), engine.begin() as conn:
        records.append_chunk(conn, rec.id, chunk("c5", 6, 9), live=records.LiveFields(key, {"config": {}}))


def test_activation_takes_a_prefix_and_never_moves_the_cursor_back(engine: Engine) -> None:
    thread_id, key = new_key()
    rec = init(engine, thread_id, key)
    for i, (a, b) in enumerate([(0, 3), (3, 6), (6, 9)]):
        assert append(engine, rec.id, chunk(f"c{i}", a, b)).persisted
    result = activate(engine, rec.id, 2)
    assert result.activated_cycle_ids == ["c0", "c1"]
    after = head(engine, key)
    assert after.last_observed_seq == 6
    assert [c.cycle_id for c in after.chunks] == ["c2"]
    assert "observation of c0" in after.active_observations
    assert after.active_observations.index("c0") < after.active_observations.index("c1")
    # A sync observation moves the cursor to 20; activating the older chunk afterwards keeps it at 20.
    with engine.begin() as conn:
        conn.execute(
            schema.records.update().where(schema.records.c.id == after.id).values(last_observed_seq=20)
        )
    activate(engine, rec.id, 1)
    assert head(engine, key).last_observed_seq == 20


def test_activation_applies_hints_of_the_last_chunk_and_writes_events_in_the_same_transaction(
    engine: Engine,
) -> None:
    thread_id, key = new_key()
    rec = init(engine, thread_id, key)
    append(engine, rec.id, chunk("c0", 0, 3))
    append(engine, rec.id, chunk("c1", 3, 6))
    with engine.begin() as conn:
        result, stored_events = records.activate(
            conn,
            rec.id,
            choose_count=lambda chunks: 2,
            pending_tokens=5000,
            thread_metadata_patch=lambda r: {"currentTask": r.current_task, "suggestedResponse": None},
            events=lambda r: [
                NewEvent("data-om-activation", {"cycleId": c.cycle_id}, c.cycle_id) for c in r.per_chunk
            ],
        )
    assert [e.cycle_id for e in stored_events] == ["c0", "c1"]
    thread = history.get_thread(engine, thread_id)
    assert thread is not None and thread.om_metadata["currentTask"] == "task after c1"
    assert result.record is not None and result.record.pending_message_tokens == 3000


def test_activation_on_a_retired_record_reports_retired_and_writes_nothing(engine: Engine) -> None:
    thread_id, key = new_key()
    rec = init(engine, thread_id, key)
    append(engine, rec.id, chunk("c0", 0, 3))
    successor, applied = reflect(engine, head(engine, key), "* 🔴 reflected")
    assert applied and successor is not None
    result = activate(engine, rec.id, 1)
    assert result.retired and not result.activated
    retry = activate(engine, successor.id, 1)
    assert retry.activated_cycle_ids == ["c0"]


# ---------------------------------------------------------------------------------------- rollover


def test_rollover_moves_chunks_keeps_appended_tail_and_retires_the_old_head(engine: Engine) -> None:
    thread_id, key = new_key()
    rec = init(engine, thread_id, key)
    for i, (a, b) in enumerate([(0, 3), (3, 6), (6, 9)]):
        append(engine, rec.id, chunk(f"c{i}", a, b))
    activate(engine, rec.id, 1)
    snapshot = head(engine, key)
    # While the Reflector runs, an activation appends c1's text to the stored log.
    activate(engine, rec.id, 1)
    new_id = f"omrec-{uuid.uuid4()}"
    successor, applied = reflect(engine, snapshot, "* 🔴 reflection", new_id)
    assert applied and successor is not None and successor.id == new_id
    assert successor.active_observations.startswith("* 🔴 reflection\n\n")
    assert "observation of c1" in successor.active_observations
    assert "observation of c0" not in successor.active_observations
    assert [c.cycle_id for c in successor.chunks] == ["c2"]
    assert successor.last_observed_seq == 6 and successor.generation_count == 1
    old = records.get_record(engine, rec.id)
    assert old is not None and old.superseded_by == new_id and old.chunks == ()
    assert records.live_heads(engine, key) == 1
    # The moved chunk activates on the successor.
    assert activate(engine, successor.id, 1).activated_cycle_ids == ["c2"]


def test_rollover_over_a_rewritten_log_creates_nothing(engine: Engine) -> None:
    thread_id, key = new_key()
    rec = init(engine, thread_id, key)
    append(engine, rec.id, chunk("c0", 0, 3))
    activate(engine, rec.id, 1)
    snapshot = head(engine, key)
    fake = Record(**{**snapshot.__dict__, "active_observations": "something else entirely"})
    current, applied = reflect(engine, fake, "* 🔴 reflection")
    assert not applied and current is not None and current.id == rec.id
    assert records.live_heads(engine, key) == 1 and head(engine, key).generation_count == 0


def test_writes_to_a_retired_head_land_on_the_live_head_or_report_it(engine: Engine) -> None:
    thread_id, key = new_key()
    rec = init(engine, thread_id, key)
    successor, _ = reflect(engine, head(engine, key), "* 🔴 reflection")
    assert successor is not None
    landed = append(engine, rec.id, chunk("c0", 0, 3))
    assert landed.persisted and landed.record_id == successor.id
    with engine.begin() as conn:
        lost, _ = records.update_buffered_reflection(
            conn, rec.id, text="x", token_count=1, input_token_count=2, reflected_line_count=1, cycle_id="r1"
        )
        retired_config = records.update_record_config(conn, rec.id, {"observation": {"messageTokens": 9000}})
    assert (lost.applied, lost.reason) == (False, "retired")
    assert head(engine, key).buffered_reflection is None
    assert retired_config is not None and retired_config.id == successor.id
    assert head(engine, key).config["_overrides"]["observation"]["messageTokens"] == 9000


def test_buffered_reflection_swap_replaces_leading_lines_only(engine: Engine) -> None:
    thread_id, key = new_key()
    rec = init(engine, thread_id, key)
    for i in range(3):
        append(engine, rec.id, chunk(f"c{i}", i * 3, i * 3 + 3, text=f"line {i}"))
    activate(engine, rec.id, 3)
    assert head(engine, key).active_observations == "line 0\n\nline 1\n\nline 2"
    with engine.begin() as conn:
        stored, _ = records.update_buffered_reflection(
            conn,
            rec.id,
            text="summary of 0 and 1",
            token_count=4,
            input_token_count=8,
            reflected_line_count=3,
            cycle_id="refl-1",
        )
    assert stored.applied
    with engine.begin() as conn:
        successor, reason, _ = records.swap_buffered_reflection_to_active(
            conn, rec.id, compose=replace_leading_lines, count_tokens=lambda s: len(s) // 4
        )
    assert reason is None and successor is not None
    assert successor.active_observations == "summary of 0 and 1\n\nline 2"
    assert successor.buffered_reflection is None and successor.generation_count == 1


# --------------------------------------------------------------------------------- sync observation


def test_sync_observation_commit_composes_under_the_lock_and_refuses_moved_cursors(engine: Engine) -> None:
    thread_id, key = new_key()
    rec = init(engine, thread_id, key)
    with engine.begin() as conn:
        ok, _ = records.commit_observation(
            conn,
            rec.id,
            from_seq=0,
            to_seq=5,
            observations="* 🔴 first",
            token_count=3,
            observed_message_tokens=100,
            last_observed_at=T0,
        )
        stale, _ = records.commit_observation(
            conn,
            rec.id,
            from_seq=0,
            to_seq=7,
            observations="* 🔴 stale",
            token_count=3,
            observed_message_tokens=100,
            last_observed_at=T0,
        )
    assert ok.applied and (stale.applied, stale.reason) == (False, "conflict")
    final = head(engine, key)
    assert final.active_observations == "* 🔴 first" and final.last_observed_seq == 5


def test_sync_observation_retires_chunks_it_covers(engine: Engine) -> None:
    thread_id, key = new_key()
    rec = init(engine, thread_id, key)
    append(engine, rec.id, chunk("c0", 0, 3))
    with engine.begin() as conn:
        ok, _ = records.commit_observation(
            conn,
            rec.id,
            from_seq=0,
            to_seq=5,
            observations="* 🔴 all of it",
            token_count=3,
            observed_message_tokens=100,
            last_observed_at=T0,
        )
    assert ok.applied
    final = head(engine, key)
    assert final.chunks == () and "observation of c0" not in final.active_observations
    with engine.connect() as conn:
        states = conn.execute(select(schema.chunks.c.state).where(schema.chunks.c.record_id == rec.id)).all()
    assert [s[0] for s in states] == ["superseded"]


# ------------------------------------------------------------------------------------ head liveness


def test_concurrent_initialization_leaves_exactly_one_live_head(engine: Engine) -> None:
    thread_id, key = new_key()
    with engine.begin() as conn:
        history.ensure_thread(conn, thread_id, "res-1")
    ids: list[str] = []
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            ids.append(init(engine, thread_id, key).id)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    workers = [threading.Thread(target=worker) for _ in range(8)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=60)
    assert errors == []
    assert len(set(ids)) == 1 and records.live_heads(engine, key) == 1


def test_ids_are_never_reused_after_a_clear(engine: Engine) -> None:
    thread_id, key = new_key()
    first = init(engine, thread_id, key)
    with engine.begin() as conn:
        records.clear(conn, key)
    second = init(engine, thread_id, key)
    assert second.id != first.id
    missing = append(engine, first.id, chunk("c0", 0, 3))
    assert (missing.persisted, missing.reason) == (False, "not-found")
    assert head(engine, key).chunks == ()


def test_events_with_the_same_type_and_cycle_are_stored_once(engine: Engine) -> None:
    thread_id, key = new_key()
    rec = init(engine, thread_id, key)
    for _ in range(2):
        with engine.begin() as conn:
            records.append_chunk(
                conn,
                rec.id,
                chunk("c0", 0, 3),
                events=lambda r: [NewEvent("data-om-buffering-end", {"cycleId": "c0"}, "c0")],
            )
    from om_core.store.outbox import list_events

    assert [e.type for e in list_events(engine, thread_id=thread_id)] == ["data-om-buffering-end"]
