"""Record lifecycle operations: the storage contract of behaviour §3.5, enforced in short transactions.

Every write locks the target record row by primary key and requires it to be the live head
(`superseded_by IS NULL`); the caller's snapshot is never the source of truth. Model calls happen before
these functions are called, never inside them. Each function takes an optional `events` builder that
returns the events to write in the same transaction, so an event exists if and only if its change does.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    CompoundSelect,
    Connection,
    Engine,
    RowMapping,
    and_,
    bindparam,
    delete,
    func,
    literal,
    null,
    select,
    text,
    union_all,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError

from om_core.store import schema
from om_core.store.db import key_lock
from om_core.store.outbox import write_record_events
from om_core.store.types import (
    ActivatedChunk,
    ActivationResult,
    AppendResult,
    Chunk,
    ChunkInput,
    NewEvent,
    Record,
    StoredEvent,
    ThreadObservation,
    WriteResult,
)
from om_core.tenancy.scoped_ids import StoredId

R = schema.records
C = schema.chunks

#: How many `superseded_by` hops a retired id may be followed after jumping to the head (behaviour §3.5).
MAX_HOPS = 3

EventBuilder = Callable[[Any], Sequence[NewEvent]]


def _now() -> datetime:
    return datetime.now(UTC)


def new_record_id() -> str:
    return f"omrec-{uuid.uuid4()}"


# --------------------------------------------------------------------------------------------- reading


def _record_from_row(row: Mapping[Any, Any], chunks: Sequence[Chunk] = ()) -> Record:
    return Record(
        id=row["id"],
        lookup_key=row["lookup_key"],
        scope=row["scope"],
        thread_id=row["thread_id"],
        resource_id=row["resource_id"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        origin_type=row["origin_type"],
        generation_count=row["generation_count"],
        superseded_by=row["superseded_by"],
        active_observations=row["active_observations"] or "",
        observation_token_count=row["observation_token_count"],
        last_observed_seq=row["last_observed_seq"],
        last_observed_at=row["last_observed_at"],
        last_buffered_seq=row["last_buffered_seq"],
        last_buffered_at_time=row["last_buffered_at_time"],
        last_buffered_at_tokens=row["last_buffered_at_tokens"],
        buffered_reflection=row["buffered_reflection"],
        buffered_reflection_tokens=row["buffered_reflection_tokens"],
        buffered_reflection_input_tokens=row["buffered_reflection_input_tokens"],
        reflected_observation_line_count=row["reflected_observation_line_count"],
        buffered_reflection_cycle_id=row["buffered_reflection_cycle_id"],
        pending_message_tokens=row["pending_message_tokens"],
        total_tokens_observed=row["total_tokens_observed"],
        is_observing=row["is_observing"],
        is_reflecting=row["is_reflecting"],
        is_buffering_observation=row["is_buffering_observation"],
        is_buffering_reflection=row["is_buffering_reflection"],
        config=dict(row["config"] or {}),
        observed_timezone=row["observed_timezone"],
        metadata=dict(row["metadata"] or {}),
        chunks=tuple(chunks),
    )


def _chunk_from_row(row: Mapping[Any, Any]) -> Chunk:
    return Chunk(
        id=row["id"],
        cycle_id=row["cycle_id"],
        position=row["position"],
        observations=row["observations"],
        token_count=row["token_count"],
        message_ids=list(row["message_ids"] or []),
        message_tokens=row["message_tokens"],
        from_seq=row["from_seq"],
        to_seq=row["to_seq"],
        last_observed_at=row["last_observed_at"],
        created_at=row["created_at"],
        current_task=row["current_task"],
        suggested_continuation=row["suggested_continuation"],
        thread_title=row["thread_title"],
        state=row["state"],
    )


# The statements every turn runs are built once with bind parameters: building an expression per call
# (and computing its cache key) was a sixth of a turn's CPU in the API.
_BUFFERED_CHUNKS = (
    select(C).where(C.c.record_id == bindparam("record_id"), C.c.state == "buffered").order_by(C.c.position)
)
#: Canonical head order (behaviour §3.4): generation desc, then created_at asc, then id asc.
_HEAD = (
    select(R)
    .where(R.c.lookup_key == bindparam("lookup_key"), R.c.superseded_by.is_(None))
    .order_by(R.c.generation_count.desc(), R.c.created_at.asc(), R.c.id.asc())
    .limit(1)
)
_HEAD_FOR_UPDATE = _HEAD.with_for_update()


def _head_with_chunks() -> CompoundSelect[Any]:
    """The head and its buffered chunks in one statement: the head's row first (chunk columns null), then
    one row per chunk (record columns null), in position order. A join would repeat the log, the largest
    column, on every chunk's row."""
    head = _HEAD.cte("head")
    nulls_of = {
        table: [null().cast(col.type).label(f"{prefix}{col.name}") for col in table.c]
        for table, prefix in ((R, "r_"), (C, "c_"))
    }
    record_row = select(
        literal(0).label("row_kind"), *[head.c[col.name].label(f"r_{col.name}") for col in R.c], *nulls_of[C]
    )
    chunk_rows = select(literal(1), *nulls_of[R], *[col.label(f"c_{col.name}") for col in C.c]).where(
        C.c.record_id == select(head.c.id).scalar_subquery(), C.c.state == "buffered"
    )
    return union_all(record_row, chunk_rows).order_by(text("row_kind"), text("c_position"))


_HEAD_AND_CHUNKS = _head_with_chunks()
# The statements a buffered observation runs (workers run many at once; see the note above).
_LOCK_ROW = select(R).where(R.c.id == bindparam("record_id")).with_for_update()
#: Whether a cycle's chunk is stored for the key: what a refused append reports first ("duplicate").
_CHUNK_OF_CYCLE = select(C.c.id).where(
    C.c.lookup_key == bindparam("lookup_key"), C.c.cycle_id == bindparam("cycle_id")
)
_CHUNK_COLUMNS = (
    "id",
    "lookup_key",
    "record_id",
    "state",
    "cycle_id",
    "observations",
    "token_count",
    "message_ids",
    "message_tokens",
    "thread_id",
    "from_seq",
    "to_seq",
    "last_observed_at",
    "created_at",
    "current_task",
    "suggested_continuation",
    "thread_title",
)


def _insert_chunk(dialect: Any) -> Any:
    """`INSERT ... SELECT <values>, <the key's next position> ON CONFLICT (lookup_key, cycle_id) DO NOTHING
    RETURNING id`: the position (one past the key's last, never reused) and the duplicate check in the
    statement that stores the chunk, run under the head's row lock, after it (so every chunk a previous
    holder committed is seen). No row back means the cycle's chunk is already stored."""
    key = bindparam("lookup_key", type_=C.c.lookup_key.type)
    position = (
        select(func.coalesce(func.max(C.c.position), 0) + 1).where(C.c.lookup_key == key).scalar_subquery()
    )
    values = select(
        *(key if name == "lookup_key" else bindparam(name, type_=C.c[name].type) for name in _CHUNK_COLUMNS),
        position,
    ).where(literal(True))  # SQLite parses `INSERT ... SELECT ... ON CONFLICT` only after a WHERE
    return (
        dialect.insert(C)
        .from_select([*_CHUNK_COLUMNS, "position"], values)
        .on_conflict_do_nothing(index_elements=[C.c.lookup_key, C.c.cycle_id])
        .returning(C.c.id)
    )


_INSERT_CHUNK = {"postgresql": _insert_chunk(postgresql), "sqlite": _insert_chunk(sqlite)}
#: The head a chunk was appended to; the SET clause comes from the execution parameters: the buffered
#: coverage, and the caller's live fields when it folds them in (`append_chunk(live=...)`).
_MARK_BUFFERED = update(R).where(R.c.id == bindparam("record_id"))
#: The live head of a key; the SET clause comes from the execution parameters (`set_live_head_fields`).
_UPDATE_LIVE_HEAD = update(R).where(R.c.lookup_key == bindparam("live_key"), R.c.superseded_by.is_(None))


def _buffered_chunks(conn: Connection, record_id: str) -> list[Chunk]:
    rows = conn.execute(_BUFFERED_CHUNKS, {"record_id": record_id}).mappings()
    return [_chunk_from_row(row) for row in rows]


def read_head(conn: Connection, lookup_key: str, *, for_update: bool = False) -> Record | None:
    """The live head of `lookup_key` with its buffered chunks: one statement to read, two to lock (a row
    lock cannot be taken through a union)."""
    if for_update:
        row = conn.execute(_HEAD_FOR_UPDATE, {"lookup_key": lookup_key}).mappings().first()
        return _record_from_row(row, _buffered_chunks(conn, row["id"])) if row is not None else None
    rows = conn.execute(_HEAD_AND_CHUNKS, {"lookup_key": lookup_key}).mappings().all()
    if not rows:
        return None
    chunks = [_chunk_from_row(_unprefixed(row, "c_")) for row in rows[1:]]
    return _record_from_row(_unprefixed(rows[0], "r_"), chunks)


def _unprefixed(row: RowMapping, prefix: str) -> dict[str, Any]:
    return {key[len(prefix) :]: value for key, value in row.items() if key.startswith(prefix)}


def get_head(engine: Engine, lookup_key: str) -> Record | None:
    with engine.connect() as conn:
        return read_head(conn, lookup_key)


def get_record(engine: Engine, record_id: str) -> Record | None:
    with engine.connect() as conn:
        row = conn.execute(select(R).where(R.c.id == record_id)).mappings().first()
        if row is None:
            return None
        return _record_from_row(row, _buffered_chunks(conn, record_id))


def history(
    engine: Engine, lookup_key: str, *, limit: int = 20, offset: int = 0, include_head: bool = False
) -> list[Record]:
    """Generations of a key, newest first (behaviour §3.5(11)); retired ones only unless `include_head`."""
    query = select(R).where(R.c.lookup_key == lookup_key)
    if not include_head:
        query = query.where(R.c.superseded_by.is_not(None))
    query = query.order_by(R.c.generation_count.desc(), R.c.created_at.desc()).offset(offset).limit(limit)
    with engine.connect() as conn:
        return [_record_from_row(row) for row in conn.execute(query).mappings()]


# ------------------------------------------------------------------------------------------- locking


def _lock_row(conn: Connection, record_id: str) -> RowMapping | None:
    return conn.execute(_LOCK_ROW, {"record_id": record_id}).mappings().first()


def lock_live(conn: Connection, record_id: str, *, redirect: bool) -> tuple[Record | None, str | None]:
    """Lock `record_id` and return it if live; with `redirect`, follow a retired id to the live head.

    Returns (record, reason). reason is "not-found" when the id does not exist (the key was cleared: the
    caller's lineage is gone and nothing may be written) and "retired" when it is retired and we may not
    redirect.
    """
    row = _lock_row(conn, record_id)
    if row is None:
        return None, "not-found"
    if row["superseded_by"] is None:
        return _record_from_row(row, _buffered_chunks(conn, record_id)), None
    if not redirect:
        return None, "retired"
    head = read_head(conn, row["lookup_key"], for_update=True)
    hops = 0
    while head is not None and head.superseded_by is not None and hops < MAX_HOPS:
        hop = _lock_row(conn, head.superseded_by)
        head = _record_from_row(hop, _buffered_chunks(conn, hop["id"])) if hop is not None else None
        hops += 1
    if head is None or not head.is_live:
        return None, "not-found"
    return head, None


def _finish(conn: Connection, record: Record, events: EventBuilder | None, result: Any) -> list[StoredEvent]:
    if events is None:
        return []
    drafts = list(events(result))
    if not drafts:
        return []
    return write_record_events(conn, record, drafts)


# --------------------------------------------------------------------------------------- operations


def initialize(
    conn: Connection,
    *,
    lookup_key: str,
    scope: str,
    thread_id: StoredId | None,
    resource_id: StoredId,
    config: Mapping[str, Any],
    observed_timezone: str,
) -> Record:
    """Insert generation 0 only while no live row exists for the key (§3.4); else return the head."""
    key_lock(conn, lookup_key)
    head = read_head(conn, lookup_key)
    if head is not None:
        return head
    now = _now()
    values = {
        "id": new_record_id(),
        "lookup_key": lookup_key,
        "scope": scope,
        "thread_id": thread_id,
        "resource_id": resource_id,
        "created_at": now,
        "updated_at": now,
        "origin_type": "initial",
        "generation_count": 0,
        "superseded_by": None,
        "active_observations": "",
        "config": dict(config),
        "observed_timezone": observed_timezone,
        "metadata": {},
    }
    try:
        with conn.begin_nested():
            conn.execute(R.insert().values(**values))
    except IntegrityError:
        # A concurrent initializer won (the partial unique index on live rows); theirs is the head.
        pass
    head = read_head(conn, lookup_key)
    assert head is not None
    return head


@dataclass(frozen=True)
class LiveFields:
    """Hint fields to write on the live head of `lookup_key` (what `set_live_head_fields` writes)."""

    lookup_key: str
    values: Mapping[str, Any]


def append_chunk(
    conn: Connection,
    record_id: str,
    chunk: ChunkInput,
    *,
    events: EventBuilder | None = None,
    live: LiveFields | None = None,
) -> tuple[AppendResult, list[StoredEvent]]:
    """Append a buffered chunk to the head of `record_id`'s lineage (§3.5(3)), keeping the list exact.

    Skips (persisted=False) when the cycle is already stored ("duplicate"), when the cursor already covers
    the chunk ("covered"), or when the chunk does not start where the head's buffered coverage ends
    ("stale": another cycle buffered or observed the same parts meanwhile). The last rule is what keeps the
    chunk list contiguous after the cursor, so activation can never jump the cursor past unobserved parts.

    `live` is written in this transaction whatever the outcome, exactly as `set_live_head_fields` would
    write it: into the UPDATE that marks the coverage when the chunk is stored on that key's head (the
    locked live head, so the same row: one statement fewer), else by `set_live_head_fields` itself.
    """
    if live is not None:
        _check_live_fields(live.values)
    result, stored = _append_chunk(conn, record_id, chunk, events, live)
    if live is not None and not result.persisted:
        set_live_head_fields(conn, live.lookup_key, live.values)
    return result, stored


def _lock_for_append(conn: Connection, record_id: str) -> tuple[Record | None, str | None]:
    """`lock_live(redirect=True)` without reading the buffered chunks of a live target: an append checks
    the head's cursors and the key's chunks (`_INSERT_CHUNK`, `_CHUNK_OF_CYCLE`), never the list itself."""
    row = _lock_row(conn, record_id)
    if row is None:
        return None, "not-found"
    if row["superseded_by"] is None:
        return _record_from_row(row), None
    return lock_live(conn, record_id, redirect=True)


def _append_chunk(
    conn: Connection, record_id: str, chunk: ChunkInput, events: EventBuilder | None, live: LiveFields | None
) -> tuple[AppendResult, list[StoredEvent]]:
    head, reason = _lock_for_append(conn, record_id)
    if head is None:
        return AppendResult(False, record_id, reason), []
    refused = (
        "covered"
        if head.last_observed_seq >= chunk.to_seq
        else "stale"
        if chunk.from_seq != head.buffer_cursor or chunk.to_seq <= chunk.from_seq
        else None
    )
    if refused is not None:
        # A stored cycle is reported as such first, whatever else is wrong with the chunk now. Read after
        # the row lock, like the insert below: a chunk committed while this append waited for it is seen.
        stored = conn.execute(_CHUNK_OF_CYCLE, {"lookup_key": head.lookup_key, "cycle_id": chunk.cycle_id})
        return AppendResult(False, head.id, "duplicate" if stored.first() else refused), []
    now = _now()
    inserted = conn.execute(
        _INSERT_CHUNK["postgresql" if conn.dialect.name == "postgresql" else "sqlite"],
        {
            "id": f"ombuf-{uuid.uuid4()}",
            "lookup_key": head.lookup_key,
            "record_id": head.id,
            "state": "buffered",
            "cycle_id": chunk.cycle_id,
            "observations": chunk.observations,
            "token_count": chunk.token_count,
            "message_ids": list(chunk.message_ids),
            "message_tokens": chunk.message_tokens,
            "thread_id": chunk.thread_id or head.thread_id,
            "from_seq": chunk.from_seq,
            "to_seq": chunk.to_seq,
            "last_observed_at": chunk.last_observed_at,
            "created_at": now,
            "current_task": chunk.current_task,
            "suggested_continuation": chunk.suggested_continuation,
            "thread_title": chunk.thread_title,
        },
    ).first()
    if inserted is None:
        return AppendResult(False, head.id, "duplicate"), []
    last_time = head.last_buffered_at_time
    if chunk.last_observed_at is not None and (last_time is None or chunk.last_observed_at > last_time):
        last_time = chunk.last_observed_at
    marked: dict[str, Any] = {
        "record_id": head.id,
        "last_buffered_seq": chunk.to_seq,
        "last_buffered_at_time": last_time,
        "updated_at": now,
    }
    if live is not None and live.lookup_key == head.lookup_key:
        marked.update(live.values)
        live = None
    conn.execute(_MARK_BUFFERED, marked)
    if live is not None:  # another key's head (never, as the engine calls it): its own statement
        set_live_head_fields(conn, live.lookup_key, live.values)
    result = AppendResult(True, head.id)
    return result, _finish(conn, head, events, result)


def activate(
    conn: Connection,
    record_id: str,
    *,
    choose_count: Callable[[Sequence[Chunk]], int],
    pending_tokens: int | None,
    thread_metadata_patch: Callable[[ActivationResult], Mapping[str, Any]] | None = None,
    events: EventBuilder | None = None,
    shared_log: SharedLog | None = None,
) -> tuple[ActivationResult, list[StoredEvent]]:
    """Move a prefix of the *stored* chunk list into the active log (behaviour §3.5(4)).

    `choose_count` sees the stored chunks and returns how many to activate (the boundary policy). The
    cursor only moves forward. A retired target writes nothing and reports `retired=True`, so the caller
    re-reads the head and retries; the caller removes messages from the actor's context only after this
    returns activated chunks from a live head (invariant 8).

    With `shared_log` (resource scope) the chunks' text joins the resource's log instead, locked after the
    thread's record (the order every writer of both takes) and composed there from its stored text; the
    thread's record only moves its cursor.
    """
    head, reason = lock_live(conn, record_id, redirect=False)
    if head is None:
        return ActivationResult(retired=reason == "retired"), []
    stored = list(head.chunks)
    if not stored:
        return ActivationResult(record=head), []
    count = max(0, min(len(stored), choose_count(stored)))
    if count == 0:
        return ActivationResult(record=head), []
    chosen = stored[:count]
    now = _now()
    texts = [c.observations.strip() for c in chosen if c.observations.strip()]
    joined = "\n\n".join(texts)
    log = head
    if shared_log is not None:
        found = read_head(conn, shared_log.key, for_update=True)
        if found is None:
            return ActivationResult(record=head), []
        log = found
    existing = log.active_observations.rstrip()
    if shared_log is not None:
        new_text = log.active_observations
        for chunk in chosen:
            new_text = shared_log.compose(new_text, chunk)
    else:
        new_text = f"{existing}\n\n{joined}" if existing and joined else (existing or joined)
    message_tokens = sum(c.message_tokens for c in chosen)
    observation_tokens = sum(c.token_count for c in chosen)
    pending = (
        pending_tokens
        if pending_tokens is not None
        else (head.pending_message_tokens or sum(c.message_tokens for c in stored))
    )
    cursor = max(head.last_observed_seq, max(c.to_seq for c in chosen))
    last_times = [c.last_observed_at for c in chosen if c.last_observed_at is not None]
    if head.last_observed_at is not None:
        last_times.append(head.last_observed_at)
    observed_at = max(last_times, default=None)
    conn.execute(
        update(C)
        .where(C.c.id.in_([c.id for c in chosen]), C.c.state == "buffered")
        .values(state="activated", activated_at=now)
    )
    log_values: dict[str, Any] = {
        "active_observations": new_text,
        "observation_token_count": log.observation_token_count + observation_tokens,
    }
    cursor_values: dict[str, Any] = {
        "pending_message_tokens": max(0, pending - message_tokens),
        "last_observed_seq": cursor,
        "last_observed_at": observed_at,
        "total_tokens_observed": head.total_tokens_observed + message_tokens,
        "last_buffered_at_tokens": 0,
        "is_buffering_observation": False,
        "updated_at": now,
    }
    if shared_log is None:
        conn.execute(update(R).where(R.c.id == head.id).values(**log_values, **cursor_values))
    else:
        conn.execute(update(R).where(R.c.id == log.id).values(**log_values, updated_at=now))
        conn.execute(update(R).where(R.c.id == head.id).values(**cursor_values))
    last = chosen[-1]
    updated = replace(
        head,
        active_observations=new_text if shared_log is None else head.active_observations,
        observation_token_count=(
            log.observation_token_count + observation_tokens
            if shared_log is None
            else head.observation_token_count
        ),
        last_observed_seq=cursor,
        last_observed_at=observed_at,
        pending_message_tokens=max(0, pending - message_tokens),
        last_buffered_at_tokens=0,
        chunks=tuple(stored[count:]),
    )
    result = ActivationResult(
        chunks_activated=count,
        message_tokens_activated=message_tokens,
        observation_tokens_activated=observation_tokens,
        messages_activated=sum(len(c.message_ids) for c in chosen),
        activated_cycle_ids=[c.cycle_id for c in chosen],
        activated_message_ids=[m for c in chosen for m in c.message_ids],
        per_chunk=[
            ActivatedChunk(
                cycle_id=c.cycle_id,
                message_tokens=c.message_tokens,
                observation_tokens=c.token_count,
                message_count=len(c.message_ids),
                observations=c.observations,
                message_ids=list(c.message_ids),
                from_seq=c.from_seq,
                to_seq=c.to_seq,
            )
            for c in chosen
        ],
        observations=joined,
        current_task=last.current_task,
        suggested_continuation=last.suggested_continuation,
        thread_title=last.thread_title,
        record=updated,
    )
    if thread_metadata_patch is not None and head.thread_id is not None:
        patch_thread_metadata(conn, head.thread_id, thread_metadata_patch(result))
    return result, _finish(conn, updated, events, result)


@dataclass(frozen=True)
class SharedLog:
    """Where activated chunks go in resource scope: the resource's log key and how a chunk's text joins
    it (its thread's section)."""

    key: str
    compose: Callable[[str, Chunk], str]


def commit_observation(
    conn: Connection,
    record_id: str,
    *,
    from_seq: int,
    to_seq: int,
    observations: str,
    token_count: int,
    observed_message_tokens: int,
    last_observed_at: datetime | None,
    thread_metadata: Mapping[str, Any] | None = None,
    events: EventBuilder | None = None,
) -> tuple[WriteResult, list[StoredEvent]]:
    """Append a synchronous observation of parts (from_seq, to_seq] to the head's log (behaviour §3.5(5)).

    The text is composed here, under the row lock, from the stored log, so a concurrent activation's text
    can never be overwritten (the reference's H2). The commit is refused ("conflict") if the cursor moved
    since the Observer started or a buffered chunk reaches past `to_seq`: both mean the same parts were
    covered by other work meanwhile, and committing would duplicate them. Buffered chunks lying wholly
    inside the observed range are retired as covered. A refused commit removes nothing from the actor's
    context; the next step tries again.
    """
    head, reason = lock_live(conn, record_id, redirect=True)
    if head is None:
        return WriteResult(False, reason), []
    if head.last_observed_seq >= to_seq:
        return WriteResult(False, "covered", head), []
    if head.last_observed_seq != from_seq:
        return WriteResult(False, "conflict", head), []
    if any(c.to_seq > to_seq for c in head.chunks):
        return WriteResult(False, "conflict", head), []
    now = _now()
    covered = [c.id for c in head.chunks]
    if covered:
        conn.execute(update(C).where(C.c.id.in_(covered)).values(state="superseded", activated_at=now))
    existing = head.active_observations.rstrip()
    body = observations.strip()
    new_text = f"{existing}\n\n{body}" if existing and body else (existing or body)
    observed_at = max([t for t in (head.last_observed_at, last_observed_at) if t is not None], default=None)
    values: dict[str, Any] = {
        "active_observations": new_text,
        "observation_token_count": head.observation_token_count + token_count,
        "last_observed_seq": to_seq,
        "last_observed_at": observed_at,
        "last_buffered_seq": max(head.last_buffered_seq, to_seq),
        "last_buffered_at_tokens": 0,
        "pending_message_tokens": 0,
        "total_tokens_observed": head.total_tokens_observed + observed_message_tokens,
        "updated_at": now,
    }
    conn.execute(update(R).where(R.c.id == head.id).values(**values))
    updated = replace(
        head,
        active_observations=new_text,
        observation_token_count=head.observation_token_count + token_count,
        last_observed_seq=to_seq,
        last_observed_at=observed_at,
        last_buffered_seq=max(head.last_buffered_seq, to_seq),
        last_buffered_at_tokens=0,
        pending_message_tokens=0,
        chunks=(),
    )
    if thread_metadata and head.thread_id is not None:
        patch_thread_metadata(conn, head.thread_id, thread_metadata)
    result = WriteResult(True, None, updated)
    return result, _finish(conn, updated, events, result)


#: What the events of a multi-thread commit are written for: each thread's cursor record and its drafts.
BatchEventBuilder = Callable[[Mapping[StoredId, Record]], Sequence[tuple[Record, Sequence[NewEvent]]]]


def commit_thread_observations(
    conn: Connection,
    log_key: str,
    entries: Sequence[ThreadObservation],
    *,
    compose: Callable[[str, ThreadObservation], str],
    events: BatchEventBuilder | None = None,
) -> tuple[WriteResult, list[StoredEvent]]:
    """Commit a multi-thread observation into a resource's shared log (behaviour §4.12, §3.5(5)), all or
    nothing.

    Each thread's cursor record is locked (in id order; the log row after them, the order every writer
    of both takes) and must still start at the entry's `from_seq` with no chunk reaching past `to_seq`,
    exactly the fence of `commit_observation`; one refused thread refuses the batch, so no thread's
    parts are ever covered twice and none is skipped. The sections are composed here from the stored log
    (`compose`), so a concurrent reflection or batch is never overwritten.
    """
    cursors: dict[StoredId, Record] = {}
    for entry in sorted(entries, key=lambda e: e.cursor_record_id):
        head, reason = lock_live(conn, entry.cursor_record_id, redirect=True)
        if head is None:
            return WriteResult(False, reason), []
        if head.last_observed_seq >= entry.to_seq:
            return WriteResult(False, "covered", head), []
        if head.last_observed_seq != entry.from_seq or any(c.to_seq > entry.to_seq for c in head.chunks):
            return WriteResult(False, "conflict", head), []
        cursors[entry.thread_id] = head
    log = read_head(conn, log_key, for_update=True)
    if log is None:
        return WriteResult(False, "not-found"), []
    now = _now()
    text = log.active_observations
    for entry in entries:
        text = compose(text, entry)
    observed_at = max(
        [t for t in (log.last_observed_at, *(e.last_observed_at for e in entries)) if t is not None],
        default=None,
    )
    added_tokens = sum(e.token_count for e in entries)
    conn.execute(
        update(R)
        .where(R.c.id == log.id)
        .values(
            active_observations=text,
            observation_token_count=log.observation_token_count + added_tokens,
            last_observed_at=observed_at,
            total_tokens_observed=log.total_tokens_observed + sum(e.observed_message_tokens for e in entries),
            updated_at=now,
        )
    )
    updated: dict[StoredId, Record] = {}
    for entry in entries:
        head = cursors[entry.thread_id]
        if head.chunks:
            conn.execute(
                update(C)
                .where(C.c.id.in_([c.id for c in head.chunks]))
                .values(state="superseded", activated_at=now)
            )
        observed_at = max(t for t in (head.last_observed_at, entry.last_observed_at) if t is not None)
        buffered_seq = max(head.last_buffered_seq, entry.to_seq)
        total = head.total_tokens_observed + entry.observed_message_tokens
        conn.execute(
            update(R)
            .where(R.c.id == head.id)
            .values(
                last_observed_seq=entry.to_seq,
                last_observed_at=observed_at,
                last_buffered_seq=buffered_seq,
                last_buffered_at_tokens=0,
                pending_message_tokens=0,
                total_tokens_observed=total,
                updated_at=now,
            )
        )
        updated[entry.thread_id] = replace(
            head,
            last_observed_seq=entry.to_seq,
            last_observed_at=observed_at,
            last_buffered_seq=buffered_seq,
            last_buffered_at_tokens=0,
            pending_message_tokens=0,
            total_tokens_observed=total,
            chunks=(),
        )
        patch_thread_metadata(conn, entry.thread_id, entry.thread_metadata)
    new_log = replace(
        log,
        active_observations=text,
        observation_token_count=log.observation_token_count + added_tokens,
        last_observed_at=observed_at,
    )
    stored: list[StoredEvent] = []
    if events is not None:
        for record, drafts in events(updated):
            if drafts:
                stored.extend(write_record_events(conn, record, drafts))
    return WriteResult(True, None, new_log), stored


def create_reflection_generation(
    conn: Connection,
    snapshot: Record,
    *,
    reflection: str,
    token_count: int,
    compose: Callable[[str, str, str], str | None],
    new_record_id_: str | None = None,
    events: EventBuilder | None = None,
) -> tuple[Record | None, bool, list[StoredEvent]]:
    """Roll the key over to a new generation built from the *stored* row (behaviour §3.5(6)).

    `compose(snapshot_text, stored_text, reflection)` is the text plan: the reflection alone when nothing
    changed, the reflection plus the appended tail when only appends happened, None for a rewrite (then
    nothing is created). Buffered chunks move to the successor in order; cursor, buffer cursor, counters,
    config and metadata carry over; the old row is retired in the same transaction.

    Returns (head, applied, events). `applied` is True only if this call created the successor.
    """
    key_lock(conn, snapshot.lookup_key)
    row = _lock_row(conn, snapshot.id)
    if row is None:
        return None, False, []
    if row["superseded_by"] is not None:
        return read_head(conn, snapshot.lookup_key), False, []
    stored = _record_from_row(row, _buffered_chunks(conn, snapshot.id))
    text = compose(snapshot.active_observations, stored.active_observations, reflection)
    if text is None:
        return stored, False, []
    tail_tokens = max(0, stored.observation_token_count - snapshot.observation_token_count)
    successor = _roll_over(
        conn,
        stored,
        text=text,
        token_count=token_count + tail_tokens,
        successor_id=new_record_id_ or new_record_id(),
    )
    return successor, True, _finish(conn, successor, events, successor)


def swap_buffered_reflection_to_active(
    conn: Connection,
    record_id: str,
    *,
    compose: Callable[[str, int, str], str],
    count_tokens: Callable[[str], int],
    events: EventBuilder | None = None,
) -> tuple[Record | None, str | None, list[StoredEvent]]:
    """Activate the buffered reflection stored on `record_id` (behaviour §3.5(8)) as a new generation.

    `compose(active_text, reflected_line_count, buffered_reflection)` replaces the leading lines the
    reflection covers and keeps the lines added since. Returns (new head, reason, events); reason is
    "retired", "not-found" or "no-buffer" when nothing was done.
    """
    # Lock order everywhere: the key's advisory lock first, then the row (as create_reflection_generation
    # does), or two rollovers of one key could deadlock.
    lookup = conn.execute(select(R.c.lookup_key).where(R.c.id == record_id)).scalar()
    if lookup is None:
        return None, "not-found", []
    key_lock(conn, lookup)
    head, reason = lock_live(conn, record_id, redirect=False)
    if head is None:
        return None, reason, []
    if not head.buffered_reflection or head.reflected_observation_line_count is None:
        return head, "no-buffer", []
    text = compose(head.active_observations, head.reflected_observation_line_count, head.buffered_reflection)
    conn.execute(
        update(R)
        .where(R.c.id == head.id)
        .values(
            buffered_reflection=None,
            buffered_reflection_tokens=None,
            buffered_reflection_input_tokens=None,
            reflected_observation_line_count=None,
            buffered_reflection_cycle_id=None,
        )
    )
    successor = _roll_over(
        conn, head, text=text, token_count=count_tokens(text), successor_id=new_record_id()
    )
    return successor, None, _finish(conn, successor, events, successor)


def _roll_over(
    conn: Connection,
    stored: Record,
    *,
    text: str,
    token_count: int,
    successor_id: str,
    origin_type: str = "reflection",
) -> Record:
    """Create the successor of `stored` (locked, live) and retire `stored`, in the caller's transaction.
    `origin_type` says what made it: a reflection, or a caller's edit of one line (`store.log_edits`)."""
    now = _now()
    # Retire first: the partial unique index allows one live row per key at any instant.
    conn.execute(update(R).where(R.c.id == stored.id).values(superseded_by=successor_id, updated_at=now))
    conn.execute(
        R.insert().values(
            id=successor_id,
            lookup_key=stored.lookup_key,
            scope=stored.scope,
            thread_id=stored.thread_id,
            resource_id=stored.resource_id,
            created_at=now,
            updated_at=now,
            origin_type=origin_type,
            generation_count=stored.generation_count + 1,
            superseded_by=None,
            active_observations=text,
            observation_token_count=token_count,
            last_observed_seq=stored.last_observed_seq,
            last_observed_at=stored.last_observed_at,
            last_buffered_seq=stored.last_buffered_seq,
            last_buffered_at_time=stored.last_buffered_at_time,
            last_buffered_at_tokens=stored.last_buffered_at_tokens,
            pending_message_tokens=stored.pending_message_tokens,
            total_tokens_observed=stored.total_tokens_observed,
            is_observing=stored.is_observing,
            is_reflecting=stored.is_reflecting,
            is_buffering_observation=stored.is_buffering_observation,
            is_buffering_reflection=False,
            config=stored.config,
            observed_timezone=stored.observed_timezone,
            metadata=stored.metadata,
        )
    )
    conn.execute(
        update(C).where(C.c.record_id == stored.id, C.c.state == "buffered").values(record_id=successor_id)
    )
    head = read_head(conn, stored.lookup_key)
    assert head is not None and head.id == successor_id
    return head


def roll_over_locked(
    conn: Connection, stored: Record, *, text: str, token_count: int, origin_type: str
) -> Record:
    """A new generation with `text` from `stored`, which the caller holds under the key's lock and its row
    lock and has checked is live (the rules `create_reflection_generation` follows): chunks, cursors and
    counters carry over, the buffered reflection (computed from the old text) does not."""
    return _roll_over(
        conn,
        stored,
        text=text,
        token_count=token_count,
        successor_id=new_record_id(),
        origin_type=origin_type,
    )


def update_buffered_reflection(
    conn: Connection,
    record_id: str,
    *,
    text: str,
    token_count: int,
    input_token_count: int,
    reflected_line_count: int,
    cycle_id: str,
    events: EventBuilder | None = None,
) -> tuple[WriteResult, list[StoredEvent]]:
    """Store a background reflection on the *named* row (its line count refers to that row's text).

    On a retired row it is simply lost: wasted work, never lost coverage (behaviour §3.5(7)).
    """
    head, reason = lock_live(conn, record_id, redirect=False)
    if head is None:
        return WriteResult(False, reason), []
    if len(head.active_observations.split("\n")) < reflected_line_count:
        return WriteResult(False, "conflict", head), []
    conn.execute(
        update(R)
        .where(R.c.id == head.id)
        .values(
            buffered_reflection=text,
            buffered_reflection_tokens=token_count,
            buffered_reflection_input_tokens=input_token_count,
            reflected_observation_line_count=reflected_line_count,
            buffered_reflection_cycle_id=cycle_id,
            is_buffering_reflection=False,
            updated_at=_now(),
        )
    )
    result = WriteResult(True, None, head)
    return result, _finish(conn, head, events, result)


FLAG_COLUMNS = ("is_observing", "is_reflecting", "is_buffering_observation", "is_buffering_reflection")


def set_flag(conn: Connection, record_id: str, flag: str, value: bool, *, redirect: bool = True) -> bool:
    """Write a hint flag. Flags are never locks: liveness is decided by the shared in-flight registry."""
    if flag not in FLAG_COLUMNS:
        raise ValueError(f"unknown flag {flag!r}; expected one of {FLAG_COLUMNS}")
    head, _ = lock_live(conn, record_id, redirect=redirect)
    if head is None:
        return False
    conn.execute(update(R).where(R.c.id == head.id).values({flag: value, "updated_at": _now()}))
    return True


def set_live_head_fields(conn: Connection, lookup_key: str, values: Mapping[str, Any]) -> None:
    """Write hint flags and the buffering boundary on the key's live head in one statement.

    These fields steer nothing that must be exact (flags are hints, the boundary only paces buffering), so
    they need no redirect walk: whichever record is live when the statement runs gets them.
    """
    _check_live_fields(values)
    conn.execute(_UPDATE_LIVE_HEAD, {**values, "updated_at": _now(), "live_key": lookup_key})


_LIVE_FIELDS = frozenset({*FLAG_COLUMNS, "last_buffered_at_tokens"})


def _check_live_fields(values: Mapping[str, Any]) -> None:
    unknown = sorted(set(values) - _LIVE_FIELDS)
    if unknown:
        raise ValueError(f"not a hint field: {unknown}; expected some of {sorted(_LIVE_FIELDS)}")


def set_buffering_boundary(conn: Connection, record_id: str, tokens: int) -> bool:
    head, _ = lock_live(conn, record_id, redirect=True)
    if head is None:
        return False
    conn.execute(update(R).where(R.c.id == head.id).values(last_buffered_at_tokens=max(0, tokens)))
    return True


def update_record_config(conn: Connection, record_id: str, partial: Mapping[str, Any]) -> Record | None:
    """Deep-merge `partial` into `config._overrides`, on the head even when given a retired id."""
    head, _ = lock_live(conn, record_id, redirect=True)
    if head is None:
        return None
    config = dict(head.config)
    config["_overrides"] = deep_merge(dict(config.get("_overrides") or {}), partial)
    conn.execute(update(R).where(R.c.id == head.id).values(config=config, updated_at=_now()))
    return replace(head, config=config)


def clear(conn: Connection, lookup_key: str) -> int:
    """Delete every generation of a key. The next initialisation gets a fresh random id."""
    key_lock(conn, lookup_key)
    conn.execute(delete(C).where(C.c.lookup_key == lookup_key))
    result = conn.execute(delete(R).where(R.c.lookup_key == lookup_key))
    return int(result.rowcount or 0)


def patch_thread_metadata(conn: Connection, thread_id: StoredId, patch: Mapping[str, Any]) -> None:
    """Merge OM values into the thread's metadata; absent or empty values never erase stored ones (§3.3)."""
    present = {k: v for k, v in patch.items() if v is not None and v != ""}
    if not present:
        return
    T = schema.threads
    row = conn.execute(select(T.c.om_metadata).where(T.c.id == thread_id).with_for_update()).first()
    if row is None:
        return
    merged = deep_merge(dict(row[0] or {}), present)
    conn.execute(update(T).where(T.c.id == thread_id).values(om_metadata=merged, updated_at=_now()))


def deep_merge(base: dict[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in patch.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def live_heads(engine: Engine, lookup_key: str) -> int:
    """How many live rows a key has (an invariant check: must be 0 or 1)."""
    with engine.connect() as conn:
        return int(
            conn.execute(
                select(func.count()).where(and_(R.c.lookup_key == lookup_key, R.c.superseded_by.is_(None)))
            ).scalar()
            or 0
        )
