"""Activation: buffered chunks join the observation log with no model call (behaviour §4.5, §4.7).

A turn activates at the threshold, or earlier when the actor's provider changed or the thread was idle
past its TTL (the prompt cache is cold either way); beat's idle check does the same for quiet threads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from om_core import tracing
from om_core.config.options import ResolvedConfig
from om_core.coordination import Keys
from om_core.engine import events as ev
from om_core.engine import reflection
from om_core.engine.core import Activity, EngineCore, policy_tokens
from om_core.engine.early import early_trigger
from om_core.engine.tasks import lookup_key
from om_core.engine.window import Window
from om_core.observations.resource_log import compose_section, thread_label
from om_core.policy import decisions
from om_core.store import history, records
from om_core.store.payloads import TriggerDetails
from om_core.store.types import ActivationResult, Chunk, NewEvent, Record
from om_core.tenancy.scoped_ids import StoredId


def step_zero_activation(
    core: EngineCore,
    thread_id: StoredId,
    cfg: ResolvedConfig,
    head: Record,
    window: Window,
    activity: Activity,
    now: datetime,
) -> Record:
    """Early activation before the threshold: provider change, then idle TTL (behaviour §4.7). `window` is
    the unobserved window of `head`. Returns `head` itself when nothing was activated."""
    if not head.chunks:
        return head
    if head.last_buffered_at_tokens:
        reset = decisions.stale_boundary_reset(head.last_buffered_at_tokens, window.tokens)
        if reset != head.last_buffered_at_tokens:
            with core.db.begin() as conn:
                records.set_buffering_boundary(conn, head.id, reset)
            core.coordination.set_int(Keys.buffer_boundary(head.lookup_key), None)
    trigger, details = early_trigger(cfg, activity, now, reflection=False)
    if trigger is None:
        return head
    result = activate(core, thread_id, triggered_by=trigger, trigger_details=details)
    return result if result is not None else head


def threshold_activation(
    core: EngineCore,
    thread_id: StoredId,
    head: Record,
    window: Window,
    status: decisions.Status,
    status_of: Callable[[Record, Window], decisions.Status],
) -> tuple[Record, Window, decisions.Status]:
    """At the threshold: activate ready chunks until under it or nothing is left (behaviour §4.5).
    `status_of` is the turn's status rule (in resource scope it counts the other threads too)."""
    while status.should_observe and status.can_activate:
        activated = activate(core, thread_id, pending_tokens=status.pending, triggered_by="threshold")
        if activated is None:
            break
        head = activated
        window = core.window(thread_id, head.last_observed_seq)
        status = status_of(head, window)
    return head, window, status


class _Choice:
    """How many of the stored chunks one activation takes (behaviour §4.5's boundary selection)."""

    def __init__(self, pending: int, floor: float, force: bool, take_all: bool) -> None:
        self.pending, self.floor, self.force, self.take_all = pending, floor, force, take_all

    def __call__(self, chunks: Sequence[Any]) -> int:
        if self.take_all:
            return len(chunks)
        return decisions.select_activation_boundary(
            [c.message_tokens for c in chunks], self.pending, self.floor, self.force
        )


class _ActivationEvents:
    """One activation marker per activated chunk, built in the committing transaction."""

    def __init__(
        self,
        thread_id: StoredId,
        now: datetime,
        triggered_by: str,
        config: dict[str, Any],
        details: TriggerDetails,
        threshold: int,
    ) -> None:
        self.thread_id, self.now, self.triggered_by = thread_id, now, triggered_by
        self.config, self.details, self.threshold = config, details.copy(), threshold

    def __call__(self, result: ActivationResult) -> list[NewEvent]:
        generation = result.record.generation_count if result.record else 0
        outcome = (
            ev.ActivationOutcome(
                remaining_chunks=len(result.record.chunks),
                remaining_tokens=int(result.record.pending_message_tokens or 0),
                threshold=self.threshold,
            )
            if result.record is not None
            else None
        )
        return [
            ev.chunk_activation(
                chunk,
                activated_at=self.now,
                generation_count=generation,
                triggered_by=self.triggered_by,
                record_id=result.record.id if result.record else "",
                thread_id=self.thread_id,
                config=self.config,
                trigger_details=self.details,
                outcome=outcome,
            )
            for chunk in result.per_chunk
        ]


def activate(
    core: EngineCore,
    thread_id: StoredId,
    *,
    pending_tokens: int | None = None,
    triggered_by: str = "threshold",
    trigger_details: TriggerDetails | None = None,
    activate_all: bool = False,
) -> Record | None:
    """Move a prefix of the stored chunks into the log; None when nothing was activated.

    Retries on the new head when a rollover retired the one it read (at most 3 times, behaviour §3.5(4)).
    """
    with tracing.operation("om.activation", {"om.trigger": triggered_by}):
        return _activate(core, thread_id, pending_tokens, triggered_by, trigger_details, activate_all)


def _activate(
    core: EngineCore,
    thread_id: StoredId,
    pending_tokens: int | None,
    triggered_by: str,
    trigger_details: TriggerDetails | None,
    activate_all: bool,
) -> Record | None:
    cfg = core.thread_config(thread_id)
    key = lookup_key(thread_id)
    shared = _shared_log(core, thread_id, cfg)
    for _attempt in range(3):
        head = records.get_head(core.db, key)
        if head is None or not head.chunks:
            return None
        window = core.window(thread_id, head.last_observed_seq)
        pending = pending_tokens if pending_tokens is not None else window.tokens
        log = records.get_head(core.db, shared.key) if shared is not None else head
        threshold = decisions.dynamic_threshold(
            policy_tokens(cfg.observation.message_tokens), (log or head).observation_token_count
        )
        buffer_activation = cfg.observation.buffer_activation
        floor = (
            decisions.retention_floor(buffer_activation, threshold) if buffer_activation is not None else 0.0
        )
        choose = _Choice(
            pending,
            floor,
            decisions.force_activation(pending, cfg.observation.block_after_at(threshold)),
            activate_all,
        )
        events = _ActivationEvents(
            thread_id,
            core.clock(),
            triggered_by,
            core.marker_config(cfg),
            trigger_details or {},
            threshold=round(threshold),
        )
        with core.db.begin() as conn:
            result, stored = records.activate(
                conn,
                head.id,
                choose_count=choose,
                pending_tokens=pending,
                thread_metadata_patch=lambda r: _thread_metadata(r, shared is not None),
                events=events,
                shared_log=shared,
            )
        if result.retired:
            continue
        core.publish(stored)
        if not result.activated:
            return None
        core.coordination.set_int(Keys.buffer_boundary(key), None)
        if cfg.observation.thread_title and result.thread_title:
            core.update_title(thread_id, head, result.thread_title, result.activated_cycle_ids[-1])
        return result.record
    return None


def _thread_metadata(result: ActivationResult, shared: bool) -> dict[str, Any]:
    """The hints of the last activated chunk; in resource scope also the thread's cursor (behaviour §4.12)."""
    patch: dict[str, Any] = {
        "currentTask": result.current_task,
        "suggestedResponse": result.suggested_continuation,
    }
    record = result.record
    if shared and record is not None and record.last_observed_at is not None:
        patch["lastObservedAt"] = record.last_observed_at.isoformat()
        patch["lastObservedMessageCursor"] = record.last_observed_seq
    return patch


def _shared_log(core: EngineCore, thread_id: StoredId, cfg: ResolvedConfig) -> records.SharedLog | None:
    """In resource scope, the resource's log and the thread's section in it (behaviour §4.12)."""
    key = core.log_key(thread_id, cfg)
    if key == lookup_key(thread_id):
        return None
    label = thread_label(thread_id, obscure=cfg.obscure_thread_ids)

    def compose(text: str, chunk: Chunk) -> str:
        observed_at = chunk.last_observed_at or chunk.created_at
        return compose_section(text, label, chunk.observations, observed_at)

    return records.SharedLog(key, compose)


def on_idle(
    core: EngineCore,
    thread_id: StoredId,
    *,
    actor_model: str | None,
    now: datetime | None,
    provider_options: Mapping[str, Any] | None = None,
) -> bool:
    """Beat's idle check: activate buffered observations (and a buffered reflection) whose idle TTL
    expired, so the next, uncached prompt is the compressed one. True if anything was activated."""
    thread = history.get_thread(core.db, thread_id)
    head = records.get_head(core.db, lookup_key(thread_id))
    if thread is None or head is None:
        return False
    cfg = core.config_for(thread.effective_overrides)
    if not cfg.enabled:
        return False  # OM off: an idle trigger armed before it was switched off activates nothing
    moment = now or core.clock()
    activity = Activity(
        previous_model=thread.last_actor_model,
        last_activity_at=thread.last_activity_at,
        actor_model=actor_model or thread.last_actor_model,
        provider_options=provider_options,
    )
    activated = False
    trigger, details = early_trigger(cfg, activity, moment, reflection=False)
    if trigger == "ttl" and head.chunks:
        activated = activate(core, thread_id, triggered_by="ttl", trigger_details=details) is not None
    generation = head.generation_count
    reflection.maybe_reflect(core, thread_id, activity=activity, now=moment)
    after = records.get_head(core.db, lookup_key(thread_id))
    return activated or (after is not None and after.generation_count != generation)
