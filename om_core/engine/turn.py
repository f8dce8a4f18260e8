"""A chat turn: store the new messages, do the cheap step, start due background work, return the context.

The common turn is two short transactions: store and read everything the turn needs (thread, head,
unobserved window and its messages), then write the status event. Everything else happens only when a
threshold says so, and only activation (database work) ever runs on the turn itself unless the
conversation is past `blockAfter`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from sqlalchemy import Connection

from om_core.config.options import ResolvedConfig, message_threshold_max
from om_core.context.actor import ActorContext, build_actor_context
from om_core.context.temporal import is_temporal_marker
from om_core.coordination import Peek
from om_core.engine import (
    activation,
    backlog,
    buffering,
    extraction,
    indexing,
    reflection,
    reminders,
    resource,
    shared_view,
)
from om_core.engine import events as ev
from om_core.engine.core import EVENT_SINK, Activity, EngineCore
from om_core.engine.ports import ThreadIdRequired
from om_core.engine.tasks import BufferObservation, Observe, Task, lookup_key, new_cycle_id
from om_core.engine.tool_pairs import with_observed_calls
from om_core.engine.window import Window, build_window, start_of_recent
from om_core.maintenance import triggers
from om_core.messages import Message, Part
from om_core.policy import decisions
from om_core.policy.decisions import StatusPayload
from om_core.policy.early_activation import resolve_ttl_ms
from om_core.recall.tool import RECALL_TOOL, recall_guidance
from om_core.store import history, records
from om_core.store.db import is_postgres, read_only, single_write
from om_core.store.outbox import write_events
from om_core.store.types import NewEvent, Record, StoredEvent
from om_core.tenancy import access
from om_core.tenancy.scoped_ids import public_id
from om_core.working_memory import document as wm

#: Parts read per page when looking for the start of the recent history (OM off); a page is ~30 KB of rows.
_RECENT_PAGE = 512


@dataclass(frozen=True)
class TurnResult:
    """What the actor sees next. Ids are public: the ones the caller's tenant chose (`scoped_ids`)."""

    thread_id: str
    record_id: str
    system_messages: list[str]
    messages: list[Message]
    continuation_reminder: str
    status: StatusPayload
    events: list[StoredEvent]
    blocked: bool = False
    degraded: bool = False
    degraded_reason: str | None = None
    context: ActorContext = field(default_factory=ActorContext)
    resource_id: str = ""
    #: Tools the actor should be offered, in the chat-completions format: the recall tool when the
    #: thread has `retrieval` on (behaviour §9.2), `updateWorkingMemory` when the actor manages its working
    #: memory (§8.7), else none. Shared values: read, do not modify.
    tools: list[dict[str, Any]] = field(default_factory=list)
    #: False when the caller asked for no context: the fields above that make it up are empty.
    with_context: bool = True


@dataclass(frozen=True)
class _Stored:
    """What the store transaction of a turn read: the thread before and after locking it, the head, the
    unobserved window and its messages, and the shared memory."""

    before: history.ThreadRow | None
    thread: history.ThreadRow
    head: Record
    window: Window
    messages: list[Message]
    shared: shared_view.SharedView
    reminders: list[StoredEvent] = field(default_factory=list)


class _Current(NamedTuple):
    """What a turn returns, as of one consistent read."""

    head: Record
    window: Window
    thread: history.ThreadRow
    messages: list[Message]
    shared: shared_view.SharedView


@dataclass(frozen=True)
class TurnInput:
    """One call of `ingest_turn`, as the caller gave it."""

    thread_id: str
    resource_id: str | None
    messages: list[Message]
    actor_model: str | None = None
    step_number: int = 0
    turn_end: bool | None = None
    tenant_id: str | None = None
    #: The actor call's provider options (`"auto"` idle TTL, behaviour §4.7).
    provider_options: dict[str, Any] | None = None
    #: False when the caller does not want the actor's context back (the reply call of an exchange): the
    #: turn then neither builds it nor reads the message bodies it would show.
    with_context: bool = True


def ingest_turn(core: EngineCore, turn: TurnInput) -> TurnResult:
    """Store the new messages, run the cheap step (activation is database work), start due background
    work, block only past `blockAfter`, and return what the actor should see next.

    `resource_id` None means the thread's own resource (a new thread's id); with a `tenant_id`, a thread
    or resource of another tenant raises `ThreadNotVisible` and nothing is stored.
    """
    if not turn.thread_id:
        raise ThreadIdRequired()
    sink: list[StoredEvent] = []
    token = EVENT_SINK.set(sink)
    try:
        return _ingest(core, turn, sink)
    finally:
        EVENT_SINK.reset(token)


def _ingest(core: EngineCore, turn: TurnInput, sink: list[StoredEvent]) -> TurnResult:
    thread_id = turn.thread_id
    stored = store_and_read(core, turn)
    reminders.announce(core, stored.reminders)
    before, head, window, shared = stored.before, stored.head, stored.window, stored.shared
    cfg = core.config_for(stored.thread.effective_overrides)
    if not cfg.enabled:
        return _disabled_turn(core, thread_id, cfg, stored, turn.step_number, turn.with_context)
    activity = Activity(
        previous_model=before.last_actor_model if before is not None else None,
        last_activity_at=before.last_activity_at if before is not None else None,
        actor_model=turn.actor_model,
        provider_options=turn.provider_options,
    )
    now = core.clock()
    blocked = in_backlog = False
    degraded_reason: str | None = None

    if head.chunks:
        activated = activation.step_zero_activation(core, thread_id, cfg, head, window, activity, now)
        if activated is not head:
            head, window = activated, core.window(thread_id, activated.last_observed_seq)
    view = coordination_view(core, head, window, cfg, shared, activity, now)
    status = first_status = shared_view.status_with(core, head, window, cfg, shared, view)
    if status.should_observe:
        head, window, status = activation.threshold_activation(
            core,
            thread_id,
            head,
            window,
            status,
            lambda h, w: shared_view.status_with(core, h, w, cfg, shared_view.refreshed(core, shared)),
        )
        if status.should_observe and any(w.cursor.chunks for w in shared.windows):
            shared, status = shared_view.activate_other_threads(
                core, stored.thread, cfg, head, window, shared, status
            )
    if decisions.must_block(
        async_enabled=cfg.async_observation_enabled,
        pending=status.pending,
        threshold=status.threshold,
        block_after=cfg.observation.block_after_at(status.threshold),
    ):
        blocked = True
        if not resource.is_shared(cfg) and backlog.is_backlog(core, window):
            degraded_reason, in_backlog = backlog.observe_blocking(core, thread_id), True
        else:
            degraded_reason = core.run_blocking(_blocking_observation(core, stored.thread, cfg), thread_id)

    reflect_blocked, reflect_reason = reflection.maybe_reflect(
        core,
        thread_id,
        activity=activity,
        now=now,
        cfg=cfg,
        head=None if sink else shared.log,
        view=None if sink else view,
    )
    blocked = blocked or reflect_blocked
    degraded_reason = degraded_reason or reflect_reason
    if status.should_buffer:
        # After reflection work, not before: the Observer dedups against the log its chunk will join,
        # and a reflection (or a buffered one activated) in this turn changes that log (behaviour §4.1).
        buffering.launch_buffering(core, thread_id, head, status.pending)

    incoming = turn.messages
    is_turn_end = (
        turn.turn_end if turn.turn_end is not None else bool(incoming and incoming[-1].role == "assistant")
    )
    if is_turn_end and cfg.async_observation_enabled and cfg.observation.buffer_on_idle:
        core.executor.submit(
            BufferObservation(thread_id, new_cycle_id("buffer-obs"), status.pending, skip_minimum=True)
        )
    _schedule_idle_trigger(core, thread_id, stored.thread.resource_id, cfg, activity)
    if cfg.retrieval:
        indexing.request_from_turn(core, thread_id, cfg)
    # Anything that changed the head reported an event; without one, and without blocking work that may
    # have run in another process, the reads above are current.
    unchanged = not sink and not blocked
    result = turn_result(
        core,
        thread_id,
        cfg,
        turn.step_number,
        blocked,
        degraded_reason,
        sink,
        current=_Current(head, window, stored.thread, stored.messages, shared) if unchanged else None,
        # A launch moved the buffering boundary the status shows: compute it again then.
        status=first_status if unchanged and not first_status.should_buffer else None,
        with_context=turn.with_context,
    )
    if in_backlog and turn.with_context:
        result = backlog.bounded_view(core, cfg, thread_id, result)
    return reminders.with_reminder_events(result, stored.reminders)


def coordination_view(
    core: EngineCore,
    head: Record,
    window: Window,
    cfg: ResolvedConfig,
    shared: shared_view.SharedView,
    activity: Activity,
    now: datetime,
) -> Peek:
    """The locks and boundaries this turn's decisions read, fetched from the shared coordination store
    only when the records say some background work could be due.

    Those values only hold work back, so the turn first decides with every lock free and only the stored
    boundaries: when that launches nothing (most turns: between two buffering intervals, below the
    reflection threshold), the shared state could launch nothing either, and the records' own running
    flags serve the status it reports. The common turn thus makes no round trip to Redis."""
    recorded = core.recorded_view(head, shared.log)
    free = Peek(dict.fromkeys(recorded.locks, False), recorded.values)
    status = shared_view.status_with(core, head, window, cfg, shared, free)
    decision, _ = reflection.decide(cfg, shared.log, activity, now, free)
    if status.should_buffer or reflection.is_due(decision):
        return core.peek(head.lookup_key, shared.log.lookup_key)
    return recorded


def _blocking_observation(core: EngineCore, thread: history.ThreadRow, cfg: ResolvedConfig) -> list[Task]:
    """What a turn past the threshold waits for: its thread's `Observe`, or in resource scope the
    resource's batches, sent together so workers run them in parallel."""
    cycle_id = new_cycle_id("observe")
    if resource.is_shared(cfg):
        return list(resource.plan_for(core, thread, cfg, cycle_id=cycle_id, trigger="turn-sync"))
    return [Observe(thread.id, cycle_id)]


def store_and_read(core: EngineCore, turn: TurnInput) -> _Stored:
    """Lock the thread (creating it for the tenant if new), check access, store the messages (temporal
    markers first, when configured), read (or create) the head, then read the unobserved window with its
    messages, bodies coming from the part cache where it has them.

    On Postgres everything is one transaction: it locks rows only. SQLite has one write lock for the whole
    database, held from `BEGIN IMMEDIATE` to commit, so there the head and the window are read after the
    commit, in a reader that neither takes nor waits for that lock, and the parts are counted before the
    transaction: every other writer (the worker's cycles, the other turns) waits only for the writes. The
    reader sees this turn's commit or later, as one snapshot, and takes the head as it finds it (work that
    moved the cursor meanwhile is then already shown)."""
    thread_id, incoming = turn.thread_id, turn.messages
    key = lookup_key(thread_id)
    count_part = _precounted(incoming, _count_part(core, turn.actor_model))  # outside the write lock
    with core.db.begin() as conn:
        before = history.lock_thread(conn, thread_id)
        thread = before or access.create_thread_for(
            conn, turn.tenant_id, thread_id, turn.resource_id or thread_id
        )
        access.check_turn_access(thread, turn.tenant_id, turn.resource_id)
        cfg = core.config_for(thread.effective_overrides)
        if cfg.temporal_markers:  # never with OM off: markers are OM's own messages
            incoming = reminders.with_markers(conn, thread, incoming, core.settings.timezone)
        fresh = history.append_to_locked(
            conn, thread, incoming, count_part=count_part, actor_model=turn.actor_model
        )
        postgres = is_postgres(conn)
        # SQLite holds its one write lock until the commit: there the head is read after it, unless this
        # transaction must write it (a new thread's first generation) or write under it (reminders).
        head: Record | None = None
        if postgres or before is None or any(is_temporal_marker(m) for m in fresh):
            head = _head_or_first(core, conn, thread)
        reminder_events = reminders.write_reminders(conn, thread_id, head, fresh) if head else []
        if cfg.enabled and resource.is_shared(cfg):
            resource.read_log(conn, core, thread.resource_id)  # created by the writer, read below
        fresh_parts = {part.seq: part for message in fresh for part in message.parts}
        read = _WindowRead(core, thread, cfg, fresh_parts, turn.with_context)
        seen = read(conn, head) if postgres and head is not None else None
    if seen is None:
        with read_only(core.db) as conn:
            current = records.read_head(conn, key) or head
            seen = read(conn, current) if current is not None else None
    if seen is None:  # a thread stored before its first turn (its config written first) has no head yet
        with core.db.begin() as conn:
            head = _head_or_first(core, conn, thread)
        with read_only(core.db) as conn:
            seen = read(conn, records.read_head(conn, key) or head)
    head, unobserved, shared = seen
    core.remember_parts(thread, unobserved, fresh_parts)
    window = build_window(unobserved.rows, core.counter)
    return _Stored(before, thread, head, window, unobserved.messages, shared, reminder_events)


@dataclass(frozen=True)
class _WindowRead:
    """The read half of `store_and_read`: the unobserved window after `head`'s cursor and the shared
    memory, consistent with each other (`shared_view.read_consistent`)."""

    core: EngineCore
    thread: history.ThreadRow
    cfg: ResolvedConfig
    fresh_parts: dict[int | None, Part]
    bodies: bool

    def __call__(
        self, conn: Connection, head: Record
    ) -> tuple[Record, history.Unobserved, shared_view.SharedView]:
        return shared_view.read_consistent(
            self.core, conn, self.thread, head, self.cfg, lambda current: self._unobserved(conn, current)
        )

    def _unobserved(self, conn: Connection, head: Record) -> history.Unobserved:
        core, thread = self.core, self.thread
        start = _context_start(core, conn, thread, head, self.cfg)
        return history.read_unobserved(
            conn,
            thread.id,
            start,
            known=lambda seq: self.fresh_parts.get(seq) or core.cached_part(thread, seq),
            bodies=self.bodies,
            held=core.held_window(thread, start),
        )


def _context_start(
    core: EngineCore, conn: Connection, thread: history.ThreadRow, head: Record, cfg: ResolvedConfig
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
        start = start_of_recent(build_window(rows, core.counter), budget)
        if start is not None:
            return start
        if len(page) < _RECENT_PAGE:
            return 0


def _disabled_turn(
    core: EngineCore,
    thread_id: str,
    cfg: ResolvedConfig,
    stored: _Stored,
    step_number: int,
    with_context: bool,
) -> TurnResult:
    """A turn with OM off: the messages are stored (storage is the source of truth) and nothing else
    happens: no model call, no background work, no change to the record or the thread's hints, no
    idle trigger, no event. The cursor stays where it was, so turning OM on later observes the
    backlog by the normal policy. The status reports the record as it stands and the context's
    message tokens."""
    status = shared_view.status_with(core, stored.head, stored.window, cfg, stored.shared)
    return TurnResult(
        thread_id=public_id(thread_id),
        resource_id=public_id(stored.thread.resource_id),
        record_id=stored.head.id,
        system_messages=[],
        messages=[m for m in stored.messages if m.has_visible_content],
        continuation_reminder="",
        status=status.to_status_payload(stored.head.id, thread_id, step_number, stored.head.generation_count),
        events=[],
        with_context=with_context,
    )


def _read_current(core: EngineCore, thread_id: str, cfg: ResolvedConfig, *, bodies: bool = True) -> _Current:
    """Head, window, unobserved messages (none without `bodies`) and shared memory as committed now
    (after work that changed them)."""
    with core.db.connect() as conn:
        head = records.read_head(conn, lookup_key(thread_id))
        thread = history.get_thread(conn, thread_id)
        assert head is not None and thread is not None, "the turn created both"
        head, unobserved, shared = shared_view.read_consistent(
            core,
            conn,
            thread,
            head,
            cfg,
            lambda current: history.read_unobserved(
                conn,
                thread_id,
                current.last_observed_seq,
                known=lambda seq: core.cached_part(thread, seq),
                bodies=bodies,
                held=core.held_window(thread, current.last_observed_seq),
            ),
        )
    core.remember_parts(thread, unobserved, {})
    window = build_window(unobserved.rows, core.counter)
    return _Current(head, window, thread, unobserved.messages, shared)


def current_status(core: EngineCore, thread_id: str, step_number: int = 0) -> StatusPayload:
    """The thread's status as committed now, as its next turn would compute it. KeyError when the
    thread has no record yet."""
    cfg = core.thread_config(thread_id)
    if records.get_head(core.db, lookup_key(thread_id)) is None:
        raise KeyError(thread_id)
    head, window, _thread, _messages, shared = _read_current(core, thread_id, cfg, bodies=False)
    log = shared.log
    status = shared_view.status_with(core, head, window, cfg, shared)
    return status.to_status_payload(log.id, thread_id, step_number, log.generation_count)


def _schedule_idle_trigger(
    core: EngineCore, thread_id: str, resource_id: str, cfg: ResolvedConfig, activity: Activity
) -> None:
    """Arm (or move) the idle trigger for beat: the earliest phase TTL after the last activity. The
    payload keeps the actor's model and provider options, so beat resolves `"auto"` as the turn did."""
    actor_model, options = activity.actor_model, activity.provider_options
    ttls = [
        ttl
        for ttl in (
            resolve_ttl_ms(cfg.observation.activate_after_idle, actor_model, options),
            resolve_ttl_ms(cfg.reflection.activate_after_idle, actor_model, options),
        )
        if ttl is not None
    ]
    if not ttls:
        return
    thread = history.get_thread(core.db, thread_id)
    if thread is None or thread.last_activity_at is None:
        return
    with core.db.begin() as conn:
        triggers.schedule(
            conn,
            lookup_key=lookup_key(thread_id),
            kind=triggers.IDLE,
            thread_id=thread_id,
            resource_id=resource_id,
            due_at=thread.last_activity_at + timedelta(milliseconds=min(ttls)),
            payload={"actorModel": actor_model, "providerOptions": dict(options) if options else None},
        )


def _head_or_first(core: EngineCore, conn: Connection, thread: history.ThreadRow) -> Record:
    """The thread's head, created (generation 0) when it has none yet."""
    key = lookup_key(thread.id)
    return records.read_head(conn, key) or records.initialize(
        conn,
        lookup_key=key,
        scope="thread",
        thread_id=thread.id,
        resource_id=thread.resource_id,
        config=core.base_config.to_public_dict(),
        observed_timezone=core.settings.timezone,
    )


def _precounted(messages: Sequence[Message], count: history.PartCounter) -> history.PartCounter:
    """`count` with the incoming parts counted now, before the write transaction that stores them, so the
    tokenizer does not run under SQLite's write lock; parts added inside it (temporal markers) are
    counted there."""
    counted = {id(part): count(part) for message in messages for part in message.parts}
    return lambda part: counted.get(id(part)) or count(part)


def _count_part(core: EngineCore, actor_model: str | None) -> Callable[[Any], tuple[float, float, int]]:
    def count(part: Any) -> tuple[float, float, int]:
        counted = core.counter.count_part(part, actor_model)
        return (counted.tokens, counted.overhead_delta, counted.extra_messages)

    return count


def turn_result(
    core: EngineCore,
    thread_id: str,
    cfg: ResolvedConfig,
    step_number: int,
    blocked: bool,
    degraded_reason: str | None,
    sink: list[StoredEvent],
    *,
    current: _Current | None,
    status: decisions.Status | None = None,
    with_context: bool = True,
) -> TurnResult:
    """Write the turn's status event and build what the actor sees from one consistent read (only the
    status and events `with_context` False)."""
    head, window, thread, unobserved, shared = current or _read_current(
        core, thread_id, cfg, bodies=with_context
    )
    status = status or shared_view.status_with(core, head, window, cfg, shared)
    log = shared.log
    payload = status.to_status_payload(log.id, thread_id, step_number, log.generation_count)
    memory: wm.WorkingMemory | None = None
    with single_write(core.db) as conn:  # one INSERT, and a read that need not be consistent with it
        stored = write_events(
            conn,
            lookup_key=lookup_key(thread_id),
            thread_id=thread_id,
            resource_id=head.resource_id,
            record_id=log.id,
            events=[NewEvent(ev.STATUS.value, dict(payload))],
        )
        if cfg.working_memory.enabled:  # one primary-key read, only for threads that have one
            memory = wm.read_at(conn, wm.target_for_thread(thread, cfg), cfg)
    core.publish(stored)
    bare = TurnResult(
        thread_id=public_id(thread_id),
        resource_id=public_id(thread.resource_id),
        record_id=log.id,
        system_messages=[],
        messages=[],
        continuation_reminder="",
        status=payload,
        events=list(sink),
        blocked=blocked,
        degraded=degraded_reason is not None,
        degraded_reason=degraded_reason,
        with_context=False,
    )
    if not with_context:
        return bare
    visible = with_observed_calls(
        core, thread_id, head.last_observed_seq, [m for m in unobserved if m.has_visible_content]
    )
    options = cfg.retrieval_options
    guidance = (
        recall_guidance(options.scope, options.vector and core.searcher is not None, options.instructions)
        if options is not None
        else None
    )
    context = actor_context(
        core,
        thread,
        log,
        has_unobserved=bool(visible),
        others=shared.others,
        retrieval_guidance=guidance,
        guidance_without_memory=options is not None and options.scope == "resource",
        memory=memory,
        cfg=cfg,
    )
    tools = [RECALL_TOOL] if options is not None else []
    if memory is not None and cfg.working_memory.agent_managed:
        tools.append(wm.update_tool(cfg.working_memory))
    return replace(
        bare,
        system_messages=list(context.system_messages),
        messages=visible,
        continuation_reminder=context.continuation_reminder,
        context=context,
        tools=tools,
        with_context=True,
    )


def actor_context(
    core: EngineCore,
    thread: history.ThreadRow | None,
    log: Record,
    *,
    has_unobserved: bool,
    others: str = "",
    retrieval_guidance: str | None = None,
    guidance_without_memory: bool = False,
    memory: wm.WorkingMemory | None = None,
    cfg: ResolvedConfig | None = None,
) -> ActorContext:
    """The observation log, the other conversations (resource scope) and the thread's hints as the
    actor's system messages; in retrieval mode the recall guidance with the preamble (behaviour §4.11); the
    working memory (`memory`, with the `cfg` it was read under) after the stable prefix (§8.7). Values of
    extractors marked `context: true` follow the built-in hints, in the volatile part, so a new value
    never changes the stable prefix."""
    meta = thread.om_metadata if thread is not None else {}
    extra = (
        extraction.context_values(core.config_for(thread.effective_overrides), thread)
        if thread is not None
        else {}
    )
    shown = wm.actor_messages(memory, cfg.working_memory) if memory is not None and cfg is not None else []
    return build_actor_context(
        active_observations=log.active_observations,
        extra_values=extra,
        other_conversations=others or None,
        current_task=meta.get("currentTask"),
        suggested_response=meta.get("suggestedResponse"),
        now=core.clock(),
        tz=core.settings.timezone,
        has_unobserved_history=has_unobserved,
        rendered_logs=core.rendered_logs,
        retrieval_guidance=retrieval_guidance,
        guidance_without_memory=guidance_without_memory,
        working_memory=shown,
        working_memory_as_signal=cfg is not None and cfg.working_memory.use_state_signals,
    )
