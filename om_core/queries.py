"""Read models and maintenance operations the HTTP API exposes, kept out of the HTTP layer.

The API shell only translates HTTP to these calls; everything that knows how memory is stored (heads,
generations, chunk rows, the outbox) lives here, next to the storage it reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, func, select, update

from om_core.config.options import ResolvedConfig
from om_core.engine import MemoryEngine, lookup_key
from om_core.errors import OMConfigError
from om_core.extractors.registry import check_tenant_overrides
from om_core.messages import Message
from om_core.models.selection import model_spec_to_json
from om_core.pagination import DEFAULT_LIMIT, CursorError, Page, decode_cursor, encode_cursor
from om_core.search import vectors
from om_core.search.index import index_lag_seconds
from om_core.store import history, records, schema
from om_core.store.types import Chunk, Record
from om_core.tenancy.scoped_ids import PublicId, StoredId, public_id, scoped_id, tenant_of

__all__ = [
    "ActiveLog",
    "BufferedReflection",
    "Generation",
    "MessagesPage",
    "ObservationsView",
    "ThreadCounts",
    "ThreadSummary",
    "effective_config",
    "messages_cursor",
    "messages_cursor_seq",
    "messages_page",
    "observations_view",
    "resource_config_overrides",
    "set_config_overrides",
    "set_resource_config_overrides",
    "thread_summary",
    "threads_of_resource",
    "threads_page",
    "update_thread",
]


@dataclass(frozen=True)
class ActiveLog:
    record_id: str
    generation_count: int
    observations: str
    observation_tokens: int
    last_observed_at: datetime | None
    #: Parts with a sequence number up to this one are covered by the log.
    observed_through_seq: int
    total_tokens_observed: int


@dataclass(frozen=True)
class BufferedReflection:
    observations: str
    observation_tokens: int
    input_observation_tokens: int
    reflected_line_count: int
    cycle_id: str | None


@dataclass(frozen=True)
class Generation:
    """A retired generation: the log as it was before a reflection replaced it."""

    record_id: str
    generation_count: int
    created_at: datetime
    retired_at: datetime
    observations: str
    observation_tokens: int


@dataclass(frozen=True)
class ObservationsView:
    thread_id: PublicId
    resource_id: PublicId
    active: ActiveLog | None
    buffered_chunks: list[Chunk]
    buffered_reflection: BufferedReflection | None
    generations: list[Generation]
    current_task: str | None
    suggested_response: str | None
    title: str | None


@dataclass(frozen=True)
class MessagesPage:
    messages: list[Message]
    #: Pass as `before_seq` to read the next (older) page; None when this page is the oldest.
    next_before_seq: int | None = None


def _active(head: Record) -> ActiveLog:
    return ActiveLog(
        record_id=head.id,
        generation_count=head.generation_count,
        observations=head.active_observations,
        observation_tokens=head.observation_token_count,
        last_observed_at=head.last_observed_at,
        observed_through_seq=head.last_observed_seq,
        total_tokens_observed=head.total_tokens_observed,
    )


def _buffered_reflection(head: Record) -> BufferedReflection | None:
    if not head.buffered_reflection:
        return None
    return BufferedReflection(
        observations=head.buffered_reflection,
        observation_tokens=head.buffered_reflection_tokens or 0,
        input_observation_tokens=head.buffered_reflection_input_tokens or 0,
        reflected_line_count=head.reflected_observation_line_count or 0,
        cycle_id=head.buffered_reflection_cycle_id,
    )


def observations_view(
    db: Engine,
    thread: history.ThreadRow,
    *,
    history_limit: int = 20,
    history_offset: int = 0,
    log_key: str | None = None,
) -> ObservationsView:
    """The active log, what is buffered for it, and the generations reflection retired (newest first).

    `log_key` names the log when it is not the thread's own (resource scope: the resource's shared log;
    the thread's own record then holds its cursor and chunks)."""
    key = lookup_key(thread.id)
    head = records.get_head(db, key)
    log_key = log_key or key
    log = records.get_head(db, log_key) if log_key != key else head
    retired = (
        records.history(db, log_key, limit=history_limit, offset=history_offset) if history_limit else []
    )
    meta = thread.om_metadata
    active = None
    if log is not None:
        active = _active(log)
        if head is not None and log is not head:
            active = replace(active, observed_through_seq=head.last_observed_seq)
    return ObservationsView(
        thread_id=public_id(thread.id),
        resource_id=public_id(thread.resource_id),
        active=active,
        buffered_chunks=list(head.chunks) if head is not None else [],
        buffered_reflection=_buffered_reflection(log) if log is not None else None,
        generations=[
            Generation(
                record_id=r.id,
                generation_count=r.generation_count,
                created_at=r.created_at,
                retired_at=r.updated_at,
                observations=r.active_observations,
                observation_tokens=r.observation_token_count,
            )
            for r in retired
        ],
        current_task=meta.get("currentTask"),
        suggested_response=meta.get("suggestedResponse"),
        title=thread.title or meta.get("threadTitle"),
    )


def messages_page(
    db: Engine, thread_id: StoredId, *, before_seq: int | None = None, limit: int = 50
) -> MessagesPage:
    """One page of stored messages in conversation order, newest page first; page back with the cursor."""
    page = history.page_messages(db, thread_id, before_seq=before_seq, limit=limit)
    seqs = [p.seq for m in page for p in m.parts if p.seq is not None]
    older = len(page) == limit and bool(seqs) and min(seqs) > 1
    return MessagesPage(messages=page, next_before_seq=min(seqs) if older else None)


_MESSAGES = "messages"


def messages_cursor(before_seq: int | None) -> str | None:
    """The cursor of the messages page that starts before `before_seq` (None: no older page)."""
    return encode_cursor(_MESSAGES, (before_seq,)) if before_seq is not None else None


def messages_cursor_seq(cursor: str) -> int:
    """The `before_seq` a messages cursor stands for; `CursorError` for any other cursor."""
    (before_seq,) = decode_cursor(_MESSAGES, cursor, (int,))
    if int(before_seq) < 1:
        raise CursorError("the cursor is damaged")
    return int(before_seq)


def threads_of_resource(db: Engine, resource_id: StoredId, tenant_id: str | None) -> list[history.ThreadRow]:
    return history.list_threads(db, resource_id, tenant_id)


#: The cursor kinds of the thread lists (a cursor of one list is refused by the other).
_TENANT_THREADS = "threads"
_RESOURCE_THREADS = "resource-threads"


def threads_page(
    db: Engine,
    *,
    tenant_id: str | None,
    resource_id: StoredId | None = None,
    cursor: str | None = None,
    limit: int = DEFAULT_LIMIT,
    q: str | None = None,
) -> Page[history.ThreadListing]:
    """One page of a tenant's threads (by id), or of one resource's (oldest first), after `cursor`, each
    with its message count and cost (`history.page_threads`); with `q`, only those whose public id or title
    contains it, in any case (a cursor then walks the filtered list).

    Keyset pages (`om_core.pagination`): walking every page returns each thread that exists throughout
    the walk exactly once, whatever is created or deleted meanwhile. Raises `CursorError` for a cursor
    this list did not hand out. Cursors carry public ids, never the tenant's name."""
    by_resource = resource_id is not None
    after: tuple[Any, ...] | None = None
    if cursor is not None:
        if by_resource:
            created, public = decode_cursor(_RESOURCE_THREADS, cursor, (datetime, str))
            after = (datetime.fromisoformat(str(created)), scoped_id(tenant_id, PublicId(str(public))))
        else:
            (public,) = decode_cursor(_TENANT_THREADS, cursor, (str,))
            after = (scoped_id(tenant_id, PublicId(str(public))),)
    rows = history.page_threads(
        db, tenant_id=tenant_id, resource_id=resource_id, after=after, limit=limit + 1, q=q
    )
    items, more = rows[:limit], len(rows) > limit
    if not more or not items:
        return Page(items)
    last = items[-1].thread
    key: tuple[str, ...] = (
        (last.created_at.isoformat(), public_id(last.id)) if by_resource else (public_id(last.id),)
    )
    return Page(items, encode_cursor(_RESOURCE_THREADS if by_resource else _TENANT_THREADS, key))


@dataclass(frozen=True)
class ThreadCounts:
    """How much a thread holds: its messages, how many are observed, and its memory's size."""

    messages: int
    observed_messages: int
    unobserved_messages: int
    #: Tokens of the active observation log the thread reads (its resource's in resource scope).
    observation_tokens: int
    #: Generations of that log (the live one and those reflection or edits retired).
    generations: int
    buffered_chunks: int


@dataclass(frozen=True)
class ThreadSummary:
    thread: history.ThreadRow
    counts: ThreadCounts
    scope: str


def thread_summary(db: Engine, thread: history.ThreadRow, *, log_key: str) -> ThreadSummary:
    """A thread with its counts, read in one connection. A message is unobserved while any of its parts
    lies after the thread's cursor (a message that grew after it was observed counts as unobserved)."""
    key = lookup_key(thread.id)
    M, P, R = schema.messages, schema.parts, schema.records
    with db.connect() as conn:
        head = records.read_head(conn, key)
        log = records.read_head(conn, log_key) if log_key != key else head
        cursor = head.last_observed_seq if head is not None else 0
        total = conn.execute(select(func.count()).select_from(M).where(M.c.thread_id == thread.id)).scalar()
        unobserved = conn.execute(
            select(func.count(func.distinct(P.c.message_id))).where(
                P.c.thread_id == thread.id, P.c.seq > cursor
            )
        ).scalar()
        generations = conn.execute(
            select(func.count()).select_from(R).where(R.c.lookup_key == log_key)
        ).scalar()
    messages, waiting = int(total or 0), int(unobserved or 0)
    return ThreadSummary(
        thread=thread,
        counts=ThreadCounts(
            messages=messages,
            observed_messages=max(0, messages - waiting),
            unobserved_messages=waiting,
            observation_tokens=log.observation_token_count if log is not None else 0,
            generations=int(generations or 0),
            buffered_chunks=len(head.chunks) if head is not None else 0,
        ),
        scope="resource" if log_key != key else "thread",
    )


def update_thread(
    db: Engine,
    thread_id: StoredId,
    *,
    title: str | None = None,
    clear_title: bool = False,
    metadata: dict[str, Any] | None = None,
    clear_metadata: bool = False,
) -> history.ThreadRow | None:
    """Set the caller's title and metadata of a thread (one transaction, under the thread's row lock);
    None if it no longer exists. OM's own metadata is never touched (`history.set_thread_fields`)."""
    with db.begin() as conn:
        return history.set_thread_fields(
            conn,
            thread_id,
            title=title,
            clear_title=clear_title,
            metadata=metadata,
            clear_metadata=clear_metadata,
        )


def set_resource_config_overrides(
    engine: MemoryEngine, resource_id: StoredId, overrides: Mapping[str, Any] | None
) -> dict[str, Any]:
    """Replace a resource's overrides (every thread of the resource resolves its config from them, its
    own overrides merged over them); returns the resource's effective config. Validated like a thread's:
    the overrides alone and merged under each existing thread's own overrides, so no thread is left with
    a config that does not resolve or that the operator's policy refuses (`om_core.config.trust`), and the
    names of operator code in them resolved for the resource's tenant. Raises `OMConfigError` /
    `ValidationError` and stores nothing then."""
    stored = dict(overrides) if overrides else None
    require_vector_support(engine, engine.check_overrides(stored))
    check_tenant_overrides(stored, tenant_of(resource_id))
    for thread in history.list_threads(engine.db, resource_id):
        engine.check_overrides(records.deep_merge(dict(stored or {}), thread.config_overrides or {}))
    effective = effective_config(engine, stored)
    with engine.db.begin() as conn:
        history.set_resource_overrides(conn, resource_id, stored)
    return effective


def resource_config_overrides(db: Engine, resource_id: StoredId) -> dict[str, Any] | None:
    with db.connect() as conn:
        value = conn.execute(
            select(schema.resources.c.metadata).where(schema.resources.c.id == resource_id)
        ).scalar()
    return history.resource_overrides(value)


def effective_config(engine: MemoryEngine, overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """The service config with `overrides` applied, as the public camelCase dict."""
    config = engine.base_config.with_overrides(overrides) if overrides else engine.base_config
    return config.to_public_dict()


def config_warnings(engine: MemoryEngine, overrides: Mapping[str, Any] | None) -> list[str]:
    """What the config with `overrides` accepts but ignores (`bufferOnIdle` with buffering off, ...)."""
    config = engine.base_config.with_overrides(overrides) if overrides else engine.base_config
    return list(config.resolve().warnings)


def config_models(engine: MemoryEngine, overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """The Observer's and Reflector's models the config with `overrides` resolves to (JSON form), as the
    dashboard shows them beside the token bars."""
    config = engine.base_config.with_overrides(overrides) if overrides else engine.base_config
    resolved = config.resolve()
    return {
        "observer": model_spec_to_json(resolved.observation.model),
        "reflector": model_spec_to_json(resolved.reflection.model),
    }


def thread_config_extras(engine: MemoryEngine, thread_id: StoredId) -> dict[str, Any]:
    """What the config answer adds about a stored thread's effective config (its resource's overrides,
    then its own): `warnings` (`config_warnings`) and `models` (`config_models`)."""
    thread = history.get_thread(engine.db, thread_id)
    overrides = thread.effective_overrides if thread is not None else None
    return {"warnings": config_warnings(engine, overrides), "models": config_models(engine, overrides)}


def set_config_overrides(
    engine: MemoryEngine, thread_id: StoredId, overrides: Mapping[str, Any] | None
) -> dict[str, Any]:
    """Replace a thread's overrides after validating them with the config model, the operator's policy
    (`om_core.config.trust`) and the names of operator code in them (`use`, `onExtracted`) for the
    thread's tenant; returns the effective config. Raises `OMConfigError` (or pydantic's
    `ValidationError` for a wrong type) and stores nothing when the result would be invalid."""
    stored = dict(overrides) if overrides else None
    thread = history.get_thread(engine.db, thread_id)
    merged = replace(thread, config_overrides=stored).effective_overrides if thread is not None else stored
    require_vector_support(engine, engine.check_overrides(merged))
    check_tenant_overrides(stored, tenant_of(thread_id))
    effective = effective_config(engine, merged)
    with engine.db.begin() as conn:
        conn.execute(
            update(schema.threads)
            .where(schema.threads.c.id == thread_id)
            .values(config_overrides=stored, updated_at=datetime.now(UTC))
        )
    return effective


def require_vector_support(engine: MemoryEngine, cfg: ResolvedConfig) -> None:
    """Refuse a config that turns `retrieval.vector` on where the database cannot store vectors
    (`OMConfigError` on `retrieval.vector`, saying what to install): never a silent words-only search."""
    if cfg.retrieval_options is None or not cfg.retrieval_options.vector:
        return
    missing = vectors.missing_support(engine.db)
    if missing is not None:
        raise OMConfigError("VECTOR_SEARCH_UNAVAILABLE", "retrieval.vector", missing, True)


def index_lag(db: Engine) -> float:
    """Seconds the search index is behind: the age of the oldest message, observation group or vector
    waiting to be indexed, over the threads being indexed (`search.index.index_lag_seconds`); 0 when
    caught up. Served as `om_search_index_lag_seconds` in `/metrics`."""
    return index_lag_seconds(db)
