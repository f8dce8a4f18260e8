"""The reads behind the recall tool: messages in order around a cursor, their parts, a resource's threads.

Recall pages through raw history, which can be long, so paging reads part *descriptions* (index, kind,
tool name: JSON fields read in the database) to decide which messages fill a page, and reads bodies only
for the messages on it. Message ids are unique per thread only, so every read names its thread. Order is
`(created_at, first_seq)`: the time a message was written, with its first sequence number breaking ties
(several messages posted in one turn can share a timestamp).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, and_, or_, select

from om_core.messages import Part
from om_core.store import schema
from om_core.tenancy.scoped_ids import StoredId

__all__ = [
    "MessageInfo",
    "PartInfo",
    "ThreadInfo",
    "find_message",
    "message_owner",
    "messages_from",
    "part_bodies",
    "recall_kind",
    "resource_threads",
    "thread_info",
    "threads_by_id",
]

M = schema.messages
P = schema.parts
T = schema.threads

#: Tool states that mean the invocation carries its outcome (a result, an error, a refusal).
_ENDED = ("result", "output-error", "output-denied")
#: How many of a resource's threads a cursor is looked for in (behaviour §9.4: newest updated first).
OWNER_SEARCH_THREADS = 100


def recall_kind(part_type: str, state: str | None, has_result: bool) -> str:
    """The part kind recall shows and filters by: a tool invocation is a `tool-result` once it carries
    its outcome, a `tool-call` before; every other stored type is its own kind."""
    if part_type == "tool-invocation":
        return "tool-result" if state in _ENDED or has_result else "tool-call"
    return part_type


@dataclass(frozen=True)
class PartInfo:
    """A part without its body: its position in the message, its recall kind and tool name."""

    index: int
    kind: str
    tool_name: str | None = None

    @property
    def visible(self) -> bool:
        """Content a reader would see (neither a `data-*` part nor a step boundary; behaviour §9.1)."""
        return not self.kind.startswith("data-") and self.kind != "step-start"


@dataclass(frozen=True)
class MessageInfo:
    id: str
    thread_id: StoredId
    role: str
    created_at: datetime
    first_seq: int
    parts: tuple[PartInfo, ...]

    @property
    def position(self) -> tuple[datetime, int]:
        return (self.created_at, self.first_seq)


@dataclass(frozen=True)
class ThreadInfo:
    id: StoredId
    resource_id: StoredId
    tenant_id: str | None
    title: str | None
    created_at: datetime
    updated_at: datetime


def _thread_info(row: Any) -> ThreadInfo:
    return ThreadInfo(
        id=row["id"],
        resource_id=row["resource_id"],
        tenant_id=row["tenant_id"],
        title=row["title"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


_THREAD_COLUMNS = (T.c.id, T.c.resource_id, T.c.tenant_id, T.c.title, T.c.created_at, T.c.updated_at)


def thread_info(conn: Connection, thread_id: StoredId) -> ThreadInfo | None:
    row = conn.execute(select(*_THREAD_COLUMNS).where(T.c.id == thread_id)).mappings().first()
    return _thread_info(row) if row is not None else None


def threads_by_id(conn: Connection, thread_ids: Sequence[StoredId]) -> dict[str, ThreadInfo]:
    if not thread_ids:
        return {}
    query = select(*_THREAD_COLUMNS).where(T.c.id.in_(list(dict.fromkeys(thread_ids))))
    return {row["id"]: _thread_info(row) for row in conn.execute(query).mappings()}


def resource_threads(
    conn: Connection,
    resource_id: StoredId,
    tenant_id: str | None,
    *,
    offset: int,
    limit: int,
    after: datetime | None = None,
    before: datetime | None = None,
) -> list[ThreadInfo]:
    """A page of the resource's threads, most recently updated first; `after` / `before` bound their
    creation time strictly."""
    query = select(*_THREAD_COLUMNS).where(T.c.resource_id == resource_id)
    if tenant_id is not None:  # a second wall: the resource's stored id already names the tenant
        query = query.where(T.c.tenant_id == tenant_id)
    if after is not None:
        query = query.where(T.c.created_at > after)
    if before is not None:
        query = query.where(T.c.created_at < before)
    query = query.order_by(T.c.updated_at.desc(), T.c.id).offset(offset).limit(limit)
    return [_thread_info(row) for row in conn.execute(query).mappings()]


def _describe(conn: Connection, thread_id: StoredId, rows: Sequence[Any]) -> list[MessageInfo]:
    """Message rows with their part descriptions (one statement for all of them), in the rows' order."""
    if not rows:
        return []
    body = P.c.body
    query = (
        select(
            P.c.message_id,
            P.c.part_index,
            P.c.type,
            body["state"].as_string().label("state"),
            body["toolName"].as_string().label("tool_name"),
            body["result"].as_string().is_not(None).label("has_result"),
        )
        .where(P.c.thread_id == thread_id, P.c.message_id.in_([row["id"] for row in rows]))
        .order_by(P.c.seq)
    )
    parts: dict[str, list[PartInfo]] = {}
    for part in conn.execute(query).mappings():
        kind = recall_kind(part["type"], part["state"], bool(part["has_result"]))
        tool = part["tool_name"] if kind in ("tool-call", "tool-result") else None
        parts.setdefault(part["message_id"], []).append(PartInfo(int(part["part_index"]), kind, tool))
    return [
        MessageInfo(
            id=row["id"],
            thread_id=thread_id,
            role=row["role"],
            created_at=row["created_at"],
            first_seq=int(row["first_seq"]),
            parts=tuple(sorted(parts.get(row["id"], ()), key=lambda p: p.index)),
        )
        for row in rows
    ]


_MESSAGE_COLUMNS = (M.c.id, M.c.role, M.c.created_at, M.c.first_seq)


def find_message(conn: Connection, thread_id: StoredId, message_id: str) -> MessageInfo | None:
    row = (
        conn.execute(select(*_MESSAGE_COLUMNS).where(M.c.thread_id == thread_id, M.c.id == message_id))
        .mappings()
        .first()
    )
    return _describe(conn, thread_id, [row])[0] if row is not None else None


def messages_from(
    conn: Connection,
    thread_id: StoredId,
    position: tuple[datetime, int] | None,
    *,
    forward: bool,
    limit: int,
) -> list[MessageInfo]:
    """Up to `limit` messages strictly after `position` (forward, oldest first) or strictly before it
    (backward, newest first); from the thread's start or end when `position` is None."""
    query = select(*_MESSAGE_COLUMNS).where(M.c.thread_id == thread_id)
    if position is not None:
        at, seq = position
        if forward:
            query = query.where(or_(M.c.created_at > at, and_(M.c.created_at == at, M.c.first_seq > seq)))
        else:
            query = query.where(or_(M.c.created_at < at, and_(M.c.created_at == at, M.c.first_seq < seq)))
    if forward:
        query = query.order_by(M.c.created_at, M.c.first_seq)
    else:
        query = query.order_by(M.c.created_at.desc(), M.c.first_seq.desc())
    rows = conn.execute(query.limit(limit)).mappings().all()
    return _describe(conn, thread_id, rows)


def part_bodies(
    conn: Connection, thread_id: StoredId, message_ids: Sequence[str]
) -> dict[str, dict[int, Part]]:
    """The parts of the given messages by message id and part index."""
    if not message_ids:
        return {}
    query = select(P.c.message_id, P.c.part_index, P.c.body).where(
        P.c.thread_id == thread_id, P.c.message_id.in_(list(dict.fromkeys(message_ids)))
    )
    out: dict[str, dict[int, Part]] = {}
    for row in conn.execute(query).mappings():
        out.setdefault(row["message_id"], {})[int(row["part_index"])] = Part.model_validate(row["body"])
    return out


def message_owner(
    conn: Connection,
    resource_id: StoredId,
    tenant_id: str | None,
    message_id: str,
    *,
    exclude: StoredId,
    limit: int = OWNER_SEARCH_THREADS,
) -> StoredId | None:
    """Which of the resource's threads (other than `exclude`; the `limit` most recently updated) holds a
    message with this id: the newest updated one when several do."""
    candidates = select(T.c.id).where(T.c.resource_id == resource_id, T.c.id != exclude)
    if tenant_id is not None:
        candidates = candidates.where(T.c.tenant_id == tenant_id)
    order = [row[0] for row in conn.execute(candidates.order_by(T.c.updated_at.desc(), T.c.id).limit(limit))]
    if not order:
        return None
    holders = {
        row[0]
        for row in conn.execute(select(M.c.thread_id).where(M.c.id == message_id, M.c.thread_id.in_(order)))
    }
    return next((thread for thread in order if thread in holders), None)
