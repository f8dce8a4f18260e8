"""The engine's `Executor` on Celery: task values go to their own queue, by a readable task name.

`submit` is fire-and-forget (buffering, background reflection). `run` is for work a chat turn waits for
(a blocking observation or reflection): it enqueues on the task's queue and waits at most the turn's
deadline. Synchronous observations travel on `om.observe`, a queue no buffering task ever uses, so a
waiting chat never queues behind a backlog of background work. After the deadline the task keeps running
and its result lands for a later turn; the turn itself goes on with the uncompressed context.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from celery import Celery
from celery.exceptions import TimeoutError as ResultTimeout
from celery.result import AsyncResult

from om_adapters.request_context import task_headers
from om_core import Task, task_to_dict
from om_core.engine import kind_of
from om_core.engine.tasks import run_each, wait_all

#: The message header the worker's queue-wait metric reads (`om_workers.metrics.SENT_AT_HEADER`).
SENT_AT_HEADER = "om_sent_at"


class CeleryExecutor:
    """Implements `om_core.engine.tasks.Executor` by sending tasks to Celery workers.

    `on_sent(task, result)` is called for every task sent (tests use it to wait for a thread's work).
    Without it, fire-and-forget work keeps no result: nobody would read it, and the Redis result backend
    would otherwise subscribe to every task's result channel.
    """

    def __init__(self, app: Celery, *, on_sent: Callable[[Task, AsyncResult], None] | None = None) -> None:
        self.app = app
        self.on_sent = on_sent

    def send(self, task: Task, *, keep_result: bool = True) -> AsyncResult:
        kind = kind_of(task)
        result = self.app.send_task(
            kind.name,
            args=[task_to_dict(task)],
            queue=kind.queue,
            routing_key=kind.queue,
            ignore_result=not keep_result,
            # The worker's queue-wait metric (`om_workers.metrics`) reads this wall-clock stamp; the
            # request's id and tenant go along for the worker's log lines (`request_context`).
            headers={SENT_AT_HEADER: time.time(), **task_headers()},
        )
        if self.on_sent is not None:
            self.on_sent(task, result)
        return result

    def submit(self, task: Task) -> None:
        self.send(task, keep_result=self.on_sent is not None)

    def run(self, task: Task, deadline_s: float) -> bool:
        """True when the task finished within `deadline_s`; its exception is raised if it failed."""
        result = self.send(task)
        try:
            result.get(timeout=max(deadline_s, 0.001), propagate=True, disable_sync_subtasks=False)
        except ResultTimeout:
            return False
        return True

    def run_all(self, tasks: Sequence[Task], deadline_s: float) -> bool:
        """Send every task first (workers run them in parallel), then wait for each within what is left
        of the one deadline. Every result is waited for before the first failure is raised."""
        results = [self.send(task) for task in tasks]

        def waiter(result: AsyncResult) -> Callable[[float], object]:
            return lambda seconds: result.get(timeout=seconds, propagate=True, disable_sync_subtasks=False)

        return wait_all([waiter(result) for result in results], deadline_s, ResultTimeout)


class WorkerExecutor(CeleryExecutor):
    """The executor of an engine that itself runs inside a worker.

    Background work is still enqueued, but blocking work (beat's idle check may start a reflection) runs
    right here: waiting on another worker from inside a worker would hold two slots for one job and can
    deadlock a deployment that runs every queue on a single worker process.
    """

    def __init__(self, app: Celery, runner: Callable[[Task], object] | None = None) -> None:
        super().__init__(app)
        self.runner = runner

    def bind(self, runner: Callable[[Task], object]) -> None:
        self.runner = runner

    def run(self, task: Task, deadline_s: float) -> bool:
        if self.runner is None:
            raise RuntimeError("WorkerExecutor is not bound to an engine; call bind(engine.run_task)")
        self.runner(task)
        return True

    def run_all(self, tasks: Sequence[Task], deadline_s: float) -> bool:
        return run_each(self, tasks, deadline_s)
