"""The task table's handlers: the function that runs each kind of task value.

Executors (inline or Celery) hand a task to `EngineCore.run_task`, which looks its type up here. The table
is a mapping of callables, so a kind without a handler fails where the table is built, not when a task of
that kind first arrives.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar, cast

from om_core.coordination import Keys
from om_core.engine import (
    buffering,
    extraction,
    indexing,
    observation,
    reflection,
    reflection_buffer,
    resource_observation,
)
from om_core.engine.core import EngineCore, Handler
from om_core.engine.tasks import (
    TASKS,
    BufferObservation,
    BufferReflection,
    DeliverWebhooks,
    ExtractValues,
    IndexThread,
    Observe,
    ObserveBatch,
    Reflect,
    Task,
    new_cycle_id,
)
from om_core.webhooks import delivery as webhook_delivery

T = TypeVar("T", bound=Task)


def index_thread(core: EngineCore, task: IndexThread) -> bool:
    """Bring the thread's search documents and vectors up to date; True when anything was written."""
    result = indexing.run(core, task)
    return result is not None and (result.messages + result.groups + result.embedded) > 0


def deliver_webhooks(core: EngineCore, task: DeliverWebhooks) -> bool:
    """One webhook endpoint's delivery run under the endpoint's lock (`om_core.webhooks.delivery`); True
    when something was delivered. A run that used up its time budget queues the next one."""
    core.coordination.set_int(Keys.webhook_queued(task.key), None)
    with core.holding(Keys.webhook_lock(task.key)) as held:
        if not held:
            return False
        report = webhook_delivery.deliver_endpoint(
            core.db, task.endpoint_id, core.settings.webhooks, clock=core.clock
        )
    if report.more:
        core.executor.submit(DeliverWebhooks(task.endpoint_id, new_cycle_id("webhook")))
    return report.delivered > 0


def _entry(kind: type[T], handler: Callable[[EngineCore, T], bool]) -> tuple[type[Task], Handler]:
    """One row, typed: `handler` takes the task value of `kind` (the table itself can only say `Any`)."""
    return cast("type[Task]", kind), handler


HANDLERS: Mapping[type[Task], Handler] = dict(
    [
        _entry(Observe, observation.observe),
        _entry(BufferObservation, buffering.buffer_observation),
        _entry(ObserveBatch, resource_observation.observe_batch),
        _entry(Reflect, reflection.reflect),
        _entry(BufferReflection, reflection_buffer.buffer_reflection),
        _entry(IndexThread, index_thread),
        _entry(ExtractValues, extraction.extract_values),
        _entry(DeliverWebhooks, deliver_webhooks),
    ]
)

_missing = [kind.value.__name__ for kind in TASKS if kind.value not in HANDLERS]
if _missing:
    raise RuntimeError(f"task kinds without a handler: {_missing}")
