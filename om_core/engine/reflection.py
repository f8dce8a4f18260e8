"""Reflection: deciding it on a turn, activating a buffered reflection, and the blocking reflection of
the whole log into a new generation (behaviour §4.6).

A reflection that is not smaller than its input is never committed (it would only churn generations);
the exact input is then suppressed until the log changes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from om_core.config.options import ResolvedConfig
from om_core.coordination import Keys, Peek
from om_core.engine import events as ev
from om_core.engine import extraction
from om_core.engine.core import Activity, EngineCore
from om_core.engine.cycle import Cycle
from om_core.engine.early import early_trigger
from om_core.engine.grouping import reflector_input
from om_core.engine.reflector_call import Reflected, reflect_for
from om_core.engine.runner import Discarded, Operation, Planned, Write, run
from om_core.engine.tasks import BufferReflection, Reflect, lookup_key, new_cycle_id, task_key
from om_core.extractors import persist
from om_core.policy import decisions
from om_core.reflector.prompt import (
    ReflectionEmptyError,
    RetryInfo,
    append_tail_after_reflection,
    replace_leading_lines,
)
from om_core.store import groups, history, records
from om_core.store.payloads import TriggerDetails
from om_core.store.types import NewEvent, Record, StoredEvent, WriteResult
from om_core.tenancy.scoped_ids import StoredId


def maybe_reflect(
    core: EngineCore,
    thread_id: StoredId,
    *,
    activity: Activity | None = None,
    now: datetime | None = None,
    cfg: ResolvedConfig | None = None,
    head: Record | None = None,
    view: Peek | None = None,
) -> tuple[bool, str | None]:
    """Decide and run reflection work. Returns (blocked, degraded reason).

    `head` is the caller's current read of the head, if it has one (saves a round trip)."""
    cfg = cfg or core.thread_config(thread_id)
    key = head.lookup_key if head is not None else core.log_key(thread_id, cfg)
    head = head or records.get_head(core.db, key)
    if head is None:
        return False, None
    now = now or core.clock()
    decision, details = decide(cfg, head, activity or Activity(), now, view or core.peek(key))
    if decision.start_buffered:
        start_buffered_reflection(core, thread_id, head)
    if decision.triggered_by is None:
        return False, None
    if decision.try_activate:
        outcome = activate_buffered_reflection(
            core,
            thread_id,
            cfg,
            decision.triggered_by,
            details if decision.triggered_by != "threshold" else {},
        )
        if outcome in ("activated", "suppressed"):
            return False, None
    if decision.on_no_buffer == "start_buffered" and not decision.start_buffered:
        start_buffered_reflection(core, thread_id, head)
        return False, None
    if decision.on_no_buffer == "sync":
        last = core.coordination.get_int(Keys.reflection_suppressed(key))
        if decisions.sync_reflection_suppressed(last, head.observation_token_count, decision.triggered_by):
            return False, None
        task = Reflect(thread_id, new_cycle_id("reflect"), key=_shared_key(thread_id, key))
        return True, core.run_blocking(task, thread_id)
    return False, None


def decide(
    cfg: ResolvedConfig, head: Record, activity: Activity, now: datetime, view: Peek
) -> tuple[decisions.ReflectionDecision, TriggerDetails]:
    """What reflection work the log needs as `view` shows the coordination state, with the details of an
    early trigger (idle TTL, provider change) for its event."""
    key = head.lookup_key
    trigger, details = early_trigger(cfg, activity, now, reflection=True)
    decision = decisions.reflection_action(
        obs=head.observation_token_count,
        R=cfg.reflection.observation_tokens,
        a=cfg.reflection.buffer_activation,
        RB=cfg.reflection.block_after,
        async_enabled=cfg.async_reflection_enabled,
        has_buffered_reflection=bool(head.buffered_reflection),
        reflection_in_flight=view.is_locked(Keys.buffered_reflection_lock(key)),
        boundary_recorded=view.get_int(Keys.reflection_boundary(key)) is not None,
        ttl_expired=trigger == "ttl",
        provider_changed=trigger == "provider_change",
        reflection_live=view.is_locked(Keys.reflect_lock(key)),
    )
    return decision, details


def is_due(decision: decisions.ReflectionDecision) -> bool:
    """Whether the decision does anything at all."""
    return decision.start_buffered or decision.triggered_by is not None


def start_buffered_reflection(core: EngineCore, thread_id: StoredId, head: Record) -> None:
    key = head.lookup_key
    if core.coordination.get_int(Keys.reflection_boundary(key)) == head.observation_token_count:
        return  # already tried on exactly this log; wait until it changes
    core.coordination.set_int(Keys.reflection_boundary(key), head.observation_token_count, ttl_s=3600)
    core.executor.submit(
        BufferReflection(thread_id, head.id, new_cycle_id("buffer-refl"), key=_shared_key(thread_id, key))
    )


def _shared_key(thread_id: StoredId, key: str) -> str:
    """A task's `key`: set only when the log is not the thread's own, so thread-scope payloads keep
    their shape."""
    return "" if key == lookup_key(thread_id) else key


@dataclass(frozen=True)
class _ReflectionActivationEvents:
    """The activation marker of a buffered reflection, built in the committing transaction."""

    cycle_id: str
    now: datetime
    tokens_before: int
    triggered_by: str
    thread_id: StoredId
    config: dict[str, Any]
    details: TriggerDetails

    def __call__(self, successor: Record) -> list[NewEvent]:
        return [replace(draft, thread_id=self.thread_id) for draft in self._drafts(successor)]

    def _drafts(self, successor: Record) -> list[NewEvent]:
        return [
            ev.reflection_activation(
                cycle_id=self.cycle_id,
                activated_at=self.now,
                tokens_before=self.tokens_before,
                tokens_after=successor.observation_token_count,
                generation_count=successor.generation_count,
                observations=successor.active_observations,
                triggered_by=self.triggered_by,
                record_id=successor.id,
                thread_id=self.thread_id,
                config=self.config,
                trigger_details=self.details.copy(),
            )
        ]


def activate_buffered_reflection(
    core: EngineCore, thread_id: StoredId, cfg: ResolvedConfig, triggered_by: str, details: TriggerDetails
) -> str:
    """Swap a buffered reflection into a new generation: "activated", "suppressed" (an early trigger's
    guard said it would not pay off) or "no-buffer"."""
    key = core.log_key(thread_id, cfg)
    head = records.get_head(core.db, key)
    if head is None or not head.buffered_reflection or head.reflected_observation_line_count is None:
        return "no-buffer"
    if triggered_by in ("ttl", "provider_change"):
        lines = head.active_observations.split("\n")
        tail = "\n".join(lines[head.reflected_observation_line_count :]).strip()
        combined = replace_leading_lines(
            head.active_observations, head.reflected_observation_line_count, head.buffered_reflection
        )
        verdict = decisions.early_trigger_guard(
            core.counter.count_string(tail),
            head.buffered_reflection_tokens or 0,
            core.counter.count_string(combined),
            cfg.reflection.observation_tokens,
            cfg.reflection.buffer_activation or 0.5,
        )
        if verdict is not None:
            return "suppressed"
    events = _ReflectionActivationEvents(
        cycle_id=head.buffered_reflection_cycle_id or new_cycle_id("buffer-refl"),
        now=core.clock(),
        tokens_before=head.observation_token_count,
        triggered_by=triggered_by,
        thread_id=thread_id,
        config=core.marker_config(cfg),
        details=details,
    )
    with core.db.begin() as conn:
        successor, reason, stored = records.swap_buffered_reflection_to_active(
            conn,
            head.id,
            compose=replace_leading_lines,
            count_tokens=core.counter.count_string,
            events=events,
        )
    core.publish(stored)
    if successor is None or reason is not None:
        return "no-buffer"
    core.coordination.set_int(Keys.reflection_boundary(key), None)
    return "activated"


def reflect(core: EngineCore, task: Reflect) -> bool:
    """Blocking reflection of the whole log into a new generation. Raises `OperationFailed` when the
    Reflector failed (its failed event is written)."""
    return run(_Reflection(core, task))


@dataclass(frozen=True)
class _Work:
    key: str
    snapshot: Record
    plain: str
    ranges: str | None
    extractors: extraction.RunExtractors


@dataclass
class _Reflection(Operation[Reflect, _Work, Reflected]):
    task: Reflect

    def escalates(self, error: BaseException) -> bool:
        return not isinstance(error, ReflectionEmptyError)

    def plan(self, cfg: ResolvedConfig | None) -> Planned[_Work] | None:
        core, task = self.core, self.task
        assert cfg is not None
        key = task_key(task) if task.key else core.log_key(task.thread_id, cfg)
        snapshot = records.get_head(core.db, key)
        if snapshot is None or not snapshot.active_observations.strip():
            return None
        plain, ranges = reflector_input(snapshot.active_observations)
        # Extractors run for the thread that asked for the reflection (§6.5), in resource scope too: the
        # values of a resource's shared log go to the metadata of the thread whose turn reflected it.
        run = extraction.plan(cfg, "reflector", history.get_thread(core.db, task.thread_id), memory=core.db)
        cycle = Cycle.of(core, task, snapshot, snapshot.observation_token_count)
        return Planned(cfg, [cycle], _Work(key, snapshot, plain, ranges, run))

    def call(self, planned: Planned[_Work]) -> Reflected:
        work, cycle, marker = planned.work, planned.lead, self.core.marker_config(planned.cfg)

        def on_retry(info: RetryInfo) -> None:
            cycle.restart(info.message, new_cycle_id("reflect"), marker)

        reflected = reflect_for(
            self.core,
            cycle,
            planned.cfg,
            work.snapshot,
            work.plain,
            work.ranges,
            target=planned.cfg.reflection.observation_tokens,
            include_hints=True,
            manual_prompt=self.task.manual_prompt,
            on_retry=on_retry,
            extractors=work.extractors,
        )
        obs = work.snapshot.observation_token_count
        if reflected.tokens >= obs:
            # Not smaller than its input: committing would only churn generations.
            raise Discarded(f"reflection not smaller than its input ({obs} -> {reflected.tokens})")
        structured = extraction.structured_values(
            self.core,
            planned.cfg,
            work.extractors,
            messages=(),
            timezone=work.snapshot.observed_timezone,
            output=reflected.raw,
            usage=cycle.usage,
        )
        if structured is not None:
            planned.extracted[self.task.thread_id] = structured
        return reflected

    def failed(self, planned: Planned[_Work], error: BaseException) -> None:
        # The log stays; retries on this exact input are suppressed until it changes.
        work = planned.work
        self.core.coordination.set_int(
            Keys.reflection_suppressed(work.key), work.snapshot.observation_token_count
        )

    def write(self, planned: Planned[_Work], output: Reflected) -> Write:
        work, task = planned.work, self.task
        hints = output.output
        builtins = extraction.builtin_values(hints.current_task, hints.suggested_response)
        values = extraction.cycle_values(
            work.extractors, output.raw, builtins, planned.extracted.get(task.thread_id)
        )
        patch = extraction.metadata_patch(work.extractors, values)
        end = planned.lead.ending(
            tokens_observed=work.snapshot.observation_token_count,
            observation_tokens=output.tokens,
            observations=output.text,
            current_task=hints.current_task,
            suggested_response=hints.suggested_response,
            extraction=persist.end_fields(values),
            signals=values.signals,
        )

        def write(conn: Connection) -> tuple[WriteResult, list[StoredEvent]]:
            successor, applied, stored = records.create_reflection_generation(
                conn,
                work.snapshot,
                reflection=output.text,
                token_count=output.tokens,
                compose=append_tail_after_reflection,
                events=end,
            )
            if applied and successor is not None:
                groups.insert(conn, [output.group] if output.group is not None else [])
                metadata = {
                    "currentTask": hints.current_task,
                    "suggestedResponse": hints.suggested_response,
                    **patch,
                }
                records.patch_thread_metadata(conn, task.thread_id, metadata)
            return WriteResult(applied), stored

        return write

    def committed(self, planned: Planned[_Work], output: Reflected) -> None:
        work = planned.work
        suppress = decisions.suppression_after_reflection(
            output.tokens, planned.cfg.reflection.observation_tokens
        )
        self.core.coordination.set_int(Keys.reflection_suppressed(work.key), suppress)
