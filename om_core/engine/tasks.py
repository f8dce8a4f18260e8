"""Background work as plain, serialisable task values, the one table that says how each kind runs, and the
executors that run them.

A task names the thread it works on and carries a `cycle_id`; running it twice has the effect of running
it once, because the storage rules dedupe by cycle (chunk rows, event rows) and refuse stale commits.
`TASKS` is the only place a task kind's Celery name, queue, lock and failure event are written: the
engine, the Celery app and its executor, the embedded stack, the `om` command, readiness and the deploy
test all read it (the function that runs each kind is in `engine.handlers`). `InlineExecutor` runs tasks
in the calling thread (tests, embedded mode); `om_adapters.celery_executor` is the Celery executor, which
enqueues the same values on their queues.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal, Protocol

from om_core.coordination import Keys
from om_core.engine.events import BLOCKING, BUFFERED, EXTRACTION, Operation, Phase
from om_core.tenancy.scoped_ids import StoredId

Trigger = Literal["manual", "turn-sync", "async-buffer", "backlog"]


def new_cycle_id(kind: str) -> str:
    """`<kind>-<epoch ms>-<random>`: unique per cycle and sortable by start time (behaviour §4.3)."""
    return f"{kind}-{int(time.time() * 1000)}-{secrets.token_hex(5)}"


def lookup_key(thread_id: StoredId) -> str:
    """The key of a thread's record chain, its locks and its triggers. In thread scope the chain holds
    the thread's observation log; in resource scope it holds only the thread's cursors (and chunks), and
    the log lives under `resource_key`."""
    return f"thread:{thread_id}"


def resource_key(resource_id: StoredId) -> str:
    """The key of a resource's shared observation log (resource scope) and its reflection locks."""
    return f"resource:{resource_id}"


#: The thread id of a task that names no thread (a webhook delivery).
NO_THREAD = StoredId("")


@dataclass(frozen=True)
class BufferObservation:
    thread_id: StoredId
    cycle_id: str
    pending_tokens: int
    skip_minimum: bool = False
    #: The memory-model choice of the turn that asked for this work (`memory_options`, JSON; "" none).
    choice: str = ""


@dataclass(frozen=True)
class BufferReflection:
    thread_id: StoredId
    record_id: str
    cycle_id: str
    #: The log's key when it is not the thread's own (resource scope): what the lock protects.
    key: str = ""
    #: The memory-model choice of the turn that asked for this work (`memory_options`, JSON; "" none).
    choice: str = ""


@dataclass(frozen=True)
class Observe:
    """A synchronous observation the chat is waiting for (goes on its own queue, never behind buffering)."""

    thread_id: StoredId
    cycle_id: str
    trigger: Trigger = "turn-sync"
    #: At most this many Observer calls (None: the run's own limit). A turn facing a backlog larger than
    #: one call waits for one and leaves the rest to a background run (`engine.backlog`).
    batches: int | None = None
    #: The memory-model choice of the turn that asked for this work (`memory_options`, JSON; "" none).
    choice: str = ""


@dataclass(frozen=True)
class Reflect:
    thread_id: StoredId
    cycle_id: str
    trigger: Trigger = "turn-sync"
    manual_prompt: str | None = None
    #: The log's key when it is not the thread's own (resource scope): what the lock protects.
    key: str = ""
    #: The memory-model choice of the turn that asked for this work (`memory_options`, JSON; "" none).
    choice: str = ""


@dataclass(frozen=True)
class ObserveBatch:
    """One multi-thread Observer batch of a resource (resource scope, behaviour §4.12). `thread_id` is the
    thread whose turn or request asked for it (its events report the batch); `thread_ids` are the threads
    observed. The batches of one request run in parallel, each holding the observe locks of its threads.
    `keep_tail` names the thread whose newest message stays raw (the prompt being answered)."""

    thread_id: StoredId
    cycle_id: str
    thread_ids: tuple[StoredId, ...]
    keep_tail: str = ""
    trigger: Trigger = "turn-sync"

    def __post_init__(self) -> None:
        # A payload decoded from JSON carries a list.
        object.__setattr__(self, "thread_ids", tuple(self.thread_ids))


@dataclass(frozen=True)
class IndexThread:
    """Bring a thread's search documents (and their vectors) up to date (`om_core.search.index`). Runs on
    its own queue, so embedding never waits behind, nor delays, observation; writes no events."""

    thread_id: StoredId
    cycle_id: str


@dataclass(frozen=True)
class ExtractValues:
    """Structured extraction (behaviour §8.5) after the cycle `source_cycle_id` committed, as an earlier
    version queued it; cycles now make the call themselves (`extraction.structured_values`), and this task is
    kept so one already queued still runs. It carries ids only and re-reads
    the messages (`from_seq`, `to_seq`] and the cycle's end event; `cycle_id` (derived from the source
    cycle) makes a redelivery a no-op once it has ended."""

    thread_id: StoredId
    cycle_id: str
    source: Literal["observer", "reflector"]
    source_cycle_id: str
    record_id: str
    from_seq: int = 0
    to_seq: int = 0
    #: The memory-model choice of the turn that asked for this work (`memory_options`, JSON; "" none).
    choice: str = ""


def webhook_key(endpoint_id: str) -> str:
    """The key of a webhook endpoint's delivery lock (one delivery run per endpoint at a time)."""
    return f"webhook:{endpoint_id}"


@dataclass(frozen=True)
class DeliverWebhooks:
    """Deliver one webhook endpoint's events past its cursor (`om_core.webhooks.delivery`). Runs on its own
    queue, so a slow or dead receiver never holds a worker that memory work needs; queued only by the
    maintenance pass (and by a run that used up its time budget), never by a turn. Names no thread
    (`thread_id` is empty); `key` is the endpoint's lock key."""

    endpoint_id: str
    cycle_id: str
    thread_id: StoredId = NO_THREAD
    key: str = ""

    def __post_init__(self) -> None:
        if not self.key:
            object.__setattr__(self, "key", webhook_key(self.endpoint_id))


Task = (
    BufferObservation
    | BufferReflection
    | Observe
    | Reflect
    | ObserveBatch
    | IndexThread
    | ExtractValues
    | DeliverWebhooks
)


def task_key(task: Task) -> str:
    """The record chain `task` works on: the log's key when the task names one, else its thread's."""
    key = getattr(task, "key", "")
    return key if isinstance(key, str) and key else lookup_key(task.thread_id)


@dataclass(frozen=True)
class TaskKind:
    """How one kind of task runs, everywhere.

    `queue` keeps a chat's blocking observation (`om.observe`) from ever waiting behind background
    buffering; `lock` is the per-thread lock its cycle holds (a redelivered task waits for a dead holder's
    lease on it); `phase` names the start, end and failed events it reports.
    """

    value: type[Task]
    name: str
    queue: str
    lock: Callable[[str], str]
    operation: Operation
    phase: Phase

    def locks_of(self, task: Task) -> tuple[str, ...]:
        """The locks a run of `task` holds: one per thread of a batch (sorted, so two batches never wait
        on each other in opposite orders), else the one lock of its key."""
        if isinstance(task, ObserveBatch):
            return tuple(self.lock(lookup_key(t)) for t in sorted(set(task.thread_ids)))
        return (self.lock(task_key(task)),)


OBSERVE_QUEUE = "om.observe"
BUFFER_QUEUE = "om.buffer"
REFLECT_QUEUE = "om.reflect"
INDEX_QUEUE = "om.index"
EXTRACT_QUEUE = "om.extract"
WEBHOOK_QUEUE = "om.webhook"
#: Periodic maintenance (idle and stale triggers), scheduled by celery-beat; not a `Task` value.
MAINTENANCE_QUEUE = "om.maintenance"
MAINTENANCE_TASK = "om.maintenance"

#: In the order workers list their queues: the one a waiting chat depends on first.
TASKS: tuple[TaskKind, ...] = (
    TaskKind(Observe, "om.observe", OBSERVE_QUEUE, Keys.observe_lock, Operation.OBSERVATION, BLOCKING),
    TaskKind(
        BufferObservation,
        "om.buffer_observation",
        BUFFER_QUEUE,
        Keys.buffer_lock,
        Operation.OBSERVATION,
        BUFFERED,
    ),
    TaskKind(
        ObserveBatch,
        "om.observe_batch",
        OBSERVE_QUEUE,
        Keys.observe_lock,
        Operation.OBSERVATION,
        BLOCKING,
    ),
    TaskKind(Reflect, "om.reflect", REFLECT_QUEUE, Keys.reflect_lock, Operation.REFLECTION, BLOCKING),
    TaskKind(
        BufferReflection,
        "om.buffer_reflection",
        REFLECT_QUEUE,
        Keys.buffered_reflection_lock,
        Operation.REFLECTION,
        BUFFERED,
    ),
    # Indexing reports no cycle events; `operation` and `phase` only satisfy the table's shape (the engine
    # never builds a `Cycle` for it, and a dropped index task records nothing).
    TaskKind(
        IndexThread,
        "om.index_thread",
        INDEX_QUEUE,
        Keys.index_lock,
        Operation.OBSERVATION,
        BUFFERED,
    ),
    TaskKind(
        ExtractValues,
        "om.extract_values",
        EXTRACT_QUEUE,
        Keys.extract_lock,
        Operation.OBSERVATION,
        EXTRACTION,
    ),
    # Webhook delivery reports no cycle events either (its state is on the endpoint's row).
    TaskKind(
        DeliverWebhooks,
        "om.deliver_webhooks",
        WEBHOOK_QUEUE,
        Keys.webhook_lock,
        Operation.OBSERVATION,
        BUFFERED,
    ),
)

#: Every queue a worker may consume, in the order the `om` command lists them.
QUEUES: tuple[str, ...] = (*dict.fromkeys(kind.queue for kind in TASKS), MAINTENANCE_QUEUE)

_BY_VALUE: dict[type[Task], TaskKind] = {kind.value: kind for kind in TASKS}
_BY_NAME: dict[str, TaskKind] = {kind.value.__name__: kind for kind in TASKS}


def kind_of(task: Task | type[Task]) -> TaskKind:
    return _BY_VALUE[task if isinstance(task, type) else type(task)]


#: The memory-model choice of the request being served (`om_core.config.request_choice`, canonical JSON;
#: "" none): set by a turn for the work it starts, and by a task that carries one while it runs.
REQUEST_CHOICE: ContextVar[str] = ContextVar("om_request_choice", default="")


def with_choice(task: Task) -> Task:
    """`task` carrying the current request's choice, when its kind takes one and it has none yet."""
    current = REQUEST_CHOICE.get()
    if current and isinstance(task, BufferObservation | BufferReflection | Observe | Reflect | ExtractValues):
        return replace(task, choice=task.choice or current)
    return task


def task_to_dict(task: Task) -> dict[str, Any]:
    """The payload of `task`, with the current request's choice (a queued task runs in another process,
    where the turn's context is not). An empty choice is left out, so the payload stays what workers of
    the previous version read."""
    data = {"kind": type(task).__name__, **asdict(with_choice(task))}
    if data.get("choice") == "":
        del data["choice"]
    return data


def task_from_dict(data: dict[str, Any]) -> Task:
    """The task value of a payload. A `queue` field, which payloads sent by older versions carried, is
    ignored: the table says where each kind runs."""
    fields = dict(data)
    fields.pop("queue", None)
    kind = _BY_NAME[fields.pop("kind")]
    return kind.value(**fields)


class Executor(Protocol):
    def submit(self, task: Task) -> None:
        """Fire and forget: the caller never waits."""

    def run(self, task: Task, deadline_s: float) -> bool:
        """Run `task` and wait at most `deadline_s`; True if it finished in time (its effects are stored)."""

    def run_all(self, tasks: Sequence[Task], deadline_s: float) -> bool:
        """Run `tasks` in parallel where the executor can, and wait at most `deadline_s` for all of them;
        True if all finished in time. The first failure is raised after every task was waited for."""


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

    def run_all(self, tasks: Sequence[Task], deadline_s: float) -> bool:
        return run_each(self, tasks, deadline_s)

    def _run(self, task: Task) -> None:
        if self.runner is None:
            raise RuntimeError("InlineExecutor is not bound to an engine; call bind(engine.run_task)")
        self.runner(task)


def run_each(executor: Executor, tasks: Sequence[Task], deadline_s: float) -> bool:
    """`run_all` for executors that run in the calling thread: one after the other, every task run even
    when an earlier one failed (each commits on its own), the first failure raised at the end."""
    failure: Exception | None = None
    finished = True
    for task in tasks:
        try:
            finished = executor.run(task, deadline_s) and finished
        except Exception as exc:
            failure = failure or exc
    if failure is not None:
        raise failure
    return finished


def wait_all(
    waits: Sequence[Callable[[float], object]],
    deadline_s: float,
    timeout: type[BaseException] | tuple[type[BaseException], ...],
) -> bool:
    """Wait for each of several running tasks within what is left of one deadline (`wait(seconds)`
    raises `timeout` when it runs out). True if all finished; every one is waited for before the first
    failure is raised, so none is left unobserved."""
    end = time.monotonic() + max(deadline_s, 0.001)
    finished = True
    failure: Exception | None = None
    for wait in waits:
        try:
            wait(max(end - time.monotonic(), 0.001))
        except timeout:
            finished = False
        except Exception as exc:
            failure = failure or exc
    if failure is not None:
        raise failure
    return finished
