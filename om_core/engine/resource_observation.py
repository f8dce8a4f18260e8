"""Observing a resource: its threads' unobserved messages go to the Observer in batches that run in
parallel (one task each), and every batch commits into the shared log on its own (behaviour §4.12).

A batch holds the observe lock of each of its threads, so no two Observers ever see the same messages;
its commit re-checks every thread's cursor under the row locks, so a batch that lost a race writes
nothing and leaves its messages raw for the next one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from om_core.config.options import ResolvedConfig
from om_core.context.tool_exchanges import safe_cut_backward
from om_core.engine import activation, extraction, resource
from om_core.engine.core import EngineCore, policy_tokens
from om_core.engine.cycle import Cycle, Usage, run_if_enabled
from om_core.engine.grouping import GroupPlace, group_observations
from om_core.engine.observer_call import observe_threads
from om_core.engine.ports import ObserverDegenerateError
from om_core.engine.tasks import Observe, ObserveBatch, kind_of, lookup_key
from om_core.engine.tool_pairs import spans_read
from om_core.engine.window import build_window, cut_for_budget, cut_keeping_tail
from om_core.errors import OperationFailed
from om_core.extractors import persist
from om_core.messages import Message
from om_core.observations.resource_log import compose_section, strip_thread_tags, thread_label
from om_core.observer.prompt import ObserverOutput
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
from om_core.tenancy.scoped_ids import public_id


def observe_resource(core: EngineCore, task: Observe, cfg: ResolvedConfig) -> bool:
    """An `Observe` of a thread in resource scope: plan the resource's batches and run them (in parallel
    where the executor can). True when any batch committed."""
    thread = history.get_thread(core.db, task.thread_id)
    if thread is None:
        return False
    batches = resource.plan_for(core, thread, cfg, cycle_id=task.cycle_id, trigger=task.trigger)
    if not batches:
        return False
    before = records.get_head(core.db, resource.log_key(cfg, thread))
    core.executor.run_all(batches, core.settings.blocking_deadline_s)
    after = records.get_head(core.db, resource.log_key(cfg, thread))
    return after is not None and (
        before is None
        or after.observation_token_count != before.observation_token_count
        or after.id != before.id
    )


def observe_batch(core: EngineCore, task: ObserveBatch) -> bool:
    """One batch: True when its observations were committed. Raises `OperationFailed` when the Observer
    call failed (every thread's failed event is written), so a turn waiting on it reports itself
    degraded."""
    return run_if_enabled(core, task, lambda cfg: _observe_locked(core, task, cfg))


@dataclass(frozen=True)
class _Share:
    """One thread's part of the batch: the parts (from_seq, to_seq] and their messages."""

    thread: history.ThreadRow
    cursor: Record
    from_seq: int
    to_seq: int
    tokens: int
    messages: list[Message]


def _shares(core: EngineCore, task: ObserveBatch, cfg: ResolvedConfig, resource_id: str) -> list[_Share]:
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


def _observe_locked(core: EngineCore, task: ObserveBatch, cfg: ResolvedConfig) -> bool:
    requester = history.get_thread(core.db, task.thread_id)
    if requester is None or not resource.is_shared(cfg):
        return False
    for thread_id in task.thread_ids:
        # Chunks first, so the log stays in conversation order and the batch starts at the cursor
        # they leave (a chunk reaching past what the batch observes would refuse its commit).
        activation.activate(core, thread_id, activate_all=True, triggered_by="threshold")
    shares = _shares(core, task, cfg, requester.resource_id)
    if not shares:
        return False
    with core.db.begin() as conn:
        log = resource.read_log(conn, core, requester.resource_id)
    obscure = cfg.obscure_thread_ids
    labels = {s.thread.id: thread_label(s.thread.id, obscure=obscure) for s in shares}
    kind = kind_of(task)
    usage = Usage()
    # One cycle per thread and starting point, as in thread scope: a batch delivered again observes what
    # came after its first commit, and its events must not be dropped as repeats of the first run's.
    cycles = {
        s.thread.id: Cycle(
            core,
            kind,
            f"{task.cycle_id}-{s.from_seq}",
            s.cursor,
            s.thread.id,
            s.tokens,
            usage=usage if i == 0 else Usage(),
        )
        for i, s in enumerate(shares)
    }
    batch_ids = [public_id(s.thread.id) for s in shares]
    for cycle in cycles.values():
        cycle.start(core.marker_config(cfg), thread_ids=batch_ids)
    runs = {labels[s.thread.id]: extraction.plan(cfg, "observer", s.thread, memory=core.db) for s in shares}
    try:
        output = observe_threads(
            core, cfg, log, {labels[s.thread.id]: (s.thread, s.messages) for s in shares}, usage, runs
        )
    except Exception as exc:
        for cycle in cycles.values():
            cycle.fail(exc)
        raise OperationFailed(str(exc) or type(exc).__name__) from exc
    committed: list[_Share] = []
    for share in shares:
        if output.for_thread(labels[share.thread.id]).observations.strip():
            committed.append(share)
        else:
            # Nothing for this thread: committing would move its cursor past parts that are nowhere in
            # the log. Its messages stay raw for the next batch.
            cycles[share.thread.id].fail(ObserverDegenerateError("no observations for the thread's messages"))
    if not committed:
        problem = ObserverDegenerateError("the Observer returned no observations for any thread of the batch")
        raise OperationFailed(str(problem)) from problem
    # Inline values per thread, from its own block (§8.5: each thread its own values).
    values = {
        s.thread.id: extraction.inline_values(
            runs[labels[s.thread.id]], output.for_thread(labels[s.thread.id]).raw
        )
        for s in committed
    }
    grouped = [
        _entry(
            core,
            cfg,
            share,
            labels[share.thread.id],
            output.for_thread(labels[share.thread.id]),
            key=log.lookup_key,
            cycle_id=cycles[share.thread.id].cycle_id,
            extracted=extraction.metadata_patch(runs[labels[share.thread.id]], values[share.thread.id]),
        )
        for share in committed
    ]
    entries = [entry for entry, _group in grouped]
    new_groups = [group for _entry, group in grouped if group is not None]
    ends = {
        e.thread_id: cycles[e.thread_id].ending(
            tokens_observed=e.observed_message_tokens,
            observation_tokens=e.token_count,
            observations=e.observations,
            current_task=e.thread_metadata.get("currentTask"),
            suggested_response=e.thread_metadata.get("suggestedResponse"),
            seq_range=(e.from_seq, e.to_seq),
            extraction=persist.end_fields(values[e.thread_id]),
        )
        for e in entries
    }

    def events(updated: Mapping[str, Record]) -> list[tuple[Record, Sequence[NewEvent]]]:
        return [(record, ends[thread_id](record)) for thread_id, record in updated.items()]

    def write(conn: Connection) -> tuple[WriteResult, list[StoredEvent]]:
        result, stored = records.commit_thread_observations(
            conn,
            log.lookup_key,
            entries,
            compose=lambda text, e: compose_section(text, e.label, e.observations, e.last_observed_at),
            events=events,
        )
        if result.applied:
            groups.insert(conn, new_groups)
        return result, stored

    first = cycles[committed[0].thread.id]
    result = first.commit(write)
    if not result.applied:
        for share in committed:
            cycles[share.thread.id].fail(RuntimeError(f"commit refused: {result.reason}"))
        return False
    for share in committed:  # structured extraction: one task per thread
        extraction.request_structured(
            core,
            runs[labels[share.thread.id]],
            thread_id=share.thread.id,
            source_cycle_id=cycles[share.thread.id].cycle_id,
            record_id=share.cursor.id,
            seq_range=(share.from_seq, share.to_seq),
        )
    if cfg.observation.thread_title:
        for share in committed:
            title = output.for_thread(labels[share.thread.id]).thread_title
            if title:
                core.update_title(share.thread.id, share.cursor, title, task.cycle_id)
    return True


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
