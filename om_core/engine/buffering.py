"""Buffered observation: the Observer runs in the background into a chunk while the chat goes on
(behaviour §4.3 `buffer()`); activation later swaps chunks into the log with no model call.

A buffering cycle never raises to the turn: a failure becomes a `data-om-buffering-failed` event and
the next interval (or the blocking fallback) covers the same messages.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import ClassVar

from sqlalchemy import Connection

from om_core.config.options import ResolvedConfig
from om_core.context.tool_exchanges import Span, exchange_spans, safe_cut_backward, tool_parts_of
from om_core.coordination import Keys
from om_core.engine import events as ev
from om_core.engine import extraction
from om_core.engine.core import EngineCore, policy_tokens
from om_core.engine.cycle import Cycle
from om_core.engine.grouping import GroupPlace, group_observations
from om_core.engine.observer_call import observe_messages
from om_core.engine.ports import ObserverDegenerateError
from om_core.engine.resource import scope_for
from om_core.engine.runner import Operation, Planned, Write, run
from om_core.engine.tasks import BufferObservation, lookup_key, new_cycle_id
from om_core.engine.window import Window, build_window, cut_for_budget
from om_core.extractors import persist
from om_core.messages import Message
from om_core.observer.prompt import ObserverOutput
from om_core.policy import decisions
from om_core.store import groups, history, records
from om_core.store.outbox import has_event
from om_core.store.types import ChunkInput, Record, StoredEvent, WriteResult
from om_core.tenancy.scoped_ids import StoredId

log = logging.getLogger("om.engine")


def launch_buffering(core: EngineCore, thread_id: StoredId, head: Record, pending: int) -> None:
    """Record the interval boundary before anything else (so the next step does not re-trigger), then
    hand the work to the executor."""
    core.coordination.set_int(Keys.buffer_boundary(head.lookup_key), pending, ttl_s=3600)
    with core.db.begin() as conn:
        records.set_buffering_boundary(conn, head.id, pending)
    core.executor.submit(BufferObservation(thread_id, new_cycle_id("buffer-obs"), pending))


def buffer_observation(core: EngineCore, task: BufferObservation) -> bool:
    """Observe unbuffered messages into a chunk. True when a chunk was stored. While another buffering op
    of the thread holds the lock this one does nothing: no parallel Observer (H8)."""
    return run(_Buffering(core, task))


@dataclass(frozen=True)
class _Snapshot:
    thread: history.ThreadRow
    cfg: ResolvedConfig
    head: Record
    unobserved: history.Unobserved
    #: The log the chunk will join: the resource's in resource scope, else the thread's own head.
    log: Record


def _snapshot(core: EngineCore, conn: Connection, task: BufferObservation) -> _Snapshot | None:
    """The reads of a buffering op, on the transaction its start is written on: the thread and its config,
    the head, whether this cycle already ended (a redelivered task does nothing, not even a model call),
    and everything after the buffer cursor."""
    key = lookup_key(task.thread_id)
    thread = history.get_thread(conn, task.thread_id)
    if thread is None:
        return None
    cfg = core.config_for(thread.effective_overrides)
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
        conn, task.thread_id, head.buffer_cursor, known=lambda seq: core.cached_part(thread, seq)
    )
    log = scope_for(cfg).joined_log(conn, thread.resource_id, head)
    return _Snapshot(thread, cfg, head, unobserved, log)


def _safe_buffer_cut(candidates: Sequence[Message], from_seq: int, window: Window) -> int:
    """The last sequence number safe to buffer: stop before an open tool call on the newest message
    (behaviour §4.3), and before any call whose result is not in yet or comes after the cut (§4.10): a chunk
    never holds a call without its result, so no activation can leave a result without its call."""
    return safe_cut_backward(_prefix_cut(candidates, from_seq, window), _spans(candidates, window))


def _spans(candidates: Sequence[Message], window: Window) -> list[Span]:
    return exchange_spans(tool_parts_of(candidates), window.user_seqs)


def _prefix_cut(candidates: Sequence[Message], from_seq: int, window: Window) -> int:
    safe = decisions.select_safe_buffer_prefix(candidates)
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


def _set_buffering(conn: Connection, key: str, flag: bool) -> None:
    records.set_live_head_fields(conn, key, {"is_buffering_observation": flag})


@dataclass(frozen=True)
class _Batch:
    """What one buffering op observes: its messages, the parts they span and their tokens."""

    messages: list[Message]
    from_seq: int
    to_seq: int
    tokens: int


def _batch(core: EngineCore, task: BufferObservation, snapshot: _Snapshot) -> _Batch | None:
    """The messages to buffer now, or None when there is nothing to do yet (no model call)."""
    cfg, head = snapshot.cfg, snapshot.head
    from_seq = head.buffer_cursor
    window = build_window(snapshot.unobserved.rows, core.counter)
    if not window.messages:
        return None
    candidates = [m for m in snapshot.unobserved.messages if m.has_visible_content]
    to_seq = _safe_buffer_cut(candidates, from_seq, window)
    if to_seq <= from_seq:
        return None  # deferred: a tool exchange is still open; the next step retries
    to_seq = min(
        to_seq, cut_for_budget(window, core.settings.observer_input_cap_tokens, _spans(candidates, window))
    )
    batch_tokens = window.tokens_upto(to_seq)
    threshold = decisions.dynamic_threshold(  # the log's size (the resource's in resource scope) sets it
        policy_tokens(cfg.observation.message_tokens), snapshot.log.observation_token_count
    )
    interval = cfg.observation.buffer_tokens_at(threshold) or 0
    if not decisions.meets_minimum(batch_tokens, interval, task.skip_minimum):
        return None
    batch = [m for m in _parts_upto(candidates, to_seq) if m.has_visible_content]
    if not batch:
        return None
    return _Batch(batch, from_seq, to_seq, batch_tokens)


@dataclass(frozen=True)
class _Work:
    snapshot: _Snapshot
    batch: _Batch
    extractors: extraction.RunExtractors


@dataclass
class _Buffering(Operation[BufferObservation, _Work, ObserverOutput]):
    task: BufferObservation
    config_in_plan: ClassVar[bool] = True

    def plan(self, cfg: ResolvedConfig | None) -> Planned[_Work] | None:
        # One transaction reads the snapshot and, when there is work, writes the start (event and flag): a
        # checkout, a BEGIN and a COMMIT fewer per observation than a read followed by a write. On SQLite
        # the read already took the write lock (`BEGIN IMMEDIATE`), so the start no longer queues for it.
        core, task = self.core, self.task
        with core.db.begin() as conn:
            snapshot = _snapshot(core, conn, task)
            batch = _batch(core, task, snapshot) if snapshot is not None else None
            if snapshot is not None and batch is not None:
                key = snapshot.head.lookup_key
                cycle = Cycle.of(core, task, snapshot.head, batch.tokens)
                started = cycle.start_on(
                    conn, core.marker_config(snapshot.cfg), with_change=lambda c: _set_buffering(c, key, True)
                )
        if snapshot is None:
            return None
        core.remember_parts(
            snapshot.thread, snapshot.unobserved, {}
        )  # committed rows only (`remember_parts`)
        if batch is None:
            return None
        run = extraction.plan(snapshot.cfg, "observer", snapshot.thread, memory=core.db)
        return Planned(snapshot.cfg, [cycle], _Work(snapshot, batch, run), started=started)

    def call(self, planned: Planned[_Work]) -> ObserverOutput:
        snapshot = planned.work.snapshot
        output = observe_messages(
            self.core,
            planned.cfg,
            snapshot.head,
            planned.work.batch.messages,
            planned.lead.usage,
            thread=snapshot.thread,
            log=snapshot.log,
            extractors=planned.work.extractors,
        )
        if not output.observations.strip():  # a failure like any other: a redelivery calls no model
            raise ObserverDegenerateError("the Observer returned no observations for the messages")
        structured = extraction.structured_values(
            self.core,
            planned.cfg,
            planned.work.extractors,
            messages=planned.work.batch.messages,
            timezone=snapshot.head.observed_timezone,
            output=output.raw,
            usage=planned.lead.usage,
        )
        if structured is not None:
            planned.extracted[self.task.thread_id] = structured
        return output

    def failed(self, planned: Planned[_Work], error: BaseException) -> None:
        with self.core.db.begin() as conn:
            _set_buffering(conn, planned.work.snapshot.head.lookup_key, False)

    def write(self, planned: Planned[_Work], output: ObserverOutput) -> Write:
        task, snapshot, batch, run = (
            self.task,
            planned.work.snapshot,
            planned.work.batch,
            planned.work.extractors,
        )
        head, key = snapshot.head, snapshot.head.lookup_key
        last_observed_at = max(m.created_at for m in batch.messages) + timedelta(milliseconds=1)
        text, group = group_observations(
            planned.cfg,
            output.observations.strip(),
            batch.messages,
            GroupPlace(
                task.thread_id,
                snapshot.thread.resource_id,
                snapshot.log.lookup_key,
                task.cycle_id,
                last_observed_at,
            ),
        )
        chunk = ChunkInput(
            cycle_id=task.cycle_id,
            observations=text,
            token_count=self.core.counter.count_string(text),
            message_ids=[m.id for m in batch.messages],
            message_tokens=batch.tokens,
            from_seq=batch.from_seq,
            to_seq=batch.to_seq,
            last_observed_at=last_observed_at,
            thread_id=task.thread_id,
            current_task=output.current_task,
            suggested_continuation=output.suggested_response,
            thread_title=output.thread_title,
        )
        builtins = extraction.builtin_values(
            output.current_task,
            output.suggested_response,
            output.thread_title if planned.cfg.observation.thread_title else None,
        )
        values = extraction.cycle_values(run, output.raw, builtins, planned.extracted.get(task.thread_id))
        patch = extraction.metadata_patch(run, values)
        end = planned.lead.ending(
            tokens_buffered=batch.tokens,
            buffered_tokens=chunk.token_count,
            observations=text,
            extraction=persist.end_fields(values),
            signals=values.signals,
        )
        # The flag and the pacing boundary go on the key's live head in the chunk's transaction, stored or
        # not; `append_chunk` folds them into the UPDATE that marks the chunk's coverage when it stores it.
        finished = records.LiveFields(
            key, {"is_buffering_observation": False, "last_buffered_at_tokens": max(0, batch.tokens)}
        )

        def write(conn: Connection) -> tuple[WriteResult, list[StoredEvent]]:
            appended, stored = records.append_chunk(conn, head.id, chunk, events=end, live=finished)
            if appended.persisted and group is not None:
                groups.insert(conn, [group])
            if appended.persisted and patch:
                # Extracted values persist now, though the chunk waits for activation (behaviour §8.6.4).
                records.patch_thread_metadata(conn, task.thread_id, patch)
            return WriteResult(appended.persisted, appended.reason), stored

        return write

    def refused(self, planned: Planned[_Work], result: WriteResult) -> None:
        self._paced(planned)
        log.info("chunk %s not stored: %s", self.task.cycle_id, result.reason)

    def committed(self, planned: Planned[_Work], output: ObserverOutput) -> None:
        self._paced(planned)
        task, head = self.task, planned.work.snapshot.head
        if planned.cfg.observation.thread_title and output.thread_title:
            self.core.update_title(task.thread_id, head, output.thread_title, task.cycle_id)

    def _paced(self, planned: Planned[_Work]) -> None:
        """The interval boundary other processes read, stored or not."""
        key = planned.work.snapshot.head.lookup_key
        self.core.coordination.set_int(Keys.buffer_boundary(key), planned.work.batch.tokens, ttl_s=3600)
