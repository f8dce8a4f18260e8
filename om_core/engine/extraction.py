"""Extractors in the cycles (behaviour §8): what a run asks the Observer for, what it reads back from the
output, the structured follow-up call, and what it persists with the commit.

Every value travels with the cycle it comes from, as in the original: inline values are parsed from its
output, structured values come from one structured-output call made right after the Observer or
Reflector call (`structured_values`, outside any transaction, before the commit), and both are persisted in
the cycle's commit and reported on its own end event (`data-om-observation-end`, or `data-om-buffering-end`
for background work). The built-in values (`current-task`, `suggested-response`, `thread-title`) are
reported there too and kept under `extracted.<slug>`.

`ExtractValues` (structured extraction as a task of its own, `data-om-extraction-*` events) is what an
earlier version queued after the commit; it is still run when such a task is delivered, and no longer
queued.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from sqlalchemy import Connection

from om_core.config.options import ResolvedConfig
from om_core.engine import events as ev
from om_core.engine.core import EngineCore
from om_core.engine.cycle import Cycle, Usage
from om_core.engine.runner import Operation, Planned, Write, run
from om_core.engine.tasks import ExtractValues, lookup_key
from om_core.errors import public_text
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
from om_core.messages import Message
from om_core.models.selection import resolve_model
from om_core.observer.input import render_histories
from om_core.observer.prompt import InlineExtractorPrompt
from om_core.store import history, records
from om_core.store.outbox import cycle_payload, has_event, write_record_events
from om_core.store.types import Record, StoredEvent, WriteResult

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


def inline_values(run: RunExtractors, output: str, structured: Extraction | None = None) -> Extraction:
    """The values of a run: the inline ones of its raw output, then the structured ones of its follow-up
    call (`structured_values`; later wins by slug, §8.6.1), after `on_extracted` (§8.4, §8.6.2)."""
    if run.empty:
        return Extraction()
    parsed = run.early.merged(parse_inline(output, run.inline))
    if structured is not None:
        parsed = parsed.merged(structured)
    return persist.apply_on_extracted(run.extractors, parsed, run.ctx)


#: The built-in continuation values (§8.3), in the spec's order; `thread-title` only with `threadTitle`.
BUILTIN_SLUGS = ("current-task", "suggested-response", "thread-title")


def builtin_values(
    current_task: str | None, suggested_response: str | None, thread_title: str | None = None
) -> dict[str, str]:
    """The built-in values a run produced, by slug (§8.3): reported in `extractedValues` and kept under
    `extracted.<slug>` beside their compatibility fields (`currentTask`, ...). Absent ones are left out."""
    given = (current_task, suggested_response, thread_title)
    return {slug: value for slug, value in zip(BUILTIN_SLUGS, given, strict=True) if value}


def cycle_values(
    run: RunExtractors,
    output: str,
    builtins: Mapping[str, str],
    structured: Extraction | None = None,
) -> Extraction:
    """Everything a cycle reports and persists: the built-ins first (§8.3 order), then the user
    extractors' values (`inline_values`)."""
    user = inline_values(run, output, structured)
    return Extraction({**builtins, **user.values}, list(user.failures), user.signals)


def metadata_patch(run: RunExtractors, extraction: Extraction) -> dict[str, Any]:
    """What the run's values add to the thread's OM metadata (§8.6.3): each user extractor's value at its
    `metadataKeyPath`, each built-in's at `extracted.<slug>`."""
    patch = persist.metadata_patch(run.extractors, extraction.values)
    builtins = {slug: extraction.values[slug] for slug in BUILTIN_SLUGS if extraction.values.get(slug)}
    if builtins:
        extracted = patch.get("extracted")
        patch["extracted"] = {**builtins, **extracted} if isinstance(extracted, dict) else builtins
    return patch


def structured_values(
    core: EngineCore,
    cfg: ResolvedConfig,
    run: RunExtractors,
    *,
    messages: Sequence[Message],
    timezone: str,
    output: str,
    usage: Usage,
) -> Extraction | None:
    """The structured extraction of one run (§8.5), made right after its Observer or Reflector call and
    before its commit, as the original does, so the values are persisted with the cycle and reported on
    its own end event (`data-om-observation-end` / `data-om-buffering-end`). One structured-output call
    over the run's messages (`messages`, none for a reflection) and its output. None when the run has no
    structured extractor. A failed call is every structured extractor's failure, never the cycle's."""
    if not run.has_structured:
        return None
    specs, early = resolve_structured(run.extractors, run.ctx)
    if not specs:
        return early
    stage = cfg.observation if run.ctx.source == "observer" else cfg.reflection
    visible = [m for m in messages if m.has_visible_content]
    transcript = render_histories([visible], timezone)[0].text if visible else ""
    user = build_user_message(
        transcript=transcript,
        output=output,
        specs=specs,
        priors=persist.priors(run.extractors, run.ctx.om_metadata),
    )
    try:
        model = resolve_model(stage.model, core.counter.count_string(user))
        completion = core.complete(
            cfg, stage, model, system=SYSTEM_PROMPT, user=user, response_format=response_format(specs)
        )
    except Exception as exc:  # the cycle it belongs to goes on without these values
        log.warning("structured extraction failed: %s", exc)
        error = public_text(exc, context="the structured extraction call")
        return early.merged(Extraction(failures=[{"slug": s.slug, "error": error} for s in specs]))
    usage.add(completion)
    return early.merged(parse_reply(completion.text, specs))


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
