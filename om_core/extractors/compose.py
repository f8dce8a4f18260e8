"""The extractors one run uses (behaviour §8.3 order): the user's list of the run's source, plus extractors
other features add (the working-memory extractor, `extra`).

The built-in continuation values (`current-task`, `suggested-response`, `thread-title`) keep their own
sections and dedicated fields in the Observer/Reflector prompts and parsers; they come before these in
the output, as the spec orders them, and never reach `on_extracted`.

The names of operator code in the user's entries (`use`, `onExtracted`) resolve for the tenant of the run's
thread (its stored id says which, `om_core.tenancy.scoped_ids.tenant_of`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from om_core.config.options import ResolvedConfig
from om_core.extractors.definition import (
    Extractor,
    ExtractorError,
    RunContext,
    check_unique,
    from_json,
    refused,
)
from om_core.tenancy.scoped_ids import tenant_of
from om_core.working_memory.extractor import build_extractor

log = logging.getLogger("om.extractors")


def working_memory_extractor(cfg: ResolvedConfig, ctx: RunContext) -> Extractor | None:
    """The `working-memory` extractor of this run (§8.7): an Observer run of a thread whose working memory
    is on and managed by the Observer, with the run's store to write it through."""
    if ctx.source != "observer" or ctx.memory is None:
        return None
    return build_extractor(ctx.memory, cfg, ctx)


def compose_extractors(
    cfg: ResolvedConfig, ctx: RunContext, extra: Sequence[Extractor] = ()
) -> list[Extractor]:
    """The user extractors of `ctx.source` (`observation.extract` or `reflection.extract`), then the
    working-memory extractor, then `extra`. An entry that cannot be built here (a `use` or `onExtracted`
    naming nothing registered for this tenant, an import path stored before names were required, a
    factory that raises) never fails the cycle: it stays in the list as `refused`, is never run, and the
    run reports why as that extractor's failure (logged too when it gives no slug to report under)."""
    entries: list[dict[str, Any]] = (
        cfg.observation.extract if ctx.source == "observer" else cfg.reflection.extract
    )
    field = "observation.extract" if ctx.source == "observer" else "reflection.extract"
    tenant = tenant_of(ctx.thread_id) if ctx.thread_id is not None else None
    out: list[Extractor] = []
    for index, entry in enumerate(entries):
        try:
            out.append(from_json(entry, field=f"{field}[{index}]", tenant=tenant))
        except Exception as exc:  # an extractor never fails the cycle it belongs to
            stand_in = refused(entry, str(exc) or type(exc).__name__)
            if stand_in is None:
                log.warning("extractor left out of this run: %s", exc)
            else:
                out.append(stand_in)
    try:
        memory = working_memory_extractor(cfg, ctx)
    except Exception as exc:
        log.warning("the working-memory extractor is left out of this run: %s", exc)
        memory = None
    if memory is not None:
        out.append(memory)
    out.extend(extra)
    try:
        check_unique(out, field=field)
    except ExtractorError as exc:
        log.warning("duplicate extractor slugs, later ones left out: %s", exc)
        kept: dict[str, Extractor] = {}
        for extractor in out:
            kept.setdefault(extractor.slug, extractor)
        return list(kept.values())
    return out
