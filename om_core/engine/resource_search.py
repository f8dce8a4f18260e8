"""Which threads a resource search covers: exactly those that are indexed.

A thread is indexed when its own effective config (the service's, the resource's overrides, the thread's
over them) has OM and `retrieval` on (`engine.indexing`). A user who switches retrieval on in each thread's
config, and not in the resource's, expects `POST /v1/resources/{id}/search` to search those threads; and a
thread whose own config turns retrieval off is not indexed (or no longer), so it is never searched, even
when the resource's config has retrieval on. Only the resource's own threads are read (its stored id holds
the caller's tenant), so another tenant's or another resource's thread can never be covered.

The work is one indexed read of the resource's threads that carry overrides of their own (the others follow
the resource's config) and one config resolution per distinct set of overrides (cached by the engine).
When no thread is indexed the search is refused (`NothingIndexed`), and the refusal says which config to
change: the resource's, for all its threads, or a thread's, for that one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import select

from om_core.config.options import ResolvedConfig
from om_core.engine.core import EngineCore
from om_core.search import SearchHit, SearchRequest
from om_core.search.errors import NothingIndexed
from om_core.store import schema
from om_core.store.records import deep_merge
from om_core.tenancy.scoped_ids import StoredId

T = schema.threads


@dataclass(frozen=True)
class Coverage:
    """What one resource search covers: `thread_ids` None means every thread of the resource (the
    resource's config has retrieval on and no thread turns it off); `cfg` the config the searcher is built
    from, semantic when any covered thread has `retrieval.vector` on."""

    thread_ids: tuple[StoredId, ...] | None
    cfg: ResolvedConfig


def _indexed(cfg: ResolvedConfig) -> bool:
    return bool(cfg.enabled and cfg.retrieval)


def _vector(cfg: ResolvedConfig) -> bool:
    return bool(cfg.retrieval and cfg.retrieval_options is not None and cfg.retrieval_options.vector)


def coverage(
    core: EngineCore,
    resource_id: StoredId,
    resource_cfg: ResolvedConfig,
    resource_overrides: Mapping[str, Any] | None,
) -> Coverage:
    """The threads of `resource_id` a search covers, or `NothingIndexed`."""
    with core.db.connect() as conn:
        rows = conn.execute(
            select(T.c.id, T.c.config_overrides).where(
                T.c.resource_id == resource_id, T.c.config_overrides.is_not(None)
            )
        ).all()
        own: dict[StoredId, ResolvedConfig] = {}
        for row in rows:
            overrides = dict(row.config_overrides or {})
            if not overrides:
                continue
            merged = deep_merge(dict(resource_overrides), overrides) if resource_overrides else overrides
            own[StoredId(row.id)] = core.config_for(merged)
        turned_off = [thread for thread, cfg in own.items() if not _indexed(cfg)]
        if _indexed(resource_cfg) and not turned_off:
            vector = _vector(resource_cfg) or any(_vector(cfg) for cfg in own.values())
            return Coverage(None, _searcher_config(resource_cfg, own.values(), vector))
        if _indexed(resource_cfg):
            # Every thread but those whose own config turns retrieval (or OM) off.
            others = conn.execute(select(T.c.id).where(T.c.resource_id == resource_id)).scalars().all()
            off = set(turned_off)
            covered = tuple(StoredId(t) for t in others if t not in off)
        else:
            covered = tuple(thread for thread, cfg in own.items() if _indexed(cfg))
    configs = [resource_cfg] if _indexed(resource_cfg) else []
    configs += [own[t] for t in covered if t in own]
    if not covered:
        raise NothingIndexed(f"resource {resource_id!r}")
    vector = any(_vector(cfg) for cfg in configs)
    return Coverage(covered, _searcher_config(configs[0], configs, vector))


def _searcher_config(base: ResolvedConfig, configs: Iterable[ResolvedConfig], vector: bool) -> ResolvedConfig:
    """A config with retrieval on, semantic when any covered thread has it on (a document without a
    vector is still found by words)."""
    if _vector(base) == vector and _indexed(base):
        return base
    for cfg in configs:
        if _indexed(cfg) and _vector(cfg) == vector:
            return cfg
    return base


def search_resource(
    core: EngineCore,
    request: SearchRequest,
    resource_cfg: ResolvedConfig,
    resource_overrides: Mapping[str, Any] | None,
    searcher_for: Callable[[ResolvedConfig], Callable[[SearchRequest], list[SearchHit]]],
) -> list[SearchHit]:
    """One search of the request's resource over its indexed threads (narrowed further by the request's
    `thread_ids`). Raises `NothingIndexed` when none of the threads it would cover is indexed."""
    cover = coverage(core, request.resource_id, resource_cfg, resource_overrides)
    if request.thread_ids == ():
        return []  # narrowed to no thread at all: nothing to search
    threads = cover.thread_ids
    if request.thread_ids is not None:
        asked = request.thread_ids
        if threads is not None:
            allowed = set(threads)
            asked = tuple(t for t in asked if t in allowed)
        threads = asked
        if not threads:
            raise NothingIndexed(f"the threads asked for in resource {request.resource_id!r}", asked=True)
    return searcher_for(cover.cfg)(replace(request, thread_ids=threads))
