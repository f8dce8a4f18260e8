"""The `working-memory` extractor (§8.7): with `observation.manageWorkingMemory` the Observer keeps the
working memory current through the extractor pipeline, so updates do not depend on the actor calling a
tool.

Its definition follows §8.7: name `Working Memory` (slug `working-memory`), `includePreviousExtraction`
false and `metadataKeyPath` false (the memory lives in `om_working_memory`, never in OM metadata);
instructions built at run time from the template or schema and the memory as stored then; an inline
string extractor in Markdown mode, a structured one in schema mode with the schema made nullable (`null`
means "no update"). Its `on_extracted` writes through `working_memory.update(..., by="observer")`: null,
empty or unchanged content writes nothing; content the schema refuses raises, which the pipeline reports
as an extraction failure of `working-memory` (no update either).

The pure pieces (`instructions_text`, `extraction_schema`, `apply_extracted`) carry the rules and are
tested on their own; `build_extractor` wraps them in the pipeline's `Extractor`
(`om_core.extractors.definition`); the pipeline (`extractors.compose`) asks for it on every Observer run,
with the run's store.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Engine

from om_core.config.options import ResolvedConfig, ResolvedWorkingMemory
from om_core.errors import OMError
from om_core.extractors.definition import ExtractedContext, Extractor, RunContext
from om_core.tenancy.scoped_ids import StoredId
from om_core.working_memory import document as wm

__all__ = [
    "EXTRACTOR_NAME",
    "EXTRACTOR_SLUG",
    "apply_extracted",
    "build_extractor",
    "extraction_schema",
    "instructions_text",
    "target_for_run",
]

EXTRACTOR_NAME = "Working Memory"
EXTRACTOR_SLUG = "working-memory"


def target_for_run(
    cfg: ResolvedConfig, thread_id: StoredId | None, resource_id: StoredId | None
) -> wm.Target | None:
    """The memory an Observer run on this thread updates (stored ids), None when the run names neither."""
    scope = cfg.working_memory.scope
    if scope == "resource" and resource_id is not None:
        return wm.Target(f"resource:{resource_id}", "resource", None, resource_id)
    if scope == "thread" and thread_id is not None and resource_id is not None:
        return wm.Target(f"thread:{thread_id}", "thread", thread_id, resource_id)
    return None


def instructions_text(memory_cfg: ResolvedWorkingMemory, current: wm.WorkingMemory) -> str:
    """What the Observer is asked (§8.7): durable facts from the new observations into the memory, the
    whole document back; schema mode: the object or `null`; Markdown: the Markdown, or nothing."""
    lead = (
        "Maintain the user's working memory: a small document of durable facts about the user (name, "
        "location, preferences, goals, ongoing projects, important dates). Update it with durable facts "
        "from the new observations; correct what they show is no longer true; keep useful existing "
        "content. Do not add one-off details of this conversation."
    )
    if memory_cfg.format == "json":
        return (
            f"{lead}\n"
            "Return the complete updated JSON object (not a patch) matching this JSON Schema, or null when "
            "no update is needed:\n"
            f"{json.dumps(memory_cfg.schema, ensure_ascii=False)}\n"
            "Current working memory:\n"
            f"{current.content}"
        )
    shape = "Its template:\n" + (memory_cfg.template or wm.DEFAULT_TEMPLATE).strip()
    return (
        f"{lead}\n"
        "Return the complete updated working memory as Markdown, keeping the template's structure. When "
        "nothing needs to change, leave this value out.\n"
        f"{shape}\n"
        "Current working memory:\n"
        f"{current.content.strip() or '(empty)'}"
    )


def extraction_schema(memory_cfg: ResolvedWorkingMemory) -> dict[str, Any] | None:
    """None in Markdown mode (an inline string extractor); in schema mode the schema made nullable."""
    if memory_cfg.format != "json" or memory_cfg.schema is None:
        return None
    return {"anyOf": [dict(memory_cfg.schema), {"type": "null"}]}


def apply_extracted(
    db: Engine,
    cfg: ResolvedConfig,
    target: wm.Target,
    value: Any,
    *,
    via_thread: StoredId | None = None,
    shown_version: int | None = None,
) -> wm.WorkingMemory | None:
    """Write an extracted value as the memory's next version; None when nothing is written: `null`, empty
    text, or the content already stored. Content the schema refuses raises `WorkingMemoryInvalid`.
    `shown_version` is the version the Observer's instructions showed: a memory written since (by the
    API or the actor) is not overwritten with a rewrite of the older one (`WorkingMemoryConflict`)."""
    memory_cfg = cfg.working_memory
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if memory_cfg.format == "markdown" and not isinstance(value, str):
        raise wm.WorkingMemoryInvalid(f"expected Markdown text, got {type(value).__name__}")
    text = wm.parse_content(memory_cfg, value.strip() if isinstance(value, str) else value)
    current = wm.read(db, target, cfg)
    if current.version > 0 and current.content == text:
        return None
    memory, _events = wm.update(
        db, target, cfg, text, by="observer", via_thread=via_thread, expected_version=shown_version
    )
    return memory


def build_extractor(db: Engine, cfg: ResolvedConfig, ctx: RunContext) -> Extractor | None:
    """The `working-memory` extractor of one Observer run (`ctx`: the pipeline's `RunContext`), or None
    when the Observer does not manage working memory here (it is off, or not Observer-managed)."""
    memory_cfg = cfg.working_memory
    if not (memory_cfg.enabled and memory_cfg.observer_managed) or ctx.source != "observer":
        return None
    target = target_for_run(cfg, ctx.thread_id, ctx.resource_id)
    if target is None:
        return None
    shown: list[int] = []  # the version this run's instructions showed the Observer

    def instructions(_run: RunContext) -> str:
        current = wm.read(db, target, cfg)
        shown[:] = [current.version]
        return instructions_text(memory_cfg, current)

    def on_extracted(extracted: ExtractedContext) -> None:
        try:
            apply_extracted(
                db,
                cfg,
                target,
                extracted.current,
                via_thread=ctx.thread_id,
                shown_version=shown[0] if shown else None,
            )
        except wm.WorkingMemoryInvalid:
            raise
        except OMError as exc:  # disabled meanwhile, a conflict: reported as this extractor's failure
            raise RuntimeError(str(exc)) from exc
        return None  # keep the value as extracted: it is reported, and stored nowhere else

    return Extractor(
        name=EXTRACTOR_NAME,
        instructions=instructions,
        schema=extraction_schema(memory_cfg),
        include_previous=False,
        metadata_key_path=None,
        on_extracted=on_extracted,
    )
