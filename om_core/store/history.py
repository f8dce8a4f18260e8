"""Threads, messages and their append-only parts.

Each new part gets the next value of its thread's sequence (`om_threads.last_seq`, bumped under the thread
row lock), so sequence order is commit order and a cursor is one integer. A message sent twice with the same
id (a retrying client) stores nothing new; a message that grew stores only its new parts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

import pydantic_core
from sqlalchemy import Connection, Engine, bindparam, func, select, text, update
from sqlalchemy.dialects import postgresql, sqlite

from om_core.messages import Message, Part, Role
from om_core.store import schema
from om_core.store.records import deep_merge
from om_core.tenancy.scoped_ids import StoredId, public_id

T = schema.threads
M = schema.messages
P = schema.parts

#: (tokens, overhead_delta, extra_messages) of one part, per behaviour §7.2.
PartCounter = Callable[[Part], tuple[float, float, int]]


class MessageConflict(ValueError):
    """A message id was reused with a different role: refused, nothing stored."""


@dataclass(frozen=True)
class ThreadRow:
    id: StoredId
    resource_id: StoredId
    title: str | None
    om_metadata: dict[str, Any]
    config_overrides: dict[str, Any] | None
    last_seq: int
    last_actor_model: str | None
    last_activity_at: datetime | None
    created_at: datetime
    updated_at: datetime
    tenant_id: str | None = None
    #: The resource's overrides (read with the thread); the thread's own are merged over them.
    resource_overrides: dict[str, Any] | None = None

    @property
    def effective_overrides(self) -> dict[str, Any] | None:
        """What the thread's config is resolved from: the resource's overrides, the thread's over them."""
        if not self.resource_overrides:
            return self.config_overrides
        return deep_merge(dict(self.resource_overrides), self.config_overrides or {})


@dataclass(frozen=True)
class PartTokens:
    """The stored token contribution of one unobserved part (no body loaded)."""

    message_id: str
    role: str
    seq: int
    type: str
    tokens: float
    overhead_delta: float
    extra_messages: int


def _now() -> datetime:
    return datetime.now(UTC)


def _insert(conn: Connection) -> Any:
    return postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert


def _thread_from_row(row: Any) -> ThreadRow:
    return ThreadRow(
        id=row["id"],
        resource_id=row["resource_id"],
        title=row["title"],
        om_metadata=dict(row["om_metadata"] or {}),
        config_overrides=dict(row["config_overrides"]) if row["config_overrides"] else None,
        last_seq=row["last_seq"],
        last_actor_model=row["last_actor_model"],
        last_activity_at=row["last_activity_at"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        tenant_id=row["tenant_id"],
        resource_overrides=resource_overrides(row.get("resource_metadata")),
    )


#: The key of a resource's config overrides in its metadata.
RESOURCE_OVERRIDES_KEY = "configOverrides"


def resource_overrides(metadata: Any) -> dict[str, Any] | None:
    value = metadata.get(RESOURCE_OVERRIDES_KEY) if isinstance(metadata, dict) else None
    return dict(value) if value else None


def set_resource_overrides(conn: Connection, resource_id: StoredId, overrides: dict[str, Any] | None) -> None:
    """Replace the resource's overrides (None clears them), keeping the rest of its metadata."""
    R = schema.resources
    row = conn.execute(select(R.c.metadata).where(R.c.id == resource_id).with_for_update()).first()
    metadata = dict(row[0] or {}) if row is not None else {}
    metadata.pop(RESOURCE_OVERRIDES_KEY, None)
    if overrides:
        metadata[RESOURCE_OVERRIDES_KEY] = overrides
    conn.execute(update(R).where(R.c.id == resource_id).values(metadata=metadata))


def ensure_resource(conn: Connection, resource_id: StoredId, tenant_id: str | None = None) -> None:
    conn.execute(
        _insert(conn)(schema.resources)
        .values(id=resource_id, tenant_id=tenant_id, metadata={}, created_at=_now())
        .on_conflict_do_nothing()
    )


def ensure_thread(
    conn: Connection, thread_id: StoredId, resource_id: StoredId, tenant_id: str | None = None
) -> None:
    now = _now()
    insert = _insert(conn)
    ensure_resource(conn, resource_id, tenant_id)
    conn.execute(
        insert(T)
        .values(
            id=thread_id,
            resource_id=resource_id,
            tenant_id=tenant_id,
            om_metadata={},
            last_seq=0,
            created_at=now,
            updated_at=now,
        )
        .on_conflict_do_nothing()
    )


def get_thread(engine_or_conn: Engine | Connection, thread_id: StoredId) -> ThreadRow | None:
    params = {"thread_id": thread_id}
    if isinstance(engine_or_conn, Engine):
        with engine_or_conn.connect() as conn:
            row = conn.execute(_THREAD, params).mappings().first()
    else:
        row = engine_or_conn.execute(_THREAD, params).mappings().first()
    return _thread_from_row(row) if row is not None else None


def list_threads(
    engine_or_conn: Engine | Connection, resource_id: StoredId, tenant_id: str | None = None
) -> list[ThreadRow]:
    """The resource's threads, oldest first, each with the resource's overrides."""
    query = (
        select(T, schema.resources.c.metadata.label("resource_metadata"))
        .outerjoin(schema.resources, schema.resources.c.id == T.c.resource_id)
        .where(T.c.resource_id == resource_id)
        .order_by(T.c.created_at, T.c.id)
    )
    if tenant_id is not None:
        query = query.where(T.c.tenant_id == tenant_id)
    if isinstance(engine_or_conn, Engine):
        with engine_or_conn.connect() as conn:
            return [_thread_from_row(row) for row in conn.execute(query).mappings()]
    return [_thread_from_row(row) for row in engine_or_conn.execute(query).mappings()]


#: The key of the caller's own thread metadata inside `om_threads.om_metadata` (`PATCH /v1/threads/{id}`).
#: OM's values (currentTask, threadTitle, ...) sit beside it and are never shown as, or written from, it.
CLIENT_METADATA_KEY = "clientMetadata"


def client_metadata(thread: ThreadRow) -> dict[str, Any]:
    """The caller's own metadata of a thread (empty when it set none)."""
    value = thread.om_metadata.get(CLIENT_METADATA_KEY)
    return dict(value) if isinstance(value, dict) else {}


@dataclass(frozen=True)
class ThreadListing:
    """A thread as a list shows it: the row, with its message count and OM's model cost, read in the
    statement that pages the list (no query per row)."""

    thread: ThreadRow
    messages: int
    cost_usd: float


def public_part(column: Any, tenant_id: str | None) -> Any:
    """SQL for the public id of a stored id `column` of `tenant_id`'s rows (`<tenant>/<id>`): what a
    substring search may match, never the tenant's name."""
    return column if tenant_id is None else func.substr(column, len(tenant_id) + 2)


def contains_text(expression: Any, needle: str) -> Any:
    """Case-insensitive substring match on both databases (`%` and `_` in `needle` match themselves)."""
    return func.lower(expression).contains(needle.lower(), autoescape=True)


def page_threads(
    engine_or_conn: Engine | Connection,
    *,
    tenant_id: str | None,
    resource_id: StoredId | None,
    after: tuple[Any, ...] | None,
    limit: int,
    q: str | None = None,
) -> list[ThreadListing]:
    """Up to `limit` threads in list order, strictly after the sort key `after` (keyset paging), each with
    its message count and cost; with `q`, only threads whose public id or title contains it (any case).

    A resource's threads are listed oldest first (`created_at`, then id: the order the unpaged list always
    had, served by the resource index); a tenant's threads by id (the primary key: no sort of the whole
    tenant per page). The counts are correlated subqueries, evaluated only for the rows of the page."""
    M, U = schema.messages, schema.usage_threads
    message_count = (
        select(func.count()).select_from(M).where(M.c.thread_id == T.c.id).correlate(T).scalar_subquery()
    )
    query = (
        select(
            T,
            schema.resources.c.metadata.label("resource_metadata"),
            message_count.label("message_count"),
            func.coalesce(U.c.cost_usd, 0.0).label("cost_usd"),
        )
        .outerjoin(schema.resources, schema.resources.c.id == T.c.resource_id)
        .outerjoin(U, U.c.thread_id == T.c.id)
    )
    if tenant_id is not None:
        query = query.where(T.c.tenant_id == tenant_id)
    if q:
        title = func.coalesce(T.c.title, T.c.om_metadata["threadTitle"].as_string(), "")
        query = query.where(contains_text(public_part(T.c.id, tenant_id), q) | contains_text(title, q))
    if resource_id is not None:
        query = query.where(T.c.resource_id == resource_id).order_by(T.c.created_at, T.c.id)
        if after is not None:
            created, last_id = after
            query = query.where(
                (T.c.created_at > created) | ((T.c.created_at == created) & (T.c.id > last_id))
            )
    else:
        query = query.order_by(T.c.id)
        if after is not None:
            query = query.where(T.c.id > after[0])
    query = query.limit(limit)
    if isinstance(engine_or_conn, Engine):
        with engine_or_conn.connect() as conn:
            rows = list(conn.execute(query).mappings())
    else:
        rows = list(engine_or_conn.execute(query).mappings())
    return [
        ThreadListing(_thread_from_row(row), int(row["message_count"] or 0), float(row["cost_usd"] or 0.0))
        for row in rows
    ]


def set_thread_fields(
    conn: Connection,
    thread_id: StoredId,
    *,
    title: str | None = None,
    clear_title: bool = False,
    metadata: dict[str, Any] | None = None,
    clear_metadata: bool = False,
) -> ThreadRow | None:
    """Set the caller's title and/or metadata of a thread under its row lock; None if it is gone.

    Only the `clientMetadata` entry of `om_metadata` is replaced, so OM's own values (cursors, current
    task, the Observer's title) are never touched by a caller, nor a caller's by OM."""
    thread = lock_thread(conn, thread_id)
    if thread is None:
        return None
    values: dict[str, Any] = {}
    if title is not None or clear_title:
        values["title"] = title
    if metadata is not None or clear_metadata:
        om_metadata = dict(thread.om_metadata)
        om_metadata.pop(CLIENT_METADATA_KEY, None)
        if metadata:
            om_metadata[CLIENT_METADATA_KEY] = metadata
        values["om_metadata"] = om_metadata
    if values:
        conn.execute(update(T).where(T.c.id == thread_id).values(**values, updated_at=_now()))
    return lock_thread(conn, thread_id)


# Statements every turn runs, built once with bind parameters (no expression building per call).
_THREAD = (
    select(T, schema.resources.c.metadata.label("resource_metadata"))
    .outerjoin(schema.resources, schema.resources.c.id == T.c.resource_id)
    .where(T.c.id == bindparam("thread_id"))
)
_LOCK_THREAD = _THREAD.with_for_update(of=T)
_KNOWN_MESSAGES = select(M.c.id, M.c.role, M.c.part_count).where(
    M.c.thread_id == bindparam("thread_id"), M.c.id.in_(bindparam("ids", expanding=True))
)
_UNOBSERVED = (
    select(
        P.c.message_id,
        P.c.seq,
        P.c.type,
        P.c.tokens,
        P.c.overhead_delta,
        P.c.extra_messages,
        M.c.role,
        M.c.created_at,
        M.c.first_seq,
        M.c.resource_id,
        M.c.metadata,
    )
    .join(M, (M.c.thread_id == P.c.thread_id) & (M.c.id == P.c.message_id))
    .where(P.c.thread_id == bindparam("thread_id"), P.c.seq > bindparam("after_seq"))
    .order_by(P.c.seq)
)
_BODIES = select(P.c.seq, P.c.body).where(
    P.c.thread_id == bindparam("thread_id"), P.c.seq.in_(bindparam("seqs", expanding=True))
)


def known_message_ids(conn: Connection, thread_id: StoredId, ids: Sequence[str]) -> set[str]:
    """Which of `ids` the thread already stores."""
    if not ids:
        return set()
    return {
        row["id"]
        for row in conn.execute(_KNOWN_MESSAGES, {"thread_id": thread_id, "ids": list(ids)}).mappings()
    }


def lock_thread(conn: Connection, thread_id: StoredId) -> ThreadRow | None:
    """Read the thread row under its lock (held to commit): the state every append builds on."""
    row = conn.execute(_LOCK_THREAD, {"thread_id": thread_id}).mappings().first()
    return _thread_from_row(row) if row is not None else None


def append_messages(
    conn: Connection,
    *,
    thread_id: StoredId,
    resource_id: StoredId,
    incoming: Sequence[Message],
    count_part: PartCounter,
    actor_model: str | None = None,
    tenant_id: str | None = None,
) -> list[Message]:
    """Store new messages and new parts of known messages; return the stored copies with `seq` set.

    Returns only what was newly stored (an exact retry returns an empty list).
    """
    ensure_thread(conn, thread_id, resource_id, tenant_id)
    thread = lock_thread(conn, thread_id)
    assert thread is not None, "ensure_thread created the row in this transaction"
    return append_to_locked(conn, thread, incoming, count_part=count_part, actor_model=actor_model)


def append_to_locked(
    conn: Connection,
    thread: ThreadRow,
    incoming: Sequence[Message],
    *,
    count_part: PartCounter,
    actor_model: str | None = None,
) -> list[Message]:
    """`append_messages` for a thread row this transaction already holds (`lock_thread`): the turn path
    locks the row first, so it reads the thread and appends with no extra statement."""
    thread_id, resource_id = thread.id, thread.resource_id
    seq = thread.last_seq
    ids = [m.id for m in incoming]
    found = conn.execute(_KNOWN_MESSAGES, {"thread_id": thread_id, "ids": ids}).mappings()
    known = {row["id"]: row for row in found}
    stored: list[Message] = []
    message_rows: list[dict[str, Any]] = []
    part_rows: list[dict[str, Any]] = []
    latest_activity: datetime | None = None
    for message in incoming:
        previous = known.get(message.id)
        if previous is not None and previous["role"] != message.role:
            raise MessageConflict(
                f"message {message.id!r} is already stored with role {previous['role']!r}; "
                f"a message id cannot change role (got {message.role!r})"
            )
        start = int(previous["part_count"]) if previous is not None else 0
        new_parts = message.parts[start:]
        if previous is not None and not new_parts:
            continue
        first_seq = seq + 1
        stamped: list[Part] = []
        for offset, part in enumerate(new_parts):
            seq += 1
            tokens, overhead, extra = count_part(part)
            stamped_part = part.model_copy(update={"seq": seq})
            body = stamped_part.model_dump(mode="json", exclude_none=True, by_alias=True)
            # The copy returned is the stored body read back, exactly what a later read will produce.
            stamped.append(Part.model_validate(body))
            part_rows.append(
                {
                    "thread_id": thread_id,
                    "seq": seq,
                    "message_id": message.id,
                    "part_index": start + offset,
                    "type": part.type,
                    "body": body,
                    "created_at": part.created_at,
                    "tokens": float(tokens),
                    "overhead_delta": float(overhead),
                    "extra_messages": int(extra),
                }
            )
        if previous is None:
            message_rows.append(
                {
                    "thread_id": thread_id,
                    "id": message.id,
                    "resource_id": resource_id,
                    "role": message.role,
                    "created_at": message.created_at,
                    "metadata": message.metadata,
                    "first_seq": first_seq,
                    "part_count": len(message.parts),
                }
            )
        else:
            conn.execute(
                update(M)
                .where(M.c.thread_id == thread_id, M.c.id == message.id)
                .values(part_count=start + len(new_parts))
            )
        stored.append(
            message.model_copy(
                update={
                    "parts": stamped,
                    "thread_id": public_id(thread_id),
                    "resource_id": public_id(resource_id),
                }
            )
        )
        if message.role == "assistant":
            times = [p.created_at for p in new_parts if p.created_at is not None and not p.is_data]
            candidate = max(times) if times else message.created_at
            latest_activity = max(latest_activity, candidate) if latest_activity else candidate
    _write_appended(
        conn,
        thread_id,
        message_rows,
        part_rows,
        {"last_seq": seq, "last_activity_at": latest_activity, "last_actor_model": actor_model or None},
    )
    return stored


#: The rows of an append and the thread's bump in one Postgres statement (one round trip instead of
#: three): the rows travel as two JSON arrays, so the statement's text never changes with their number.
#: Data-modifying CTEs all run, to completion, whether or not the UPDATE reads them.
_APPEND_PG = text(
    """
WITH new_messages AS (
    INSERT INTO om_messages (thread_id, id, resource_id, role, created_at, metadata, first_seq, part_count)
    SELECT m.thread_id, m.id, m.resource_id, m.role, m.created_at, m.metadata, m.first_seq, m.part_count
    FROM jsonb_to_recordset(CAST(:messages AS jsonb)) AS m(
        thread_id text, id text, resource_id text, role text, created_at timestamptz, metadata jsonb,
        first_seq bigint, part_count integer)
), new_parts AS (
    INSERT INTO om_parts (thread_id, seq, message_id, part_index, type, body, created_at, tokens,
                          overhead_delta, extra_messages)
    SELECT p.thread_id, p.seq, p.message_id, p.part_index, p.type, p.body, p.created_at, p.tokens,
           p.overhead_delta, p.extra_messages
    FROM jsonb_to_recordset(CAST(:parts AS jsonb)) AS p(
        thread_id text, seq bigint, message_id text, part_index integer, type text, body jsonb,
        created_at timestamptz, tokens double precision, overhead_delta double precision,
        extra_messages integer)
)
UPDATE om_threads SET
    last_seq = :last_seq,
    updated_at = :updated_at,
    last_activity_at = COALESCE(:last_activity_at, last_activity_at),
    last_actor_model = COALESCE(:last_actor_model, last_actor_model)
WHERE id = :thread_id
"""
).bindparams(
    bindparam("updated_at", type_=schema.Timestamp),
    bindparam("last_activity_at", type_=schema.Timestamp),
)


def _write_appended(
    conn: Connection,
    thread_id: StoredId,
    message_rows: list[dict[str, Any]],
    part_rows: list[dict[str, Any]],
    thread_values: dict[str, Any],
) -> None:
    """Insert an append's new messages and parts and move the thread's `last_seq` (and its activity time
    and actor model when given). Postgres does it in one statement (`_APPEND_PG`), the others in three."""
    now = _now()
    if conn.dialect.name == "postgresql":
        conn.execute(
            _APPEND_PG,
            {
                "thread_id": thread_id,
                "messages": _json_rows(message_rows, conn),
                "parts": _json_rows(part_rows, conn),
                "updated_at": now,
                **thread_values,
            },
        )
        return
    if message_rows:
        conn.execute(M.insert(), message_rows)
    if part_rows:
        conn.execute(P.insert(), part_rows)
    values = {"updated_at": now, **{k: v for k, v in thread_values.items() if v is not None}}
    conn.execute(update(T).where(T.c.id == thread_id).values(**values))


def _json_rows(rows: list[dict[str, Any]], conn: Connection) -> str:
    """`rows` as one JSON array, times checked and made UTC as the column type does on any other insert."""
    bind = schema.Timestamp.process_bind_param
    return pydantic_core.to_json(
        [{**row, "created_at": bind(row["created_at"], conn.dialect)} for row in rows]
    ).decode()


def _with_messages(conn: Connection, thread_id: StoredId, rows: Sequence[Any]) -> list[Message]:
    """Part rows (message id, body, seq) assembled into their messages, read in one statement."""
    if not rows:
        return []
    ids = sorted({row["message_id"] for row in rows})
    message_rows = {
        row["id"]: row
        for row in conn.execute(select(M).where(M.c.thread_id == thread_id, M.c.id.in_(ids))).mappings()
    }
    return _assemble(rows, message_rows, thread_id)


def _assemble(rows: Sequence[Any], message_rows: dict[str, Any], thread_id: StoredId) -> list[Message]:
    grouped: dict[str, list[Part]] = {}
    for row in rows:
        part = Part.model_validate(row["body"])
        grouped.setdefault(row["message_id"], []).append(part)
    ordered = sorted(
        grouped.items(),
        key=lambda item: (message_rows[item[0]]["created_at"], message_rows[item[0]]["first_seq"]),
    )
    out: list[Message] = []
    for message_id, message_parts in ordered:
        meta = message_rows[message_id]
        out.append(
            Message(
                id=message_id,
                role=meta["role"],
                parts=message_parts,
                created_at=meta["created_at"],
                thread_id=public_id(thread_id),
                resource_id=public_id(meta["resource_id"]),
                metadata=dict(meta["metadata"] or {}),
            )
        )
    return out


def load_parts(
    conn: Connection, thread_id: StoredId, *, after_seq: int = 0, upto_seq: int | None = None
) -> list[Message]:
    """Messages holding the parts with after_seq < seq <= upto_seq, each with only those parts.

    This is how "unobserved" is read: by sequence, so per-turn reads depend on the unobserved window only.
    """
    query = select(P.c.message_id, P.c.body, P.c.seq).where(P.c.thread_id == thread_id, P.c.seq > after_seq)
    if upto_seq is not None:
        query = query.where(P.c.seq <= upto_seq)
    return _with_messages(conn, thread_id, conn.execute(query.order_by(P.c.seq)).mappings().all())


def part_tokens_after(conn: Connection, thread_id: StoredId, after_seq: int) -> list[PartTokens]:
    """Stored token contributions of the parts after the cursor (no bodies: cheap on the turn path)."""
    query = (
        select(
            P.c.message_id, M.c.role, P.c.seq, P.c.type, P.c.tokens, P.c.overhead_delta, P.c.extra_messages
        )
        .join(M, (M.c.thread_id == P.c.thread_id) & (M.c.id == P.c.message_id))
        .where(P.c.thread_id == thread_id, P.c.seq > after_seq)
        .order_by(P.c.seq)
    )
    return [_part_tokens(row) for row in conn.execute(query).mappings()]


def part_tokens_newest_first(
    conn: Connection, thread_id: StoredId, *, before_seq: int | None, limit: int
) -> list[PartTokens]:
    """Stored token contributions of up to `limit` parts before `before_seq` (None: the newest), newest
    first: a page of the history read backwards, so finding the recent tail costs the tail, not the
    thread."""
    query = (
        select(
            P.c.message_id, M.c.role, P.c.seq, P.c.type, P.c.tokens, P.c.overhead_delta, P.c.extra_messages
        )
        .join(M, (M.c.thread_id == P.c.thread_id) & (M.c.id == P.c.message_id))
        .where(P.c.thread_id == thread_id)
        .order_by(P.c.seq.desc())
        .limit(limit)
    )
    if before_seq is not None:
        query = query.where(P.c.seq < before_seq)
    return [_part_tokens(row) for row in conn.execute(query).mappings()]


@dataclass(frozen=True, slots=True)
class WindowRow:
    """One part of the unobserved window as the window read returns it: its weight and what its message
    needs (role, time, position, resource, metadata). Stored rows never change (parts are append-only),
    so a process may keep them between turns (`store.window_cache`)."""

    tokens: PartTokens
    created_at: datetime
    first_seq: int
    resource_id: StoredId
    metadata: dict[str, Any] | None

    @property
    def seq(self) -> int:
        return self.tokens.seq


@dataclass(frozen=True)
class Unobserved:
    """The window after the cursor, read once: its weights (for the policy) and its messages (for the
    actor). `fetched` holds the bodies that had to be read from the database, and `window` every row after
    `after_seq`, for the caller to keep once its transaction has committed."""

    rows: list[PartTokens]
    messages: list[Message]
    fetched: dict[int, Part]
    after_seq: int = 0
    window: tuple[WindowRow, ...] = ()


def read_unobserved(
    conn: Connection,
    thread_id: StoredId,
    after_seq: int,
    *,
    known: Callable[[int], Part | None],
    bodies: bool = True,
    held: tuple[Sequence[WindowRow], int] | None = None,
) -> Unobserved:
    """Weights and messages of the parts after `after_seq`, reading bodies only for parts `known` does not
    have (a turn usually knows every part but the ones it just stored). `held` is what this process
    already holds of the window (`WindowCache.held`): the committed rows after `after_seq` up to a
    sequence number, so only the rows after that one are read. Without `bodies`, only the weights: no
    message is built (a caller that wants the status, not the context)."""
    rows_held, read_after = held if held is not None else ((), after_seq)
    read = conn.execute(_UNOBSERVED, {"thread_id": thread_id, "after_seq": read_after}).mappings()
    window = (*rows_held, *(_window_row(row) for row in read))
    weights = [row.tokens for row in window]
    if not bodies:
        return Unobserved(weights, [], {}, after_seq, window)
    parts: dict[int, Part] = {}
    missing: list[int] = []
    for row in window:
        part = known(row.seq)
        if part is None:
            missing.append(row.seq)
        else:
            parts[row.seq] = part
    fetched: dict[int, Part] = {}
    if missing:
        body_rows = conn.execute(_BODIES, {"thread_id": thread_id, "seqs": missing}).mappings()
        for body_row in body_rows:
            seq = int(body_row["seq"])
            parts[seq] = fetched[seq] = Part.model_validate(body_row["body"])
    return Unobserved(weights, _messages_from(window, parts, thread_id), fetched, after_seq, window)


def _part_tokens(row: Any) -> PartTokens:
    return PartTokens(
        message_id=row["message_id"],
        role=row["role"],
        seq=int(row["seq"]),
        type=row["type"],
        tokens=float(row["tokens"]),
        overhead_delta=float(row["overhead_delta"]),
        extra_messages=int(row["extra_messages"]),
    )


def _window_row(row: Any) -> WindowRow:
    return WindowRow(
        tokens=_part_tokens(row),
        created_at=row["created_at"],
        first_seq=int(row["first_seq"]),
        resource_id=row["resource_id"],
        metadata=row["metadata"],
    )


def _messages_from(rows: Sequence[WindowRow], bodies: dict[int, Part], thread_id: StoredId) -> list[Message]:
    """Group parts (in sequence order) by message, messages in (created_at, first_seq) order; each part a
    shallow copy, so callers may treat the result as theirs without touching cached parts. The messages
    are built from stored values, valid when they were stored (times aware: `schema.UtcDateTime`), so
    they are not validated again: a turn builds every message of its window."""
    grouped: dict[str, list[Part]] = {}
    meta: dict[str, WindowRow] = {}
    for row in rows:
        message_id = row.tokens.message_id
        grouped.setdefault(message_id, []).append(bodies[row.seq].model_copy())
        meta.setdefault(message_id, row)
    ordered = sorted(grouped, key=lambda mid: (meta[mid].created_at, meta[mid].first_seq))
    return [
        Message.model_construct(
            id=message_id,
            role=cast(Role, meta[message_id].tokens.role),
            parts=grouped[message_id],
            created_at=meta[message_id].created_at,
            thread_id=public_id(thread_id),
            resource_id=public_id(meta[message_id].resource_id),
            metadata=dict(meta[message_id].metadata or {}),
        )
        for message_id in ordered
    ]


def page_messages(
    engine: Engine, thread_id: StoredId, *, before_seq: int | None = None, limit: int = 50
) -> list[Message]:
    """Messages of a thread, newest page first by first sequence (for the API's paged reads)."""
    with engine.connect() as conn:
        return last_messages(conn, thread_id, before_seq=before_seq, limit=limit)


def last_messages(
    conn: Connection, thread_id: StoredId, *, before_seq: int | None = None, limit: int = 50
) -> list[Message]:
    query = select(M).where(M.c.thread_id == thread_id)
    if before_seq is not None:
        query = query.where(M.c.first_seq < before_seq)
    query = query.order_by(M.c.first_seq.desc()).limit(limit)
    message_rows = {row["id"]: row for row in conn.execute(query).mappings()}
    if not message_rows:
        return []
    rows = (
        conn.execute(
            select(P.c.message_id, P.c.body, P.c.seq)
            .where(P.c.thread_id == thread_id, P.c.message_id.in_(list(message_rows)))
            .order_by(P.c.seq)
        )
        .mappings()
        .all()
    )
    return _assemble(rows, message_rows, thread_id)


def max_seq(conn: Connection, thread_id: StoredId) -> int:
    value = conn.execute(select(func.max(P.c.seq)).where(P.c.thread_id == thread_id)).scalar()
    return int(value or 0)


@dataclass(frozen=True)
class ToolPartRow:
    """A stored tool part's identity, read without its body (results can be large)."""

    seq: int
    call_id: str
    state: str | None
    has_result: bool


def tool_parts_after(conn: Connection, thread_id: StoredId, after_seq: int) -> list[ToolPartRow]:
    """The tool parts after `after_seq` by call id and state, for pairing calls with results: the JSON
    fields are read in the database, so a large result is never transferred to find its pair."""
    body = P.c.body
    query = (
        select(
            P.c.seq,
            body["toolCallId"].as_string().label("call_id"),
            body["state"].as_string().label("state"),
            body["result"].as_string().is_not(None).label("has_result"),
        )
        .where(P.c.thread_id == thread_id, P.c.seq > after_seq, P.c.type == "tool-invocation")
        .order_by(P.c.seq)
    )
    return [
        ToolPartRow(int(row["seq"]), str(row["call_id"]), row["state"], bool(row["has_result"]))
        for row in conn.execute(query).mappings()
        if row["call_id"]
    ]


def call_parts(
    conn: Connection, thread_id: StoredId, call_ids: Sequence[str], *, upto_seq: int
) -> list[Message]:
    """The stored call parts (not results) of `call_ids` at or before `upto_seq`, each in a copy of its
    message holding only that part: what the actor is shown again beside a result whose call was
    observed."""
    body = P.c.body
    ending = ("result", "output-error", "output-denied")
    state = body["state"].as_string()
    query = select(P.c.message_id, P.c.body, P.c.seq).where(
        P.c.thread_id == thread_id,
        P.c.seq <= upto_seq,
        P.c.type == "tool-invocation",
        body["toolCallId"].as_string().in_(list(call_ids)),
        state.is_(None) | state.not_in(ending),
    )
    return _with_messages(conn, thread_id, conn.execute(query.order_by(P.c.seq)).mappings().all())
