"""The seeded interleaving scenario: two service instances, several Python threads, one conversation (or,
in resource scope, several conversations of one user sharing one observation log).

Per seed, a plan of ~40 operations (save, grow a stored message, run / redeliver a recorded background
task, buffer, activate, sync observe, reflect, maybe_reflect) is drawn from the seed and split over a few
Python threads that run it at the same time against one Postgres database through two `MemoryEngine`
instances. Each instance has its own `LocalCoordination`, so locks never de-duplicate work across
instances (the worst case a deployment can produce when its shared coordination is lost or expired).

Background work is never run inline: both instances hand their tasks to one shared pool, and the plan
decides when they run, on which instance, sometimes twice (a queue redelivery) or concurrently (a task
queued twice). Blocking work the turn waits for (`executor.run`) either runs at once or misses its
deadline and lands in the pool, as a slow worker would make it.

Every `ScenarioSettings.resource_every`-th seed runs in resource scope: 2-4 threads of one resource, each
operation aimed at a thread drawn from the seed, message numbers (hence markers) unique across them. A turn
then counts and shows the other threads' unobserved messages, observation runs as `ObserveBatch` tasks (one
multi-thread Observer call each, in the same pool, run late, twice or on the other instance like any task),
and reflection works on the shared log. The seed's config comes from `om_options`, which asks for async
buffering in resource scope for some seeds and falls back to `bufferTokens: false` while the config refuses
it (`RESOURCE_SCOPE_NO_ASYNC`), so those seeds buffer as soon as the engine supports it.

The plan is a pure function of the seed; the thread interleaving is not (that is the point of running
real threads), so a failing seed is re-run several times and, when found, pinned down as a deterministic
test built from the root cause.
"""

from __future__ import annotations

import random
import threading
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from sqlalchemy import Connection, Engine, func, select

from om_core.config.options import ObservationalMemoryConfig
from om_core.coordination import LocalCoordination
from om_core.engine import (
    BufferObservation,
    EngineSettings,
    MemoryEngine,
    ObserverDegenerateError,
    TurnResult,
)
from om_core.engine.tasks import Observe, Reflect, Task, Trigger, lookup_key, new_cycle_id, run_each
from om_core.errors import OMConfigError, OperationFailed
from om_core.messages import Message, Part
from om_core.observations.resource_log import thread_label
from om_core.reflector.prompt import ReflectionEmptyError
from om_core.store import history, schema
from om_core.tokens import TokenCounter
from tests.fuzz.checks import FuzzReport, View, check_resource_scenario, check_scenario, view_of
from tests.fuzz.fake_model import FaultRates, InjectedModelError, SeededModels, marker, markers_in

OpKind = Literal[
    "save", "grow", "run_task", "redeliver", "buffer", "activate", "observe", "reflect", "maybe_reflect"
]
Scope = Literal["thread", "resource"]

#: Relative frequency of each operation in a plan.
OP_WEIGHTS: dict[OpKind, int] = {
    "save": 30,
    "grow": 5,
    "run_task": 22,
    "redeliver": 6,
    "buffer": 6,
    "activate": 9,
    "observe": 8,
    "reflect": 5,
    "maybe_reflect": 9,
}

#: Failures the fake provider injects on purpose; the engine may surface these from blocking calls.
EXPECTED_ERRORS: tuple[type[BaseException], ...] = (
    InjectedModelError,
    ObserverDegenerateError,
    ReflectionEmptyError,
)


def expected_failure(exc: BaseException) -> str | None:
    """The injected fault behind an error a blocking call surfaced, or None for a bug: the error itself, or
    what a recorded failure (`OperationFailed`) chains."""
    cause = exc.__cause__ if isinstance(exc, OperationFailed) else exc
    return type(cause).__name__ if isinstance(cause, EXPECTED_ERRORS) else None


RESOURCE_ID = "res-fuzz"
#: A seed's threads normally finish in seconds; one still running after this is reported as hung.
HANG_AFTER_S = 120.0
T0 = datetime(2026, 3, 3, 9, 0, tzinfo=UTC)
VOCABULARY = (  # noqa: SIM905 (one readable block of words)
    "harbor lantern copper meadow signal orchard velvet canyon ember quartz willow falcon garden ticket "
    "river budget window market kettle pencil thunder island winter basket mirror rocket saddle violin "
    "honey bridge castle dragon engine forest glove hammer jacket ladder magnet needle"
).split()


@dataclass(frozen=True)
class ScenarioSettings:
    operations: int = 40
    workers: int = 3
    instances: int = 2
    message_tokens: int = 2000
    observation_tokens: int = 1500
    max_latency_s: float = 0.02
    rates: FaultRates = field(default_factory=FaultRates)
    #: Chance that a submitted background task is queued twice (at-least-once delivery).
    duplicate_delivery: float = 0.15
    #: Chance that blocking work misses the turn's deadline and is left to a (slow) worker.
    missed_deadline: float = 0.25
    #: Words per planted message part (about 1.3 tokens each).
    words: tuple[int, int] = (30, 380)
    #: Turn on early activation (idle TTL, provider change), turn-end buffering and a shared token budget
    #: for some seeds.
    vary_config: bool = True
    #: Every seed shares one budget between messages and observations (`shareTokenBudget`, async on).
    share_token_budget: bool = False
    #: Every n-th seed (those with `seed % n == n - 1`) runs in resource scope; 0: none does.
    resource_every: int = 3
    #: How many threads a resource-scope seed's resource has (drawn from the seed).
    resource_threads: tuple[int, int] = (2, 4)


@dataclass(frozen=True)
class PlannedMessage:
    number: int
    role: Literal["user", "assistant"]
    words: str
    minute: int

    def to_message(self) -> Message:
        created = T0 + timedelta(minutes=self.minute)
        text = f"{marker(self.number, 0)} {self.words}"
        return Message(
            id=f"m{self.number}",
            role=self.role,
            created_at=created,
            parts=[Part(type="text", text=text, created_at=created)],
        )


ACTOR_MODELS = ("openai/gpt-4o", "anthropic/claude-sonnet-4")
#: What a resource-scope seed asks for when it asks for async buffering (the thread-scope defaults).
RESOURCE_BUFFERING: dict[str, dict[str, Any]] = {
    "observation": {"bufferTokens": 0.2, "bufferActivation": 0.8},
    "reflection": {"bufferActivation": 0.5},
}


def scope_of(seed: int, settings: ScenarioSettings) -> Scope:
    every = settings.resource_every
    return "resource" if every > 0 and seed % every == every - 1 else "thread"


def thread_count(seed: int, settings: ScenarioSettings) -> int:
    """How many threads the seed's conversation has: one, or in resource scope a few of one resource."""
    if scope_of(seed, settings) == "thread":
        return 1
    return random.Random(f"{seed}|threads").randint(*settings.resource_threads)


def om_options(seed: int, settings: ScenarioSettings) -> dict[str, Any]:
    """The seed's OM configuration: small thresholds so every path fires, and for some seeds the early
    activation triggers (idle TTL, which is always expired here because message times lie in the past,
    and provider change) and turn-end buffering, which add activations and reflections at step 0.

    Resource-scope seeds add the scope, a small `maxTokensPerBatch` for some (several batches per
    observation), real or hashed thread ids, and for half of them async buffering: asked for explicitly,
    and replaced by `bufferTokens: false` while the config refuses it in resource scope."""
    observation: dict[str, Any] = {"messageTokens": settings.message_tokens}
    reflection: dict[str, Any] = {"observationTokens": settings.observation_tokens}
    if settings.vary_config:
        rng = random.Random(f"{seed}|config")
        if rng.random() < 0.3:
            observation["bufferOnIdle"] = True
        for block in (observation, reflection):
            if rng.random() < 0.2:
                block["activateAfterIdle"] = "5m"
            if rng.random() < 0.3:
                block["activateOnProviderChange"] = True
    # Drawn after the draws above, so adding it left every earlier seed's other options unchanged.
    shared = settings.share_token_budget or (settings.vary_config and rng.random() < 0.25)
    options: dict[str, Any] = {"observation": observation, "reflection": reflection}
    if shared:
        options["shareTokenBudget"] = True
    # Its own stream of draws, so adding it left every seed's other options unchanged.
    if settings.vary_config and random.Random(f"{seed}|retrieval").random() < 0.4:
        options["retrieval"] = True
    if scope_of(seed, settings) == "resource":
        options = _resource_options(seed, options)
    return options


def _resource_options(seed: int, options: dict[str, Any]) -> dict[str, Any]:
    rng = random.Random(f"{seed}|resource-config")
    observation = {
        **options["observation"],
        "maxTokensPerBatch": rng.choice((600, 1200, 10_000)),
    }
    chosen: dict[str, Any] = {
        **options,
        "scope": "resource",
        "observation": observation,
        "obscureThreadIds": rng.random() < 0.5,
    }
    if rng.random() < 0.5:
        buffered = {
            **chosen,
            "observation": {**observation, **RESOURCE_BUFFERING["observation"]},
            "reflection": {**chosen["reflection"], **RESOURCE_BUFFERING["reflection"]},
        }
        try:
            ObservationalMemoryConfig.parse(buffered)
            return buffered
        except OMConfigError as exc:
            if exc.code != "RESOURCE_SCOPE_NO_ASYNC":
                raise
    return {**chosen, "observation": {**observation, "bufferTokens": False}}


def scenario_config(seed: int, settings: ScenarioSettings) -> ObservationalMemoryConfig:
    return ObservationalMemoryConfig.parse(om_options(seed, settings))


@dataclass(frozen=True)
class Operation:
    kind: OpKind
    instance: int
    #: Chooses the task or message at run time (the pool's content depends on the interleaving).
    pick: float
    #: A per-kind switch: activate all, manual observe, skip the buffer minimum.
    flag: bool
    messages: tuple[PlannedMessage, ...] = ()
    words: str = ""
    #: The actor model the turn reports (switching it triggers provider-change activation when enabled).
    actor_model: str = ACTOR_MODELS[0]
    #: Resource scope: the index of the thread the operation is aimed at.
    thread: int = 0


def plan(seed: int, settings: ScenarioSettings) -> list[list[Operation]]:
    """The seed's operations, split over the worker threads. A pure function of its arguments.

    Message numbers are unique within the seed, so markers never collide between its threads."""
    rng = random.Random(seed)
    kinds = list(OP_WEIGHTS)
    weights = [OP_WEIGHTS[k] for k in kinds]
    per_worker: list[list[Operation]] = [[] for _ in range(settings.workers)]
    number = 0
    actor_model = ACTOR_MODELS[0]
    threads = thread_count(seed, settings)
    for index in range(settings.operations):
        # Every worker (and every thread) starts by saving, so the threads exist early and the plan has
        # something to chew on.
        first_round = index < max(settings.workers, threads)
        kind: OpKind = "save" if first_round else rng.choices(kinds, weights)[0]
        messages: list[PlannedMessage] = []
        if kind == "save":
            for position in range(rng.choice((1, 1, 2))):
                role: Literal["user", "assistant"] = "user" if position == 0 else "assistant"
                if position == 0 and rng.random() < 0.3:
                    role = "assistant"
                messages.append(PlannedMessage(number, role, _words(rng, settings), number))
                number += 1
            if rng.random() < 0.15:
                actor_model = ACTOR_MODELS[1 - ACTOR_MODELS.index(actor_model)]
        operation = Operation(
            kind=kind,
            instance=rng.randrange(settings.instances),
            pick=rng.random(),
            flag=rng.random() < 0.3,
            messages=tuple(messages),
            words=_words(rng, settings) if kind == "grow" else "",
            actor_model=actor_model,
        )
        if threads > 1:  # a second stream of draws, so thread-scope plans stay what they were
            thread = index if index < threads else rng.randrange(threads)
            operation = replace(operation, thread=thread)
        worker = index if index < settings.workers else rng.randrange(settings.workers)
        per_worker[worker].append(operation)
    return per_worker


def _words(rng: random.Random, settings: ScenarioSettings) -> str:
    return " ".join(rng.choice(VOCABULARY) for _ in range(rng.randint(*settings.words)))


# ------------------------------------------------------------------------------------ shared state


class TaskPool:
    """Background tasks both instances submitted, waiting for a 'worker' (an operation) to run them."""

    def __init__(self, seed: int, duplicate_rate: float) -> None:
        self._seed = seed
        self._duplicate_rate = duplicate_rate
        self._lock = threading.Lock()
        self._pending: list[Task] = []
        self._delivered: list[Task] = []
        self._submitted = 0
        self.stats: Counter[str] = Counter()

    def put(self, task: Task) -> None:
        with self._lock:
            rng = random.Random(f"{self._seed}|pool|{self._submitted}")
            self._submitted += 1
            self._pending.append(task)
            self.stats[f"submitted:{type(task).__name__}"] += 1
            if rng.random() < self._duplicate_rate:
                self._pending.append(task)
                self.stats["queued-twice"] += 1

    def take(self, pick: float) -> Task | None:
        with self._lock:
            if not self._pending:
                return None
            task = self._pending.pop(min(len(self._pending) - 1, int(pick * len(self._pending))))
            self._delivered.append(task)
            return task

    def redeliver(self, pick: float) -> Task | None:
        with self._lock:
            if not self._delivered:
                return None
            return self._delivered[min(len(self._delivered) - 1, int(pick * len(self._delivered)))]

    def count(self, name: str) -> None:
        with self._lock:
            self.stats[name] += 1


class RecordingExecutor:
    """An executor that records fire-and-forget work in the pool and sometimes misses blocking deadlines."""

    def __init__(self, pool: TaskPool, seed: int, instance: int, missed_deadline: float) -> None:
        self.pool = pool
        self.runner: Callable[[Task], object] | None = None
        self._seed = seed
        self._instance = instance
        self._missed_deadline = missed_deadline
        self._runs = 0
        self._lock = threading.Lock()

    def submit(self, task: Task) -> None:
        self.pool.put(task)

    def run(self, task: Task, deadline_s: float) -> bool:
        with self._lock:
            rng = random.Random(f"{self._seed}|run|{self._instance}|{self._runs}")
            self._runs += 1
        if rng.random() < self._missed_deadline:
            self.pool.put(task)  # a slow worker finishes it later; the turn goes on without it
            self.pool.count("missed-deadline")
            return False
        assert self.runner is not None
        self.runner(task)
        return True

    def run_all(self, tasks: Sequence[Task], deadline_s: float) -> bool:
        return run_each(self, tasks, deadline_s)


@dataclass
class StoredMessage:
    role: Literal["user", "assistant"]
    created_at: datetime
    texts: list[str]
    #: The index of the thread holding it (resource scope).
    thread: int = 0


class MessageRegistry:
    """Messages known to be stored, so `grow` can append a part to one of them (one grower at a time)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._messages: dict[int, StoredMessage] = {}
        self._busy: set[int] = set()

    def stored(self, message: Message, thread: int = 0) -> None:
        number = int(message.id[1:])
        with self._lock:
            self._messages[number] = StoredMessage(
                message.role,  # type: ignore[arg-type]
                message.created_at,
                [p.text or "" for p in message.parts],
                thread,
            )

    def claim(self, pick: float) -> tuple[int, StoredMessage] | None:
        with self._lock:
            free = sorted(n for n in self._messages if n not in self._busy)
            if not free:
                return None
            number = free[min(len(free) - 1, int(pick * len(free)))]
            self._busy.add(number)
            return number, self._messages[number]

    def release(self, number: int, grown: StoredMessage | None) -> None:
        with self._lock:
            self._busy.discard(number)
            if grown is not None:
                self._messages[number] = grown


@dataclass
class SeedResult:
    seed: int
    thread_id: str
    report: FuzzReport
    seconds: float

    @property
    def ok(self) -> bool:
        return not self.report.violations


# ------------------------------------------------------------------------------------------ running


class Scenario:
    """One seed: the plan run by worker threads against the instances, a drain, a final turn, the checks."""

    def __init__(self, seed: int, dbs: Sequence[Engine], settings: ScenarioSettings) -> None:
        self.seed = seed
        self.settings = settings
        self.db = dbs[0]
        self.scope = scope_of(seed, settings)
        tag = uuid.uuid4().hex[:8]
        count = thread_count(seed, settings)
        if self.scope == "thread":
            self.thread_ids = [f"fz{seed}-{tag}"]
            self.resource_id = RESOURCE_ID
        else:
            self.thread_ids = [f"fz{seed}-{k}-{tag}" for k in range(count)]
            self.resource_id = f"res-fz{seed}-{tag}"
        #: The first thread (the only one in thread scope).
        self.thread_id = self.thread_ids[0]
        self.finals: dict[str, View] = {}
        self.models = SeededModels(
            seed,
            rates=settings.rates,
            max_latency_s=settings.max_latency_s,
        )
        self.pool = TaskPool(seed, settings.duplicate_delivery)
        self.registry = MessageRegistry()
        self.views: list[View] = []
        self.stats: Counter[str] = Counter()
        self.violations: list[str] = []
        self._lock = threading.Lock()
        counter = TokenCounter()
        config = scenario_config(seed, settings)
        resolved = config.resolve()
        obscure = resolved.obscure_thread_ids
        self.buffering = resolved.async_observation_enabled
        #: Each thread's label in prompts and in the shared log (resource scope).
        self.labels = {t: thread_label(t, obscure=obscure) for t in self.thread_ids}
        self.engines: list[MemoryEngine] = []
        for index in range(settings.instances):
            executor = RecordingExecutor(self.pool, seed, index, settings.missed_deadline)
            engine = MemoryEngine(
                dbs[index % len(dbs)],
                models=self.models,
                config=config,
                counter=counter,
                coordination=LocalCoordination(),
                executor=executor,
                settings=EngineSettings(failure_policy="bypass"),
            )
            executor.runner = engine.run_task
            self.engines.append(engine)

    def run(self) -> SeedResult:
        started = time.perf_counter()
        workers = plan(self.seed, self.settings)
        gate = threading.Barrier(len(workers))
        threads = [
            threading.Thread(target=self._worker, args=(ops, gate), name=f"fuzz-{self.seed}-{i}", daemon=True)
            for i, ops in enumerate(workers)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=HANG_AFTER_S)
            if thread.is_alive():  # a deadlock or a lost wake-up: report it instead of hanging the suite
                self.violations.append(f"[hang] {thread.name} still running after {HANG_AFTER_S:.0f} s")
        self._drain()
        number = sum(len(ops) for ops in workers)
        if self.scope == "thread":
            final = self._final_turn(self.thread_id, number)
            report = check_scenario(self.db, self.thread_id, self.views, final, self.models.calls)
        else:
            for index, thread_id in enumerate(self.thread_ids):
                self.finals[thread_id] = self._final_turn(thread_id, number + index)
            report = check_resource_scenario(
                self.db, self.resource_id, self.labels, self.views, self.finals, self.models.calls
            )
            report.stats["resource:seeds"] += 1
            report.stats["resource:seeds-buffering"] += int(self.buffering)
        report.violations[:0] = self.violations
        report.stats.update(self.stats)
        report.stats.update(self.pool.stats)
        return SeedResult(self.seed, ",".join(self.thread_ids), report, time.perf_counter() - started)

    # --------------------------------------------------------------------------- the operations

    def _worker(self, operations: list[Operation], gate: threading.Barrier) -> None:
        gate.wait()
        for operation in operations:
            self._perform(operation)

    def _perform(self, op: Operation) -> None:
        engine = self.engines[op.instance]
        thread_id = self.thread_ids[op.thread]
        try:
            self._count(f"op:{op.kind}")
            self._apply(engine, thread_id, op)
        except Exception as exc:
            expected = expected_failure(exc)
            if expected is not None:
                self._count(f"expected-error:{expected}")
                return
            detail = "".join(traceback.format_exception(exc)[-6:]).strip()
            with self._lock:
                self.violations.append(
                    f"[unexpected-exception] {op.kind} raised {type(exc).__name__}: {detail}"
                )

    def _apply(self, engine: MemoryEngine, thread_id: str, op: Operation) -> None:
        """One operation of the schedule; what it raises, `_perform` sorts into expected or violation."""
        if op.kind == "save":
            messages = [m.to_message() for m in op.messages]
            self._turn(engine, op.thread, messages, "save", actor_model=op.actor_model)
        elif op.kind == "grow":
            self._grow(engine, op)
        elif op.kind == "run_task":
            task = self.pool.take(op.pick)
            if task is not None:
                engine.run_task(task)
        elif op.kind == "redeliver":
            task = self.pool.redeliver(op.pick)
            if task is not None:
                engine.run_task(task)
        elif op.kind == "buffer":
            engine.buffer_observation(
                BufferObservation(thread_id, new_cycle_id("buffer-obs"), 0, skip_minimum=op.flag)
            )
        elif op.kind == "activate":
            engine.activate(thread_id, activate_all=op.flag)
        elif op.kind == "observe":
            trigger: Trigger = "manual" if op.flag else "turn-sync"
            engine.observe(Observe(thread_id, new_cycle_id("observe"), trigger=trigger))
        elif op.kind == "reflect":
            engine.reflect(Reflect(thread_id, new_cycle_id("reflect"), key=self._log_key(engine, thread_id)))
        elif op.kind == "maybe_reflect":
            engine.maybe_reflect(thread_id)

    def _log_key(self, engine: MemoryEngine, thread_id: str) -> str:
        """A `Reflect`'s key: the resource's log in resource scope (as a manual reflection names it)."""
        if self.scope == "thread":
            return ""
        key = engine.log_key(thread_id, engine.thread_config(thread_id))
        return "" if key == lookup_key(thread_id) else key

    def _grow(self, engine: MemoryEngine, op: Operation) -> None:
        claimed = self.registry.claim(op.pick)
        if claimed is None:
            return
        number, stored = claimed
        grown: StoredMessage | None = None
        try:
            texts = [*stored.texts, f"{marker(number, len(stored.texts))} {op.words}"]
            message = Message(
                id=f"m{number}",
                role=stored.role,
                created_at=stored.created_at,
                parts=[Part(type="text", text=t, created_at=stored.created_at) for t in texts],
            )
            self._turn(engine, stored.thread, [message], "grow", register=False, actor_model=op.actor_model)
            grown = StoredMessage(stored.role, stored.created_at, texts, stored.thread)
        finally:
            self.registry.release(number, grown)

    def _turn(
        self,
        engine: MemoryEngine,
        thread: int,
        messages: list[Message],
        label: str,
        *,
        register: bool = True,
        actor_model: str | None = None,
    ) -> TurnResult:
        thread_id = self.thread_ids[thread]
        others: dict[str, int] | None = None
        with self.db.connect() as conn:
            if self.scope == "thread":
                before = history.max_seq(conn, thread_id)
            else:
                others = max_seqs(conn, self.thread_ids)
                before = others.pop(thread_id, 0)
        result = engine.ingest_turn(thread_id, self.resource_id, messages, actor_model=actor_model)
        own = frozenset(m for message in messages for part in message.parts for m in markers_in(part.text))
        shared = self.scope == "resource"
        view = view_of(
            result, label, before, own, thread_id=thread_id if shared else "", others_before=others
        )
        with self._lock:
            self.views.append(view)
        if register:
            for message in messages:
                self.registry.stored(message, thread)
        if result.degraded:
            self._count("degraded-turn")
        return result

    def _count(self, name: str) -> None:
        with self._lock:
            self.stats[name] += 1

    # ------------------------------------------------------------------------------ draining

    def _drain(self) -> None:
        """Run whatever is still queued, alternating instances, as idle workers would after the burst."""
        for attempt in range(500):
            task = self.pool.take(0.0)
            if task is None:
                return
            self._perform_task(self.engines[attempt % len(self.engines)], task)

    def _perform_task(self, engine: MemoryEngine, task: Task) -> None:
        try:
            engine.run_task(task)
        except Exception as exc:
            expected = expected_failure(exc)
            if expected is not None:
                self._count(f"expected-error:{expected}")
                return
            detail = "".join(traceback.format_exception(exc)[-6:]).strip()
            self.violations.append(f"[unexpected-exception] drain {type(task).__name__}: {detail}")

    def _final_turn(self, thread_id: str, number: int) -> View:
        words = " ".join(VOCABULARY[:12])
        message = PlannedMessage(10_000 + number, "user", f"final question {words}", 10_000).to_message()
        try:
            self._turn(self.engines[0], self.thread_ids.index(thread_id), [message], "final", register=False)
        except Exception as exc:
            self.violations.append(f"[unexpected-exception] final turn raised {type(exc).__name__}: {exc}")
            return View("final", 0, frozenset(), (), (), thread_id if self.scope == "resource" else "")
        return self.views[-1]


def max_seqs(conn: Connection, thread_ids: Sequence[str]) -> dict[str, int]:
    """The highest stored sequence number of each of `thread_ids` (0 for a thread with no parts yet)."""
    P = schema.parts
    rows = conn.execute(
        select(P.c.thread_id, func.max(P.c.seq)).where(P.c.thread_id.in_(thread_ids)).group_by(P.c.thread_id)
    )
    found = {str(thread): int(seq or 0) for thread, seq in rows}
    return {thread: found.get(thread, 0) for thread in thread_ids}


def run_seed(seed: int, dbs: Sequence[Engine], settings: ScenarioSettings | None = None) -> SeedResult:
    return Scenario(seed, dbs, settings or ScenarioSettings()).run()
