"""Extractors in the cycles (behaviour §8): what a run asks the Observer for, what it reads back from the
output, what it persists with the commit, and the structured extraction task (`ExtractValues`).

Inline values travel with the cycle they come from: parsed from its output, persisted in its commit, and
reported on its end event. Structured values need a second model call, so they run as their own task after
the cycle committed, persist in their own transaction and report on `data-om-extraction-end`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from sqlalchemy import Connection

from om_core.config.options import ResolvedConfig
from om_core.engine import events as ev
from om_core.engine.core import EngineCore, resolve_model
from om_core.engine.cycle import Cycle
from om_core.engine.runner import Operation, Planned, Write, run
from om_core.engine.tasks import ExtractValues, lookup_key
from om_core.extractors import persist
from om_core.extractors.compose import compose_extractors
from om_core.extractors.definition import Extractor, RunContext, Source
from om_core.extractors.inline import (
    Extraction,
    InlineSpec,
    parse_inline,
    prompts,
    resolve_inline,
    section_tags,
)
from om_core.extractors.structured import (
    SYSTEM_PROMPT,
    StructuredSpec,
    build_user_message,
    parse_reply,
    resolve_structured,
    response_format,
)
from om_core.observer.input import render_histories
from om_core.observer.prompt import InlineExtractorPrompt
from om_core.store import history, records
from om_core.store.outbox import cycle_payload, has_event, write_record_events
from om_core.store.types import Record, StoredEvent, WriteResult
from om_core.tenancy.scoped_ids import StoredId

log = logging.getLogger("om.engine")


@dataclass(frozen=True)
class RunExtractors:
    """The extractors of one Observer or Reflector run and what the prompt needs from them."""

    ctx: RunContext
    extractors: tuple[Extractor, ...]
    inline: tuple[InlineSpec, ...]
    #: Failures found before the model call (an instructions callable that raised).
    early: Extraction
    priors: Mapping[str, Any]

    @property
    def prompts(self) -> tuple[InlineExtractorPrompt, ...]:
        return prompts(self.inline)

    @property
    def section_tags(self) -> tuple[str, ...]:
        return section_tags(self.inline)

    @property
    def has_structured(self) -> bool:
        return any(e.structured for e in self.extractors)

    @property
    def empty(self) -> bool:
        return not self.extractors


NONE = RunExtractors(RunContext("observer"), (), (), Extraction(), {})


def plan(
    cfg: ResolvedConfig,
    source: Source,
    thread: history.ThreadRow | None,
    extra: Sequence[Extractor] = (),
    *,
    memory: Any = None,
) -> RunExtractors:
    """The run's extractors (`compose_extractors`), their inline prompts and the priors shown to the model
    (each extractor with `includePreviousExtraction`, read from its `metadataKeyPath`). `memory` is what
    hooks receive as the run's store (the engine's database)."""
    meta: Mapping[str, Any] = thread.om_metadata if thread is not None else {}
    ctx = RunContext(
        source,
        thread_id=thread.id if thread is not None else None,
        resource_id=thread.resource_id if thread is not None else None,
        om_metadata=dict(meta),
        memory=memory,
    )
    extractors = compose_extractors(cfg, ctx, extra)
    if not extractors:
        return RunExtractors(ctx, (), (), Extraction(), {})
    inline, early = resolve_inline(extractors, ctx)
    inline_slugs = {spec.slug for spec in inline}
    priors = {slug: value for slug, value in persist.priors(extractors, meta).items() if slug in inline_slugs}
    return RunExtractors(ctx, tuple(extractors), tuple(inline), early, priors)


def inline_values(run: RunExtractors, output: str) -> Extraction:
    """The inline values of a run's raw output, after `on_extracted` (§8.4, §8.6.1-2)."""
    if run.empty:
        return Extraction()
    parsed = run.early.merged(parse_inline(output, run.inline))
    return persist.apply_on_extracted(run.extractors, parsed, run.ctx)


def metadata_patch(run: RunExtractors, extraction: Extraction) -> dict[str, Any]:
    """What the run's values add to the thread's OM metadata (§8.6.3)."""
    return persist.metadata_patch(run.extractors, extraction.values)


def request_structured(
    core: EngineCore,
    run: RunExtractors,
    *,
    thread_id: StoredId,
    source_cycle_id: str,
    record_id: str,
    seq_range: tuple[int, int] = (0, 0),
) -> None:
    """Queue the structured extraction of a committed cycle (only when the run has a structured
    extractor). Fire and forget: the cycle never waits for it."""
    if not run.has_structured:
        return
    core.executor.submit(
        ExtractValues(
            thread_id,
            f"extract-{source_cycle_id}",
            run.ctx.source,
            source_cycle_id,
            record_id,
            seq_range[0],
            seq_range[1],
        )
    )


#: The end events a source cycle reports its output on (a reflection's is `data-om-observation-end` too).
_SOURCE_END = (ev.OBSERVATION_END, ev.BUFFERING_END)


def extract_values(core: EngineCore, task: ExtractValues) -> bool:
    """One structured extraction (§8.5): re-read the source messages and the cycle's output, one
    structured-output call, then the values and their end event in one transaction. True when it ran.
    Applied once: a redelivery after its end (or failure) event does nothing."""
    return run(_Extraction(core, task))


@dataclass(frozen=True)
class _Work:
    thread: history.ThreadRow
    head: Record
    extractors: RunExtractors
    specs: list[StructuredSpec]
    early: Extraction
    #: The source cycle's output and the transcript of its messages, what the model reads.
    output: str
    transcript: str


@dataclass
class _Extraction(Operation[ExtractValues, _Work, Extraction]):
    task: ExtractValues
    indexes: ClassVar[bool] = False  # values are no search documents

    def plan(self, cfg: ResolvedConfig | None) -> Planned[_Work] | None:
        core, task = self.core, self.task
        assert cfg is not None
        key = lookup_key(task.thread_id)
        with core.db.connect() as conn:
            thread = history.get_thread(conn, task.thread_id)
            head = records.read_head(conn, key)
            if thread is None or head is None:
                return None
            if has_event(
                conn, lookup_key=key, cycle_id=task.cycle_id, types=[ev.EXTRACTION_END, ev.EXTRACTION_FAILED]
            ):
                return None
            source_end = cycle_payload(
                conn, thread_id=task.thread_id, cycle_id=task.source_cycle_id, types=_SOURCE_END
            )
            messages = (
                [
                    m
                    for m in history.load_parts(
                        conn, task.thread_id, after_seq=task.from_seq, upto_seq=task.to_seq
                    )
                    if m.has_visible_content
                ]
                if task.to_seq > task.from_seq
                else []
            )
        run = plan(cfg, task.source, thread, memory=core.db)
        specs, early = resolve_structured(run.extractors, run.ctx)
        if not specs and not early.failures:
            return None
        output = str((source_end or {}).get("observations") or "")
        transcript = render_histories([messages], head.observed_timezone)[0].text if messages else ""
        work = _Work(thread, head, run, list(specs), early, output, transcript)
        return Planned(cfg, [Cycle.of(core, task, head, 0)], work)

    def call(self, planned: Planned[_Work]) -> Extraction:
        work, cfg = planned.work, planned.cfg
        if not work.specs:
            return work.early
        stage = cfg.observation if self.task.source == "observer" else cfg.reflection
        priors = persist.priors(work.extractors.extractors, work.thread.om_metadata)
        user = build_user_message(
            transcript=work.transcript, output=work.output, specs=work.specs, priors=priors
        )
        model = resolve_model(stage.model, self.core.counter.count_string(user))
        completion = self.core.complete(
            cfg, stage, model, system=SYSTEM_PROMPT, user=user, response_format=response_format(work.specs)
        )
        planned.lead.usage.add(completion)
        return work.early.merged(parse_reply(completion.text, work.specs))

    def write(self, planned: Planned[_Work], output: Extraction) -> Write:
        work, task, cycle = planned.work, self.task, planned.lead
        extractors = work.extractors.extractors
        values = persist.apply_on_extracted(extractors, output, work.extractors.ctx)
        patch = persist.metadata_patch(extractors, values.values)
        end = ev.extraction_end(
            cycle_id=task.cycle_id,
            source=task.source,
            source_cycle_id=task.source_cycle_id,
            started_at=cycle.started,
            completed_at=self.core.clock(),
            record_id=work.head.id,
            thread_id=task.thread_id,
            usage=cycle.usage.fields(),
            extraction=persist.end_fields(values),
        )

        def write(conn: Connection) -> tuple[WriteResult, list[StoredEvent]]:
            records.patch_thread_metadata(conn, task.thread_id, patch)
            return WriteResult(True), write_record_events(conn, work.head, [cycle.own(end)])

        return write


def context_values(cfg: ResolvedConfig, thread: history.ThreadRow | None) -> dict[str, str]:
    """Values of extractors marked `context: true`, for the actor's volatile context (`<slug>` blocks)."""
    if thread is None or not (cfg.observation.extract or cfg.reflection.extract):
        return {}
    out: dict[str, str] = {}
    for source in ("observer", "reflector"):
        run = compose_extractors(cfg, RunContext(source, thread.id, thread.resource_id, thread.om_metadata))
        out.update(persist.context_values(run, thread.om_metadata))
    return out


def persisted(cfg: ResolvedConfig, thread: history.ThreadRow) -> dict[str, Any]:
    """Each configured extractor's persisted value by slug (what `GET /v1/threads/{id}` shows)."""
    out: dict[str, Any] = {}
    for source in ("observer", "reflector"):
        run = compose_extractors(cfg, RunContext(source, thread.id, thread.resource_id, thread.om_metadata))
        out.update(persist.persisted_values(run, thread.om_metadata))
    return out
