"""Background work as plain, serialisable task values, and the executors that run them.

A task names the thread it works on and carries a `cycle_id`; running it twice has the effect of running
it once, because the storage rules dedupe by cycle (chunk rows, event rows) and refuse stale commits.
`InlineExecutor` runs tasks in the calling thread (tests, embedded mode); `om_workers` provides the Celery
executor, which enqueues the same values on per-kind queues and calls the same engine methods.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Literal, Protocol

Trigger = Literal["manual", "turn-sync", "async-buffer"]


def new_cycle_id(kind: str) -> str:
    """`<kind>-<epoch ms>-<random>`: unique per cycle and sortable by start time (spec §4.3)."""
    return f"{kind}-{int(time.time() * 1000)}-{secrets.token_hex(5)}"


@dataclass(frozen=True)
class BufferObservation:
    thread_id: str
    cycle_id: str
    pending_tokens: int
    skip_minimum: bool = False
    queue: str = "om.buffer"


@dataclass(frozen=True)
class BufferReflection:
    thread_id: str
    record_id: str
    cycle_id: str
    queue: str = "om.reflect"


@dataclass(frozen=True)
class Observe:
    """A synchronous observation the chat is waiting for (goes on its own queue, never behind buffering)."""

    thread_id: str
    cycle_id: str
    trigger: Trigger = "turn-sync"
    queue: str = "om.observe"


@dataclass(frozen=True)
class Reflect:
    thread_id: str
    cycle_id: str
    trigger: Trigger = "turn-sync"
    manual_prompt: str | None = None
    queue: str = "om.reflect"


Task = BufferObservation | BufferReflection | Observe | Reflect

TASK_TYPES: dict[str, type[Task]] = {
    cls.__name__: cls for cls in (BufferObservation, BufferReflection, Observe, Reflect)
}


def task_to_dict(task: Task) -> dict[str, Any]:
    return {"kind": type(task).__name__, **asdict(task)}


def task_from_dict(data: dict[str, Any]) -> Task:
    fields = dict(data)
    cls = TASK_TYPES[fields.pop("kind")]
    return cls(**fields)


class Executor(Protocol):
    def submit(self, task: Task) -> None:
        """Fire and forget: the caller never waits."""

    def run(self, task: Task, deadline_s: float) -> bool:
        """Run `task` and wait at most `deadline_s`; True if it finished in time (its effects are stored)."""


class InlineExecutor:
    """Runs every task immediately in the calling thread. `runner` is the engine's task dispatcher."""

    def __init__(self, runner: Callable[[Task], object] | None = None) -> None:
        self.runner = runner
        self.submitted: list[Task] = []

    def bind(self, runner: Callable[[Task], object]) -> None:
        self.runner = runner

    def submit(self, task: Task) -> None:
        self.submitted.append(task)
        self._run(task)

    def run(self, task: Task, deadline_s: float) -> bool:
        self.submitted.append(task)
        self._run(task)
        return True

    def _run(self, task: Task) -> None:
        if self.runner is None:
            raise RuntimeError("InlineExecutor is not bound to an engine; call bind(engine.run_task)")
        self.runner(task)
