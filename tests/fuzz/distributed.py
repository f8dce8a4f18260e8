"""The interleaving fuzz across processes (issue 6 item 3): real API and Celery worker processes, Postgres,
Redis, and concurrent HTTP clients.

The in-process fuzz (`scenario.py`) proves the storage rules under every interleaving two engines in one
process can produce. Here the same invariants are checked where a deployment runs: two API processes in
celery mode (`OM_EXECUTOR=celery`, one with a blocking deadline so short that turns often go on without
their observation, as a slow worker would make them), three Celery worker processes (prefork, two children
each) consuming the observe, buffer and reflect queues, shared Redis locks, and the traced fake model
(`tests/support/traced_model.py`, the in-process fuzz's `SeededModels` behind litellm) with seeded latency
and faults in the workers.

Per seed, a plan drawn from the seed (a pure function of it, `plan`) gives a few conversations (threads)
and several HTTP clients, each running its share of operations with seeded pauses between them:

- `save`: post a turn with one or two new messages (sometimes switching the actor model);
- `grow`: post a known message again with one more part (coverage is per part);
- `retry`: post a known message again unchanged (a retried request: nothing may be stored twice);
- `observe` / `reflect`: the manual API, waiting for the result or not;
- `task`: a task sent straight to its queue (buffer an observation or a reflection, a sync observation, a
  reflection), as a turn or beat would, sometimes twice with the same cycle id (an at-least-once
  redelivery, possibly running on two workers at once).

Every third seed runs in resource scope: its conversations (2-4, drawn from the seed) are threads of one
resource whose OM options (scope, thresholds, batch size, hashed ids or not, async buffering when the config
allows it) are set on the resource (`PUT /v1/resources/{id}/config`) and merged under each thread's own
(its traced model). Their turns count and show each other's unobserved messages, observation runs as
`ObserveBatch` tasks on the workers (sent by the API in parallel, or straight to the queue by a `task`
operation, sometimes twice with one cycle id), and reflection works on the shared log; the resource-scope
checker (`checks.check_resource_scenario`) runs once per seed over all its threads.

Every part carries a marker the fake copies into observations, and every turn's answer (what the actor
would be shown) is kept. When the clients are done the run waits until no task is queued, delivered or
holding a lock, posts one quiet final turn per thread, waits again, and runs the fuzz checker
(`tests/fuzz/checks.py`, which includes `tests/support/invariants.check_thread`) on every thread.

The processes start once per run (the first wave's clients start as soon as the API processes answer;
their tasks wait in the queues until the workers are up); seeds run in waves of `parallel` seeds against
them, each seed on fresh thread ids, so a seed costs seconds, not process start-ups. Command line:
`python -m tests.fuzz.distributed --seeds N --first K` (needs `OM_TEST_DATABASE_URL` and
`OM_TEST_REDIS_URL`, as `scripts/testenv.py run --` sets them).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypeVar

import httpx
from sqlalchemy import Engine

from om_adapters.celery_executor import CeleryExecutor
from om_api.client import OMAPIError, OMClient, RetryPolicy
from om_api.schemas import TurnResponse
from om_core.config.options import ObservationalMemoryConfig
from om_core.engine import MAINTENANCE_QUEUE, QUEUES, BufferObservation, lookup_key, new_cycle_id
from om_core.engine.tasks import BufferReflection, Observe, ObserveBatch, Reflect, Task, resource_key
from om_core.messages import Message, Part
from om_core.observations.resource_log import thread_label
from om_core.store import history, records
from om_core.store.migrate import upgrade
from om_core.tenancy import access
from om_core.tenancy.scoped_ids import scoped_id
from tests.fuzz.checks import FuzzReport, View, check_resource_scenario, check_scenario, view_from
from tests.fuzz.fake_model import marker, markers_in
from tests.fuzz.runner import Summary, fuzz_engine
from tests.fuzz.scenario import (
    ACTOR_MODELS,
    VOCABULARY,
    MessageRegistry,
    PlannedMessage,
    ScenarioSettings,
    SeedResult,
    StoredMessage,
    max_seqs,
    om_options,
    scope_of,
    thread_count,
)
from tests.support.api_server import ApiServer, run_api_server
from tests.support.parallel_start import enter_all
from tests.support.progress import Progress
from tests.support.queues import drain
from tests.support.traced_calls import model_id, read_calls
from tests.support.workers import TEST_WORKER_ENV, Process, WorkerCluster, worker_cluster

log = logging.getLogger("om.dfuzz")
#: Seconds between two progress lines of the command line.
PROGRESS_EVERY_S = 5.0
T = TypeVar("T")

OpKind = Literal["save", "grow", "retry", "observe", "reflect", "task"]

#: Relative frequency of each operation in a plan.
OP_WEIGHTS: dict[OpKind, int] = {
    "save": 44,
    "grow": 6,
    "retry": 4,
    "observe": 7,
    "reflect": 5,
    "task": 16,
}
#: What a `task` operation sends, chosen by its `pick`: buffering is what turns enqueue most.
TASK_KINDS = ("BufferObservation", "BufferObservation", "BufferReflection", "Observe", "Reflect")
#: The same in resource scope, where a turn's observation is a batch of the resource's threads.
RESOURCE_TASK_KINDS = (
    "BufferObservation",
    "BufferReflection",
    "Observe",
    "ObserveBatch",
    "ObserveBatch",
    "Reflect",
)

#: The Redis database of this fuzz's broker, locks and call logs (other suites use 2-11).
REDIS_DB = int(os.environ.get("OM_DFUZZ_REDIS_DB", "14"))
TRACE_MODULE = "tests.support.traced_model"
MUTANT_MODULE = "tests.support.plant_mutant"
#: The queues the fuzz's workers consume: every task queue (no beat runs, so nothing lands on maintenance;
#: seeds with retrieval on queue search indexing).
WORK_QUEUES = [queue for queue in QUEUES if queue != MAINTENANCE_QUEUE]
#: A client still running after this is reported as hung (a deadlock, a lost wake-up) instead of waited for.
HANG_AFTER_S = 180.0
#: How long the queues get to empty after the clients are done.
DRAIN_DEADLINE_S = 180.0
#: Worker log lines that mean a task failed with an exception (the engine records model failures as
#: events and returns; an exception escaping a task is a bug).
TASK_FAILURE_MARKERS = ("raised unexpected", "Traceback (most recent call last)")
FINAL_NUMBER = 100_000
KEEPALIVE_S = 2.0
#: Process start-up on a busy two-core machine: every process imports litellm at the same time.
START_DEADLINE_S = 180.0


# ------------------------------------------------------------------------------------------- the plan


@dataclass(frozen=True)
class DistributedSettings:
    """What one seed does. The defaults are the CI size; every knob is a CLI flag."""

    #: One conversation per seed: the clients of a seed contend on it (seeds of a wave run side by side,
    #: so the workers and API processes still serve several threads at once).
    threads: int = 1
    clients: int = 3
    operations: int = 18
    #: Lower than the in-process fuzz's (2000 / 1500): a seed here has fewer operations, and every path
    #: (buffering, activation, sync observation, reflection) must still fire.
    message_tokens: int = 1000
    observation_tokens: int = 500
    #: Longest seeded pause before each client operation.
    jitter_s: float = 0.05
    #: Chance that a task sent straight to a queue is sent twice with the same cycle id.
    duplicate_delivery: float = 0.3
    words: tuple[int, int] = (20, 240)
    #: Turn on early activation and turn-end buffering for some seeds (as the in-process fuzz does).
    vary_config: bool = True
    #: Every n-th seed runs its conversations as threads of one resource in resource scope; 0: none.
    resource_every: int = 3
    #: Operations of a resource-scope seed (its threads share them).
    resource_operations: int = 24

    def scenario(self) -> ScenarioSettings:
        """The in-process settings `om_options`, `scope_of` and `thread_count` read (thresholds, config
        variation, which seeds run in resource scope and with how many threads)."""
        return ScenarioSettings(
            message_tokens=self.message_tokens,
            observation_tokens=self.observation_tokens,
            words=self.words,
            vary_config=self.vary_config,
            resource_every=self.resource_every,
        )

    def shared(self, seed: int) -> bool:
        return scope_of(seed, self.scenario()) == "resource"

    def threads_of(self, seed: int) -> int:
        return max(self.threads, thread_count(seed, self.scenario())) if self.shared(seed) else self.threads

    def operations_of(self, seed: int) -> int:
        return self.resource_operations if self.shared(seed) else self.operations


@dataclass(frozen=True)
class ClientOp:
    kind: OpKind
    #: Index of the seed's conversation the operation works on.
    thread: int
    #: Chooses the API process (a fraction of however many the stack runs).
    api_pick: float
    #: Seconds the client waits before the operation.
    pause_s: float
    #: Chooses a stored message at run time (which ones are stored depends on the interleaving).
    pick: float
    #: Per kind: wait for a manual observe/reflect; skip the buffer minimum; send a task twice.
    flag: bool
    twice: bool = False
    messages: tuple[PlannedMessage, ...] = ()
    words: str = ""
    actor_model: str = ACTOR_MODELS[0]


def plan(seed: int, settings: DistributedSettings) -> list[list[ClientOp]]:
    """The seed's operations, split over the clients. A pure function of its arguments.

    Message numbers are unique within the seed, so markers never collide between its conversations.
    """
    rng = random.Random(f"distributed|{seed}")
    kinds = list(OP_WEIGHTS)
    weights = [OP_WEIGHTS[k] for k in kinds]
    per_client: list[list[ClientOp]] = [[] for _ in range(settings.clients)]
    threads = settings.threads_of(seed)
    actor_models = [ACTOR_MODELS[0]] * threads
    number = 0
    for index in range(settings.operations_of(seed)):
        first_round = index < threads  # every conversation starts with a save
        thread = index if first_round else rng.randrange(threads)
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
                current = actor_models[thread]
                actor_models[thread] = ACTOR_MODELS[1 - ACTOR_MODELS.index(current)]
        operation = ClientOp(
            kind=kind,
            thread=thread,
            api_pick=rng.random(),
            pause_s=rng.uniform(0.0, settings.jitter_s),
            pick=rng.random(),
            flag=rng.random() < 0.5,
            twice=rng.random() < settings.duplicate_delivery,
            messages=tuple(messages),
            words=_words(rng, settings) if kind == "grow" else "",
            actor_model=actor_models[thread],
        )
        client = index % settings.clients if first_round else rng.randrange(settings.clients)
        per_client[client].append(operation)
    return per_client


def _words(rng: random.Random, settings: DistributedSettings) -> str:
    return " ".join(rng.choice(VOCABULARY) for _ in range(rng.randint(*settings.words)))


# ------------------------------------------------------------------------------------------ the stack


@dataclass(frozen=True)
class StackSettings:
    workers: int = 3
    #: Pool processes per worker (prefork).
    worker_concurrency: int = 2
    #: How long a turn waits for its blocking work, per API process (the length is the process count).
    blocking_deadlines_s: tuple[float, ...] = (30.0, 0.5)
    #: The fake model's latency range per call, seconds.
    model_latency_s: tuple[float, float] = (0.0, 0.1)
    faults: bool = True
    #: A planted loss path (`tests/fuzz/mutants.py`) for every API and worker process, to measure detection.
    mutant: str | None = None


@dataclass
class Stack:
    """The running processes and what the test process needs to talk to them."""

    apis: list[ApiServer]
    cluster: WorkerCluster
    api_key: str
    #: The key's tenant: a thread `t` is stored (and sent to the queues) as `scoped_id(tenant, t)`.
    tenant: str
    db: Engine
    sender: CeleryExecutor
    #: Prefix of every model key of this run, so call logs of two runs never mix.
    tag: str
    workdir: Path

    #: Done when every worker answers a ping (its result raises if one failed to start).
    workers_ready: Future[list[Process]]
    #: How far each worker log has been read for task failures.
    log_offsets: dict[str, int] = field(default_factory=dict)

    def logs(self) -> str:
        return f"logs in {self.workdir}"

    def new_task_failures(self) -> list[str]:
        """Task failures the workers logged since the last call (one line each, without the traceback)."""
        found = []
        for process in self.cluster.processes:
            path = process.log_path
            text = path.read_bytes()[self.log_offsets.get(str(path), 0) :].decode(errors="replace")
            self.log_offsets[str(path)] = self.log_offsets.get(str(path), 0) + len(text.encode())
            lines = text.splitlines()
            for index, line in enumerate(lines):
                if any(m in line for m in TASK_FAILURE_MARKERS):
                    after = " | ".join(lines[index + 1 : index + 4])
                    found.append(f"{process.name}: {line.strip()[:300]} / {after[:300]}")
        return found


def _trace_env(settings: StackSettings) -> dict[str, str]:
    low, high = settings.model_latency_s
    env = {
        "OM_MODEL": model_id("default"),
        "OM_TRACE_LATENCY_S": f"{low:g}-{high:g}",
        "OM_TRACE_FAULTS": "on" if settings.faults else "off",
        "OM_TRACE_WARM": "on",
        # Celery runs workers at INFO; litellm would log two lines per model call.
        "LITELLM_LOG": "ERROR",
    }
    if settings.mutant is not None:
        env["OM_PLANT_MUTANT"] = settings.mutant
    return env


def _signal_all(cluster: WorkerCluster, apis: Sequence[ApiServer]) -> None:
    """SIGTERM every process at once, so their shutdowns overlap (each launcher then waits for its own)."""
    groups = [p.popen.pid for p in cluster.processes] + [api.process.pid for api in apis]
    for group in groups:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGTERM)


def _imports(settings: StackSettings) -> str:
    return ",".join([TRACE_MODULE, *([MUTANT_MODULE] if settings.mutant else [])])


@contextlib.contextmanager
def running_stack(
    postgres_url: str, redis_url: str, workdir: Path, settings: StackSettings | None = None
) -> Iterator[Stack]:
    """Start the workers and the API processes (at the same time), yield them, stop them all."""
    chosen = settings or StackSettings()
    db = fuzz_engine(postgres_url)
    upgrade(db)
    trace = _trace_env(chosen)
    worker_env = {**trace, "OM_WORKER_IMPORTS": _imports(chosen)}
    try:
        with (
            worker_cluster(
                postgres_url=postgres_url,
                redis_url=redis_url,
                workdir=workdir / "workers",
                db=REDIS_DB,
                env=worker_env,
            ) as cluster,
            contextlib.ExitStack() as servers,
            ThreadPoolExecutor(1, thread_name_prefix="dfuzz-start") as starter,
        ):
            (workdir / "workers").mkdir(parents=True, exist_ok=True)
            specs = [(WORK_QUEUES, chosen.worker_concurrency) for _ in range(chosen.workers)]
            api_env = {
                **TEST_WORKER_ENV,
                **worker_env,
                "OM_EXECUTOR": "celery",
                # The API hands every model call to the workers: no model plugin (and no litellm import,
                # seconds of start-up) is needed here, only the planted mutant when there is one.
                "OM_PLUGINS": MUTANT_MODULE if chosen.mutant else "",
            }
            api_servers = [
                run_api_server(
                    postgres_url,
                    cluster.redis_url,
                    workdir / f"api{index}",
                    env={**api_env, "OM_BLOCKING_DEADLINE_S": str(deadline)},
                    deadline_s=START_DEADLINE_S,
                )
                for index, deadline in enumerate(chosen.blocking_deadlines_s)
            ]
            began = time.monotonic()

            def timed(name: str, start: Callable[[], T]) -> T:
                value = start()
                log.info("%s up after %.1f s", name, time.monotonic() - began)
                return value

            # Workers spend most of their start-up importing and warming litellm; the first wave's clients
            # start as soon as the API processes answer, and their tasks wait in the queues meanwhile.
            workers_ready = starter.submit(timed, "workers", lambda: cluster.start_workers(specs))
            apis = timed("API processes", lambda: enter_all(servers, api_servers))
            tenant = f"dfuzz-{uuid.uuid4().hex[:8]}"
            key = access.create_key(db, tenant, "distributed fuzz").secret
            try:
                yield Stack(
                    apis=apis,
                    cluster=cluster,
                    api_key=key,
                    tenant=tenant,
                    db=db,
                    sender=CeleryExecutor(cluster.app),
                    tag=uuid.uuid4().hex[:6],
                    workdir=workdir,
                    workers_ready=workers_ready,
                )
            finally:
                with contextlib.suppress(Exception):
                    workers_ready.result()
                _signal_all(cluster, apis)
    finally:
        db.dispose()


# ---------------------------------------------------------------------------------------- one seed


class Conversation:
    """One thread of a seed: its ids, what was stored, what each turn showed. In thread scope each has its
    own resource and model key; the threads of a resource-scope seed share both (`shared`)."""

    def __init__(self, seed: int, index: int, tag: str, tenant: str, shared: str | None = None) -> None:
        self.index = index
        self.thread_id = f"df{seed}-{index}-{uuid.uuid4().hex[:8]}"
        self.resource_id = f"res-{shared}" if shared else f"res-{self.thread_id}"
        #: The thread's id in storage, Redis and task payloads.
        self.stored_id = scoped_id(tenant, self.thread_id)
        self.stored_resource_id = scoped_id(tenant, self.resource_id)
        self.model_key = f"{tag}-{seed}" if shared else f"{tag}-{seed}-{index}"
        self.registry = MessageRegistry()
        self.views: list[View] = []
        self.final: View | None = None
        self.guard = threading.Lock()


class SeedRun:
    """One seed against the running stack: setup, the clients, the final turns, the checks."""

    def __init__(self, seed: int, stack: Stack, settings: DistributedSettings) -> None:
        self.seed = seed
        self.stack = stack
        self.settings = settings
        self.shared = settings.shared(seed)
        group = f"df{seed}-{uuid.uuid4().hex[:8]}" if self.shared else None
        self.conversations = [
            Conversation(seed, i, stack.tag, stack.tenant, group) for i in range(settings.threads_of(seed))
        ]
        #: Resource scope: each thread's label in prompts and in the shared log.
        self.labels: dict[str, str] = {}
        self.violations: list[str] = []
        self.stats: Counter[str] = Counter()
        #: Milliseconds spent per operation kind (for `-v`: where a seed's time goes).
        self.timings: Counter[str] = Counter()
        self._guard = threading.Lock()
        self.started = time.perf_counter()

    # ---------------------------------------------------------------------------------- helpers

    def _fail(self, message: str) -> None:
        with self._guard:
            self.violations.append(message)

    def _count(self, name: str) -> None:
        with self._guard:
            self.stats[name] += 1

    def _client(self, api: int) -> OMClient:
        # uvicorn closes a keep-alive connection idle for 5 s; a client that reused one it was closing would
        # see a reset that says nothing about the service, so ours drop idle connections first.
        transport = httpx.HTTPTransport(limits=httpx.Limits(keepalive_expiry=KEEPALIVE_S))
        # No retries: every refusal the service answers is a finding, never something to resend quietly.
        return OMClient(
            self.stack.apis[api].base_url,
            self.stack.api_key,
            timeout=HANG_AFTER_S,
            transport=transport,
            retry=RetryPolicy.off(),
        )

    # ------------------------------------------------------------------------------------ setup

    def prepare(self) -> None:
        """Create each thread with its config: the seed's thresholds and its own traced model key. In
        resource scope the options go on the resource and each thread sets only its model."""
        options = om_options(self.seed, self.settings.scenario())
        if self.shared:
            self._put_resource_config(self.conversations[0].resource_id, options)
            obscure = ObservationalMemoryConfig.parse(options).resolve().obscure_thread_ids
            self.labels = {
                c.stored_id: thread_label(c.stored_id, obscure=obscure) for c in self.conversations
            }
        with self._client(0) as client:
            for conversation in self.conversations:
                overrides = {
                    **({} if self.shared else options),
                    "model": model_id(conversation.model_key),
                }
                client.set_config(conversation.thread_id, overrides, resource_id=conversation.resource_id)

    def _put_resource_config(self, resource_id: str, options: dict[str, object]) -> None:
        response = httpx.put(
            f"{self.stack.apis[0].base_url}/v1/resources/{resource_id}/config",
            json={"overrides": options},
            headers={"Authorization": f"Bearer {self.stack.api_key}"},
            timeout=HANG_AFTER_S,
        )
        response.raise_for_status()

    def client_threads(self) -> list[threading.Thread]:
        return [
            threading.Thread(
                target=self._client_loop, args=(index, ops), name=f"dfuzz-{self.seed}-{index}", daemon=True
            )
            for index, ops in enumerate(plan(self.seed, self.settings))
        ]

    # ---------------------------------------------------------------------------------- clients

    def _client_loop(self, index: int, operations: list[ClientOp]) -> None:
        clients = [self._client(api) for api in range(len(self.stack.apis))]
        try:
            for operation in operations:
                time.sleep(operation.pause_s)  # the seeded jitter between a client's requests
                api = min(len(clients) - 1, int(operation.api_pick * len(clients)))
                self._perform(clients[api], api, operation)
        finally:
            for client in clients:
                client.close()

    def _perform(self, client: OMClient, api: int, op: ClientOp) -> None:
        conversation = self.conversations[op.thread]
        where = f"{op.kind} on thread {op.thread} via api{api}"
        self._count(f"op:{op.kind}")
        began = time.perf_counter()
        try:
            if op.kind == "save":
                messages = [m.to_message() for m in op.messages]
                self._turn(client, conversation, messages, "save", op.actor_model)
                for message in messages:
                    conversation.registry.stored(message)
            elif op.kind in ("grow", "retry"):
                self._post_known(client, conversation, op)
            elif op.kind == "observe":
                done = client.observe(conversation.thread_id, wait=op.flag)
                self._count(f"observe:{'applied' if done.applied else 'not-applied'}")
            elif op.kind == "reflect":
                done = client.reflect(conversation.thread_id, wait=op.flag)
                self._count(f"reflect:{'applied' if done.applied else 'not-applied'}")
            elif op.kind == "task":
                task = self._task(conversation, op)
                if task is not None:
                    self._count(f"task:{type(task).__name__}")
                    self.stack.sender.send(task, keep_result=False)
                    if op.twice:
                        self.stack.sender.send(task, keep_result=False)
                        self._count("sent-twice")
        except OMAPIError as exc:
            self._fail(f"[api-error] {where}: {exc}")
        except httpx.HTTPError as exc:
            self._fail(f"[transport-error] {where}: {type(exc).__name__}: {exc}")
        except Exception as exc:
            detail = "".join(traceback.format_exception(exc)[-4:]).strip()
            self._fail(f"[client-exception] {where}: {detail}")
        finally:
            with self._guard:
                self.timings[op.kind] += int((time.perf_counter() - began) * 1000)

    def _task(self, conversation: Conversation, op: ClientOp) -> Task | None:
        thread_id = conversation.stored_id
        kinds = RESOURCE_TASK_KINDS if self.shared else TASK_KINDS
        kind = kinds[min(len(kinds) - 1, int(op.pick * len(kinds)))]
        # In resource scope the log (what reflection works on) is the resource's.
        log_key = resource_key(conversation.stored_resource_id) if self.shared else lookup_key(thread_id)
        shared_key = log_key if self.shared else ""
        if kind == "BufferObservation":
            return BufferObservation(thread_id, new_cycle_id("buffer-obs"), 0, skip_minimum=op.flag)
        if kind == "Observe":
            return Observe(thread_id, new_cycle_id("observe"), trigger="manual" if op.flag else "turn-sync")
        if kind == "ObserveBatch":
            # A batch of every thread, as a turn of this thread would plan it when the threads are small.
            threads = tuple(c.stored_id for c in self.conversations)
            tail = thread_id if op.flag else ""
            return ObserveBatch(thread_id, new_cycle_id("observe"), threads, keep_tail=tail)
        if kind == "Reflect":
            return Reflect(thread_id, new_cycle_id("reflect"), key=shared_key)
        head = records.get_head(self.stack.db, log_key)
        # The head may be retired by the time a worker runs the task: that is part of the point.
        if head is None:
            return None
        return BufferReflection(thread_id, head.id, new_cycle_id("buffer-refl"), key=shared_key)

    def _post_known(self, client: OMClient, conversation: Conversation, op: ClientOp) -> None:
        """`grow`: the message again with one more part; `retry`: the message again, unchanged."""
        claimed = conversation.registry.claim(op.pick)
        if claimed is None:
            return
        number, stored = claimed
        grown: StoredMessage | None = None
        try:
            texts = list(stored.texts)
            if op.kind == "grow":
                texts.append(f"{marker(number, len(texts))} {op.words}")
            message = Message(
                id=f"m{number}",
                role=stored.role,
                created_at=stored.created_at,
                parts=[Part(type="text", text=t, created_at=stored.created_at) for t in texts],
            )
            self._turn(client, conversation, [message], op.kind, op.actor_model)
            if op.kind == "grow":
                grown = StoredMessage(stored.role, stored.created_at, texts)
        finally:
            conversation.registry.release(number, grown)

    def _turn(
        self,
        client: OMClient,
        conversation: Conversation,
        messages: list[Message],
        label: str,
        actor_model: str,
    ) -> View:
        others: dict[str, int] | None = None
        with self.stack.db.connect() as conn:
            if self.shared:
                others = max_seqs(conn, [c.stored_id for c in self.conversations])
                before = others.pop(conversation.stored_id, 0)
            else:
                before = history.max_seq(conn, conversation.stored_id)
        response = client.post_turn(
            conversation.thread_id,
            messages,
            resource_id=conversation.resource_id,
            actor_model=actor_model,
            context="full",  # the view checks read the stored messages and the memory
        )
        own = frozenset(m for message in messages for part in message.parts for m in markers_in(part.text))
        view = view_of_response(
            response,
            label,
            before,
            own,
            thread_id=conversation.stored_id if self.shared else "",
            others_before=others,
        )
        with conversation.guard:
            conversation.views.append(view)
        if response.blocked:
            self._count("blocked-turn")
        if response.degraded:
            self._count("degraded-turn")
        return view

    # ------------------------------------------------------------------------------- the ending

    def final_turns(self) -> None:
        """One quiet turn per thread after the drain: its view must be exactly the stored conversation."""
        words = " ".join(VOCABULARY[:12])
        with self._client(0) as client:
            for conversation in self.conversations:
                number = FINAL_NUMBER + conversation.index
                message = PlannedMessage(number, "user", f"final question {words}", 10_000).to_message()
                try:
                    conversation.final = self._turn(client, conversation, [message], "final", ACTOR_MODELS[0])
                except Exception as exc:
                    self._fail(f"[final-turn] thread {conversation.index}: {type(exc).__name__}: {exc}")

    def check(self) -> SeedResult:
        merged = FuzzReport()
        merged.violations.extend(self.violations)
        if self.shared:
            self._check_resource(merged)
        for conversation in [] if self.shared else self.conversations:
            final = conversation.final or View("final", 0, frozenset(), (), ())
            calls = read_calls(self.stack.cluster.redis, conversation.model_key)
            report = check_scenario(self.stack.db, conversation.stored_id, conversation.views, final, calls)
            merged.violations.extend(f"thread {conversation.index}: {v}" for v in report.violations)
            merged.duplicates.update(report.duplicates)
            merged.stats.update(report.stats)
        merged.stats.update(self.stats)
        threads = ",".join(c.thread_id for c in self.conversations)
        return SeedResult(self.seed, threads, merged, time.perf_counter() - self.started)

    def _check_resource(self, merged: FuzzReport) -> None:
        """One check over all the threads of the seed's resource (they share one log and one model key)."""
        first = self.conversations[0]
        views = [v for c in self.conversations for v in c.views]
        finals = {
            c.stored_id: c.final or View("final", 0, frozenset(), (), (), c.stored_id)
            for c in self.conversations
        }
        calls = read_calls(self.stack.cluster.redis, first.model_key)
        report = check_resource_scenario(
            self.stack.db, first.stored_resource_id, self.labels, views, finals, calls
        )
        merged.violations.extend(report.violations)
        merged.duplicates.update(report.duplicates)
        merged.stats.update(report.stats)
        merged.stats["resource:seeds"] += 1


def view_of_response(
    response: TurnResponse,
    label: str,
    stored_before: int,
    own: frozenset[str],
    *,
    thread_id: str = "",
    others_before: dict[str, int] | None = None,
) -> View:
    """What the turn showed the actor, reduced to part markers (`checks.view_of` for an HTTP answer)."""
    raw = tuple(
        m for message in response.context.messages for part in message.parts for m in markers_in(part.text)
    )
    return view_from(
        label, stored_before, own, raw, response.context.system_messages, thread_id, others_before
    )


# ------------------------------------------------------------------------------------------ many seeds


class _Laps:
    """The wall time of a wave's phases, for the log line that closes it."""

    def __init__(self) -> None:
        self.phases: list[str] = []
        self._clock = time.perf_counter()

    def __call__(self, name: str) -> None:
        now = time.perf_counter()
        self.phases.append(f"{name} {now - self._clock:.1f} s")
        self._clock = now


def _run_clients(runs: Sequence[SeedRun]) -> None:
    """Every seed's clients at once; a client still running after `HANG_AFTER_S` is its seed's violation."""
    threads = [thread for run in runs for thread in run.client_threads()]
    for thread in threads:
        thread.start()
    end = time.monotonic() + HANG_AFTER_S
    for thread in threads:
        thread.join(timeout=max(0.0, end - time.monotonic()))
    hung = [t.name for t in threads if t.is_alive()]
    for run in runs:
        for name in hung:
            if name.startswith(f"dfuzz-{run.seed}-"):
                run.violations.append(f"[hang] client {name} still running after {HANG_AFTER_S:.0f} s")


def _drain(stack: Stack, runs: Sequence[SeedRun], stage: str) -> None:
    """Wait until the workers have nothing left; failing that is every seed's violation."""
    problem = drain(stack.cluster, DRAIN_DEADLINE_S)
    if problem is not None:
        for run in runs:
            run.violations.append(f"[drain] {stage}: {problem} ({stack.logs()})")


def _log_operation_times(runs: Sequence[SeedRun]) -> None:
    if not log.isEnabledFor(logging.INFO):
        return
    spent: Counter[str] = Counter()
    count: Counter[str] = Counter()
    for run in runs:
        spent.update(run.timings)
        count.update({k.removeprefix("op:"): v for k, v in run.stats.items() if k.startswith("op:")})
    log.info(
        "    mean ms per operation: %s",
        ", ".join(f"{k} {spent[k] / max(1, count[k]):.0f}" for k in sorted(spent)),
    )


def run_wave(stack: Stack, seeds: Sequence[int], settings: DistributedSettings) -> list[SeedResult]:
    """Seeds side by side: all their clients at once, one drain, the final turns, a drain, the checks."""
    lap = _Laps()
    runs = [SeedRun(seed, stack, settings) for seed in seeds]
    for run in runs:
        run.prepare()
    lap("setup")
    _run_clients(runs)
    lap("clients")
    stack.workers_ready.result()
    _drain(stack, runs, "after the clients")
    lap("drain")
    with ThreadPoolExecutor(len(runs)) as pool:
        list(pool.map(lambda run: run.final_turns(), runs))
    lap("final turns")
    _drain(stack, runs, "after the final turns")
    lap("drain")
    for failure in stack.new_task_failures():
        for run in runs:
            run.violations.append(f"[task-exception] {failure}")
    results = [run.check() for run in runs]
    lap("checks")
    log.info("seeds %s: %s", ", ".join(map(str, seeds)), ", ".join(lap.phases))
    _log_operation_times(runs)
    return results


def run_seeds(
    stack: Stack,
    seeds: Iterable[int],
    *,
    settings: DistributedSettings | None = None,
    parallel: int = 5,
    on_result: Callable[[SeedResult], None] | None = None,
    stop_on_failure: bool = False,
    budget_s: float | None = None,
) -> Summary:
    """Run `seeds` in waves of `parallel` against `stack`. With `budget_s`, no wave starts after that many
    seconds (`Summary.seeds` says how many ran); `stop_on_failure` ends the run after a failing wave."""
    chosen = settings or DistributedSettings()
    summary = Summary()
    started = time.perf_counter()
    seed_list = list(seeds)
    for offset in range(0, len(seed_list), max(1, parallel)):
        if budget_s is not None and time.perf_counter() - started > budget_s:
            break
        results = run_wave(stack, seed_list[offset : offset + max(1, parallel)], chosen)
        for result in results:
            summary.add(result)
            if on_result is not None:
                on_result(result)
        if stop_on_failure and summary.failed:
            break
    summary.seconds = time.perf_counter() - started
    summary.failed.sort(key=lambda r: r.seed)
    return summary


def render(summary: Summary, startup_s: float) -> str:
    lines = [
        f"seeds run: {summary.seeds}",
        f"failing seeds: {len(summary.failed)}",
        f"violations found: {summary.violations}",
        f"time: {summary.seconds:.1f} s for the seeds + {startup_s:.1f} s before the first one started "
        f"(slowest wave {summary.slowest:.2f} s)",
        "exercised: " + ", ".join(f"{k}={v}" for k, v in sorted(summary.stats.items())),
        "accepted duplicates (never shown twice): "
        + ", ".join(f"{k}={v}" for k, v in sorted(summary.duplicates.items())),
    ]
    for result in summary.failed:
        lines.append(f"seed {result.seed} (threads {result.thread_id}):")
        lines.extend(f"    {violation}" for violation in result.report.violations)
    return "\n".join(lines)


# ------------------------------------------------------------------------------------- command line


def parse_args(argv: list[str]) -> argparse.Namespace:
    defaults, stack = DistributedSettings(), StackSettings()
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz.distributed", description=__doc__)
    parser.add_argument("--seeds", type=int, default=100, help="how many seeds to run (default 100)")
    parser.add_argument("--first", type=int, default=0, help="the first seed (default 0)")
    parser.add_argument("--parallel", type=int, default=5, help="seeds run side by side (default 5)")
    parser.add_argument("--threads", type=int, default=defaults.threads, help="conversations per seed")
    parser.add_argument("--clients", type=int, default=defaults.clients, help="HTTP clients per seed")
    parser.add_argument("--operations", type=int, default=defaults.operations, help="operations per seed")
    parser.add_argument("--workers", type=int, default=stack.workers, help="Celery worker processes")
    parser.add_argument(
        "--mutant", choices=["P1", "P2"], help="plant a known loss path in every process (detection run)"
    )
    parser.add_argument("--stop-on-failure", action="store_true")
    parser.add_argument("--keep-logs", action="store_true", help="keep the process logs also on success")
    parser.add_argument("--database-url", default=os.environ.get("OM_TEST_DATABASE_URL"))
    parser.add_argument("--redis-url", default=os.environ.get("OM_TEST_REDIS_URL"))
    parser.add_argument("--verbose", "-v", action="store_true", help="print one line per seed")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if not (args.database_url and args.redis_url):
        print(
            "no database or Redis: pass --database-url/--redis-url or run under "
            "`python scripts/testenv.py run -- ...`",
            file=sys.stderr,
        )
        return 2
    settings = DistributedSettings(threads=args.threads, clients=args.clients, operations=args.operations)
    stack_settings = StackSettings(workers=args.workers, mutant=args.mutant)
    workdir = Path(tempfile.mkdtemp(prefix="om-dfuzz-"))

    failing = 0

    def progress(result: SeedResult) -> None:
        nonlocal failing
        failing += not result.ok
        if args.verbose or not result.ok:
            state = "ok" if result.ok else f"FAILED ({len(result.report.violations)} violations)"
            print(f"seed {result.seed}: {state} in {result.seconds:.2f} s", flush=True)
        meter.advance(note=f"{failing} failing")

    if args.verbose:
        logging.basicConfig(level=logging.WARNING, format="%(message)s")
        log.setLevel(logging.INFO)
    started = time.perf_counter()
    with running_stack(args.database_url, args.redis_url, workdir, stack_settings) as stack:
        startup = time.perf_counter() - started
        print(f"API processes up in {startup:.1f} s, workers starting ({stack.logs()})", flush=True)
        # done/total, elapsed and ETA on stderr every few seconds (from here: the ETA leaves start-up out);
        # the summary below goes to stdout.
        meter = Progress("distributed fuzz", args.seeds, unit="seeds", every_s=PROGRESS_EVERY_S)
        summary = run_seeds(
            stack,
            range(args.first, args.first + args.seeds),
            settings=settings,
            parallel=args.parallel,
            on_result=progress,
            stop_on_failure=args.stop_on_failure,
        )
    meter.finish()
    print(render(summary, startup))
    if summary.failed or args.keep_logs:
        print(f"process logs kept in {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if summary.failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
