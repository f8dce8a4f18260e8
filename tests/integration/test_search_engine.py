"""When the engine asks for indexing, in one process (inline executor, fake Observer, both databases).

- Retrieval off: a turn does exactly what it did before search existed: no statement touches the search
  tables, no `IndexThread` is submitted, no index key is taken in coordination (the turn path is
  benchmarked; this is its guard).
- Retrieval on: the first turn indexes (inline), later turns within the interval do not ask again, and an
  observation that commits asks for its thread; the documents follow the conversation.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine, event, func, select

from om_core.config.options import ObservationalMemoryConfig
from om_core.coordination import LocalCoordination
from om_core.engine import EngineSettings, IndexThread, InlineExecutor, MemoryEngine, Observe
from om_core.messages import text_message
from om_core.search import SearchRequest
from om_core.store import schema
from tests.support.fake_models import FakeModels

T0 = datetime(2026, 8, 1, 10, 0, tzinfo=UTC)
SEARCH_TABLES = ("om_search_docs", "om_index_state", "om_search_fts", "om_vec_")


class CountingCoordination(LocalCoordination):
    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def try_lock(self, name: str, ttl_s: float) -> str | None:
        self.names.append(name)
        return super().try_lock(name, ttl_s)


def make(db: Engine, options: dict[str, Any]) -> tuple[MemoryEngine, InlineExecutor, CountingCoordination]:
    executor = InlineExecutor()
    coordination = CountingCoordination()
    observation = {"messageTokens": 1000, "bufferTokens": False}
    cfg = ObservationalMemoryConfig.parse({"observation": observation, **options})
    om = MemoryEngine(
        db,
        models=FakeModels(),  # type: ignore[arg-type]
        config=cfg,
        executor=executor,
        coordination=coordination,
        settings=EngineSettings(index_interval_s=3600),
    )
    return om, executor, coordination


@contextmanager
def statements(db: Engine) -> Iterator[list[str]]:
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        seen.append(statement)

    event.listen(db, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(db, "before_cursor_execute", record)


def message(i: int, body: str | None = None) -> Any:
    role = "user" if i % 2 == 0 else "assistant"
    return text_message(
        f"m{i}", role, body or f"Line {i}: notes on the orchard and the harvest.", T0 + timedelta(minutes=i)
    )


def test_retrieval_off_the_turn_touches_nothing_of_search(engine: Engine) -> None:
    om, executor, coordination = make(engine, {})
    thread = f"off-{uuid.uuid4().hex[:8]}"
    with statements(engine) as seen:
        for i in range(80):  # until a turn has observed (a commit) and a few turns after it
            om.ingest_turn(thread, "user-off", [message(i)])
            if sum(isinstance(task, Observe) for task in executor.submitted) >= 2:
                break
    assert seen, "the listener saw the turns"
    assert any(isinstance(task, Observe) for task in executor.submitted), "a turn observed (and committed)"
    touching = [s for s in seen if any(table in s for table in SEARCH_TABLES)]
    assert touching == []
    assert not any(isinstance(task, IndexThread) for task in executor.submitted)
    assert not any(":index:" in name for name in coordination.names)


def test_retrieval_on_a_turn_indexes_once_per_interval_and_a_commit_asks_again(engine: Engine) -> None:
    om, executor, _ = make(engine, {"retrieval": True})
    thread, resource = f"on-{uuid.uuid4().hex[:8]}", f"user-{uuid.uuid4().hex[:8]}"
    om.ingest_turn(thread, resource, [message(0, "My passport number is P-55120-XR.")])
    index_tasks = [task for task in executor.submitted if isinstance(task, IndexThread)]
    assert len(index_tasks) == 1
    searcher = om.searcher_for(om.thread_config(thread))
    hits = searcher(SearchRequest(resource_id=resource, query="P-55120-XR"))
    assert [(h.kind, h.ref) for h in hits] == [("message", "m0")]

    for i in range(1, 4):
        om.ingest_turn(thread, resource, [message(i)])
    assert len([t for t in executor.submitted if isinstance(t, IndexThread)]) == 1, "throttled"

    # Over the threshold the turn observes (blocking, inline): the commit asks for indexing at once.
    i = 4
    while not any(isinstance(t, Observe) for t in executor.submitted):
        om.ingest_turn(thread, resource, [message(i)])
        i += 1
        assert i < 60, "no observation ran"
    kinds = [type(t).__name__ for t in executor.submitted if isinstance(t, Observe | IndexThread)]
    assert kinds[:3] == ["IndexThread", "Observe", "IndexThread"], kinds
    D = schema.search_docs
    with engine.connect() as conn:
        kinds = dict(
            conn.execute(
                select(D.c.kind, func.count()).where(D.c.thread_id == thread).group_by(D.c.kind)
            ).all()
        )
    assert kinds.get("message") == i, "the run after the commit indexed every message so far, throttled too"
    assert kinds.get("group", 0) >= 1, "the observation's group (retrieval on) is a document too"
