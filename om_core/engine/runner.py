"""The one runner every background operation plugs into.

Observation (buffered, blocking, or a resource's batch), reflection (buffered or blocking) and structured
extraction all run the same sequence: check that OM is on for the thread, take the task kind's lock, plan
from a snapshot, report the start, call the model outside any transaction, then either report the
failure (which never changes the record) or commit the result with its end event in one transaction,
publish it, and do what only a committed run may (queue structured extraction, apply a title, ask for
search indexing once the lock is released). `run` owns that sequence; an `Operation` supplies only what
differs, one small step each.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

from sqlalchemy import Connection

from om_core.config.options import ResolvedConfig
from om_core.engine import indexing
from om_core.engine.core import EngineCore
from om_core.engine.cycle import Cycle
from om_core.engine.tasks import Task, kind_of
from om_core.errors import OperationFailed
from om_core.extractors.inline import Extraction
from om_core.hooks import CURRENT_TRIGGER
from om_core.store.types import StoredEvent, WriteResult
from om_core.tenancy.scoped_ids import PublicId, StoredId

log = logging.getLogger("om.engine")

TaskT = TypeVar("TaskT", bound=Task)
PlanT = TypeVar("PlanT")
OutputT = TypeVar("OutputT")

#: The transaction that commits an operation's output: what the store decided, and the events it wrote.
Write = Callable[[Connection], tuple[WriteResult, list[StoredEvent]]]


class Discarded(Exception):
    """An output the operation will not commit (a reflection no smaller than its input). Reported as the
    cycle's failure like a failed call, with its message, but never raised to a waiting turn."""


@dataclass
class Planned(Generic[PlanT]):
    """What one cycle of an operation will do, decided under the lock before any model call.

    `cycles` are the cycles the run reports on (one per thread of a resource batch, else one): all start,
    all fail together, and the first commits. A call may drop a cycle it has already reported failed (a
    thread of a batch the Observer wrote nothing for), so it is neither failed twice nor committed.
    `started` holds start events the plan already wrote on the transaction it read its snapshot on (the
    runner publishes them instead of starting the cycles); `batch` names the threads of a multi-thread
    batch on each start marker.
    """

    cfg: ResolvedConfig
    cycles: list[Cycle]
    work: PlanT
    started: list[StoredEvent] | None = None
    batch: list[PublicId] | None = None
    #: Values the call's structured extraction produced, by thread (`extraction.structured_values`): made
    #: with the model call, outside any transaction, and committed by `write` with the cycle's end event.
    extracted: dict[StoredId, Extraction] = field(default_factory=dict)

    @property
    def lead(self) -> Cycle:
        return self.cycles[0]


@dataclass
class Operation(ABC, Generic[TaskT, PlanT, OutputT]):
    """One kind of background work, as the steps in which it differs from the others."""

    core: EngineCore
    task: TaskT
    #: Set by a plan that changed the log without a model call (chunks activated first): the run counts
    #: as having done something even when no cycle commits.
    changed: bool = field(default=False, init=False)

    #: The config is read with the plan's snapshot, under the lock (None is passed to `plan`), instead of
    #: before the lock is taken: one transaction fewer where the snapshot reads the thread anyway.
    config_in_plan: ClassVar[bool] = False
    #: A committed run asks for its threads' search indexing when `retrieval` is on.
    indexes: ClassVar[bool] = True
    #: A commit the store refused is reported as the failure of the run's cycles.
    reports_refusal: ClassVar[bool] = False

    @property
    def rounds(self) -> int:
        """Cycles one run may make, each planned afresh (a backlog larger than one Observer call)."""
        return 1

    @abstractmethod
    def plan(self, cfg: ResolvedConfig | None) -> Planned[PlanT] | None:
        """Under the lock: what to do now, or None when there is nothing (no event, no model call)."""

    @abstractmethod
    def call(self, planned: Planned[PlanT]) -> OutputT:
        """The model call, outside any transaction. Raising fails the cycle (`Discarded`: a usable reply
        not worth committing)."""

    @abstractmethod
    def write(self, planned: Planned[PlanT], output: OutputT) -> Write:
        """The transaction that commits `output` with the end events."""

    def escalates(self, error: BaseException) -> bool:
        """Whether a failed call reaches a waiting turn as `OperationFailed` (it reports itself degraded)
        rather than ending the run with False."""
        return False

    def failed(self, planned: Planned[PlanT], error: BaseException) -> None:
        """After the failure was reported: undo what the plan set up (a running flag, a boundary)."""

    def refused(self, planned: Planned[PlanT], result: WriteResult) -> None:
        """After the store refused the commit."""

    def committed(self, planned: Planned[PlanT], output: OutputT) -> None:
        """After the commit, still under the lock: follow-up work (a title)."""

    def request_index(self) -> None:
        """After a run that committed, the lock released: index what it covered."""
        indexing.request_index(self.core, [self.task.thread_id])


@contextmanager
def holding_lock(core: EngineCore, task: Task) -> Iterator[bool]:
    """The locks of `task`'s kind on its key (or its batch's threads), for the block (False: another run
    holds one)."""
    with core.holding(*kind_of(task).locks_of(task)) as held:
        yield held


def run(operation: Operation[Any, Any, Any]) -> bool:
    """Run `operation` once: True when a cycle committed or its plan changed the log.

    False without any model call when OM is off for the thread (work queued before it was switched off)
    or another run holds the lock. A failed call raises `OperationFailed` when the operation escalates it;
    a run that committed asks for search indexing after the lock is released."""
    core, task = operation.core, operation.task
    cfg = None if operation.config_in_plan else core.thread_config(task.thread_id)
    if cfg is not None and not cfg.enabled:
        return False
    # Hooks (`om_core.hooks`) report the trigger of the task whose events they see, however it was run.
    token = CURRENT_TRIGGER.set(getattr(task, "trigger", None))
    try:
        with holding_lock(core, task) as held:
            done, cfg = _rounds(operation, cfg) if held else (False, cfg)
    finally:
        CURRENT_TRIGGER.reset(token)
    if done and operation.indexes and cfg is not None and cfg.retrieval:
        operation.request_index()
    return done


def _rounds(
    operation: Operation[Any, Any, Any], cfg: ResolvedConfig | None
) -> tuple[bool, ResolvedConfig | None]:
    done = False
    for _round in range(operation.rounds):
        planned = operation.plan(cfg)
        if planned is None:
            break
        cfg = planned.cfg
        if not _cycle(operation, planned):
            break
        done = True
    return done or operation.changed, cfg


def _cycle(operation: Operation[Any, PlanT, Any], planned: Planned[PlanT]) -> bool:
    """One planned cycle: start, call, then fail or commit. True when it committed."""
    core = operation.core
    if planned.started is not None:
        core.publish(planned.started)
    else:
        marker = core.marker_config(planned.cfg)
        for cycle in planned.cycles:
            cycle.start(marker, thread_ids=planned.batch)
    try:
        output = operation.call(planned)
    except Exception as exc:
        log.warning("%s %s failed: %s", type(operation.task).__name__, operation.task.cycle_id, exc)
        reported = RuntimeError(str(exc)) if isinstance(exc, Discarded) else exc
        for cycle in planned.cycles:
            cycle.fail(reported)
        operation.failed(planned, exc)
        if not isinstance(exc, Discarded) and operation.escalates(exc):
            raise OperationFailed(str(exc) or type(exc).__name__) from exc
        return False
    result = planned.lead.commit(operation.write(planned, output))
    if not result.applied:
        if operation.reports_refusal:
            for cycle in planned.cycles:
                cycle.fail(RuntimeError(f"commit refused: {result.reason}"))
        operation.refused(planned, result)
        return False
    operation.committed(planned, output)
    return True
