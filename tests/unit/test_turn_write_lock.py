"""On SQLite a turn holds the database's one write lock only for its writes: the unobserved window is read
after the commit, so another writer (a worker's cycle, another turn) can commit while a turn reads."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from sqlalchemy import Engine, text

from om_core.config.options import ObservationalMemoryConfig
from om_core.engine import MemoryEngine
from om_core.messages import text_message
from om_core.models.client import ModelClient
from om_core.store import history
from tests.support.workers import HoldingExecutor


def test_a_turn_reads_its_window_without_the_write_lock(
    sqlite_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = MemoryEngine(
        sqlite_engine,
        models=ModelClient(),
        config=ObservationalMemoryConfig.parse(True),
        executor=HoldingExecutor(),
    )
    engine.ingest_turn("t-lock", "r-lock", [text_message("m0", "user", "Hello there")])
    outcomes: list[str] = []
    real = history.read_unobserved

    def read_while_another_writes(*args: Any, **kwargs: Any) -> history.Unobserved:
        """Another thread takes the write lock, with no busy wait, while the turn reads its window."""

        def write() -> None:
            raw = sqlite_engine.raw_connection()
            try:
                cursor = raw.cursor()
                cursor.execute("PRAGMA busy_timeout = 0")
                cursor.execute("BEGIN IMMEDIATE")
                cursor.execute("ROLLBACK")
                outcomes.append("written")
            except Exception as exc:  # "database is locked" when the turn still holds the lock
                outcomes.append(f"refused: {exc}")
            finally:
                raw.close()

        other = threading.Thread(target=write)
        other.start()
        other.join(30)
        return real(*args, **kwargs)

    monkeypatch.setattr(history, "read_unobserved", read_while_another_writes)
    result = engine.ingest_turn("t-lock", "r-lock", [text_message("m1", "assistant", "Hi, how can I help?")])
    assert outcomes and all(o == "written" for o in outcomes), outcomes
    assert [m.id for m in result.messages] == ["m0", "m1"], "the read sees this turn"
    with sqlite_engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM om_messages")).scalar_one() == 2
