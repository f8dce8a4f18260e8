"""The engine's collaborators and the small reads and writes every use-case shares.

`EngineCore` holds what one process shares between calls (database, model caller, coordination,
executor, publisher, caches) and nothing about any one thread. The use-case modules (`turn`,
`activation`, `buffering`, `observation`, `reflection`) are functions of it; `MemoryEngine` is the facade
the shells call.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import Engine, update

from om_core import tracing
from om_core.config import request_choice, trust
from om_core.config.options import (
    ObservationalMemoryConfig,
    ResolvedConfig,
    ResolvedObservation,
    ResolvedReflection,
    TokenRange,
)
from om_core.context.actor import RenderedLogCache
from om_core.coordination import Coordination, Keys, LocalCoordination, Peek
from om_core.engine import events as ev
from om_core.engine.ports import (
    Completion,
    EngineSettings,
    EventPublisher,
    ModelCaller,
    NullPublisher,
    UserContent,
)
from om_core.engine.resource import scope_for
from om_core.engine.tasks import REQUEST_CHOICE, Executor, InlineExecutor, Task
from om_core.engine.window import Window, build_window
from om_core.errors import ModelCallRefused
from om_core.hooks import CURRENT_TRIGGER, DISPATCHER
from om_core.messages import Part
from om_core.models.client import ModelClient
from om_core.models.selection import CallModel
from om_core.observer.prompt import thread_title_update
from om_core.policy import decisions
from om_core.recall.search_mode import Searcher
from om_core.search.embedder import Embedder, ModelEmbedder, effective_embedding_model
from om_core.store import history, records, schema
from om_core.store.outbox import last_event_id, list_events, write_record_events
from om_core.store.part_cache import PartCache
from om_core.store.types import NewEvent, Record, StoredEvent
from om_core.store.window_cache import WindowCache
from om_core.tenancy.scoped_ids import StoredId, tenant_of
from om_core.tenancy.spend import spend_refusal
from om_core.tokens import TokenCounter
from om_core.tokens.memo import RememberedCounts

log = logging.getLogger("om.engine")

#: Events written during the current `ingest_turn` (inline background work included), returned to the caller.
#: The tenant of the task the current thread runs (`EngineCore.run_task` sets it): whose spend budget its
#: model calls draw on. None outside a task and for ids stored without a tenant (no auth: no budgets).
CURRENT_TENANT: ContextVar[str | None] = ContextVar("om_current_tenant", default=None)

EVENT_SINK: ContextVar[list[StoredEvent] | None] = ContextVar("om_event_sink", default=None)


def utc_now() -> datetime:
    return datetime.now(UTC)


def max_threshold(value: int | TokenRange) -> int:
    return value.max if isinstance(value, TokenRange) else value


def policy_tokens(value: int | TokenRange) -> decisions.MessageTokens:
    return (value.min, value.max) if isinstance(value, TokenRange) else value


def buffering_boundary(record: Record, view: Peek) -> int:
    """Tokens at the last buffering launch: the stored boundary or a newer one another process shared."""
    shared = view.get_int(Keys.buffer_boundary(record.lookup_key)) or 0
    return max(record.last_buffered_at_tokens or 0, shared)


def _peek_names(keys: Sequence[str]) -> tuple[list[str], list[str]]:
    """The lock and value names a turn's peek reads for each distinct key."""
    unique = list(dict.fromkeys(keys))
    locks = [
        name
        for key in unique
        for name in (Keys.buffer_lock(key), Keys.buffered_reflection_lock(key), Keys.reflect_lock(key))
    ]
    values = [name for key in unique for name in (Keys.buffer_boundary(key), Keys.reflection_boundary(key))]
    return locks, values


#: Runs one task value on the engine; True when it did something.
Handler = Callable[["EngineCore", Any], bool]


@dataclass(frozen=True)
class Activity:
    """What early activation needs about the thread, read once per turn before new messages land."""

    previous_model: str | None = None
    last_activity_at: datetime | None = None
    actor_model: str | None = None
    #: The actor call's provider options: `"auto"` reads its prompt-cache settings (behaviour §4.7).
    provider_options: Mapping[str, Any] | None = None


class EngineCore:
    """One per process; stateless between calls apart from its collaborators and caches."""

    #: The function that runs each kind of task (`engine.handlers`), set by the facade that knows them all.
    handlers: ClassVar[Mapping[type[Task], Handler]] = {}

    def __init__(
        self,
        db: Engine,
        *,
        models: ModelCaller,
        config: ObservationalMemoryConfig | None = None,
        counter: TokenCounter | None = None,
        coordination: Coordination | None = None,
        executor: Executor | None = None,
        publisher: EventPublisher | None = None,
        settings: EngineSettings | None = None,
        clock: Callable[[], datetime] = utc_now,
        searcher: Searcher | None = None,
        embedder: Embedder | None = None,
    ) -> None:
        self.db = db
        #: What the recall tool's search mode calls (`om_core.search`); None: search is not configured.
        self.searcher = searcher
        self.models = models
        self.base_config = config or ObservationalMemoryConfig.parse(True)
        self.counter = counter or TokenCounter()
        self.coordination = coordination or LocalCoordination()
        self.settings = settings or EngineSettings()
        self.publisher = publisher or NullPublisher()
        self.clock = clock
        if executor is None:
            executor = InlineExecutor()
        if isinstance(executor, InlineExecutor) and executor.runner is None:
            executor.bind(self.run_task)
        self.executor = executor
        self._resolved_cache: dict[str, ResolvedConfig] = {}
        self._chosen = request_choice.ChosenConfigs()
        # The part cache's budget covers the window's rows too (a quarter: a row is small beside a body).
        rows_budget = self.settings.part_cache_bytes // 4
        #: Bodies of unobserved parts this process has stored or read (see `store.part_cache`).
        self.part_cache = PartCache(self.settings.part_cache_bytes - rows_budget)
        #: Rows of each thread's unobserved window (see `store.window_cache`).
        self.window_rows = WindowCache(rows_budget)
        #: Rendered observation logs (see `context.RenderedLogCache`).
        self.rendered_logs = RenderedLogCache(self.settings.rendered_log_cache_bytes)
        #: Token counts of observation lines, which every Observer call shows again (see `tokens.memo`).
        self.line_counts = RememberedCounts(self.counter.count_string)
        self._embedder = embedder

    @property
    def embedder(self) -> Embedder:
        """The search index's embedder: the one given, else `settings.embedding_model` (or its fallback,
        `effective_embedding_model`) through this engine's model client (its retries and budgets) or,
        when the engine was given some other model caller (tests), through a plain `ModelClient`."""
        if self._embedder is None:
            client = self.models if isinstance(self.models, ModelClient) else ModelClient()
            self._embedder = ModelEmbedder(
                effective_embedding_model(self.settings.embedding_model),
                client,
                batch_size=self.settings.embedding_batch_size,
            )
        return self._embedder

    def run_task(self, task: Task) -> bool:
        """Run one task value: the single entry point executors (inline or Celery) call."""
        handler = self.handlers[type(task)]
        token = CURRENT_TRIGGER.set(getattr(task, "trigger", None))
        tenant = CURRENT_TENANT.set(tenant_of(task.thread_id) if task.thread_id else None)
        # A kind that takes a request's choice runs with its own, else with the one of the turn running it
        # inline; the other kinds (a resource's batch, indexing, delivery) never with one.
        carried = getattr(task, "choice", None)
        chosen = REQUEST_CHOICE.set("" if carried is None else (carried or REQUEST_CHOICE.get()))
        try:
            with tracing.operation(
                tracing.SPAN_OF_TASK.get(type(task).__name__, "om.task"), {"om.task": type(task).__name__}
            ):
                return handler(self, task)
        finally:
            REQUEST_CHOICE.reset(chosen)
            CURRENT_TENANT.reset(tenant)
            CURRENT_TRIGGER.reset(token)

    # ---------------------------------------------------------------------------------- config

    def config_for(self, overrides: Mapping[str, Any] | None) -> ResolvedConfig:
        """The resolved config of a thread: service config plus its validated overrides. Overrides are a
        tenant's, so they are checked against the operator's policy here too, where they are used: a
        stored config that breaks it resolves with `refused` set, and its model calls are refused.

        While a request's model choice is current (`tasks.REQUEST_CHOICE`: the turn that made it, and the
        work it started), the choice is applied over the thread's config."""
        choice = REQUEST_CHOICE.get()
        if choice:
            return self._chosen.resolve(self.base_config, overrides, choice, self.settings.memory_policy)
        if not overrides:
            return self.base_config.resolve()
        cache_key = repr(sorted(overrides.items()))
        cached = self._resolved_cache.get(cache_key)
        if cached is None:
            config = self.base_config.with_overrides(overrides)
            cached = config.resolve()
            refused = trust.refusal(config, self.base_config, self.settings.memory_policy)
            if refused is not None:
                cached = replace(cached, refused=refused)
            self._resolved_cache[cache_key] = cached
        return cached

    def check_choice(
        self, overrides: Mapping[str, Any] | None, choice: Mapping[str, Mapping[str, Any]], tenant: str | None
    ) -> None:
        """`request_choice.check_request` under this engine's config and the operator's policy."""
        request_choice.check_request(self.base_config, overrides, choice, self.settings.memory_policy, tenant)

    def check_overrides(self, overrides: Mapping[str, Any] | None) -> ResolvedConfig:
        """The resolved config of overrides a tenant key is writing, or `OMConfigError` naming the first
        option the config model or the operator's policy refuses (the API's 422)."""
        if not overrides:
            return self.base_config.resolve()
        config = self.base_config.with_overrides(overrides)
        trust.check(config, self.base_config, self.settings.memory_policy)
        return self.config_for(overrides)

    def complete(
        self,
        cfg: ResolvedConfig,
        stage: ResolvedObservation | ResolvedReflection,
        model: CallModel,
        *,
        system: str,
        user: UserContent,
        response_format: dict[str, Any] | None = None,
    ) -> Completion:
        """One memory-model call (Observer, Reflector, extraction) with `stage`'s settings: the one door
        from a thread's config to a provider. Refused before anything is sent when the config was refused
        by the operator's policy or when the task's tenant spent its daily budget (`ModelCallRefused`,
        handled by the caller like any failed call: the failure policy applies, the turn goes on); the
        output bound by `OM_MEMORY_MAX_OUTPUT_TOKENS` whatever the config says."""
        if cfg.refused is not None:
            raise ModelCallRefused("CONFIG_REFUSED", cfg.refused)
        tenant = CURRENT_TENANT.get()
        if tenant is not None:
            spent = spend_refusal(
                self.db, tenant, self.clock(), default_budget_usd=self.settings.tenant_daily_budget_usd
            )
            if spent is not None:
                raise ModelCallRefused("SPEND_BUDGET_EXCEEDED", spent)
        cap = self.settings.memory_policy.max_output_tokens
        return self.models.complete(
            model,
            system=system,
            user=user,
            temperature=stage.temperature,
            max_output_tokens=None if stage.max_output_tokens is None else min(stage.max_output_tokens, cap),
            provider_options=stage.provider_options,
            response_format=response_format,
        )

    def thread_config(self, thread_id: StoredId) -> ResolvedConfig:
        thread = history.get_thread(self.db, thread_id)
        return self.config_for(thread.effective_overrides if thread is not None else None)

    def log_key(self, thread_id: StoredId, cfg: ResolvedConfig) -> str:
        """The record chain holding the thread's observation log: its own, or its resource's in resource
        scope (where the thread's own chain holds only its cursor)."""
        return scope_for(cfg).log_key_of(self.db, thread_id)

    def marker_config(self, cfg: ResolvedConfig) -> dict[str, Any]:
        """The `config` field of start and activation markers."""
        marker: dict[str, Any] = {
            "messageTokens": max_threshold(cfg.observation.message_tokens),
            "observationTokens": cfg.reflection.observation_tokens,
            "scope": cfg.scope,
        }
        if cfg.observation.activate_after_idle is not None:
            marker["activateAfterIdle"] = cfg.observation.activate_after_idle
        return marker

    # ----------------------------------------------------------------------------------- reads

    def window(self, thread_id: StoredId, after_seq: int) -> Window:
        with self.db.connect() as conn:
            rows = history.part_tokens_after(conn, thread_id, after_seq)
        return build_window(rows, self.counter)

    def peek(self, *keys: str) -> Peek:
        """The coordination state a turn's decisions read (status and reflection), in one round trip: of
        its thread's key, and of its log's when that is another (resource scope)."""
        locks, values = _peek_names(keys)
        return self.coordination.peek(locks, values)

    def recorded_view(self, head: Record, log: Record) -> Peek:
        """The coordination state as the records themselves show it, with no round trip: the running flags
        the workers write on the records stand for the locks, and no boundary is known beyond the one
        stored on the record.

        Locks and boundaries only ever hold work back (a cycle already running, an interval already
        launched), so a turn that finds nothing due under this view would find nothing due under the
        shared one either: `turn.coordination_view` asks for the round trip only when something is."""
        locks, values = _peek_names((head.lookup_key, log.lookup_key))
        running = {
            Keys.buffer_lock(head.lookup_key): head.is_buffering_observation,
            Keys.buffered_reflection_lock(log.lookup_key): log.is_buffering_reflection,
            Keys.reflect_lock(log.lookup_key): log.is_reflecting,
        }
        return Peek({name: running.get(name, False) for name in locks}, dict.fromkeys(values))

    def status_of(
        self,
        record: Record,
        window: Window,
        cfg: ResolvedConfig,
        view: Peek | None = None,
        *,
        log: Record | None = None,
        others_tokens: int = 0,
    ) -> decisions.Status:
        """The thread's status. In resource scope `log` is the resource's shared log (its observation
        and reflection state count) and `others_tokens` the other threads' context block, which the
        actor sees too and so counts toward pending (behaviour §4.12)."""
        key = record.lookup_key
        log = log or record
        view = view or self.peek(key, log.lookup_key)
        buffering = view.is_locked(Keys.buffer_lock(key))
        message_tokens = policy_tokens(cfg.observation.message_tokens)
        threshold = decisions.dynamic_threshold(message_tokens, log.observation_token_count)
        return decisions.compute_status(
            pending=window.tokens + others_tokens,
            message_tokens=message_tokens,
            observation_token_count=log.observation_token_count,
            reflection_threshold=cfg.reflection.observation_tokens,
            async_observation_enabled=cfg.async_observation_enabled,
            async_reflection_enabled=cfg.async_reflection_enabled,
            block_after=cfg.observation.block_after_at(threshold),
            buffer_tokens=cfg.observation.buffer_tokens_at(threshold),
            last_boundary=buffering_boundary(record, view),
            buffering_in_flight=buffering,
            chunk_message_tokens=[c.message_tokens for c in record.chunks],
            chunk_observation_tokens=[c.token_count for c in record.chunks],
            buffer_activation=cfg.observation.buffer_activation,
            buffering_observation=buffering,
            buffering_reflection=view.is_locked(Keys.buffered_reflection_lock(log.lookup_key)),
            has_buffered_reflection=bool(log.buffered_reflection),
            buffered_reflection_tokens=log.buffered_reflection_tokens,
            buffered_reflection_input_tokens=log.buffered_reflection_input_tokens,
        )

    def cached_part(self, thread: history.ThreadRow, seq: int) -> Part | None:
        return self.part_cache.get((thread.id, thread.created_at, seq))

    def held_window(
        self, thread: history.ThreadRow, after_seq: int
    ) -> tuple[Sequence[history.WindowRow], int] | None:
        """What this process holds of the thread's window after `after_seq` (`history.read_unobserved`)."""
        return self.window_rows.held((thread.id, thread.created_at), after_seq)

    def remember_parts(
        self, thread: history.ThreadRow, unobserved: history.Unobserved, fresh: Mapping[int | None, Part]
    ) -> None:
        """After commit only: a rolled-back insert's sequence numbers are reused by the next append."""
        self.window_rows.remember((thread.id, thread.created_at), unobserved.after_seq, unobserved.window)
        stored = {row.seq for row in unobserved.rows}
        for seq, part in fresh.items():
            if seq is not None and seq in stored:
                self.part_cache.remember((thread.id, thread.created_at, seq), part)
        for seq, part in unobserved.fetched.items():
            self.part_cache.remember((thread.id, thread.created_at, seq), part)

    # ---------------------------------------------------------------------------------- writes

    def publish(self, stored: Sequence[StoredEvent]) -> None:
        sink = EVENT_SINK.get()
        if sink is not None:
            sink.extend(stored)
        if stored:
            try:
                self.publisher.publish(stored)
            except Exception:  # publishing is best effort: the outbox row is the durable copy
                log.exception(
                    "publishing %d events failed; they stay replayable from the outbox", len(stored)
                )
            # Python hooks (`om_core.hooks`): queued to the process's hook thread, after the commit.
            DISPATCHER.submit(stored, CURRENT_TRIGGER.get(), self.resource_of)

    def resource_of(self, thread_id: StoredId) -> StoredId | None:
        """The stored resource id of a stored thread id (None when the thread is gone)."""
        thread = history.get_thread(self.db, thread_id)
        return thread.resource_id if thread is not None else None

    def write_events(self, record: Record, drafts: Sequence[NewEvent]) -> None:
        """Events that report no change of their own, in a transaction of their own."""
        with self.db.begin() as conn:
            stored = write_record_events(conn, record, drafts)
        self.publish(stored)

    @contextmanager
    def holding(self, *locks: str) -> Iterator[bool]:
        """Hold every one of `locks` for the block if all are free (yields False, holding nothing, when
        one is not). Taken in the order given: callers pass them sorted."""
        held: list[tuple[str, str]] = []
        try:
            for lock in locks:
                token = self.coordination.try_lock(lock, self.settings.lock_ttl_s)
                if token is None:
                    break
                held.append((lock, token))
            yield len(held) == len(locks)
        finally:
            for lock, token in reversed(held):
                self.coordination.release(lock, token)

    def update_title(self, thread_id: StoredId, head: Record, title: str, cycle_id: str) -> None:
        """Apply a title the Observer proposed under `observer.thread_title_update` (at least 3
        characters, different from the current title), with its `data-om-thread-update` event (§5.6).
        Buffering, blocking observation (either scope) and activation all call this; the caller checks that
        `observation.threadTitle` is on."""
        thread = history.get_thread(self.db, thread_id)
        old = thread.title if thread is not None else None
        clean = thread_title_update(title, old)
        if clean is None:
            return
        with self.db.begin() as conn:
            conn.execute(update(schema.threads).where(schema.threads.c.id == thread_id).values(title=clean))
            records.patch_thread_metadata(conn, thread_id, {"threadTitle": clean})
        self.write_events(
            head,
            [
                ev.thread_update(
                    cycle_id=cycle_id,
                    thread_id=thread_id,
                    old_title=old,
                    new_title=clean,
                    timestamp=self.clock(),
                )
            ],
        )

    # -------------------------------------------------------------------------------- blocking

    def run_blocking(self, task: Task | Sequence[Task], thread_id: StoredId) -> str | None:
        """Run blocking work (one task, or several in parallel) within the deadline. Returns a reason when
        the turn goes on uncompressed.

        Events the work wrote in another process (a Celery worker) are added to this turn's events."""
        tasks = [task] if not isinstance(task, Sequence) else list(task)
        if not tasks:
            return None
        mark = last_event_id(self.db, thread_id)
        try:
            return self._run_within_deadline(tasks)
        finally:
            sink = EVENT_SINK.get()
            if sink is not None:
                known = {event.id for event in sink}
                remote = list_events(self.db, thread_id=thread_id, after_id=mark, limit=1000)
                sink.extend(event for event in remote if event.id not in known)

    def _run_within_deadline(self, tasks: Sequence[Task]) -> str | None:
        task = tasks[0]
        try:
            if len(tasks) == 1:
                finished = self.executor.run(task, self.settings.blocking_deadline_s)
            else:
                finished = self.executor.run_all(tasks, self.settings.blocking_deadline_s)
        except Exception as exc:
            if self.settings.failure_policy == "raise":
                raise
            log.warning(
                "blocking %s failed (%s); the turn goes on with the uncompressed context",
                type(task).__name__,
                exc,
            )
            return f"{type(task).__name__.lower()}-failed: {exc}"
        if not finished:
            if self.settings.failure_policy == "raise":
                raise TimeoutError(f"{type(task).__name__} did not finish within the turn deadline")
            return f"{type(task).__name__.lower()}-deadline"
        return None
