"""A turn reads only the window's rows stored since the last turn this process saw, and still shows
exactly what storage holds: rows another replica stored, and nothing of an erased thread's old rows."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine, event

from om_core.engine import MemoryEngine
from om_core.messages import Message, text_message
from om_core.models.client import ModelClient
from om_core.store import erasure, history
from om_core.store.history import PartTokens, WindowRow
from om_core.store.window_cache import WindowCache
from tests.support.workers import HoldingExecutor

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def row(seq: int) -> WindowRow:
    return WindowRow(PartTokens(f"m{seq}", "user", seq, "text", 3.0, 0.0, 0), T0, seq, "r", None)


def test_what_is_held_starts_after_the_cursor_and_runs_to_the_last_row_kept() -> None:
    cache = WindowCache(1_000_000)
    key = ("t", T0)
    assert cache.held(key, 0) is None
    cache.remember(key, 2, [row(3), row(4), row(5)])
    held = cache.held(key, 3)
    assert held is not None and [r.seq for r in held[0]] == [4, 5] and held[1] == 5
    assert cache.held(key, 1) is None, "a cursor before what is kept reads the whole window"
    assert cache.held(key, 9) == ((), 9), "a cursor past everything kept holds nothing"
    cache.remember(key, 2, [row(3)])
    held = cache.held(key, 2)
    assert held is not None and held[1] == 5, "a turn that saw less does not replace what another kept"
    assert cache.held(("t", T0 + timedelta(seconds=1)), 2) is None, "a thread created again is another"


def _engine(db: Engine) -> MemoryEngine:
    return MemoryEngine(db, models=ModelClient(), executor=HoldingExecutor())


def _window_reads(db: Engine) -> list[Any]:
    """The `after_seq` of every window read on `db` (the join of parts with their messages)."""
    seen: list[Any] = []

    def before(_conn: Any, _cursor: Any, statement: str, params: Any, _ctx: Any, _many: bool) -> None:
        if "om_parts.overhead_delta" in statement and "om_messages.first_seq" in statement:
            seen.append(params["after_seq"] if isinstance(params, dict) else params[-1])

    event.listen(db, "before_cursor_execute", before)
    return seen


def _texts(messages: list[Message]) -> list[str]:
    return [p.text or "" for m in messages for p in m.parts]


def test_turns_read_only_new_rows_and_see_what_another_replica_stored(engine: Engine) -> None:
    here, there = _engine(engine), _engine(engine)
    thread = f"wc-{uuid.uuid4().hex[:8]}"
    reads = _window_reads(engine)
    said: list[str] = []
    for i in range(6):
        text = f"message {i}"
        said.append(text)
        who = there if i in (2, 3) else here
        result = who.ingest_turn(
            thread, "r", [text_message(f"m{i}", "user", text, T0 + timedelta(minutes=i))]
        )
        assert _texts(result.messages) == said, f"turn {i} shows every stored part once, in order"
    # Each turn reads the rows after the last part its own process saw (turn i stores part i + 1):
    # `there` starts from nothing, and `here` reads the parts `there` stored after its own part 2.
    assert reads == [0, 1, 0, 3, 2, 5]


def test_a_thread_erased_and_created_again_shows_none_of_its_old_rows(engine: Engine) -> None:
    om = _engine(engine)
    thread = f"wc-{uuid.uuid4().hex[:8]}"
    for i in range(3):
        om.ingest_turn(thread, "r", [text_message(f"old{i}", "user", f"old {i}", T0 + timedelta(minutes=i))])
    with engine.begin() as conn:
        erasure.erase_thread(conn, thread)
    result = om.ingest_turn(thread, "r", [text_message("new", "user", "new", T0 + timedelta(hours=1))])
    assert _texts(result.messages) == ["new"]
    with engine.connect() as conn:
        stored = history.load_parts(conn, thread, after_seq=0)
    assert _texts(stored) == ["new"]
