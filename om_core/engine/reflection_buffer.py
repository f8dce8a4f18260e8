"""Buffered reflection: the leading slice of the log is reflected in the background and stored on the
record it was read from, to be swapped in later with no model call (behaviour §4.6)."""

from __future__ import annotations

from sqlalchemy import Connection

from om_core.config.options import ResolvedConfig
from om_core.coordination import Keys
from om_core.engine import extraction
from om_core.engine.core import EngineCore
from om_core.engine.cycle import Cycle, run_if_enabled
from om_core.engine.grouping import GroupPlace, group_reflection, reflector_input
from om_core.engine.reflector_call import ladder_usage, run_ladder
from om_core.engine.tasks import BufferReflection, lookup_key
from om_core.extractors import persist
from om_core.observations.groups import align_slice
from om_core.policy import decisions
from om_core.store import groups, history, records
from om_core.store.types import StoredEvent, WriteResult


def buffer_reflection(core: EngineCore, task: BufferReflection) -> bool:
    """True when a buffered reflection was stored on the named record."""
    return run_if_enabled(core, task, lambda cfg: _buffer_locked(core, task, cfg))


def _buffer_locked(core: EngineCore, task: BufferReflection, cfg: ResolvedConfig) -> bool:
    head = records.get_record(core.db, task.record_id)
    if (
        head is None
        or not head.is_live
        or head.buffered_reflection
        or cfg.reflection.buffer_activation is None
    ):
        return False
    lines = head.active_observations.split("\n")
    n_lines, slice_estimate, target = decisions.reflection_slice(
        len(lines),
        head.observation_token_count,
        cfg.reflection.observation_tokens,
        cfg.reflection.buffer_activation,
    )
    n_lines = align_slice(lines, n_lines)  # a prefix never ends inside an observation group
    if n_lines <= 0:
        return False
    sliced = "\n".join(lines[:n_lines])
    slice_tokens = core.counter.count_string(sliced)
    text, ranges = reflector_input(sliced)
    boundary = Keys.reflection_boundary(head.lookup_key)
    cycle = Cycle.of(core, task, head, slice_estimate)
    cycle.start(core.marker_config(cfg))
    # Extractors run on a thread's own log, as in blocking reflection; their values persist now, though
    # the reflection waits for activation (behaviour §8.6.4).
    run = (
        extraction.plan(cfg, "reflector", history.get_thread(core.db, task.thread_id), memory=core.db)
        if head.lookup_key == lookup_key(task.thread_id)
        else extraction.NONE
    )
    try:
        result, raw = run_ladder(
            core,
            cfg,
            text,
            target=target,
            include_hints=False,
            manual_prompt=None,
            on_retry=None,
            extractors=run,
        )
    except Exception as exc:
        cycle.fail(exc)
        core.coordination.set_int(boundary, None)
        return False
    out, group = group_reflection(
        result.output.observations.strip(),
        ranges,
        GroupPlace(task.thread_id, head.resource_id, head.lookup_key, task.cycle_id, core.clock()),
    )
    out_tokens = core.counter.count_string(out)
    cycle.usage = ladder_usage(result)
    if out_tokens >= slice_tokens:
        # Not smaller than its slice: storing it would only churn generations. The boundary stays
        # recorded at this size, so the same input is not reflected again.
        cycle.fail(RuntimeError(f"reflection not smaller than its input ({slice_estimate} -> {out_tokens})"))
        return False
    values = extraction.inline_values(run, raw)
    patch = extraction.metadata_patch(run, values)
    end = cycle.ending(
        tokens_buffered=slice_estimate,
        buffered_tokens=out_tokens,
        observations=out,
        extraction=persist.end_fields(values),
    )

    def write(conn: Connection) -> tuple[WriteResult, list[StoredEvent]]:
        written, stored = records.update_buffered_reflection(
            conn,
            head.id,
            text=out,
            token_count=out_tokens,
            input_token_count=slice_estimate,
            reflected_line_count=n_lines,
            cycle_id=task.cycle_id,
            events=end,
        )
        if written.applied and group is not None:
            groups.insert(conn, [group])
        if written.applied and patch:
            records.patch_thread_metadata(conn, task.thread_id, patch)
        return written, stored

    written = cycle.commit(write)
    if not written.applied:
        core.coordination.set_int(boundary, None)
        return False
    extraction.request_structured(
        core, run, thread_id=task.thread_id, source_cycle_id=task.cycle_id, record_id=head.id
    )
    return True
