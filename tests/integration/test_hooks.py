"""Python hooks (§10.3) and debug events (§10.4) on a real database: start and end hooks of every kind
of cycle with their trigger (`manual`, `turn-sync`, `async-buffer`), usage and cost; a hook that raises
never fails a cycle; a failed cycle's end hook carries the error; OM's usage totals per thread and tenant
equal what the events reported."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, func, select

from om_core.config.options import ObservationalMemoryConfig
from om_core.engine import EngineSettings, MemoryEngine, Task
from om_core.engine import events as ev
from om_core.hooks import DISPATCHER, DebugEvent, HookContext, ObserveHooks, register_hooks, unregister_hooks
from om_core.messages import text_message
from om_core.store import schema
from om_core.store.outbox import list_events
from om_core.store.usage import fold_tenant_deltas, tenant_usage, thread_usage
from om_core.tenancy.scoped_ids import scoped_id
from tests.support.fake_models import FakeCompletion, FakeModels

pytestmark = [pytest.mark.postgres]

T0 = datetime(2026, 3, 3, 9, 0, tzinfo=UTC)
WORDS = ["harbor", "lantern", "copper", "meadow", "signal", "orchard", "velvet", "canyon", "ember", "quartz"]
#: What the priced fake model charges per call.
PRICE = 0.0025


class PricedModels(FakeModels):
    """The fake model with a price, so cost flows through events, hooks and totals."""

    def complete(self, model: Any, *, system: str, user: Any, **kw: Any) -> FakeCompletion:
        done = super().complete(model, system=system, user=user, **kw)
        return FakeCompletion(done.text, done.input_tokens, done.output_tokens, PRICE, done.model)


class Idle:
    """An executor that runs nothing: turns store their messages and launch no work."""

    def submit(self, task: Task) -> None:
        pass

    def run(self, task: Task, deadline_s: float) -> bool:
        return False

    def run_all(self, tasks: Sequence[Task], deadline_s: float) -> bool:
        return False


@dataclass
class Call:
    name: str
    arg: HookContext | DebugEvent


class Recorder(ObserveHooks):
    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.threads: set[str] = set()
        self.guard = threading.Lock()

    def _add(self, name: str, arg: HookContext | DebugEvent) -> None:
        with self.guard:
            self.calls.append(Call(name, arg))
            if arg.thread_id:
                self.threads.add(threading.current_thread().name)

    def on_observation_start(self, ctx: HookContext) -> None:
        self._add("on_observation_start", ctx)

    def on_observation_end(self, ctx: HookContext) -> None:
        self._add("on_observation_end", ctx)

    def on_reflection_start(self, ctx: HookContext) -> None:
        self._add("on_reflection_start", ctx)

    def on_reflection_end(self, ctx: HookContext) -> None:
        self._add("on_reflection_end", ctx)

    def on_debug_event(self, event: DebugEvent) -> None:
        self._add("on_debug_event", event)

    def of(self, thread: str, name: str) -> list[Any]:
        return [c.arg for c in self.calls if c.name == name and c.arg.thread_id == thread]

    def debug(self, thread: str, kind: str) -> list[DebugEvent]:
        return [e for e in self.of(thread, "on_debug_event") if e.type == kind]


class Raising(ObserveHooks):
    """Every callback raises: registered before the recorder, so the recorder proves the rest still runs."""

    def __init__(self) -> None:
        self.raised = 0

    def _boom(self, *_: Any) -> None:
        self.raised += 1
        raise RuntimeError("hook bug")

    on_observation_start = on_observation_end = on_reflection_start = on_reflection_end = _boom
    on_debug_event = _boom


@pytest.fixture
def hooks() -> Iterator[tuple[Recorder, Raising]]:
    raising, recorder = Raising(), Recorder()
    register_hooks(raising)
    register_hooks(recorder)
    try:
        yield recorder, raising
    finally:
        unregister_hooks(raising)
        unregister_hooks(recorder)


def make(db: Engine, models: FakeModels, **observation: object) -> MemoryEngine:
    config = ObservationalMemoryConfig.parse(
        {"observation": {"messageTokens": 3000, **observation}, "reflection": {"observationTokens": 2000}}
    )
    return MemoryEngine(db, models=models, config=config, settings=EngineSettings())  # type: ignore[arg-type]


def chatter(i: int, words: int = 150) -> str:
    return f"Message {i} says " + " ".join(WORDS[(i * 7 + k * k) % len(WORDS)] for k in range(words))


def play(om: MemoryEngine, thread_id: str, resource_id: str, turns: int, start: int = 0) -> None:
    for i in range(start, start + turns):
        role = "user" if i % 2 == 0 else "assistant"
        message = text_message(f"m{i}", role, chatter(i), T0 + timedelta(minutes=i))
        om.ingest_turn(thread_id, resource_id, [message])


def ids(tenant: str) -> tuple[str, str, str]:
    public = f"t-{uuid.uuid4().hex[:8]}"
    return scoped_id(tenant, public), scoped_id(tenant, "res-1"), public


def drained() -> None:
    assert DISPATCHER.drain(30), "the hook thread went through every event"


def test_turn_sync_cycles_call_start_and_end_hooks_with_usage_and_cost(
    engine: Engine, hooks: tuple[Recorder, Raising], tenant: str
) -> None:
    recorder, raising = hooks
    om = make(engine, PricedModels(), bufferTokens=False)
    thread, resource, public = ids(tenant)
    play(om, thread, resource, 40)
    drained()
    starts, ends = recorder.of(public, "on_observation_start"), recorder.of(public, "on_observation_end")
    assert starts and len(starts) == len(ends), "every observation cycle started and ended"
    assert {c.trigger for c in starts + ends} == {"turn-sync"}
    assert all(c.resource_id == "res-1" and c.operation == "observation" for c in starts + ends)
    for end in ends:
        assert end.error is None
        assert end.usage is not None and end.usage["inputTokens"] > 0 and end.usage["outputTokens"] > 0
        assert end.usage["totalTokens"] == end.usage["inputTokens"] + end.usage["outputTokens"]
        assert end.cost == pytest.approx(PRICE) and end.provider_metadata == {"cost": pytest.approx(PRICE)}
    assert [e.data["cycleId"] for e in recorder.debug(public, "observation_triggered")] == [
        s.cycle_id for s in starts
    ]
    complete = recorder.debug(public, "observation_complete")
    assert len(complete) == len(ends) and all(e.data["observations"] for e in complete)
    progress = recorder.debug(public, "step_progress")
    assert len(progress) == 40, "one step_progress per turn"
    assert all(p.data["thresholdPercent"] == round(p.data["pendingTokens"] / 3000 * 100) for p in progress)
    assert raising.raised > 0, "the raising hook was called, and no cycle failed because of it"
    assert not [e for e in list_events(engine, thread_id=thread) if e.type.endswith("-failed")]
    assert recorder.threads == {"om-hooks"}, "hooks run on the dispatcher thread, never in the cycle"


def test_buffering_reports_async_buffer_and_manual_work_reports_manual(
    engine: Engine, hooks: tuple[Recorder, Raising], tenant: str
) -> None:
    recorder, _ = hooks
    om = make(engine, PricedModels(), bufferTokens=0.25)
    thread, resource, public = ids(tenant)
    play(om, thread, resource, 12)
    drained()
    buffered = recorder.of(public, "on_observation_start")
    assert buffered and {c.trigger for c in buffered} == {"async-buffer"}
    assert {c.event["cycleId"] for c in buffered} == {
        e.cycle_id for e in list_events(engine, thread_id=thread) if e.type == ev.BUFFERING_START
    }
    # Manual work on a thread past its threshold whose turns ran no work: one observation, one reflection.
    om = make(engine, PricedModels(), bufferTokens=False)
    thread, resource, public = ids(tenant)
    inline, om.executor = om.executor, Idle()
    play(om, thread, resource, 30)
    om.executor = inline
    drained()
    before = len(recorder.calls)
    assert om.observe_now(thread).applied
    assert om.reflect_now(thread).applied
    drained()
    manual = recorder.calls[before:]
    names = [c.name for c in manual if c.name != "on_debug_event"]
    assert names == ["on_observation_start", "on_observation_end", "on_reflection_start", "on_reflection_end"]
    assert {c.arg.trigger for c in manual if isinstance(c.arg, HookContext)} == {"manual"}
    reflection_end = next(c.arg for c in manual if c.name == "on_reflection_end")
    assert reflection_end.usage["inputTokens"] > 0 and reflection_end.cost == pytest.approx(PRICE)
    kinds = [c.arg.type for c in manual if isinstance(c.arg, DebugEvent)]
    assert kinds == [
        "observation_triggered",
        "observation_complete",
        "reflection_triggered",
        "reflection_complete",
    ]


def test_a_failed_cycle_reports_its_error_to_the_end_hook(
    engine: Engine, hooks: tuple[Recorder, Raising], tenant: str
) -> None:
    recorder, _ = hooks
    models = PricedModels()
    om = make(engine, models, bufferTokens=False)
    thread, resource, public = ids(tenant)
    play(om, thread, resource, 10)
    models.fail_next = 1000
    play(om, thread, resource, 30, start=10)
    drained()
    failed = [c for c in recorder.of(public, "on_observation_end") if c.error]
    # The public form of the error (`om_core.errors.public_text`): a socket error's words stay in the log.
    assert failed and all(c.error == "ConnectionError" for c in failed)
    assert not recorder.debug(public, "observation_complete"), "a failed cycle completes nothing"


def test_usage_totals_per_thread_and_tenant_equal_what_the_events_reported(
    engine: Engine, tenant: str
) -> None:
    om = make(engine, PricedModels(), bufferTokens=0.25)
    first, resource, _ = ids(tenant)
    second, _, _ = ids(tenant)
    play(om, first, resource, 30)
    play(om, second, resource, 30)
    om.reflect_now(first)
    expected: dict[str, tuple[int, int, float, int]] = {}
    for thread in (first, second):
        reported = [
            e.payload for e in list_events(engine, thread_id=thread, limit=10_000) if "usage" in e.payload
        ]
        assert reported, "the scenario ran cycles"
        expected[thread] = (
            sum(p["usage"]["inputTokens"] for p in reported),
            sum(p["usage"]["outputTokens"] for p in reported),
            sum(p["cost"] or 0 for p in reported),
            len(reported),
        )
        got = thread_usage(engine, thread)
        assert (got.input_tokens, got.output_tokens, got.cycles) == expected[thread][:2] + expected[thread][
            3:
        ]
        assert got.cost_usd == pytest.approx(expected[thread][2])
    totals = tenant_usage(engine)[tenant]
    assert totals.input_tokens == expected[first][0] + expected[second][0]
    assert totals.cycles == expected[first][3] + expected[second][3]
    assert totals.cost_usd == pytest.approx(expected[first][2] + expected[second][2])

    # The maintenance pass folds the deltas a commit appended into the tenant's row, a few at a time or
    # all at once; the totals read the same before, between and after.
    assert fold_tenant_deltas(engine, limit=3) == 3
    assert tenant_usage(engine)[tenant] == totals
    fold_tenant_deltas(engine)
    assert tenant_usage(engine)[tenant] == totals
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(schema.usage_tenant_deltas)).scalar_one() == 0
