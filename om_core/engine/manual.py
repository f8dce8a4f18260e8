"""Manual observe and reflect: work a caller asks for by name, outside any turn.

A manual operation plans its tasks (in resource scope an observation covers every thread of the
resource, in parallel batches; a reflection runs on the log the thread reads), runs them through the
engine's executor within the blocking deadline or hands them to the workers, and reads back what they
wrote. A model failure is an outcome, not an exception: the cycle already recorded it as a failed event,
and the caller asked for the work, so it is told what happened. Failures of the infrastructure (database,
broker) propagate: the work may not have been recorded at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.exc import DBAPIError

from om_core.engine import events as ev
from om_core.engine import resource
from om_core.engine.core import EngineCore
from om_core.engine.ports import MemoryDisabled
from om_core.engine.tasks import Observe, Reflect, Task, kind_of, lookup_key, new_cycle_id
from om_core.store.outbox import last_event_id, list_events
from om_core.store.payloads import lifecycle_fields
from om_core.store.types import StoredEvent
from om_core.tenancy.scoped_ids import StoredId

#: Events read back after one operation: more than any one operation writes.
_EVENTS_READ = 1_000


@dataclass(frozen=True)
class OperationOutcome:
    """What a manual observe or reflect did."""

    #: "observation" or "reflection": the operation type its events carry.
    operation: str
    cycle_id: str
    #: The work ended within the deadline (always False when the caller did not wait).
    completed: bool
    #: The log changed: an end of the operation's blocking phase, or an activation, was written.
    applied: bool
    #: The failure of a model call that ended the work, as `Type: message`.
    error: str | None
    events: list[StoredEvent]


def require_enabled(core: EngineCore, thread_id: StoredId) -> None:
    """Refuse manual work on a thread with OM off (`MemoryDisabled`), instead of a silent no-op."""
    if not core.thread_config(thread_id).enabled:
        raise MemoryDisabled(thread_id)


def observation_tasks(core: EngineCore, thread_id: StoredId) -> list[Task]:
    """The thread's `Observe`, or in resource scope the batches of everything its resource has unobserved."""
    cfg = core.thread_config(thread_id)
    task = Observe(thread_id, new_cycle_id("observe"), trigger="manual")
    batches = resource.scope_for(cfg).batches(core, task, cfg)
    return list(batches) if batches else [task]


def reflection_task(core: EngineCore, thread_id: StoredId, prompt: str | None) -> Reflect:
    """A reflection of the log the thread reads; in resource scope the task names the resource's key, so
    it holds the resource's lock."""
    key = core.log_key(thread_id, core.thread_config(thread_id))
    shared = "" if key == lookup_key(thread_id) else key
    return Reflect(thread_id, new_cycle_id("reflect"), trigger="manual", manual_prompt=prompt, key=shared)


def run(
    core: EngineCore,
    tasks: Sequence[Task],
    *,
    wait: bool,
    infrastructure: tuple[type[BaseException], ...] = (),
) -> OperationOutcome:
    """Run one operation's tasks (all of one kind, one cycle id): wait for them within the blocking
    deadline, or only submit them. `infrastructure` adds the exception types of the caller's executor
    that must propagate (its broker's) to the database's own."""
    task = tasks[0]
    propagate: tuple[type[BaseException], ...] = (DBAPIError, *infrastructure)
    mark = last_event_id(core.db, task.thread_id)
    completed = False
    error: str | None = None
    if wait:
        try:
            completed = core.executor.run_all(tasks, core.settings.blocking_deadline_s)
        except propagate:
            raise
        except Exception as exc:  # a model failure: the cycle recorded it as a failed event
            completed, error = True, f"{type(exc).__name__}: {exc}"
    else:
        for each in tasks:
            core.executor.submit(each)
    kind = kind_of(task)
    produced = list_events(core.db, thread_id=task.thread_id, after_id=mark, limit=_EVENTS_READ)
    applied = any(
        e.type in (kind.phase.end, ev.ACTIVATION)
        and lifecycle_fields(e.payload).get("operationType") == kind.operation.value
        for e in produced
    )
    return OperationOutcome(kind.operation.value, task.cycle_id, completed, applied, error, produced)
