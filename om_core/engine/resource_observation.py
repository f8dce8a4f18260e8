"""Observing a resource: its threads' unobserved messages go to the Observer in batches that run in
parallel (one task each), and every batch commits into the shared log on its own (behaviour §4.12).

A batch holds the observe lock of each of its threads, so no two Observers ever see the same messages;
its commit re-checks every thread's cursor under the row locks, so a batch that lost a race writes
nothing and leaves its messages raw for the next one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from sqlalchemy import Connection

from om_core.config.options import ResolvedConfig
from om_core.context.tool_exchanges import safe_cut_backward
from om_core.engine import activation, extraction, indexing, resource
from om_core.engine.core import EngineCore, policy_tokens
from om_core.engine.cycle import Cycle, Usage
from om_core.engine.grouping import GroupPlace, group_observations
from om_core.engine.observer_call import observe_threads
from om_core.engine.ports import ObserverDegenerateError
from om_core.engine.resource import scope_for
from om_core.engine.runner import Operation, Planned, Write, run
from om_core.engine.tasks import ObserveBatch, kind_of, lookup_key
from om_core.engine.tool_pairs import spans_read
from om_core.engine.window import build_window, cut_for_budget, cut_keeping_tail
from om_core.extractors import persist
from om_core.messages import Message
from om_core.observations.resource_log import compose_section, strip_thread_tags, thread_label
from om_core.observer.prompt import MultiThreadObserverOutput, ObserverOutput
from om_core.policy import decisions
from om_core.store import groups, history, records
from om_core.store.types import (
    NewEvent,
    ObservationGroup,
    Record,
    StoredEvent,
    ThreadObservation,
    WriteResult,
)
from om_core.tenancy.scoped_ids import StoredId, public_id


def run_batches(core: EngineCore, log_key: str, batches: Sequence[ObserveBatch]) -> bool:
    """Run the batches of one observation of a resource (in parallel where the executor can). True when
    any batch committed: the log under `log_key` changed."""
    if not batches:
        return False
    before = records.get_head(core.db, log_key)
    core.executor.run_all(batches, core.settings.blocking_deadline_s)
    after = records.get_head(core.db, log_key)
    return after is not None and (
        before is None
        or after.observation_token_count != before.observation_token_count
        or after.id != before.id
    )


def observe_batch(core: EngineCore, task: ObserveBatch) -> bool:
    """One batch: True when its observations were committed. Raises `OperationFailed` when the Observer
    call failed (every thread's failed event is written), so a turn waiting on it reports itself
    degraded."""
    return run(_Batch(core, task))


@dataclass(frozen=True)
class _Share:
    """One thread's part of the batch: the parts (from_seq, to_seq] and their messages."""

    thread: history.ThreadRow
    cursor: Record
    from_seq: int
    to_seq: int
    tokens: int
    messages: list[Message]


def _shares(core: EngineCore, task: ObserveBatch, cfg: ResolvedConfig, resource_id: StoredId) -> list[_Share]:
    threshold = decisions.dynamic_threshold(policy_tokens(cfg.observation.message_tokens), 0)
    out: list[_Share] = []
    with core.db.connect() as conn:
        for thread_id in task.thread_ids:
            thread = history.get_thread(conn, thread_id)
            cursor = records.read_head(conn, lookup_key(thread_id))
            if thread is None or cursor is None or thread.resource_id != resource_id:
                continue
            window = build_window(
                history.part_tokens_after(conn, thread_id, cursor.last_observed_seq), core.counter
            )
            if not window.messages:
                continue
            spans = spans_read(conn, thread_id, cursor.last_observed_seq, window)  # pairs stay together
            cut = safe_cut_backward(window.max_seq, spans)
            if thread_id == task.keep_tail:
                cut = cut_keeping_tail(window, 1.0, max_keep=threshold - 1, spans=spans)
            cut = min(cut, cut_for_budget(window, core.settings.observer_input_cap_tokens, spans))
            if cut <= cursor.last_observed_seq:
                continue
            messages = [
                m
                for m in history.load_parts(conn, thread_id, after_seq=cursor.last_observed_seq, upto_seq=cut)
                if m.has_visible_content
            ]
            if messages:
                share = _Share(
                    thread, cursor, cursor.last_observed_seq, cut, window.tokens_upto(cut), messages
                )
                out.append(share)
    return out


@dataclass(frozen=True)
class _Work:
    shares: list[_Share]
    labels: dict[StoredId, str]
    extractors: dict[str, extraction.RunExtractors]
    log: Record

    def run_of(self, share: _Share) -> extraction.RunExtractors:
        return self.extractors[self.labels[share.thread.id]]


@dataclass(frozen=True)
class _Observed:
    output: MultiThreadObserverOutput
    #: The shares the Observer wrote something for, in batch order: only they commit.
    shares: list[_Share]

    def of(self, work: _Work, share: _Share) -> ObserverOutput:
        return self.output.for_thread(work.labels[share.thread.id])


@dataclass
class _Batch(Operation[ObserveBatch, _Work, _Observed]):
    task: ObserveBatch
    reports_refusal: ClassVar[bool] = True

    def escalates(self, error: BaseException) -> bool:
        return True

    def plan(self, cfg: ResolvedConfig | None) -> Planned[_Work] | None:
        core, task = self.core, self.task
        assert cfg is not None
        requester = history.get_thread(core.db, task.thread_id)
        if requester is None or not scope_for(cfg).shared:
            return None
        for thread_id in task.thread_ids:
            # Chunks first, so the log stays in conversation order and the batch starts at the cursor
            # they leave (a chunk reaching past what the batch observes would refuse its commit).
            activation.activate(core, thread_id, activate_all=True, triggered_by="threshold")
        shares = _shares(core, task, cfg, requester.resource_id)
        if not shares:
            return None
        with core.db.begin() as conn:
            log = resource.read_log(conn, core, requester.resource_id)
        labels = {s.thread.id: thread_label(s.thread.id, obscure=cfg.obscure_thread_ids) for s in shares}
        kind = kind_of(task)
        usage = Usage()
        # One cycle per thread and starting point, as in thread scope: a batch delivered again observes
        # what came after its first commit, and its events must not be dropped as repeats of the first
        # run's. The first reports the batch's model usage.
        cycles = [
            Cycle(
                core,
                kind,
                f"{task.cycle_id}-{s.from_seq}",
                s.cursor,
                s.thread.id,
                s.tokens,
                usage=usage if i == 0 else Usage(),
            )
            for i, s in enumerate(shares)
        ]
        runs = {
            labels[s.thread.id]: extraction.plan(cfg, "observer", s.thread, memory=core.db) for s in shares
        }
        return Planned(
            cfg, cycles, _Work(shares, labels, runs, log), batch=[public_id(s.thread.id) for s in shares]
        )

    def call(self, planned: Planned[_Work]) -> _Observed:
        work = planned.work
        output = observe_threads(
            self.core,
            planned.cfg,
            work.log,
            {work.labels[s.thread.id]: (s.thread, s.messages) for s in work.shares},
            planned.lead.usage,
            work.extractors,
        )
        observed = _Observed(output, [])
        for share in work.shares:
            if observed.of(work, share).observations.strip():
                observed.shares.append(share)
                continue
            # Nothing for this thread: committing would move its cursor past parts that are nowhere in
            # the log. Its messages stay raw for the next batch; its cycle ends here.
            cycle = _cycle_of(planned, share)
            cycle.fail(ObserverDegenerateError("no observations for the thread's messages"))
            planned.cycles.remove(cycle)
        if not observed.shares:
            raise ObserverDegenerateError("the Observer returned no observations for any thread of the batch")
        for share in observed.shares:  # structured extraction: one call per thread (§8.5)
            structured = extraction.structured_values(
                self.core,
                planned.cfg,
                work.run_of(share),
                messages=share.messages,
                timezone=share.cursor.observed_timezone,
                output=observed.of(work, share).raw,
                usage=planned.lead.usage,
            )
            if structured is not None:
                planned.extracted[share.thread.id] = structured
        return observed

    def write(self, planned: Planned[_Work], output: _Observed) -> Write:
        work = planned.work
        # Inline values per thread, from its own block (§8.5: each thread its own values).
        values = {
            s.thread.id: extraction.cycle_values(
                work.run_of(s),
                output.of(work, s).raw,
                extraction.builtin_values(
                    output.of(work, s).current_task,
                    output.of(work, s).suggested_response,
                    output.of(work, s).thread_title if planned.cfg.observation.thread_title else None,
                ),
                planned.extracted.get(s.thread.id),
            )
            for s in output.shares
        }
        grouped = [
            _entry(
                self.core,
                planned.cfg,
                share,
                work.labels[share.thread.id],
                output.of(work, share),
                key=work.log.lookup_key,
                cycle_id=_cycle_of(planned, share).cycle_id,
                extracted=extraction.metadata_patch(work.run_of(share), values[share.thread.id]),
            )
            for share in output.shares
        ]
        entries = [entry for entry, _group in grouped]
        new_groups = [group for _entry, group in grouped if group is not None]
        cycles = {cycle.thread_id: cycle for cycle in planned.cycles}
        ends = {
            e.thread_id: cycles[e.thread_id].ending(
                tokens_observed=e.observed_message_tokens,
                observation_tokens=e.token_count,
                observations=e.observations,
                current_task=e.thread_metadata.get("currentTask"),
                suggested_response=e.thread_metadata.get("suggestedResponse"),
                seq_range=(e.from_seq, e.to_seq),
                extraction=persist.end_fields(values[e.thread_id]),
                signals=values[e.thread_id].signals,
            )
            for e in entries
        }

        def events(updated: Mapping[StoredId, Record]) -> list[tuple[Record, Sequence[NewEvent]]]:
            return [(record, ends[thread_id](record)) for thread_id, record in updated.items()]

        def write(conn: Connection) -> tuple[WriteResult, list[StoredEvent]]:
            result, stored = records.commit_thread_observations(
                conn,
                work.log.lookup_key,
                entries,
                compose=lambda text, e: compose_section(text, e.label, e.observations, e.last_observed_at),
                events=events,
            )
            if result.applied:
                groups.insert(conn, new_groups)
            return result, stored

        return write

    def committed(self, planned: Planned[_Work], output: _Observed) -> None:
        work = planned.work
        if planned.cfg.observation.thread_title:
            for share in output.shares:
                title = output.of(work, share).thread_title
                if title:
                    self.core.update_title(share.thread.id, share.cursor, title, self.task.cycle_id)

    def request_index(self) -> None:
        indexing.request_after_commit(self.core, self.task.thread_ids)


def _cycle_of(planned: Planned[_Work], share: _Share) -> Cycle:
    return next(cycle for cycle in planned.cycles if cycle.thread_id == share.thread.id)


def _entry(
    core: EngineCore,
    cfg: ResolvedConfig,
    share: _Share,
    label: str,
    output: ObserverOutput,
    *,
    key: str,
    cycle_id: str,
    extracted: Mapping[str, Any] | None = None,
) -> tuple[ThreadObservation, ObservationGroup | None]:
    last = max(m.created_at for m in share.messages)
    text, group = group_observations(
        cfg,
        strip_thread_tags(output.observations).strip(),
        share.messages,
        GroupPlace(share.thread.id, share.thread.resource_id, key, cycle_id, last),
    )
    entry = ThreadObservation(
        cursor_record_id=share.cursor.id,
        thread_id=share.thread.id,
        label=label,
        from_seq=share.from_seq,
        to_seq=share.to_seq,
        observations=text,
        token_count=core.counter.count_string(text),
        observed_message_tokens=share.tokens,
        last_observed_at=last,
        thread_metadata={
            "currentTask": output.current_task,
            "suggestedResponse": output.suggested_response,
            "lastObservedAt": last.isoformat(),
            "lastObservedMessageCursor": share.to_seq,
            **(extracted or {}),
        },
    )
    return entry, group
