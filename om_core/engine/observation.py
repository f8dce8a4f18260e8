"""Blocking observation of the unobserved tail (behaviour §4.5 `sync_observe`): a turn past `blockAfter`
waits for it, a manual "observe now" runs it.

Chunks still waiting are activated first so the log stays in conversation order; the tail is observed
in batches no larger than the Observer input cap, each committing on its own; the newest messages (the
retention floor, at least the prompt being answered) stay raw.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from sqlalchemy import Connection

from om_core.config.options import ResolvedConfig
from om_core.coordination import Keys
from om_core.engine import activation, extraction, resource_observation
from om_core.engine.core import EngineCore, policy_tokens
from om_core.engine.cycle import Cycle
from om_core.engine.grouping import GroupPlace, group_observations
from om_core.engine.observer_call import observe_messages
from om_core.engine.ports import ObserverDegenerateError
from om_core.engine.resource import scope_for
from om_core.engine.runner import Operation, Planned, Write, run
from om_core.engine.tasks import Observe, lookup_key
from om_core.engine.tool_pairs import spans_after
from om_core.engine.window import cut_for_budget, cut_keeping_tail
from om_core.extractors import persist
from om_core.messages import Message
from om_core.observer.prompt import ObserverOutput
from om_core.policy import decisions
from om_core.store import groups, history, records
from om_core.store.types import Record, StoredEvent, WriteResult

#: Batches per run: a backlog larger than this many Observer inputs is finished by the next run.
_MAX_BATCHES = 64


def observe(core: EngineCore, task: Observe) -> bool:
    """True when anything was observed or activated. Raises `OperationFailed` when an Observer call
    failed (its failed event is written), so a turn waiting on it reports itself degraded.

    Where the scope plans the observation across threads (a resource's batches) those run instead, each
    holding its own threads' locks."""
    cfg = core.thread_config(task.thread_id)
    if cfg.enabled:
        scope = scope_for(cfg)
        batches = scope.batches(core, task, cfg)
        if batches is not None:
            return resource_observation.run_batches(core, scope.log_key_of(core.db, task.thread_id), batches)
    return run(_Observation(core, task))


@dataclass(frozen=True)
class _Work:
    thread: history.ThreadRow | None
    head: Record
    batch: list[Message]
    from_seq: int
    to_seq: int
    tokens: int
    extractors: extraction.RunExtractors


@dataclass
class _Observation(Operation[Observe, _Work, ObserverOutput]):
    """The unobserved tail in batches no larger than the Observer input cap, each its own cycle."""

    task: Observe

    @property
    def rounds(self) -> int:
        return self.task.batches or _MAX_BATCHES

    def escalates(self, error: BaseException) -> bool:
        return True

    reports_refusal: ClassVar[bool] = True

    def plan(self, cfg: ResolvedConfig | None) -> Planned[_Work] | None:
        """The next batch, after the waiting chunks (activated first so the log stays in order)."""
        core, task = self.core, self.task
        assert cfg is not None
        if activation.activate(core, task.thread_id, activate_all=True, triggered_by="threshold"):
            self.changed = True
        key = lookup_key(task.thread_id)
        head = records.get_head(core.db, key)
        if head is None:
            return None
        window = core.window(task.thread_id, head.last_observed_seq)
        threshold = decisions.dynamic_threshold(
            policy_tokens(cfg.observation.message_tokens), head.observation_token_count
        )
        if not window.messages or window.tokens < (threshold if task.trigger == "manual" else 1):
            return None
        buffer_activation = cfg.observation.buffer_activation
        floor = (
            decisions.retention_floor(buffer_activation, threshold) if buffer_activation is not None else 1.0
        )
        # The kept tail is over the threshold only when one message is; it is observed by the next batch.
        spans = spans_after(core, task.thread_id, head.last_observed_seq, window)  # pairs stay together
        cut = cut_keeping_tail(window, max(floor, 1.0), max_keep=threshold - 1, spans=spans)
        if cut <= head.last_observed_seq:
            return None
        if head.chunks:
            return None  # activation above did not clear the list (retired head); the next step retries
        cut = min(cut, cut_for_budget(window, core.settings.observer_input_cap_tokens, spans))
        from_seq = head.last_observed_seq
        with core.db.connect() as conn:
            thread = history.get_thread(conn, task.thread_id)
            batch = [
                m
                for m in history.load_parts(conn, task.thread_id, after_seq=from_seq, upto_seq=cut)
                if m.has_visible_content
            ]
        if not batch:
            return None  # nothing unobserved: never commit a cursor computed from nothing (H4)
        tokens = window.tokens_upto(cut)
        cycle = Cycle.of(core, task, head, tokens, cycle_id=f"{task.cycle_id}-{from_seq}")
        run = extraction.plan(cfg, "observer", thread, memory=core.db)
        return Planned(cfg, [cycle], _Work(thread, head, batch, from_seq, cut, tokens, run))

    def call(self, planned: Planned[_Work]) -> ObserverOutput:
        work = planned.work
        output = observe_messages(
            self.core,
            planned.cfg,
            work.head,
            work.batch,
            planned.lead.usage,
            thread=work.thread,
            extractors=work.extractors,
        )
        if not output.observations.strip():
            # Committing would move the cursor past parts whose content is nowhere in the log. Keep them
            # raw, and fail like a failed model call, so a turn that waited on this reports itself degraded.
            raise ObserverDegenerateError("no observations for a non-empty transcript")
        structured = extraction.structured_values(
            self.core,
            planned.cfg,
            work.extractors,
            messages=work.batch,
            timezone=work.head.observed_timezone,
            output=output.raw,
            usage=planned.lead.usage,
        )
        if structured is not None:
            planned.extracted[self.task.thread_id] = structured
        return output

    def write(self, planned: Planned[_Work], output: ObserverOutput) -> Write:
        work, cycle, task = planned.work, planned.lead, self.task
        last_observed_at = max(m.created_at for m in work.batch)
        text, group = group_observations(
            planned.cfg,
            output.observations.strip(),
            work.batch,
            GroupPlace(
                task.thread_id, work.head.resource_id, work.head.lookup_key, cycle.cycle_id, last_observed_at
            ),
        )
        observation_tokens = self.core.counter.count_string(text)
        builtins = extraction.builtin_values(
            output.current_task,
            output.suggested_response,
            output.thread_title if planned.cfg.observation.thread_title else None,
        )
        values = extraction.cycle_values(
            work.extractors, output.raw, builtins, planned.extracted.get(task.thread_id)
        )
        end = cycle.ending(
            tokens_observed=work.tokens,
            observation_tokens=observation_tokens,
            observations=text,
            current_task=output.current_task,
            suggested_response=output.suggested_response,
            seq_range=(work.from_seq, work.to_seq),
            extraction=persist.end_fields(values),
            signals=values.signals,
        )
        metadata = {
            "currentTask": output.current_task,
            "suggestedResponse": output.suggested_response,
            **extraction.metadata_patch(work.extractors, values),
        }

        def write(conn: Connection) -> tuple[WriteResult, list[StoredEvent]]:
            result, stored = records.commit_observation(
                conn,
                work.head.id,
                from_seq=work.from_seq,
                to_seq=work.to_seq,
                observations=text,
                token_count=observation_tokens,
                observed_message_tokens=work.tokens,
                last_observed_at=last_observed_at,
                thread_metadata=metadata,
                events=end,
            )
            if result.applied and group is not None:
                groups.insert(conn, [group])
            return result, stored

        return write

    def committed(self, planned: Planned[_Work], output: ObserverOutput) -> None:
        work, cycle_id, thread_id = planned.work, planned.lead.cycle_id, self.task.thread_id
        self.core.coordination.set_int(Keys.buffer_boundary(work.head.lookup_key), None)
        if planned.cfg.observation.thread_title and output.thread_title:
            self.core.update_title(thread_id, work.head, output.thread_title, cycle_id)
