"""Buffered reflection: the leading slice of the log is reflected in the background and stored on the
record it was read from, to be swapped in later with no model call (behaviour §4.6)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection

from om_core.config.options import ResolvedConfig
from om_core.coordination import Keys
from om_core.engine import extraction
from om_core.engine.core import EngineCore
from om_core.engine.cycle import Cycle
from om_core.engine.grouping import reflector_input
from om_core.engine.reflector_call import Reflected, reflect_for
from om_core.engine.runner import Discarded, Operation, Planned, Write, run
from om_core.engine.tasks import BufferReflection
from om_core.extractors import persist
from om_core.observations.groups import align_slice
from om_core.policy import decisions
from om_core.store import groups, history, records
from om_core.store.types import Record, StoredEvent, WriteResult


def buffer_reflection(core: EngineCore, task: BufferReflection) -> bool:
    """True when a buffered reflection was stored on the named record."""
    return run(_BufferedReflection(core, task))


@dataclass(frozen=True)
class _Work:
    head: Record
    #: Lines of the log the slice covers, its estimated and its counted tokens, the Reflector's target.
    lines: int
    estimate: int
    tokens: int
    target: int
    text: str
    ranges: str | None
    extractors: extraction.RunExtractors


@dataclass
class _BufferedReflection(Operation[BufferReflection, _Work, Reflected]):
    task: BufferReflection

    def plan(self, cfg: ResolvedConfig | None) -> Planned[_Work] | None:
        core, task = self.core, self.task
        assert cfg is not None
        head = records.get_record(core.db, task.record_id)
        activation = cfg.reflection.buffer_activation
        if head is None or not head.is_live or head.buffered_reflection or activation is None:
            return None
        lines = head.active_observations.split("\n")
        n_lines, estimate, target = decisions.reflection_slice(
            len(lines), head.observation_token_count, cfg.reflection.observation_tokens, activation
        )
        n_lines = align_slice(lines, n_lines)  # a prefix never ends inside an observation group
        if n_lines <= 0:
            return None
        sliced = "\n".join(lines[:n_lines])
        text, ranges = reflector_input(sliced)
        # Extractors run for the thread that asked for the reflection, in resource scope too, as in blocking
        # reflection; their values persist now, though the reflection waits for activation (§8.6.4).
        run = extraction.plan(cfg, "reflector", history.get_thread(core.db, task.thread_id), memory=core.db)
        work = _Work(head, n_lines, estimate, core.counter.count_string(sliced), target, text, ranges, run)
        return Planned(cfg, [Cycle.of(core, task, head, estimate)], work)

    def call(self, planned: Planned[_Work]) -> Reflected:
        work = planned.work
        reflected = reflect_for(
            self.core,
            planned.lead,
            planned.cfg,
            work.head,
            work.text,
            work.ranges,
            target=work.target,
            include_hints=False,
            manual_prompt=None,
            on_retry=None,
            extractors=work.extractors,
        )
        if reflected.tokens >= work.tokens:
            # Not smaller than its slice: storing it would only churn generations. The boundary stays
            # recorded at this size, so the same input is not reflected again.
            raise Discarded(f"reflection not smaller than its input ({work.estimate} -> {reflected.tokens})")
        structured = extraction.structured_values(
            self.core,
            planned.cfg,
            work.extractors,
            messages=(),
            timezone=work.head.observed_timezone,
            output=reflected.raw,
            usage=planned.lead.usage,
        )
        if structured is not None:
            planned.extracted[self.task.thread_id] = structured
        return reflected

    def failed(self, planned: Planned[_Work], error: BaseException) -> None:
        if not isinstance(error, Discarded):
            self._forget_boundary(planned)

    def write(self, planned: Planned[_Work], output: Reflected) -> Write:
        work, task = planned.work, self.task
        values = extraction.inline_values(work.extractors, output.raw, planned.extracted.get(task.thread_id))
        patch = extraction.metadata_patch(work.extractors, values)
        end = planned.lead.ending(
            tokens_buffered=work.estimate,
            buffered_tokens=output.tokens,
            observations=output.text,
            extraction=persist.end_fields(values),
            signals=values.signals,
        )

        def write(conn: Connection) -> tuple[WriteResult, list[StoredEvent]]:
            written, stored = records.update_buffered_reflection(
                conn,
                work.head.id,
                text=output.text,
                token_count=output.tokens,
                input_token_count=work.estimate,
                reflected_line_count=work.lines,
                cycle_id=task.cycle_id,
                events=end,
            )
            if written.applied and output.group is not None:
                groups.insert(conn, [output.group])
            if written.applied and patch:
                records.patch_thread_metadata(conn, task.thread_id, patch)
            return written, stored

        return write

    def refused(self, planned: Planned[_Work], result: WriteResult) -> None:
        self._forget_boundary(planned)

    def _forget_boundary(self, planned: Planned[_Work]) -> None:
        """A later turn may start a buffered reflection of the same log again."""
        self.core.coordination.set_int(Keys.reflection_boundary(planned.work.head.lookup_key), None)
