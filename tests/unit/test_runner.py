"""The one background runner (`om_core.engine.runner.run`), with a probe operation on a real engine.

Every background operation relies on the runner for the same promises: no model call while another run
holds the task's lock or OM is off, a start event before the call, a failed call reported on every cycle and
never committed (so nothing leaves the actor's context), a failure raised to a waiting turn only when the
operation says it escalates (never a `Discarded` output), and the commit hooks only after a commit the
store applied. The use-case tests reach these through real Observers and Reflectors; here each promise is
checked alone, so a change to the runner that breaks one names it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
from sqlalchemy import Connection, Engine

from om_core import queries
from om_core.config.options import ObservationalMemoryConfig, ResolvedConfig
from om_core.engine import EngineSettings, MemoryEngine
from om_core.engine.cycle import Cycle
from om_core.engine.runner import Discarded, Operation, Planned, Write, holding_lock, run
from om_core.engine.tasks import Observe, lookup_key
from om_core.errors import OperationFailed
from om_core.messages import text_message
from om_core.store import records
from om_core.store.outbox import list_events
from om_core.store.types import StoredEvent, WriteResult
from tests.support.fake_models import FakeModels

THREAD = "t-runner"


@dataclass
class Probe(Operation[Observe, str, str]):
    """An operation whose call answers `reply()` and whose commit the store answers with `applied`; it
    records which of its steps ran, in order."""

    reply: Callable[[], str] = lambda: "output"
    applied: bool = True
    escalating: bool = False
    steps: list[str] = field(default_factory=list)

    def plan(self, cfg: ResolvedConfig | None) -> Planned[str] | None:
        self.steps.append("plan")
        assert cfg is not None, "the runner reads the config before the lock for this operation"
        head = records.get_head(self.core.db, lookup_key(self.task.thread_id))
        assert head is not None
        return Planned(cfg, [Cycle.of(self.core, self.task, head, 7)], "work")

    def call(self, planned: Planned[str]) -> str:
        self.steps.append("call")
        return self.reply()

    def write(self, planned: Planned[str], output: str) -> Write:
        self.steps.append("write")

        def commit(conn: Connection) -> tuple[WriteResult, list[StoredEvent]]:
            return WriteResult(applied=self.applied, reason=None if self.applied else "conflict"), []

        return commit

    def escalates(self, error: BaseException) -> bool:
        return self.escalating

    def failed(self, planned: Planned[str], error: BaseException) -> None:
        self.steps.append("failed")

    def refused(self, planned: Planned[str], result: WriteResult) -> None:
        self.steps.append("refused")

    def committed(self, planned: Planned[str], output: str) -> None:
        self.steps.append("committed")


@pytest.fixture
def engine(sqlite_engine: Engine) -> Iterator[MemoryEngine]:
    """An in-process engine with a thread that has a head (one turn posted)."""
    om = MemoryEngine(
        sqlite_engine,
        models=FakeModels(),
        config=ObservationalMemoryConfig.parse({"observation": {"messageTokens": 3000}}),
        settings=EngineSettings(),
    )
    om.ingest_turn(THREAD, "res-1", [text_message("m1", "user", "hello there")])
    yield om


def probe(engine: MemoryEngine, **options: object) -> Probe:
    """A probe on a cycle of its own (a cycle's events are written once, as a redelivery's would be)."""
    task = Observe(THREAD, f"cycle-{uuid.uuid4().hex[:8]}", trigger="manual")
    return Probe(engine, task, **options)  # type: ignore[arg-type]


def event_types(engine: MemoryEngine) -> list[str]:
    return [e.type for e in list_events(engine.db, thread_id=THREAD) if e.type != "data-om-status"]


def fail(message: str) -> Callable[[], str]:
    def reply() -> str:
        raise RuntimeError(message)

    return reply


def discard() -> str:
    raise Discarded("no smaller than its input")


def test_a_committed_run_starts_calls_writes_then_runs_its_hooks(engine: MemoryEngine) -> None:
    operation = probe(engine)
    before = event_types(engine)
    assert run(operation) is True
    assert operation.steps == ["plan", "call", "write", "committed"]
    assert event_types(engine)[len(before) :] == ["data-om-observation-start"]


def test_a_failed_call_is_reported_on_its_cycle_and_nothing_is_written(engine: MemoryEngine) -> None:
    operation = probe(engine, reply=fail("model down"))
    before = event_types(engine)
    assert run(operation) is False
    assert operation.steps == ["plan", "call", "failed"]
    assert event_types(engine)[len(before) :] == ["data-om-observation-start", "data-om-observation-failed"]


def test_a_failure_reaches_a_waiting_turn_only_when_the_operation_escalates_it(engine: MemoryEngine) -> None:
    with pytest.raises(OperationFailed, match="model down"):
        run(probe(engine, reply=fail("model down"), escalating=True))
    quiet = probe(engine, reply=discard, escalating=True)
    assert run(quiet) is False, "a discarded output is a failed cycle, never an error for the turn"
    assert quiet.steps == ["plan", "call", "failed"]
    failed = [e for e in list_events(engine.db, thread_id=THREAD) if e.type == "data-om-observation-failed"]
    assert failed[-1].payload["error"] == "no smaller than its input"


def test_a_commit_the_store_refused_is_not_a_committed_run(engine: MemoryEngine) -> None:
    operation = probe(engine, applied=False)
    assert run(operation) is False
    assert operation.steps == ["plan", "call", "write", "refused"]


def test_no_plan_and_no_call_while_another_run_holds_the_lock(engine: MemoryEngine) -> None:
    operation = probe(engine)
    with holding_lock(engine, operation.task) as held:
        assert held
        assert run(operation) is False
    assert operation.steps == []
    assert run(operation) is True, "the lock released, the same operation runs"


def test_no_plan_and_no_call_while_memory_is_off_for_the_thread(engine: MemoryEngine) -> None:
    engine.ingest_turn("t-off", "res-1", [text_message("m1", "user", "hello")])
    queries.set_config_overrides(engine, "t-off", {"enabled": False})
    operation = Probe(engine, Observe("t-off", "cycle-off", trigger="manual"))
    assert run(operation) is False
    assert operation.steps == []
