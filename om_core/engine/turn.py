"""A chat turn: store the new messages, do the cheap step, start due background work, return the context.

The common turn is two short transactions: store and read everything the turn needs (thread, head,
unobserved window and its messages), then write the status event. Everything else happens only when a
threshold says so, and only activation (database work) ever runs on the turn itself unless the
conversation is past `blockAfter`.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from om_core import tracing
from om_core.config import request_choice
from om_core.config.options import ResolvedConfig
from om_core.coordination import Peek
from om_core.engine import (
    activation,
    backlog,
    buffering,
    indexing,
    reflection,
    reminders,
    resource,
    shared_view,
)
from om_core.engine.core import EVENT_SINK, Activity, EngineCore
from om_core.engine.ports import ThreadIdRequired
from om_core.engine.tasks import REQUEST_CHOICE, BufferObservation, Observe, Task, lookup_key, new_cycle_id
from om_core.engine.turn_reply import Current, TurnResult, disabled_turn, turn_result
from om_core.engine.turn_store import TurnInput, previous_actor_model, store_and_read
from om_core.engine.window import Window
from om_core.maintenance import triggers
from om_core.policy import decisions
from om_core.policy.early_activation import resolve_ttl_ms
from om_core.store import history
from om_core.store.types import Record, StoredEvent
from om_core.tenancy.scoped_ids import StoredId


def ingest_turn(core: EngineCore, turn: TurnInput) -> TurnResult:
    """Store the new messages, run the cheap step (activation is database work), start due background
    work, block only past `blockAfter`, and return what the actor should see next.

    `resource_id` None means the thread's own resource (a new thread's id); with a `tenant_id`, a thread
    or resource of another tenant raises `ThreadNotVisible` and nothing is stored.
    """
    if not turn.thread_id:
        raise ThreadIdRequired()
    if turn.choice:
        # Refused (OMConfigError, the API's 422) before anything is stored.
        thread = history.get_thread(core.db, turn.thread_id)
        core.check_choice(
            thread.effective_overrides if thread is not None else None, turn.choice, turn.tenant_id
        )
    sink: list[StoredEvent] = []
    token = EVENT_SINK.set(sink)
    chosen = REQUEST_CHOICE.set(request_choice.encode(turn.choice))
    try:
        with tracing.operation("om.turn", {"om.messages": len(turn.messages)}):
            return _ingest(core, turn, sink)
    finally:
        REQUEST_CHOICE.reset(chosen)
        EVENT_SINK.reset(token)


def _ingest(core: EngineCore, turn: TurnInput, sink: list[StoredEvent]) -> TurnResult:
    thread_id = turn.thread_id
    stored = store_and_read(core, turn)
    reminders.announce(core, stored.reminders)
    before, head, window, shared = stored.before, stored.head, stored.window, stored.shared
    cfg = core.config_for(stored.thread.effective_overrides)
    if not cfg.enabled:
        return disabled_turn(core, thread_id, cfg, stored, turn.step_number, turn.with_context)
    activity = Activity(
        previous_model=previous_actor_model(turn, before),
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
        if not resource.scope_for(cfg).shared and backlog.is_backlog(core, window):
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
        current=Current(head, window, stored.thread, stored.messages, shared) if unchanged else None,
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
    task = Observe(thread.id, new_cycle_id("observe"), trigger="turn-sync")
    batches = resource.scope_for(cfg).batches(core, task, cfg)
    return [task] if batches is None else list(batches)


def _schedule_idle_trigger(
    core: EngineCore, thread_id: StoredId, resource_id: StoredId, cfg: ResolvedConfig, activity: Activity
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
