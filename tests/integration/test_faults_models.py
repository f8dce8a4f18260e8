"""Model faults, each in every kind of model work, with real worker processes (issue 6, item 4).

The Observer and Reflector are a loopback OpenAI-compatible server (`tests/support/model_server.py`)
reached through litellm, the OpenAI SDK and httpx, so a timeout is a real client timeout and a 500 a real
HTTP status. Faults: the model times out, answers 500, answers nothing, answers garbage (control
characters, NULs, unpaired surrogates), or runs far past its output budget (the provider cuts the reply at
`maxOutputTokens`, finish reason "length"). Work: background buffering, a blocking observation (a turn past
the threshold), a blocking reflection and a background (buffered) reflection. 429s, repetition loops and
unparseable replies are covered in test_workers_faults.py and not repeated here.

Every case checks, in this order:
1. the failing call stores nothing and removes nothing from what the actor sees (context before == after);
2. the failure is reported: a `*-failed` event for the work, and no "in progress" flag left set;
3. a later healthy call catches up (the work is done and stored);
4. the invariant checker passes and every message sent is stored exactly once.
Checks 1-2 are what a fault handler must do; a case where the engine misses them today is listed in
`KNOWN_BUGS` with the bug, and fails with `KnownBug` (strict xfail) only after checks 3-4 passed, so a
known bug can never hide a loss.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, func, select

from om_adapters.celery_executor import CeleryExecutor
from om_core.engine import BufferObservation, BufferReflection, Reflect, lookup_key, new_cycle_id
from om_core.engine import events as ev
from om_core.messages import Role, text_message
from om_core.store import history, records, schema
from om_core.store.outbox import last_event_id, list_events
from tests.support.invariants import check_thread
from tests.support.model_server import CLIENT_TIMEOUT_S, PASSTHROUGH_ENV, SHORT_TIMEOUT_S, ModelServer
from tests.support.services import kill_workers
from tests.support.workers import Producer, WorkerCluster, set_thread_config, worker_cluster

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

T0 = datetime(2026, 3, 3, 9, 0, tzinfo=UTC)
WORDS = ["harbor", "lantern", "copper", "meadow", "signal", "orchard", "velvet", "canyon", "ember", "quartz"]
FAULTS = ["timeout", "error500", "empty", "garbage", "overbudget"]
WORK = ["buffering", "observation", "reflection", "buffered-reflection"]
#: Output budget of every thread here: an "overbudget" reply is cut at this many tokens.
OUTPUT_BUDGET = 60


class KnownBug(AssertionError):
    """A fault-handling check that fails because of a bug listed in KNOWN_BUGS."""


#: (fault, work) → the bug that makes checks 1-2 fail today. See the module docstring and the report.
KNOWN_BUGS: dict[tuple[str, str], str] = {}
#: Fixed: B1 (an empty reply ended buffering without a failed event), B2 (an unstorable reply failed the
#: commit after the start event), B3 (a reply cut at maxOutputTokens was stored as complete). See
#: `om_core/models/reply_checks.py`.


# ------------------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def server() -> Iterator[ModelServer]:
    with ModelServer() as running:
        yield running


@pytest.fixture(scope="module")
def cluster(
    postgres_url: str, redis_url: str, pg_engine: Engine, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerCluster]:
    workdir: Path = tmp_path_factory.mktemp("faults-models")
    env = {
        "OM_MODEL": "om-local/extractive",
        "LITELLM_LOG": "ERROR",
        "OPENAI_API_KEY": "sk-fake-key-for-the-loopback-model",
        # One retry, quickly: a persistent fault fails the call in two attempts.
        "OM_WORKER_RETRY_MAX_RETRIES": "1",
        "OM_WORKER_RETRY_BASE_DELAY_S": "0.05",
        "OM_WORKER_RETRY_MAX_DELAY_S": "0.1",
        **PASSTHROUGH_ENV,
    }
    with worker_cluster(postgres_url=postgres_url, redis_url=redis_url, workdir=workdir, db=13, env=env) as c:
        c.start_workers([(["om.buffer", "om.observe", "om.reflect"], 1)])
        try:
            yield c
        finally:
            kill_workers(c)


@pytest.fixture(scope="module")
def producer(cluster: WorkerCluster) -> Producer:
    return cluster.producer()


# ------------------------------------------------------------------------------------------- helpers


@dataclass(frozen=True)
class View:
    """What the actor sees of a thread, plus what is stored but not shown yet."""

    observations: str
    generation: int
    raw_message_ids: list[str]
    cursor: int
    chunks: list[str]
    buffered_reflection: str | None


def view(db: Engine, thread_id: str) -> View:
    head = records.get_head(db, lookup_key(thread_id))
    assert head is not None
    with db.connect() as conn:
        raw = history.load_parts(conn, thread_id, after_seq=head.last_observed_seq)
    return View(
        head.active_observations,
        head.generation_count,
        [m.id for m in raw if m.has_visible_content],
        head.last_observed_seq,
        [c.cycle_id for c in head.chunks],
        head.buffered_reflection,
    )


def stored_message_ids(db: Engine, thread_id: str) -> list[str]:
    with db.connect() as conn:
        rows = conn.execute(
            select(schema.messages.c.id)
            .where(schema.messages.c.thread_id == thread_id)
            .order_by(schema.messages.c.first_seq)
        ).all()
    return [row[0] for row in rows]


def buffering_flag(db: Engine, thread_id: str) -> bool:
    with db.connect() as conn:
        return bool(
            conn.execute(
                select(func.bool_or(schema.records.c.is_buffering_observation)).where(
                    schema.records.c.lookup_key == lookup_key(thread_id)
                )
            ).scalar()
        )


def message(i: int) -> Any:
    text = f"Message {i}: " + " ".join(WORDS[(i * 5 + k * k) % len(WORDS)] for k in range(150))
    role: Role = "user" if i % 2 == 0 else "assistant"
    return text_message(f"m{i}", role, text, T0 + timedelta(minutes=i))


class Case:
    """One thread, its model namespace, and the fault-handling checks that failed (known bugs)."""

    def __init__(self, server: ModelServer, producer: Producer, fault: str, work: str) -> None:
        self.server, self.producer, self.fault, self.work = server, producer, fault, work
        self.namespace = f"{fault}{uuid.uuid4().hex[:8]}"
        self.thread_id = f"faults-models-{work}-{self.namespace}"
        self.executor = CeleryExecutor(producer.app)
        self.sent = 0
        self.misses: list[str] = []
        self.configure(CLIENT_TIMEOUT_S)

    @property
    def db(self) -> Engine:
        return self.producer.engine.db

    def configure(self, timeout_s: float) -> None:
        """The thread's config: its own model namespace, a small output budget, and for the observation
        case a low threshold without buffering (so a turn blocks on a synchronous observation)."""
        budget = {"maxOutputTokens": OUTPUT_BUDGET}
        observation: dict[str, Any] = {"messageTokens": 20_000, "modelSettings": budget}
        if self.work == "observation":
            observation.update(messageTokens=1_500, bufferTokens=False)
        config = self.server.thread_config(
            self.namespace, timeout_s=timeout_s, observation=observation, reflection={"modelSettings": budget}
        )
        set_thread_config(self.db, self.thread_id, config)

    def play(self, count: int, *, hold: bool = True) -> Any:
        """Send the next `count` messages; with `hold`, the turns start no background work."""
        result = None
        with self.producer.holding() if hold else contextlib.nullcontext():
            for _ in range(count):
                turn = [message(self.sent)]
                result = self.producer.engine.ingest_turn(self.thread_id, self.thread_id, turn)
                self.sent += 1
        return result

    def run(self, task: Any) -> Any:
        return self.executor.send(task).get(timeout=120, propagate=False, disable_sync_subtasks=False)

    def failing(self) -> None:
        """From now on every call of the thread meets the fault (a timing-out model gets a short client
        timeout only now, so a slow machine never times out the healthy calls around it)."""
        self.server.script(self.namespace, default=self.fault)
        if self.fault == "timeout":
            self.configure(SHORT_TIMEOUT_S)

    def healthy(self) -> None:
        self.server.script(self.namespace, default="ok")
        if self.fault == "timeout":
            self.configure(CLIENT_TIMEOUT_S)

    def expect(self, ok: bool, message: str) -> None:
        """A fault-handling check: collected, and raised as `KnownBug` only after the loss checks of
        `finish` passed, so a known bug never hides a loss."""
        if not ok:
            self.misses.append(message)

    def events_after(self, mark: int, *types: str) -> list[Any]:
        return list_events(self.db, thread_id=self.thread_id, after_id=mark, limit=10_000, types=types)

    def finish(self) -> None:
        report = check_thread(self.db, self.thread_id)
        assert report.violations == [], report.violations
        stored = stored_message_ids(self.db, self.thread_id)
        assert stored == [f"m{i}" for i in range(self.sent)], "every message sent is stored exactly once"
        if self.misses:
            raise KnownBug("; ".join(self.misses))


# -------------------------------------------------------------------------------------------- scenarios


def with_observations(case: Case) -> None:
    """Ten messages, buffered and activated by a healthy model: the log a reflection works on."""
    case.play(10)
    assert case.run(BufferObservation(case.thread_id, new_cycle_id("buffer-obs"), 0, skip_minimum=True))
    assert case.producer.engine.activate(case.thread_id, activate_all=True) is not None
    assert view(case.db, case.thread_id).observations


def fault_in_buffering(case: Case) -> None:
    case.play(10)
    before, mark = view(case.db, case.thread_id), last_event_id(case.db, case.thread_id)
    case.failing()
    task = BufferObservation(case.thread_id, new_cycle_id("buffer-obs"), 0, skip_minimum=True)
    case.expect(case.run(task) is not True, "the faulty buffering reported a stored chunk")

    case.expect(view(case.db, case.thread_id) == before, "the failing buffering stored or removed something")
    failed = [e for e in case.events_after(mark, ev.BUFFERING_FAILED) if e.cycle_id == task.cycle_id]
    case.expect(len(failed) == 1, f"{len(failed)} buffering-failed events for the failed cycle")
    case.expect(not buffering_flag(case.db, case.thread_id), "is_buffering_observation left set")

    case.healthy()
    case.run(BufferObservation(case.thread_id, new_cycle_id("buffer-obs"), 0, skip_minimum=True))
    case.producer.engine.activate(case.thread_id, activate_all=True)
    after = view(case.db, case.thread_id)
    assert after.observations and after.raw_message_ids == [], "after the healthy buffering all is observed"


def fault_in_observation(case: Case) -> None:
    case.play(9)
    before, mark = view(case.db, case.thread_id), last_event_id(case.db, case.thread_id)
    assert before.cursor == 0 and len(before.raw_message_ids) == 9
    case.failing()
    turn = case.play(1, hold=False)  # past the threshold: the turn blocks on an observation that fails

    case.expect(
        [m.id for m in turn.messages] == [f"m{i}" for i in range(10)],
        "the failing observation removed messages from the turn's context",
    )
    case.expect(
        turn.blocked and bool(turn.degraded_reason),
        "the turn that waited on a failed observation did not report itself degraded",
    )
    after = view(case.db, case.thread_id)
    case.expect(
        after.observations == before.observations and after.cursor == 0,
        "the failing observation stored observations",
    )
    failed = case.events_after(mark, ev.OBSERVATION_FAILED)
    case.expect(
        bool(failed) and all(e.payload.get("operationType") == "observation" for e in failed),
        "no observation-failed event for the failed observation",
    )

    case.healthy()
    turn = case.play(1, hold=False)
    assert not turn.degraded, turn.degraded_reason
    after = view(case.db, case.thread_id)
    assert after.cursor > 0 and after.observations, "the healthy observation caught up"
    assert [m.id for m in turn.messages] == after.raw_message_ids


def fault_in_reflection(case: Case) -> None:
    with_observations(case)
    before, mark = view(case.db, case.thread_id), last_event_id(case.db, case.thread_id)
    case.failing()
    outcome = case.run(Reflect(case.thread_id, new_cycle_id("reflect")))
    case.expect(outcome is not True, "the faulty reflection reported a new generation")

    case.expect(view(case.db, case.thread_id) == before, "the failing reflection changed the log")
    failed = [
        e
        for e in case.events_after(mark, ev.OBSERVATION_FAILED)
        if e.payload.get("operationType") == "reflection" and not e.payload.get("retrying")
    ]
    case.expect(len(failed) == 1, f"{len(failed)} final reflection-failed events")

    case.healthy()
    case.run(Reflect(case.thread_id, new_cycle_id("reflect")))
    after = view(case.db, case.thread_id)
    assert after.generation > before.generation, "after the healthy reflection the log is reflected"
    assert after.observations and after.cursor == before.cursor


def fault_in_buffered_reflection(case: Case) -> None:
    with_observations(case)
    head = records.get_head(case.db, lookup_key(case.thread_id))
    assert head is not None
    before, mark = view(case.db, case.thread_id), last_event_id(case.db, case.thread_id)
    case.failing()
    task = BufferReflection(case.thread_id, head.id, new_cycle_id("buffer-refl"))
    case.expect(case.run(task) is not True, "the faulty buffered reflection reported a stored reflection")

    case.expect(view(case.db, case.thread_id) == before, "the failing buffered reflection stored something")
    failed = [e for e in case.events_after(mark, ev.BUFFERING_FAILED) if e.cycle_id == task.cycle_id]
    case.expect(len(failed) == 1, f"{len(failed)} buffering-failed events for the failed reflection")

    case.healthy()
    case.run(BufferReflection(case.thread_id, head.id, new_cycle_id("buffer-refl")))
    after = view(case.db, case.thread_id)
    assert after.buffered_reflection, "the healthy buffered reflection is stored, ready to activate"
    assert after.observations == before.observations, "and the log stays as it was until it activates"


SCENARIOS = {
    "buffering": fault_in_buffering,
    "observation": fault_in_observation,
    "reflection": fault_in_reflection,
    "buffered-reflection": fault_in_buffered_reflection,
}


def cases() -> list[Any]:
    out = []
    for fault in FAULTS:
        for work in WORK:
            bug = KNOWN_BUGS.get((fault, work))
            marks = [pytest.mark.xfail(raises=KnownBug, strict=True, reason=bug)] if bug else []
            out.append(pytest.param(fault, work, id=f"{fault}-{work}", marks=marks))
    return out


@pytest.mark.parametrize(("fault", "work"), cases())
def test_a_model_fault_removes_nothing_is_reported_and_a_healthy_call_catches_up(
    server: ModelServer, cluster: WorkerCluster, producer: Producer, fault: str, work: str
) -> None:
    case = Case(server, producer, fault, work)
    SCENARIOS[work](case)
    case.finish()
