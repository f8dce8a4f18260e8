"""The OM use-cases: ingest a turn, buffer, activate, observe, reflect, and build the actor's context.

Each use-case reads the head, calls a model if it must (outside any transaction), then commits through
one storage operation that re-checks everything under the row lock. The engine never trusts its own
snapshot at commit time; that is what keeps it correct when several workers run the same thread.
`om_workers` and `om_api` call these methods and add nothing to OM's behaviour.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, NamedTuple, Protocol

from sqlalchemy import Connection, Engine

from om_core import policy, tenancy, triggers
from om_core.config import ObservationalMemoryConfig, ResolvedConfig, TokenRange, message_threshold_max
from om_core.context import ActorContext, RenderedLogCache, build_actor_context
from om_core.coordination import Coordination, Keys, LocalCoordination, Peek
from om_core.early_activation import provider_changed, resolve_ttl_ms, ttl_expired
from om_core.engine import events as ev
from om_core.engine.tasks import (
    BufferObservation,
    BufferReflection,
    Executor,
    InlineExecutor,
    Observe,
    Reflect,
    Task,
    new_cycle_id,
)
from om_core.engine.window import (
    Window,
    build_window,
    cut_for_budget,
    cut_keeping_tail,
    start_of_recent,
)
from om_core.errors import OMError, OperationFailed
from om_core.messages import Message, Part
from om_core.models.selection import DEFAULT_MODEL, ModelByInputTokens, ModelSpec
from om_core.observer import (
    ObserverOutput,
    ObserverPromptOptions,
    build_observer_system_prompt,
    build_observer_user_message,
    combine_for_observer,
    parse_observer_output,
    prepare_observer_context,
)
from om_core.reflector import (
    LadderResult,
    ModelReply,
    ReflectionEmptyError,
    ReflectorPromptOptions,
    RetryInfo,
    append_tail_after_reflection,
    build_reflector_system_prompt,
    reflect_with_ladder,
    replace_leading_lines,
)
from om_core.reply_checks import unusable_reply
from om_core.scoped_ids import public_id
from om_core.store import history, records
from om_core.store.outbox import has_event, last_event_id, list_events, write_events
from om_core.store.part_cache import PartCache
from om_core.store.types import ActivationResult, ChunkInput, NewEvent, Record, StoredEvent
from om_core.temporal import temporal_marker_for
from om_core.tokens import TokenCounter
from om_core.tokens.memo import RememberedCounts
from om_core.transcript import render_transcript

log = logging.getLogger("om.engine")

FailurePolicy = Literal["bypass", "raise"]


class ObserverDegenerateError(OMError, RuntimeError):
    def __init__(self, detail: str) -> None:
        super().__init__("OBSERVER_DEGENERATE", f"[OBSERVER_DEGENERATE] {detail}")


class ThreadIdRequired(OMError, ValueError):
    def __init__(self) -> None:
        super().__init__("THREAD_ID_REQUIRED", "[THREAD_ID_REQUIRED] a thread id is required in thread scope")


class MemoryDisabled(OMError, ValueError):
    """Manual observe/reflect on a thread whose effective config says `enabled: false`: OM is off there
    (spec §2.1), so there is no memory to work on; refused rather than silently doing nothing."""

    def __init__(self, thread_id: str) -> None:
        self.thread_id = thread_id
        super().__init__(
            "MEMORY_DISABLED",
            f"[MEMORY_DISABLED] observational memory is off for thread {thread_id!r} (enabled: false); "
            "set enabled: true in its config to observe or reflect",
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (MemoryDisabled, (self.thread_id,))


class Completion(Protocol):
    @property
    def text(self) -> str: ...
    @property
    def input_tokens(self) -> int: ...
    @property
    def output_tokens(self) -> int: ...
    @property
    def cost(self) -> float | None: ...
    @property
    def model(self) -> str: ...
    @property
    def finish_reason(self) -> str | None: ...


class ModelCaller(Protocol):
    def complete(
        self,
        model: str | list[str],
        *,
        system: str,
        user: str,
        temperature: float | None,
        max_output_tokens: int | None,
        provider_options: dict[str, Any] | None,
    ) -> Completion: ...


class EventPublisher(Protocol):
    def publish(self, events: Sequence[StoredEvent]) -> None: ...


class NullPublisher:
    def publish(self, events: Sequence[StoredEvent]) -> None:
        return None


@dataclass(frozen=True)
class EngineSettings:
    """Service-level knobs that are not OM options."""

    timezone: str = "UTC"
    #: Largest Observer input per call; a larger backlog is split (never sent whole and failed forever).
    observer_input_cap_tokens: int = 64_000
    #: How long a turn waits for a blocking observation or reflection before going on uncompressed.
    blocking_deadline_s: float = 30.0
    failure_policy: FailurePolicy = "bypass"
    #: Lock lifetimes; locks only de-duplicate work, so an expiry costs duplicate work, never data.
    lock_ttl_s: float = 300.0
    #: Memory for parsed unobserved parts kept between turns (0 turns the cache off; see
    #: `store.part_cache`). A full 30k-token window takes ~0.3 MB.
    part_cache_bytes: int = 8 * 1024 * 1024
    #: Memory for rendered observation logs (see `context.RenderedLogCache`); a 15k-token log takes ~0.2 MB.
    rendered_log_cache_bytes: int = 4 * 1024 * 1024


@dataclass(frozen=True)
class TurnResult:
    """What the actor sees next. Ids are public: the ones the caller's tenant chose (`scoped_ids`)."""

    thread_id: str
    record_id: str
    system_messages: list[str]
    messages: list[Message]
    continuation_reminder: str
    status: dict[str, Any]
    events: list[StoredEvent]
    blocked: bool = False
    degraded: bool = False
    degraded_reason: str | None = None
    context: ActorContext = field(default_factory=ActorContext)
    resource_id: str = ""


@dataclass(frozen=True)
class _Stored:
    """What the store transaction of a turn read: the thread before and after locking it, the head, the
    unobserved window and its messages."""

    before: history.ThreadRow | None
    thread: history.ThreadRow
    head: Record
    window: Window
    messages: list[Message]


class _Current(NamedTuple):
    """What a turn returns, as of one consistent read."""

    head: Record
    window: Window
    thread: history.ThreadRow
    messages: list[Message]


@dataclass
class _Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float | None = None
    model: str | None = None

    def add(self, completion: Completion) -> None:
        self.input_tokens += completion.input_tokens
        self.output_tokens += completion.output_tokens
        if completion.cost is not None:
            self.cost = (self.cost or 0.0) + completion.cost
        self.model = completion.model

    def fields(self) -> dict[str, Any]:
        return ev.usage_fields(self.input_tokens, self.output_tokens, self.cost, self.model)


@dataclass(frozen=True)
class _Activity:
    """What early activation needs about the thread, read once per turn before new messages land."""

    previous_model: str | None = None
    last_activity_at: datetime | None = None
    actor_model: str | None = None


def _now() -> datetime:
    return datetime.now(UTC)


#: Parts read per page when looking for the start of the recent history (OM off); a page is ~30 KB of rows.
_RECENT_PAGE = 512

#: Events written during the current `ingest_turn` (inline background work included), returned to the caller.
_EVENT_SINK: ContextVar[list[StoredEvent] | None] = ContextVar("om_event_sink", default=None)


def lookup_key(thread_id: str) -> str:
    return f"thread:{thread_id}"


def _max_threshold(value: int | TokenRange) -> int:
    return value.max if isinstance(value, TokenRange) else value


def _policy_tokens(value: int | TokenRange) -> policy.MessageTokens:
    return (value.min, value.max) if isinstance(value, TokenRange) else value


def resolve_model(spec: ModelSpec, input_tokens: int) -> str | list[str]:
    """A concrete model (or fallback chain) for one call: tiers resolved by input size, "default" mapped."""
    if isinstance(spec, ModelByInputTokens):
        return resolve_model(spec.resolve(input_tokens), input_tokens)
    if isinstance(spec, list):
        chain: list[str] = []
        for item in spec:
            resolved = resolve_model(item, input_tokens)
            chain.extend(resolved if isinstance(resolved, list) else [resolved])
        return chain
    return DEFAULT_MODEL if spec in ("default", "", None) else str(spec)


def _primary(model: str | list[str]) -> str:
    return model[0] if isinstance(model, list) else model


def _boundary(record: Record, view: Peek) -> int:
    """Tokens at the last buffering launch: the stored boundary or a newer one another process shared."""
    shared = view.get_int(Keys.buffer_boundary(record.lookup_key)) or 0
    return max(record.last_buffered_at_tokens or 0, shared)


def _safe_buffer_cut(candidates: Sequence[Message], from_seq: int, window: Window) -> int:
    """The last sequence number safe to buffer: stop before an open tool call on the newest message."""
    safe = policy.select_safe_buffer_prefix(candidates)
    if len(safe) == len(candidates):
        return window.max_seq
    if not safe:
        return from_seq
    kept = {m.id for m in safe}
    excluded_seqs = [p.seq for m in candidates if m.id not in kept for p in m.parts if p.seq is not None]
    return min(excluded_seqs) - 1 if excluded_seqs else window.max_seq


def _parts_upto(messages: Sequence[Message], to_seq: int) -> list[Message]:
    """Each message with only its parts at or before `to_seq`; messages left with none are dropped."""
    out: list[Message] = []
    for message in messages:
        parts = [p for p in message.parts if p.seq is not None and p.seq <= to_seq]
        if len(parts) == len(message.parts):
            out.append(message)
        elif parts:
            out.append(message.model_copy(update={"parts": parts}))
    return out


class MemoryEngine:
    """One engine per process; stateless between calls apart from its collaborators."""

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
        clock: Callable[[], datetime] = _now,
    ) -> None:
        self.db = db
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
        #: Bodies of unobserved parts this process has stored or read (see `store.part_cache`).
        self.part_cache = PartCache(self.settings.part_cache_bytes)
        #: Rendered observation logs (see `context.RenderedLogCache`).
        self.rendered_logs = RenderedLogCache(self.settings.rendered_log_cache_bytes)
        #: Token counts of observation lines, which every Observer call shows again (see `tokens.memo`).
        self.line_counts = RememberedCounts(self.counter.count_string)

    # ------------------------------------------------------------------------------------ config

    def config_for(self, overrides: Mapping[str, Any] | None) -> ResolvedConfig:
        """The resolved config of a thread: service config plus its validated overrides."""
        if not overrides:
            return self.base_config.resolve()
        cache_key = repr(sorted(overrides.items()))
        cached = self._resolved_cache.get(cache_key)
        if cached is None:
            cached = self.base_config.with_overrides(overrides).resolve()
            self._resolved_cache[cache_key] = cached
        return cached

    def _thread_config(self, thread_id: str) -> ResolvedConfig:
        thread = history.get_thread(self.db, thread_id)
        return self.config_for(thread.config_overrides if thread is not None else None)

    def _marker_config(self, cfg: ResolvedConfig) -> dict[str, Any]:
        marker: dict[str, Any] = {
            "messageTokens": _max_threshold(cfg.observation.message_tokens),
            "observationTokens": cfg.reflection.observation_tokens,
            "scope": cfg.scope,
        }
        if cfg.observation.activate_after_idle is not None:
            marker["activateAfterIdle"] = cfg.observation.activate_after_idle
        return marker

    # ----------------------------------------------------------------------------------- helpers

    def _window(self, thread_id: str, after_seq: int) -> Window:
        with self.db.connect() as conn:
            rows = history.part_tokens_after(conn, thread_id, after_seq)
        return build_window(rows, self.counter)

    def _publish(self, stored: Sequence[StoredEvent]) -> None:
        sink = _EVENT_SINK.get()
        if sink is not None:
            sink.extend(stored)
        if stored:
            try:
                self.publisher.publish(stored)
            except Exception:  # publishing is best effort: the outbox row is the durable copy
                log.exception(
                    "publishing %d events failed; they stay replayable from the outbox", len(stored)
                )

    def _write_events(self, record: Record, drafts: Sequence[NewEvent]) -> None:
        from om_core.store.outbox import write_events

        with self.db.begin() as conn:
            stored = write_events(
                conn,
                lookup_key=record.lookup_key,
                thread_id=record.thread_id,
                resource_id=record.resource_id,
                record_id=record.id,
                events=drafts,
            )
        self._publish(stored)

    def _peek(self, key: str) -> Peek:
        """The coordination state a turn's decisions read (status and reflection), in one round trip."""
        return self.coordination.peek(
            [Keys.buffer_lock(key), Keys.buffered_reflection_lock(key), Keys.reflect_lock(key)],
            [Keys.buffer_boundary(key), Keys.reflection_boundary(key)],
        )

    def _status(
        self, record: Record, window: Window, cfg: ResolvedConfig, view: Peek | None = None
    ) -> policy.Status:
        key = record.lookup_key
        view = view or self._peek(key)
        buffering = view.is_locked(Keys.buffer_lock(key))
        return policy.compute_status(
            pending=window.tokens,
            message_tokens=_policy_tokens(cfg.observation.message_tokens),
            observation_token_count=record.observation_token_count,
            reflection_threshold=cfg.reflection.observation_tokens,
            async_observation_enabled=cfg.async_observation_enabled,
            async_reflection_enabled=cfg.async_reflection_enabled,
            block_after=cfg.observation.block_after,
            buffer_tokens=cfg.observation.buffer_tokens,
            last_boundary=_boundary(record, view),
            buffering_in_flight=buffering,
            chunk_message_tokens=[c.message_tokens for c in record.chunks],
            chunk_observation_tokens=[c.token_count for c in record.chunks],
            buffer_activation=cfg.observation.buffer_activation,
            buffering_observation=buffering,
            buffering_reflection=view.is_locked(Keys.buffered_reflection_lock(key)),
            has_buffered_reflection=bool(record.buffered_reflection),
            buffered_reflection_tokens=record.buffered_reflection_tokens,
            buffered_reflection_input_tokens=record.buffered_reflection_input_tokens,
        )

    # --------------------------------------------------------------------------------- the turn

    def ingest_turn(
        self,
        thread_id: str,
        resource_id: str | None,
        messages: Sequence[Message],
        *,
        actor_model: str | None = None,
        step_number: int = 0,
        turn_end: bool | None = None,
        tenant_id: str | None = None,
    ) -> TurnResult:
        """Store the new messages, run the cheap step (activation is database work), start due background
        work, block only past `blockAfter`, and return what the actor should see next.

        The common turn is two short transactions: store and read everything the turn needs (thread, head,
        unobserved window and its messages), then write the status event. Everything else happens only when
        a threshold says so. `resource_id` None means the thread's own resource (a new thread's id); with a
        `tenant_id`, a thread or resource of another tenant raises `ThreadNotVisible` and nothing is stored.
        """
        if not thread_id:
            raise ThreadIdRequired()
        sink: list[StoredEvent] = []
        token = _EVENT_SINK.set(sink)
        try:
            return self._ingest(
                thread_id, resource_id, tenant_id, list(messages), actor_model, step_number, turn_end, sink
            )
        finally:
            _EVENT_SINK.reset(token)

    def _ingest(
        self,
        thread_id: str,
        resource_id: str | None,
        tenant_id: str | None,
        incoming: list[Message],
        actor_model: str | None,
        step_number: int,
        turn_end: bool | None,
        sink: list[StoredEvent],
    ) -> TurnResult:
        stored = self._store_and_read(thread_id, resource_id, tenant_id, incoming, actor_model)
        before, head, window, resource = stored.before, stored.head, stored.window, stored.thread.resource_id
        cfg = self.config_for(before.config_overrides if before is not None else None)
        if not cfg.enabled:
            return self._disabled_turn(thread_id, cfg, stored, step_number)
        activity = _Activity(
            previous_model=before.last_actor_model if before is not None else None,
            last_activity_at=before.last_activity_at if before is not None else None,
            actor_model=actor_model,
        )
        now = self.clock()
        blocked = False
        degraded_reason: str | None = None

        if head.chunks:
            activated = self._step_zero_activation(thread_id, cfg, head, window, activity, now)
            if activated is not head:
                head, window = activated, self._window(thread_id, activated.last_observed_seq)
        view = self._peek(head.lookup_key)
        status = first_status = self._status(head, window, cfg, view)
        if status.should_observe:
            head, window, status = self._threshold_activation(thread_id, cfg, head, window, status)
        if policy.must_block(
            async_enabled=cfg.async_observation_enabled,
            pending=status.pending,
            threshold=status.threshold,
            block_after=cfg.observation.block_after,
        ):
            blocked = True
            degraded_reason = self._run_blocking(Observe(thread_id, new_cycle_id("observe")), thread_id)

        reflect_blocked, reflect_reason = self.maybe_reflect(
            thread_id,
            activity=activity,
            now=now,
            cfg=cfg,
            head=None if sink else head,
            view=None if sink else view,
        )
        blocked = blocked or reflect_blocked
        degraded_reason = degraded_reason or reflect_reason
        if status.should_buffer:
            # After reflection work, not before: the Observer dedups against the log its chunk will join,
            # and a reflection (or a buffered one activated) in this turn changes that log (spec §4.1).
            self._launch_buffering(thread_id, head, status.pending)

        is_turn_end = (
            turn_end if turn_end is not None else bool(incoming and incoming[-1].role == "assistant")
        )
        if is_turn_end and cfg.async_observation_enabled and cfg.observation.buffer_on_idle:
            self.executor.submit(
                BufferObservation(thread_id, new_cycle_id("buffer-obs"), status.pending, skip_minimum=True)
            )
        self._schedule_idle_trigger(thread_id, resource, cfg, actor_model)
        # Anything that changed the head reported an event; without one, and without blocking work that may
        # have run in another process, the reads above are current.
        unchanged = not sink and not blocked
        return self._turn_result(
            thread_id,
            cfg,
            step_number,
            blocked,
            degraded_reason,
            sink,
            current=_Current(head, window, stored.thread, stored.messages) if unchanged else None,
            # A launch moved the buffering boundary the status shows: compute it again then.
            status=first_status if unchanged and not first_status.should_buffer else None,
        )

    def _store_and_read(
        self,
        thread_id: str,
        resource_id: str | None,
        tenant_id: str | None,
        incoming: list[Message],
        actor_model: str | None,
    ) -> _Stored:
        """One transaction: lock the thread (creating it for the tenant if new), check access, store the
        messages (temporal markers first, when configured), read (or create) the head, and read the
        unobserved window with its messages, bodies coming from the part cache where it has them."""
        key = lookup_key(thread_id)
        with self.db.begin() as conn:
            before = history.lock_thread(conn, thread_id)
            thread = before or tenancy.create_thread_for(conn, tenant_id, thread_id, resource_id or thread_id)
            tenancy.check_turn_access(thread, tenant_id, resource_id)
            cfg = self.config_for(thread.config_overrides)
            if cfg.temporal_markers:
                incoming = self._with_temporal_markers(conn, thread_id, incoming)
            fresh = history.append_to_locked(
                conn, thread, incoming, count_part=self._count_part(actor_model), actor_model=actor_model
            )
            head = records.read_head(conn, key) or records.initialize(
                conn,
                lookup_key=key,
                scope="thread",
                thread_id=thread_id,
                resource_id=thread.resource_id,
                config=self.base_config.to_public_dict(),
                observed_timezone=self.settings.timezone,
            )
            fresh_parts = {part.seq: part for message in fresh for part in message.parts}
            unobserved = history.read_unobserved(
                conn,
                thread_id,
                self._context_start(conn, thread, head, cfg),
                known=lambda seq: fresh_parts.get(seq) or self._cached_part(thread, seq),
            )
        self._remember_parts(thread, unobserved, fresh_parts)
        return _Stored(before, thread, head, build_window(unobserved.rows, self.counter), unobserved.messages)

    def _context_start(
        self, conn: Connection, thread: history.ThreadRow, head: Record, cfg: ResolvedConfig
    ) -> int:
        """Where the actor's raw messages start: after the cursor while OM is on.

        With OM off (`enabled: false`) nothing is compressed, so the raw history is all the actor has:
        the newest messages within the thread's message budget (`observation.messageTokens`, the most
        raw history OM itself shows before compressing), wherever a cursor left by an earlier enabled
        period stands. Bounded so that neither the context nor the turn's reads grow with the thread."""
        if cfg.enabled:
            return head.last_observed_seq
        budget = message_threshold_max(cfg)
        rows: list[history.PartTokens] = []
        while True:
            page = history.part_tokens_newest_first(
                conn, thread.id, before_seq=rows[-1].seq if rows else None, limit=_RECENT_PAGE
            )
            rows.extend(page)
            start = start_of_recent(build_window(rows, self.counter), budget)
            if start is not None:
                return start
            if len(page) < _RECENT_PAGE:
                return 0

    def _disabled_turn(
        self, thread_id: str, cfg: ResolvedConfig, stored: _Stored, step_number: int
    ) -> TurnResult:
        """A turn with OM off: the messages are stored (storage is the source of truth) and nothing else
        happens: no model call, no background work, no change to the record or the thread's hints, no
        idle trigger, no event. The cursor stays where it was, so turning OM on later observes the
        backlog by the normal policy. The status reports the record as it stands and the context's
        message tokens."""
        status = self._status(stored.head, stored.window, cfg)
        return TurnResult(
            thread_id=public_id(thread_id),
            resource_id=public_id(stored.thread.resource_id),
            record_id=stored.head.id,
            system_messages=[],
            messages=[m for m in stored.messages if m.has_visible_content],
            continuation_reminder="",
            status=status.to_status_payload(
                stored.head.id, thread_id, step_number, stored.head.generation_count
            ),
            events=[],
        )

    def _cached_part(self, thread: history.ThreadRow, seq: int) -> Part | None:
        return self.part_cache.get((thread.id, thread.created_at, seq))

    def _remember_parts(
        self, thread: history.ThreadRow, unobserved: history.Unobserved, fresh: Mapping[int | None, Part]
    ) -> None:
        """After commit only: a rolled-back insert's sequence numbers are reused by the next append."""
        stored = {row.seq for row in unobserved.rows}
        for seq, part in fresh.items():
            if seq is not None and seq in stored:
                self.part_cache.remember((thread.id, thread.created_at, seq), part)
        for seq, part in unobserved.fetched.items():
            self.part_cache.remember((thread.id, thread.created_at, seq), part)

    def _read_current(self, thread_id: str) -> _Current:
        """Head, window and unobserved messages as committed now (after work that changed them)."""
        with self.db.connect() as conn:
            head = records.read_head(conn, lookup_key(thread_id))
            thread = history.get_thread(conn, thread_id)
            assert head is not None and thread is not None, "the turn created both"
            unobserved = history.read_unobserved(
                conn,
                thread_id,
                head.last_observed_seq,
                known=lambda seq: self._cached_part(thread, seq),
            )
        self._remember_parts(thread, unobserved, {})
        return _Current(head, build_window(unobserved.rows, self.counter), thread, unobserved.messages)

    def _schedule_idle_trigger(
        self, thread_id: str, resource_id: str, cfg: ResolvedConfig, actor_model: str | None
    ) -> None:
        """Arm (or move) the idle trigger for beat: the earliest phase TTL after the last activity."""
        ttls = [
            ttl
            for ttl in (
                resolve_ttl_ms(cfg.observation.activate_after_idle, actor_model, None),
                resolve_ttl_ms(cfg.reflection.activate_after_idle, actor_model, None),
            )
            if ttl is not None
        ]
        if not ttls:
            return
        thread = history.get_thread(self.db, thread_id)
        if thread is None or thread.last_activity_at is None:
            return
        with self.db.begin() as conn:
            triggers.schedule(
                conn,
                lookup_key=lookup_key(thread_id),
                kind=triggers.IDLE,
                thread_id=thread_id,
                resource_id=resource_id,
                due_at=thread.last_activity_at + timedelta(milliseconds=min(ttls)),
                payload={"actorModel": actor_model},
            )

    def on_idle(self, thread_id: str, *, actor_model: str | None = None, now: datetime | None = None) -> bool:
        """Beat's idle check: activate buffered observations (and a buffered reflection) whose idle TTL
        expired, so the next, uncached prompt is the compressed one. True if anything was activated."""
        thread = history.get_thread(self.db, thread_id)
        head = records.get_head(self.db, lookup_key(thread_id))
        if thread is None or head is None:
            return False
        cfg = self.config_for(thread.config_overrides)
        if not cfg.enabled:
            return False  # OM off: an idle trigger armed before it was switched off activates nothing
        moment = now or self.clock()
        activity = _Activity(
            previous_model=thread.last_actor_model,
            last_activity_at=thread.last_activity_at,
            actor_model=actor_model or thread.last_actor_model,
        )
        activated = False
        trigger, details = self._early_trigger(cfg, activity, moment, reflection=False)
        if trigger == "ttl" and head.chunks:
            activated = self.activate(thread_id, triggered_by="ttl", trigger_details=details) is not None
        generation = head.generation_count
        self.maybe_reflect(thread_id, activity=activity, now=moment)
        after = records.get_head(self.db, lookup_key(thread_id))
        return activated or (after is not None and after.generation_count != generation)

    def _count_part(self, actor_model: str | None) -> Callable[[Any], tuple[float, float, int]]:
        def count(part: Any) -> tuple[float, float, int]:
            counted = self.counter.count_part(part, actor_model)
            return (counted.tokens, counted.overhead_delta, counted.extra_messages)

        return count

    def _with_temporal_markers(
        self, conn: Connection, thread_id: str, incoming: list[Message]
    ) -> list[Message]:
        previous = history.last_messages(conn, thread_id, limit=1)
        out: list[Message] = []
        seen: list[Message] = list(previous)
        for message in incoming:
            if message.role == "user":
                marker = temporal_marker_for(message, seen, self.settings.timezone)
                if marker is not None:
                    out.append(marker)
            out.append(message)
            seen.append(message)
        return out

    def _turn_result(
        self,
        thread_id: str,
        cfg: ResolvedConfig,
        step_number: int,
        blocked: bool,
        degraded_reason: str | None,
        sink: list[StoredEvent],
        *,
        current: _Current | None,
        status: policy.Status | None = None,
    ) -> TurnResult:
        key = lookup_key(thread_id)
        head, window, thread, unobserved = current or self._read_current(thread_id)
        status = status or self._status(head, window, cfg)
        payload = status.to_status_payload(head.id, thread_id, step_number, head.generation_count)
        with self.db.begin() as conn:
            stored = write_events(
                conn,
                lookup_key=key,
                thread_id=thread_id,
                resource_id=head.resource_id,
                record_id=head.id,
                events=[NewEvent(ev.STATUS, payload)],
            )
        self._publish(stored)
        visible = [m for m in unobserved if m.has_visible_content]
        meta = thread.om_metadata
        context = build_actor_context(
            active_observations=head.active_observations,
            current_task=meta.get("currentTask"),
            suggested_response=meta.get("suggestedResponse"),
            now=self.clock(),
            tz=self.settings.timezone,
            has_unobserved_history=bool(visible),
            rendered_logs=self.rendered_logs,
        )
        return TurnResult(
            thread_id=public_id(thread_id),
            resource_id=public_id(thread.resource_id),
            record_id=head.id,
            system_messages=list(context.system_messages),
            messages=visible,
            continuation_reminder=context.continuation_reminder,
            status=payload,
            events=list(sink),
            blocked=blocked,
            degraded=degraded_reason is not None,
            degraded_reason=degraded_reason,
            context=context,
        )

    def actor_context(self, thread_id: str, head: Record, *, has_unobserved: bool) -> ActorContext:
        thread = history.get_thread(self.db, thread_id)
        meta = thread.om_metadata if thread is not None else {}
        return build_actor_context(
            active_observations=head.active_observations,
            current_task=meta.get("currentTask"),
            suggested_response=meta.get("suggestedResponse"),
            now=self.clock(),
            tz=self.settings.timezone,
            has_unobserved_history=has_unobserved,
            rendered_logs=self.rendered_logs,
        )

    def _run_blocking(self, task: Task, thread_id: str) -> str | None:
        """Run blocking work within the deadline. Returns a reason when the turn goes on uncompressed.

        Events the work wrote in another process (a Celery worker) are added to this turn's events."""
        mark = last_event_id(self.db, thread_id)
        try:
            return self._run_blocking_task(task)
        finally:
            sink = _EVENT_SINK.get()
            if sink is not None:
                known = {event.id for event in sink}
                remote = list_events(self.db, thread_id=thread_id, after_id=mark, limit=1000)
                sink.extend(event for event in remote if event.id not in known)

    def _run_blocking_task(self, task: Task) -> str | None:
        try:
            finished = self.executor.run(task, self.settings.blocking_deadline_s)
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

    # ------------------------------------------------------------------------------- activation

    def _step_zero_activation(
        self,
        thread_id: str,
        cfg: ResolvedConfig,
        head: Record,
        window: Window,
        activity: _Activity,
        now: datetime,
    ) -> Record:
        """Early activation before the threshold: provider change, then idle TTL (spec §4.7). `window` is
        the unobserved window of `head`. Returns `head` itself when nothing was activated."""
        if not head.chunks:
            return head
        if head.last_buffered_at_tokens:
            reset = policy.stale_boundary_reset(head.last_buffered_at_tokens, window.tokens)
            if reset != head.last_buffered_at_tokens:
                with self.db.begin() as conn:
                    records.set_buffering_boundary(conn, head.id, reset)
                self.coordination.set_int(Keys.buffer_boundary(head.lookup_key), None)
        trigger, details = self._early_trigger(cfg, activity, now, reflection=False)
        if trigger is None:
            return head
        result = self.activate(thread_id, triggered_by=trigger, trigger_details=details)
        return result if result is not None else head

    def _early_trigger(
        self, cfg: ResolvedConfig, activity: _Activity, now: datetime, *, reflection: bool
    ) -> tuple[str | None, dict[str, Any]]:
        """Provider change beats idle TTL (spec §4.7). Reads the thread's stored activity, not messages."""
        phase = cfg.reflection if reflection else cfg.observation
        if phase.activate_on_provider_change and provider_changed(
            activity.actor_model, activity.previous_model
        ):
            return "provider_change", {
                "previousModel": activity.previous_model,
                "currentModel": activity.actor_model,
            }
        ttl = resolve_ttl_ms(phase.activate_after_idle, activity.actor_model, None)
        if ttl is not None and activity.last_activity_at is not None:
            expired, idle_ms = ttl_expired(ttl, activity.last_activity_at, now)
            if expired:
                return "ttl", {
                    "lastActivityAt": int(activity.last_activity_at.timestamp() * 1000),
                    "ttlExpiredMs": idle_ms,
                }
        return None, {}

    def _threshold_activation(
        self, thread_id: str, cfg: ResolvedConfig, head: Record, window: Window, status: policy.Status
    ) -> tuple[Record, Window, policy.Status]:
        """At the threshold: activate ready chunks until under it or nothing is left (spec §4.5)."""
        while status.should_observe and status.can_activate:
            activated = self.activate(thread_id, pending_tokens=status.pending, triggered_by="threshold")
            if activated is None:
                break
            head = activated
            window = self._window(thread_id, head.last_observed_seq)
            status = self._status(head, window, cfg)
        return head, window, status

    def activate(
        self,
        thread_id: str,
        *,
        pending_tokens: int | None = None,
        triggered_by: str = "threshold",
        trigger_details: Mapping[str, Any] | None = None,
        activate_all: bool = False,
    ) -> Record | None:
        """Move a prefix of the stored chunks into the log; None when nothing was activated.

        Retries on the new head when a rollover retired the one it read (at most 3 times, spec §3.5(4)).
        """
        cfg = self._thread_config(thread_id)
        key = lookup_key(thread_id)
        for _attempt in range(3):
            head = records.get_head(self.db, key)
            if head is None or not head.chunks:
                return None
            window = self._window(thread_id, head.last_observed_seq)
            pending = pending_tokens if pending_tokens is not None else window.tokens
            threshold = policy.dynamic_threshold(
                _policy_tokens(cfg.observation.message_tokens), head.observation_token_count
            )
            activation = cfg.observation.buffer_activation
            floor = policy.retention_floor(activation, threshold) if activation is not None else 0.0
            force = policy.force_activation(pending, cfg.observation.block_after)

            def choose(
                chunks: Sequence[Any], pending: int = pending, floor: float = floor, force: bool = force
            ) -> int:
                if activate_all:
                    return len(chunks)
                return policy.select_activation_boundary(
                    [c.message_tokens for c in chunks], pending, floor, force
                )

            now = self.clock()
            marker_config = self._marker_config(cfg)

            def build_events(
                result: ActivationResult, now: datetime = now, marker_config: dict[str, Any] = marker_config
            ) -> list[NewEvent]:
                generation = result.record.generation_count if result.record else 0
                return [
                    ev.chunk_activation(
                        chunk,
                        activated_at=now,
                        generation_count=generation,
                        triggered_by=triggered_by,
                        record_id=result.record.id if result.record else "",
                        thread_id=thread_id,
                        config=marker_config,
                        trigger_details=dict(trigger_details or {}),
                    )
                    for chunk in result.per_chunk
                ]

            with self.db.begin() as conn:
                result, stored = records.activate(
                    conn,
                    head.id,
                    choose_count=choose,
                    pending_tokens=pending,
                    thread_metadata_patch=lambda r: {
                        "currentTask": r.current_task,
                        "suggestedResponse": r.suggested_continuation,
                    },
                    events=build_events,
                )
            if result.retired:
                continue
            self._publish(stored)
            if not result.activated:
                return None
            self.coordination.set_int(Keys.buffer_boundary(key), None)
            if cfg.observation.thread_title and result.thread_title:
                self._update_title(thread_id, head, result.thread_title, result.activated_cycle_ids[-1])
            return result.record
        return None

    # -------------------------------------------------------------------------------- buffering

    def _launch_buffering(self, thread_id: str, head: Record, pending: int) -> None:
        """Record the interval boundary before anything else (so the next step does not re-trigger), then
        hand the work to the executor."""
        key = head.lookup_key
        self.coordination.set_int(Keys.buffer_boundary(key), pending, ttl_s=3600)
        with self.db.begin() as conn:
            records.set_buffering_boundary(conn, head.id, pending)
        self.executor.submit(BufferObservation(thread_id, new_cycle_id("buffer-obs"), pending))

    def buffer_observation(self, task: BufferObservation) -> bool:
        """Observe unbuffered messages in the background into a chunk (spec §4.3 `buffer()`).

        Returns True when a chunk was stored. Never raises to the turn: failures become a
        `data-om-buffering-failed` event and the next interval (or the sync fallback) covers the messages.
        """
        key = lookup_key(task.thread_id)
        token = self.coordination.try_lock(Keys.buffer_lock(key), self.settings.lock_ttl_s)
        if token is None:
            return False  # another buffering op for this thread is running: no parallel Observer (H8)
        try:
            return self._buffer_locked(task, key)
        finally:
            self.coordination.release(Keys.buffer_lock(key), token)

    def _buffering_snapshot(
        self, task: BufferObservation, key: str
    ) -> tuple[history.ThreadRow, ResolvedConfig, Record, history.Unobserved] | None:
        """One read for a buffering op: the thread and its config, the head, whether this cycle already
        ended (a redelivered task does nothing, not even a model call), and everything after the buffer
        cursor. One connection: each checkout costs a ping and a rollback, and workers run many of these."""
        with self.db.connect() as conn:
            thread = history.get_thread(conn, task.thread_id)
            if thread is None:
                return None
            cfg = self.config_for(thread.config_overrides)
            if not cfg.enabled or not cfg.async_observation_enabled:
                return None  # OM off (a task queued before it was switched off) or buffering off
            head = records.read_head(conn, key)
            if head is None or has_event(
                conn,
                lookup_key=key,
                cycle_id=task.cycle_id,
                types=[ev.BUFFERING_END, ev.OBSERVATION_END, ev.BUFFERING_FAILED, ev.OBSERVATION_FAILED],
            ):
                return None
            unobserved = history.read_unobserved(
                conn, task.thread_id, head.buffer_cursor, known=lambda seq: self._cached_part(thread, seq)
            )
        self._remember_parts(thread, unobserved, {})
        return thread, cfg, head, unobserved

    def _buffer_locked(self, task: BufferObservation, key: str) -> bool:
        snapshot = self._buffering_snapshot(task, key)
        if snapshot is None:
            return False
        thread, cfg, head, unobserved = snapshot
        from_seq = head.buffer_cursor
        window = build_window(unobserved.rows, self.counter)
        if not window.messages:
            return False
        candidates = [m for m in unobserved.messages if m.has_visible_content]
        to_seq = _safe_buffer_cut(candidates, from_seq, window)
        if to_seq <= from_seq:
            return False  # deferred: a tool exchange is still open; the next step retries
        to_seq = min(to_seq, cut_for_budget(window, self.settings.observer_input_cap_tokens))
        batch_tokens = window.tokens_upto(to_seq)
        buffer_tokens = cfg.observation.buffer_tokens or 0
        if not policy.meets_minimum(batch_tokens, buffer_tokens, task.skip_minimum):
            return False
        batch = [m for m in _parts_upto(candidates, to_seq) if m.has_visible_content]
        if not batch:
            return False
        started = self.clock()
        marker_config = self._marker_config(cfg)
        with self.db.begin() as conn:
            records.set_live_head_fields(conn, key, {"is_buffering_observation": True})
            stored_start = write_events(
                conn,
                lookup_key=key,
                thread_id=head.thread_id,
                resource_id=head.resource_id,
                record_id=head.id,
                events=[
                    ev.start(
                        ev.BUFFERING_START,
                        cycle_id=task.cycle_id,
                        operation="observation",
                        started_at=started,
                        tokens=batch_tokens,
                        record_id=head.id,
                        thread_id=task.thread_id,
                        config=marker_config,
                    )
                ],
            )
        self._publish(stored_start)
        usage = _Usage()
        try:
            output = self._observe_messages(
                cfg, head, task.thread_id, batch, usage, include_hints=True, thread=thread
            )
            text = output.observations.strip()
            if not text:  # a failure like any other: the cycle ends, a redelivery calls no model
                raise ObserverDegenerateError("the Observer returned no observations for the messages")
        except Exception as exc:
            log.warning("buffering %s failed: %s", task.cycle_id, exc)
            self._fail(
                head, ev.BUFFERING_FAILED, task.cycle_id, "observation", started, batch_tokens, exc, usage
            )
            with self.db.begin() as conn:
                records.set_live_head_fields(conn, key, {"is_buffering_observation": False})
            return False
        chunk = ChunkInput(
            cycle_id=task.cycle_id,
            observations=text,
            token_count=self.counter.count_string(text),
            message_ids=[m.id for m in batch],
            message_tokens=batch_tokens,
            from_seq=from_seq,
            to_seq=to_seq,
            last_observed_at=max(m.created_at for m in batch) + timedelta(milliseconds=1),
            thread_id=task.thread_id,
            current_task=output.current_task,
            suggested_continuation=output.suggested_response,
            thread_title=output.thread_title,
        )
        completed = self.clock()

        def build_events(_result: Any) -> list[NewEvent]:
            return [
                ev.buffering_end(
                    cycle_id=task.cycle_id,
                    operation="observation",
                    started_at=started,
                    completed_at=completed,
                    tokens_buffered=batch_tokens,
                    buffered_tokens=chunk.token_count,
                    observations=text,
                    record_id=head.id,
                    thread_id=task.thread_id,
                    usage=usage.fields(),
                )
            ]

        with self.db.begin() as conn:
            appended, stored = records.append_chunk(conn, head.id, chunk, events=build_events)
            finished = {"is_buffering_observation": False, "last_buffered_at_tokens": max(0, batch_tokens)}
            records.set_live_head_fields(conn, key, finished)
        self._publish(stored)
        self.coordination.set_int(Keys.buffer_boundary(key), batch_tokens, ttl_s=3600)
        if appended.persisted and cfg.observation.thread_title and output.thread_title:
            self._update_title(task.thread_id, head, output.thread_title, task.cycle_id)
        if not appended.persisted:
            log.info("chunk %s not stored: %s", task.cycle_id, appended.reason)
        return appended.persisted

    # -------------------------------------------------------------------------- the Observer call

    def _observe_messages(
        self,
        cfg: ResolvedConfig,
        head: Record,
        thread_id: str,
        batch: Sequence[Message],
        usage: _Usage,
        *,
        include_hints: bool,
        thread: history.ThreadRow | None = None,
    ) -> ObserverOutput:
        """`thread` is the caller's read of the thread, when it has one (its metadata feeds the prompt)."""
        if thread is None:
            thread = history.get_thread(self.db, thread_id)
        meta = thread.om_metadata if thread is not None else {}
        transcript = render_transcript(batch, head.observed_timezone, counter=self.counter.count_string)
        previous, truncated = prepare_observer_context(
            combine_for_observer(head.active_observations, [c.observations for c in head.chunks]),
            budget=cfg.observation.previous_observer_tokens,
            buffered_reflection=head.buffered_reflection,
            reflected_line_count=head.reflected_observation_line_count,
            count=self.counter.count_string,
            count_line=self.line_counts,
        )
        system = self._observer_system_prompt(cfg, include_hints)
        user = build_observer_user_message(
            transcript=transcript.text,
            previous_observations=previous,
            previous_truncated=truncated,
            prior_current_task=meta.get("currentTask"),
            prior_suggested_response=meta.get("suggestedResponse"),
            prior_thread_title=meta.get("threadTitle") if cfg.observation.thread_title else None,
            include_hints=include_hints,
        )
        model = resolve_model(cfg.observation.model, self.counter.count_messages(batch))
        last_problem = "empty"
        for _attempt in range(2):
            completion = self.models.complete(
                model,
                system=system,
                user=user,
                temperature=cfg.observation.temperature,
                max_output_tokens=cfg.observation.max_output_tokens,
                provider_options=cfg.observation.provider_options,
            )
            usage.add(completion)
            unusable = unusable_reply(completion.text, completion.finish_reason)
            if unusable is not None:
                last_problem = unusable
                continue
            output = parse_observer_output(completion.text)
            if not output.degenerate:
                return output
            last_problem = "degenerate output (repetition loop)"
        raise ObserverDegenerateError(
            f"the Observer produced {last_problem} twice for model {_primary(model)}"
        )

    def _observer_system_prompt(self, cfg: ResolvedConfig, include_hints: bool) -> str:
        return build_observer_system_prompt(
            ObserverPromptOptions(
                thread_title=cfg.observation.thread_title,
                include_hints=include_hints,
                instruction=cfg.observation.instruction,
            )
        )

    def _fail(
        self,
        head: Record,
        kind: str,
        cycle_id: str,
        operation: str,
        started: datetime,
        tokens: int,
        exc: BaseException,
        usage: _Usage,
        *,
        retrying: bool = False,
    ) -> None:
        self._write_events(
            head,
            [
                ev.failed(
                    kind,
                    cycle_id=cycle_id,
                    operation=operation,
                    started_at=started,
                    failed_at=self.clock(),
                    tokens_attempted=tokens,
                    error=str(exc) or type(exc).__name__,
                    record_id=head.id,
                    thread_id=head.thread_id,
                    usage=usage.fields(),
                    retrying=retrying,
                )
            ],
        )

    def _update_title(self, thread_id: str, head: Record, title: str, cycle_id: str) -> None:
        clean = title.strip()
        if len(clean) < 3:
            return
        thread = history.get_thread(self.db, thread_id)
        old = thread.title if thread is not None else None
        if old == clean:
            return
        from sqlalchemy import update

        from om_core.store import schema

        with self.db.begin() as conn:
            conn.execute(update(schema.threads).where(schema.threads.c.id == thread_id).values(title=clean))
            records.patch_thread_metadata(conn, thread_id, {"threadTitle": clean})
        self._write_events(
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

    # ------------------------------------------------------------------------- sync observation

    def observe(self, task: Observe) -> bool:
        """Blocking observation of the unobserved tail (spec §4.5 `sync_observe`).

        Chunks still waiting are activated first so the log stays in conversation order; the tail is
        observed in batches no larger than the Observer input cap; each batch commits on its own. The
        newest messages (the retention floor, at least the prompt being answered) stay raw.
        """
        cfg = self._thread_config(task.thread_id)
        if not cfg.enabled:
            return False  # OM off: work queued before it was switched off calls no model
        key = lookup_key(task.thread_id)
        token = self.coordination.try_lock(Keys.observe_lock(key), self.settings.lock_ttl_s)
        if token is None:
            return False
        try:
            observed_any = False
            for _batch in range(64):
                if self.activate(task.thread_id, activate_all=True, triggered_by="threshold") is not None:
                    observed_any = True
                outcome = self._observe_one_batch(task, cfg, key, manual=task.trigger == "manual")
                if outcome is None:
                    break
                observed_any = observed_any or outcome
                if not outcome:
                    break
            return observed_any
        finally:
            self.coordination.release(Keys.observe_lock(key), token)

    def _observe_one_batch(
        self, task: Observe, cfg: ResolvedConfig, key: str, *, manual: bool
    ) -> bool | None:
        """One Observer call and commit. None when there is nothing (more) to observe."""
        head = records.get_head(self.db, key)
        if head is None:
            return None
        window = self._window(task.thread_id, head.last_observed_seq)
        threshold = policy.dynamic_threshold(
            _policy_tokens(cfg.observation.message_tokens), head.observation_token_count
        )
        if not window.messages or window.tokens < (threshold if manual else 1):
            return None
        activation = cfg.observation.buffer_activation
        floor = policy.retention_floor(activation, threshold) if activation is not None else 1.0
        cut = cut_keeping_tail(window, max(floor, 1.0), max_keep=threshold - 1)
        if cut <= head.last_observed_seq:
            return None
        if head.chunks:
            return None  # activation above did not clear the list (retired head); the next step retries
        remaining = window.tokens - window.tokens_upto(cut)
        if remaining >= threshold:
            pass  # the kept tail itself is over the threshold only when one message is; observed next batch
        cut = min(cut, cut_for_budget(window, self.settings.observer_input_cap_tokens))
        from_seq = head.last_observed_seq
        with self.db.connect() as conn:
            batch = [
                m
                for m in history.load_parts(conn, task.thread_id, after_seq=from_seq, upto_seq=cut)
                if m.has_visible_content
            ]
        if not batch:
            return None  # nothing unobserved: never commit a cursor computed from nothing (H4)
        tokens = window.tokens_upto(cut)
        cycle_id = f"{task.cycle_id}-{from_seq}"
        started = self.clock()
        self._write_events(
            head,
            [
                ev.start(
                    ev.OBSERVATION_START,
                    cycle_id=cycle_id,
                    operation="observation",
                    started_at=started,
                    tokens=tokens,
                    record_id=head.id,
                    thread_id=task.thread_id,
                    config=self._marker_config(cfg),
                )
            ],
        )
        usage = _Usage()
        try:
            output = self._observe_messages(cfg, head, task.thread_id, batch, usage, include_hints=True)
        except Exception as exc:
            self._fail(head, ev.OBSERVATION_FAILED, cycle_id, "observation", started, tokens, exc, usage)
            raise OperationFailed(str(exc) or type(exc).__name__) from exc
        text = output.observations.strip()
        if not text:
            # Committing would move the cursor past parts whose content is nowhere in the log. Keep them raw,
            # and fail like a failed model call, so a turn that waited on this reports itself degraded.
            problem = ObserverDegenerateError("no observations for a non-empty transcript")
            self._fail(head, ev.OBSERVATION_FAILED, cycle_id, "observation", started, tokens, problem, usage)
            raise OperationFailed(str(problem)) from problem
        observation_tokens = self.counter.count_string(text)
        completed = self.clock()

        def build_events(_result: Any) -> list[NewEvent]:
            return [
                ev.observation_end(
                    cycle_id=cycle_id,
                    operation="observation",
                    started_at=started,
                    completed_at=completed,
                    tokens_observed=tokens,
                    observation_tokens=observation_tokens,
                    observations=text,
                    current_task=output.current_task,
                    suggested_response=output.suggested_response,
                    record_id=head.id,
                    thread_id=task.thread_id,
                    usage=usage.fields(),
                    seq_range=(from_seq, cut),
                )
            ]

        with self.db.begin() as conn:
            result, stored = records.commit_observation(
                conn,
                head.id,
                from_seq=from_seq,
                to_seq=cut,
                observations=text,
                token_count=observation_tokens,
                observed_message_tokens=tokens,
                last_observed_at=max(m.created_at for m in batch),
                thread_metadata={
                    "currentTask": output.current_task,
                    "suggestedResponse": output.suggested_response,
                },
                events=build_events,
            )
        self._publish(stored)
        if not result.applied:
            self._fail(
                head,
                ev.OBSERVATION_FAILED,
                cycle_id,
                "observation",
                started,
                tokens,
                RuntimeError(f"commit refused: {result.reason}"),
                usage,
            )
            return False
        self.coordination.set_int(Keys.buffer_boundary(key), None)
        if cfg.observation.thread_title and output.thread_title:
            self._update_title(task.thread_id, head, output.thread_title, cycle_id)
        return True

    # ------------------------------------------------------------------------------- reflection

    def maybe_reflect(
        self,
        thread_id: str,
        *,
        activity: _Activity | None = None,
        now: datetime | None = None,
        cfg: ResolvedConfig | None = None,
        head: Record | None = None,
        view: Peek | None = None,
    ) -> tuple[bool, str | None]:
        """Decide and run reflection work (spec §4.6). Returns (blocked, degraded reason).

        `head` is the caller's current read of the head, if it has one (saves a round trip)."""
        cfg = cfg or self._thread_config(thread_id)
        key = lookup_key(thread_id)
        head = head or records.get_head(self.db, key)
        if head is None:
            return False, None
        now = now or self.clock()
        trigger, details = self._early_trigger(cfg, activity or _Activity(), now, reflection=True)
        buffer_lock = Keys.buffered_reflection_lock(key)
        view = view or self._peek(key)
        decision = policy.reflection_action(
            obs=head.observation_token_count,
            R=cfg.reflection.observation_tokens,
            a=cfg.reflection.buffer_activation,
            RB=cfg.reflection.block_after,
            async_enabled=cfg.async_reflection_enabled,
            has_buffered_reflection=bool(head.buffered_reflection),
            reflection_in_flight=view.is_locked(buffer_lock),
            boundary_recorded=view.get_int(Keys.reflection_boundary(key)) is not None,
            ttl_expired=trigger == "ttl",
            provider_changed=trigger == "provider_change",
            reflection_live=view.is_locked(Keys.reflect_lock(key)),
        )
        if decision.start_buffered:
            self._start_buffered_reflection(thread_id, head)
        if decision.triggered_by is None:
            return False, None
        action: str = decision.on_no_buffer
        if decision.try_activate:
            outcome = self._try_activate_buffered_reflection(
                thread_id, cfg, decision.triggered_by, details if decision.triggered_by != "threshold" else {}
            )
            if outcome in ("activated", "suppressed"):
                return False, None
        if action == "start_buffered" and not decision.start_buffered:
            self._start_buffered_reflection(thread_id, head)
            return False, None
        if action == "sync":
            last = self.coordination.get_int(Keys.reflection_suppressed(key))
            if policy.sync_reflection_suppressed(last, head.observation_token_count, decision.triggered_by):
                return False, None
            reason = self._run_blocking(Reflect(thread_id, new_cycle_id("reflect")), thread_id)
            return True, reason
        return False, None

    def _start_buffered_reflection(self, thread_id: str, head: Record) -> None:
        key = head.lookup_key
        if self.coordination.get_int(Keys.reflection_boundary(key)) == head.observation_token_count:
            return  # already tried on exactly this log; wait until it changes
        self.coordination.set_int(Keys.reflection_boundary(key), head.observation_token_count, ttl_s=3600)
        self.executor.submit(BufferReflection(thread_id, head.id, new_cycle_id("buffer-refl")))

    def _reflector_call(
        self, cfg: ResolvedConfig, model: str | list[str]
    ) -> Callable[[str, str], ModelReply]:
        def call(system: str, user: str) -> ModelReply:
            completion = self.models.complete(
                model,
                system=system,
                user=user,
                temperature=cfg.reflection.temperature,
                max_output_tokens=cfg.reflection.max_output_tokens,
                provider_options=cfg.reflection.provider_options,
            )
            return ModelReply(
                completion.text,
                completion.input_tokens,
                completion.output_tokens,
                completion.cost,
                unusable=unusable_reply(completion.text, completion.finish_reason),
            )

        return call

    def _ladder(
        self,
        cfg: ResolvedConfig,
        observations: str,
        *,
        target: int,
        include_hints: bool,
        manual_prompt: str | None,
        on_retry: Callable[[RetryInfo], None] | None,
    ) -> tuple[LadderResult, str]:
        model = resolve_model(cfg.reflection.model, self.counter.count_string(observations))
        start_level = policy.compression_start_level(_primary(model), manual=manual_prompt is not None)
        system = build_reflector_system_prompt(
            ReflectorPromptOptions(
                observer_instructions=self._observer_system_prompt(cfg, include_hints=True),
                instruction=cfg.reflection.instruction,
                include_hints=include_hints,
            )
        )

        result = reflect_with_ladder(
            observations,
            target=target,
            start_level=start_level,
            include_hints=include_hints,
            call=self._reflector_call(cfg, model),
            count=self.counter.count_string,
            manual_prompt=manual_prompt,
            on_retry=on_retry,
            system_prompt=system,
        )
        return result, _primary(model)

    def buffer_reflection(self, task: BufferReflection) -> bool:
        """Reflect the leading slice of the log in the background and store it on the named record."""
        cfg = self._thread_config(task.thread_id)
        if not cfg.enabled:
            return False  # OM off: work queued before it was switched off calls no model
        key = lookup_key(task.thread_id)
        lock = Keys.buffered_reflection_lock(key)
        token = self.coordination.try_lock(lock, self.settings.lock_ttl_s)
        if token is None:
            return False
        try:
            head = records.get_record(self.db, task.record_id)
            if (
                head is None
                or not head.is_live
                or head.buffered_reflection
                or cfg.reflection.buffer_activation is None
            ):
                return False
            lines = head.active_observations.split("\n")
            n_lines, slice_estimate, target = policy.reflection_slice(
                len(lines),
                head.observation_token_count,
                cfg.reflection.observation_tokens,
                cfg.reflection.buffer_activation,
            )
            if n_lines <= 0:
                return False
            text = "\n".join(lines[:n_lines])
            started = self.clock()
            self._write_events(
                head,
                [
                    ev.start(
                        ev.BUFFERING_START,
                        cycle_id=task.cycle_id,
                        operation="reflection",
                        started_at=started,
                        tokens=slice_estimate,
                        record_id=head.id,
                        thread_id=task.thread_id,
                        config=self._marker_config(cfg),
                    )
                ],
            )
            try:
                result, _model = self._ladder(
                    cfg, text, target=target, include_hints=False, manual_prompt=None, on_retry=None
                )
            except Exception as exc:
                self._fail(
                    head,
                    ev.BUFFERING_FAILED,
                    task.cycle_id,
                    "reflection",
                    started,
                    slice_estimate,
                    exc,
                    _Usage(),
                )
                self.coordination.set_int(Keys.reflection_boundary(key), None)
                return False
            out = result.output.observations.strip()
            out_tokens = self.counter.count_string(out)
            usage = _Usage(result.input_tokens, result.output_tokens, result.cost)
            if out_tokens >= self.counter.count_string(text):
                # Not smaller than its slice: storing it would only churn generations. The boundary stays
                # recorded at this size, so the same input is not reflected again.
                self._fail(
                    head,
                    ev.BUFFERING_FAILED,
                    task.cycle_id,
                    "reflection",
                    started,
                    slice_estimate,
                    RuntimeError(f"reflection not smaller than its input ({slice_estimate} -> {out_tokens})"),
                    usage,
                )
                return False
            completed = self.clock()

            def build_events(_r: Any) -> list[NewEvent]:
                return [
                    ev.buffering_end(
                        cycle_id=task.cycle_id,
                        operation="reflection",
                        started_at=started,
                        completed_at=completed,
                        tokens_buffered=slice_estimate,
                        buffered_tokens=out_tokens,
                        observations=out,
                        record_id=head.id,
                        thread_id=task.thread_id,
                        usage=usage.fields(),
                    )
                ]

            with self.db.begin() as conn:
                written, stored = records.update_buffered_reflection(
                    conn,
                    head.id,
                    text=out,
                    token_count=out_tokens,
                    input_token_count=slice_estimate,
                    reflected_line_count=n_lines,
                    cycle_id=task.cycle_id,
                    events=build_events,
                )
            self._publish(stored)
            if not written.applied:
                self.coordination.set_int(Keys.reflection_boundary(key), None)
            return written.applied
        finally:
            self.coordination.release(lock, token)

    def _try_activate_buffered_reflection(
        self, thread_id: str, cfg: ResolvedConfig, triggered_by: str, details: Mapping[str, Any]
    ) -> str:
        key = lookup_key(thread_id)
        head = records.get_head(self.db, key)
        if head is None or not head.buffered_reflection or head.reflected_observation_line_count is None:
            return "no-buffer"
        lines = head.active_observations.split("\n")
        tail = "\n".join(lines[head.reflected_observation_line_count :]).strip()
        combined = replace_leading_lines(
            head.active_observations, head.reflected_observation_line_count, head.buffered_reflection
        )
        combined_tokens = self.counter.count_string(combined)
        a = cfg.reflection.buffer_activation or 0.5
        if triggered_by in ("ttl", "provider_change"):
            verdict = policy.early_trigger_guard(
                self.counter.count_string(tail),
                head.buffered_reflection_tokens or 0,
                combined_tokens,
                cfg.reflection.observation_tokens,
                a,
            )
            if verdict is not None:
                return "suppressed"
        before = head.observation_token_count
        cycle_id = head.buffered_reflection_cycle_id or new_cycle_id("buffer-refl")
        now = self.clock()
        marker_config = self._marker_config(cfg)

        def build_events(successor: Record) -> list[NewEvent]:
            return [
                ev.reflection_activation(
                    cycle_id=cycle_id,
                    activated_at=now,
                    tokens_before=before,
                    tokens_after=successor.observation_token_count,
                    generation_count=successor.generation_count,
                    observations=successor.active_observations,
                    triggered_by=triggered_by,
                    record_id=successor.id,
                    thread_id=thread_id,
                    config=marker_config,
                    trigger_details=dict(details),
                )
            ]

        with self.db.begin() as conn:
            successor, reason, stored = records.swap_buffered_reflection_to_active(
                conn,
                head.id,
                compose=replace_leading_lines,
                count_tokens=self.counter.count_string,
                events=build_events,
            )
        self._publish(stored)
        if successor is None or reason is not None:
            return "no-buffer"
        self.coordination.set_int(Keys.reflection_boundary(key), None)
        return "activated"

    def reflect(self, task: Reflect) -> bool:
        """Blocking reflection of the whole log into a new generation (spec §4.6 sync reflection)."""
        cfg = self._thread_config(task.thread_id)
        if not cfg.enabled:
            return False  # OM off: work queued before it was switched off calls no model
        key = lookup_key(task.thread_id)
        token = self.coordination.try_lock(Keys.reflect_lock(key), self.settings.lock_ttl_s)
        if token is None:
            return False
        try:
            snapshot = records.get_head(self.db, key)
            if snapshot is None or not snapshot.active_observations.strip():
                return False
            obs = snapshot.observation_token_count
            target = cfg.reflection.observation_tokens
            started = self.clock()
            cycle = {"id": task.cycle_id}
            marker_config = self._marker_config(cfg)

            def start_event(cycle_id: str) -> None:
                self._write_events(
                    snapshot,
                    [
                        ev.start(
                            ev.OBSERVATION_START,
                            cycle_id=cycle_id,
                            operation="reflection",
                            started_at=started,
                            tokens=obs,
                            record_id=snapshot.id,
                            thread_id=task.thread_id,
                            config=marker_config,
                        )
                    ],
                )

            def on_retry(info: RetryInfo) -> None:
                self._fail(
                    snapshot,
                    ev.OBSERVATION_FAILED,
                    cycle["id"],
                    "reflection",
                    started,
                    obs,
                    RuntimeError(info.message),
                    _Usage(),
                    retrying=True,
                )
                cycle["id"] = new_cycle_id("reflect")
                start_event(cycle["id"])

            start_event(cycle["id"])
            try:
                result, _model = self._ladder(
                    cfg,
                    snapshot.active_observations,
                    target=target,
                    include_hints=True,
                    manual_prompt=task.manual_prompt,
                    on_retry=on_retry,
                )
            except ReflectionEmptyError as exc:
                self._fail(
                    snapshot, ev.OBSERVATION_FAILED, cycle["id"], "reflection", started, obs, exc, _Usage()
                )
                self.coordination.set_int(Keys.reflection_suppressed(key), obs)
                return False
            except Exception as exc:
                self._fail(
                    snapshot, ev.OBSERVATION_FAILED, cycle["id"], "reflection", started, obs, exc, _Usage()
                )
                self.coordination.set_int(Keys.reflection_suppressed(key), obs)
                raise OperationFailed(str(exc) or type(exc).__name__) from exc
            out = result.output.observations.strip()
            out_tokens = self.counter.count_string(out)
            if out_tokens >= obs:
                # Not smaller than its input: committing would only churn generations (the original once
                # made 17 in two days). Keep the log; suppress retries on this exact input.
                self._fail(
                    snapshot,
                    ev.OBSERVATION_FAILED,
                    cycle["id"],
                    "reflection",
                    started,
                    obs,
                    RuntimeError(f"reflection not smaller than its input ({obs} -> {out_tokens})"),
                    _Usage(result.input_tokens, result.output_tokens, result.cost),
                )
                self.coordination.set_int(Keys.reflection_suppressed(key), obs)
                return False
            usage = _Usage(result.input_tokens, result.output_tokens, result.cost)
            completed = self.clock()
            cycle_id = cycle["id"]

            def build_events(successor: Record) -> list[NewEvent]:
                return [
                    ev.observation_end(
                        cycle_id=cycle_id,
                        operation="reflection",
                        started_at=started,
                        completed_at=completed,
                        tokens_observed=obs,
                        observation_tokens=out_tokens,
                        observations=out,
                        current_task=result.output.current_task,
                        suggested_response=result.output.suggested_response,
                        record_id=successor.id,
                        thread_id=task.thread_id,
                        usage=usage.fields(),
                    )
                ]

            with self.db.begin() as conn:
                successor, applied, stored = records.create_reflection_generation(
                    conn,
                    snapshot,
                    reflection=out,
                    token_count=out_tokens,
                    compose=append_tail_after_reflection,
                    events=build_events,
                )
                if applied and successor is not None:
                    records.patch_thread_metadata(
                        conn,
                        task.thread_id,
                        {
                            "currentTask": result.output.current_task,
                            "suggestedResponse": result.output.suggested_response,
                        },
                    )
            self._publish(stored)
            if not applied:
                return False
            suppress = policy.suppression_after_reflection(out_tokens, target)
            self.coordination.set_int(Keys.reflection_suppressed(key), suppress)
            return True
        finally:
            self.coordination.release(Keys.reflect_lock(key), token)

    # ---------------------------------------------------------------------------------- dispatch

    def run_task(self, task: Task) -> bool:
        """Run one task value: the single entry point executors (inline or Celery) call."""
        if isinstance(task, BufferObservation):
            return self.buffer_observation(task)
        if isinstance(task, BufferReflection):
            return self.buffer_reflection(task)
        if isinstance(task, Observe):
            return self.observe(task)
        if isinstance(task, Reflect):
            return self.reflect(task)
        raise TypeError(f"unknown task {task!r}")

    # ------------------------------------------------------------------------------ manual API

    def require_enabled(self, thread_id: str) -> None:
        """Refuse manual work on a thread with OM off (`MemoryDisabled`), instead of a silent no-op."""
        if not self._thread_config(thread_id).enabled:
            raise MemoryDisabled(thread_id)

    def observe_now(self, thread_id: str) -> bool:
        self.require_enabled(thread_id)
        return self.observe(Observe(thread_id, new_cycle_id("observe"), trigger="manual"))

    def reflect_now(self, thread_id: str, prompt: str | None = None) -> bool:
        self.require_enabled(thread_id)
        return self.reflect(
            Reflect(thread_id, new_cycle_id("reflect"), trigger="manual", manual_prompt=prompt)
        )

    def status(self, thread_id: str, step_number: int = 0) -> dict[str, Any]:
        cfg = self._thread_config(thread_id)
        head = records.get_head(self.db, lookup_key(thread_id))
        if head is None:
            raise KeyError(thread_id)
        window = self._window(thread_id, head.last_observed_seq)
        return self._status(head, window, cfg).to_status_payload(
            head.id, thread_id, step_number, head.generation_count
        )
