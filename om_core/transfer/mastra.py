"""Read the original's storage (Mastra's `@mastra/libsql` file or `@mastra/pg` database) as transfer lines.

The tables read are `mastra_threads`, `mastra_messages`, `mastra_resources` and
`mastra_observational_memory`; nothing is written to them (a LibSQL file is opened read-only). What maps
to what:

- a thread → a `thread` line; its OM state kept in `metadata.mastra.om` (current task, suggested
  response) → OM's per-thread metadata; a thread's `workingMemory` → a thread `working_memory` line;
- a message (`content` in the v2 format, `{"format": 2, "parts": [...]}`) → a `message` line, its
  parts numbered in the order the original shows them (by `createdAt`); the original's own
  `data-om-*` markers are left out (they describe the original's cycles and name its record ids);
- an observational-memory row → one `record` line per generation (`generationCount`), the newest the
  live one: its active observations, generation count, token counts and, for thread scope, the cursor
  placed after the last message the original counted as observed (`observedMessageIds`, else every
  message created at or before `lastObservedAt`); its buffered chunks (`bufferedObservationChunks`)
  become chunks when they cover messages that follow the cursor in order, and are left out otherwise
  (the next buffering interval observes those messages again);
- a resource's `workingMemory` → a resource `working_memory` line.

Resource scope's shared log is imported with its observations; its per-thread cursors are not (om keeps
them in its own form), so every message of such a resource counts as unobserved after the import.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, text
from sqlalchemy.engine import make_url

from om_core.messages import Part
from om_core.transfer.records import (
    ChunkLine,
    HeaderLine,
    Line,
    MessageLine,
    RecordLine,
    ResourceLine,
    ThreadLine,
    WorkingMemoryLine,
)
from om_core.transfer.sqlite_jsonb import decode

__all__ = ["MastraSourceError", "open_source", "read_mastra"]

_ROLES = {"user", "assistant", "system", "tool"}
_TOOL_STATES = {"partial-call", "call", "result", "output-error", "output-denied"}


class MastraSourceError(ValueError):
    """The source is not a database the original wrote (or cannot be opened)."""


def open_source(source: str) -> Engine:
    """An engine on the original's storage: a LibSQL/SQLite file (`file:` URL or a path), read-only, or a
    Postgres URL."""
    if source.startswith(("postgres://", "postgresql://", "postgresql+")):
        url = make_url(source)
        if url.drivername in ("postgres", "postgresql"):
            url = url.set(drivername="postgresql+psycopg2")
        return create_engine(url, pool_size=1, max_overflow=0)
    path = source.removeprefix("file://").removeprefix("file:")
    if not os.path.isfile(path):
        raise MastraSourceError(f"{source!r} is neither a LibSQL/SQLite file nor a postgres:// URL")
    return create_engine(f"sqlite:///file:{os.path.abspath(path)}?mode=ro&uri=true")


def read_mastra(db: Engine) -> Iterator[Line]:
    """The original's threads, messages, working memory and observational memory as transfer lines."""
    with db.connect() as conn:
        _require_tables(conn)
        yield HeaderLine(scope="tenant", source="mastra", exported_at=datetime.now(UTC))
        resources = _resources(conn)
        thread_rows = (
            conn.execute(text('SELECT * FROM mastra_threads ORDER BY "resourceId", "createdAt", id'))
            .mappings()
            .all()
        )
        by_resource: dict[str, list[Any]] = {}
        for row in thread_rows:
            by_resource.setdefault(row["resourceId"], []).append(row)
        for resource_id in sorted(set(by_resource) | set(resources)):
            threads = by_resource.get(resource_id, [])
            created = resources.get(resource_id, {}).get("createdAt") or (
                threads[0]["createdAt"] if threads else None
            )
            yield ResourceLine(id=resource_id, created_at=_time(created) or datetime.now(UTC))
            yield from _records(conn, f"resource:{resource_id}", "resource", None, resource_id, {})
            memory = resources.get(resource_id, {}).get("workingMemory")
            if memory:
                yield _memory("resource", None, resource_id, memory, resources[resource_id].get("updatedAt"))
            for thread in threads:
                yield from _thread(conn, thread)


def _require_tables(conn: Connection) -> None:
    for table in ("mastra_threads", "mastra_messages"):
        try:
            conn.execute(text(f"SELECT 1 FROM {table} LIMIT 1")).first()
        except Exception as exc:
            raise MastraSourceError(
                f"no {table} table: is this a database the original wrote? ({exc})"
            ) from None


def _optional_rows(conn: Connection, statement: str, **params: Any) -> list[Any]:
    """Rows of a table older versions of the original may not have (none when it is missing)."""
    try:
        with conn.begin_nested():
            return list(conn.execute(text(statement), params).mappings().all())
    except Exception:
        return []


def _resources(conn: Connection) -> dict[str, dict[str, Any]]:
    return {row["id"]: dict(row) for row in _optional_rows(conn, "SELECT * FROM mastra_resources")}


def _json(value: Any) -> Any:
    """A JSON column as stored by either store: text, a JSONB blob (LibSQL), or already decoded (pg)."""
    if value is None or isinstance(value, dict | list):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        # JSON text first: a short text blob can also parse as JSONB by accident (`{"a": 1}` does), a
        # JSONB blob (its first byte a header such as 0xcc) is never valid UTF-8 JSON.
        try:
            return json.loads(bytes(value).decode("utf-8"))
        except ValueError:
            return decode(bytes(value))
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _time(value: Any) -> datetime | None:
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value / 1000, UTC)
    parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _int(value: Any) -> int:
    try:
        return max(0, int(value or 0))
    except (TypeError, ValueError):
        return 0


def _thread(conn: Connection, row: Any) -> Iterator[Line]:
    thread_id, resource_id = row["id"], row["resourceId"]
    meta = _json(row["metadata"]) or {}
    om_state = (meta.get("mastra") or {}).get("om") or {} if isinstance(meta, dict) else {}
    om_metadata = {
        key: om_state[key]
        for key in ("currentTask", "suggestedResponse", "threadTitle")
        if isinstance(om_state.get(key), str)
    }
    messages = list(_messages(conn, thread_id))
    last_seq = max((p.seq or 0 for m in messages for p in m.parts), default=0)
    yield ThreadLine(
        id=thread_id,
        resource_id=resource_id,
        title=row["title"] or None,
        metadata=om_metadata,
        last_seq=last_seq,
        created_at=_time(row["createdAt"]) or datetime.now(UTC),
        updated_at=_time(row["updatedAt"]) or datetime.now(UTC),
    )
    yield from messages
    yield from _records(conn, f"thread:{thread_id}", "thread", thread_id, resource_id, _seq_index(messages))
    memory = meta.get("workingMemory") if isinstance(meta, dict) else None
    if isinstance(memory, str) and memory:
        yield _memory("thread", thread_id, resource_id, memory, row["updatedAt"])


def _memory(scope: str, thread_id: str | None, resource_id: str, content: str, at: Any) -> WorkingMemoryLine:
    return WorkingMemoryLine(
        scope=scope,
        thread_id=thread_id,
        resource_id=resource_id,
        content=content,
        format="json" if content.lstrip().startswith("{") else "markdown",
        updated_at=_time(at) or datetime.now(UTC),
        updated_by="actor",
    )


def _messages(conn: Connection, thread_id: str) -> Iterator[MessageLine]:
    rows = conn.execute(
        text('SELECT * FROM mastra_messages WHERE thread_id = :t ORDER BY "createdAt", id'), {"t": thread_id}
    ).mappings()
    seq = 0
    for row in rows:
        if row["role"] not in _ROLES:
            continue
        content = _json(row["content"])
        raw_parts = content.get("parts") if isinstance(content, dict) else None
        if raw_parts is None:
            raw_parts = [
                {"type": "text", "text": content if isinstance(content, str) else json.dumps(content)}
            ]
        parts: list[Part] = []
        for raw in raw_parts:
            part = _part(raw) if isinstance(raw, dict) else None
            if part is not None:
                seq += 1
                parts.append(part.model_copy(update={"seq": seq}))
        meta = content.get("metadata") if isinstance(content, dict) else None
        yield MessageLine(
            thread_id=thread_id,
            id=row["id"],
            role=row["role"],
            created_at=_time(row["createdAt"]) or datetime.now(UTC),
            metadata=meta if isinstance(meta, dict) else {},
            parts=parts,
        )


def _part(raw: dict[str, Any]) -> Part | None:
    """One of the original's v2 parts as om's, or None for what om does not keep."""
    kind = raw.get("type")
    created = _time(raw.get("createdAt")) if isinstance(raw.get("createdAt"), int | float | str) else None
    if kind == "text":
        return Part(type="text", text=str(raw.get("text") or ""), created_at=created)
    if kind == "reasoning":
        details = raw.get("details") or []
        joined = "".join(d.get("text", "") for d in details if isinstance(d, dict))
        return Part(type="reasoning", text=str(raw.get("reasoning") or joined), created_at=created)
    if kind == "tool-invocation" and isinstance(raw.get("toolInvocation"), dict):
        call = raw["toolInvocation"]
        state = call.get("state")
        return Part(
            type="tool-invocation",
            tool_call_id=str(call.get("toolCallId") or ""),
            tool_name=str(call.get("toolName") or ""),
            state=state if state in _TOOL_STATES else "call",
            args=call.get("args"),
            result=call.get("result"),
            created_at=created,
        )
    if kind == "file":
        mime = str(raw.get("mimeType") or raw.get("mediaType") or "")
        return Part(
            type="image" if mime.startswith("image/") else "file",
            data=raw.get("data"),
            url=raw.get("url") if isinstance(raw.get("url"), str) else None,
            mime_type=mime or None,
            created_at=created,
        )
    if kind == "step-start":
        return Part(type="step-start")
    if isinstance(kind, str) and kind.startswith("data-") and not kind.startswith("data-om-"):
        return Part(type=kind[:64], data=raw.get("data"), created_at=created)
    return None


def _seq_index(messages: list[MessageLine]) -> dict[str, Any]:
    """Per message id: the last seq of its parts (or the one before it for a message without parts) and
    its creation time, in thread order."""
    index: dict[str, Any] = {}
    last = 0
    for message in messages:
        if message.parts:
            last = message.parts[-1].seq or last
        index[message.id] = (last, message.created_at)
    return index


def _records(
    conn: Connection,
    key: str,
    scope: str,
    thread_id: str | None,
    resource_id: str,
    seqs: dict[str, Any],
) -> Iterator[RecordLine]:
    rows = _optional_rows(
        conn,
        'SELECT * FROM mastra_observational_memory WHERE "lookupKey" = :k '
        'ORDER BY "generationCount", "createdAt", id',
        k=key,
    )
    for index, row in enumerate(rows):
        newer = rows[index + 1]["id"] if index + 1 < len(rows) else None
        yield _record(row, scope, thread_id, resource_id, seqs, newer)


def _cursor(row: Any, seqs: dict[str, Any]) -> int:
    observed_ids = _json(row.get("observedMessageIds"))
    cursor = 0
    if isinstance(observed_ids, list):
        cursor = max((seqs[i][0] for i in observed_ids if i in seqs), default=0)
    observed_at = _time(row.get("lastObservedAt"))
    if observed_at is not None:
        cursor = max([cursor, *(seq for seq, at in seqs.values() if at <= observed_at)])
    return cursor


def _record(
    row: Any, scope: str, thread_id: str | None, resource_id: str, seqs: dict[str, Any], newer: str | None
) -> RecordLine:
    cursor = _cursor(row, seqs) if scope == "thread" and newer is None else 0
    chunks = _chunks(row, cursor, seqs, thread_id) if scope == "thread" and newer is None else []
    created = _time(row["createdAt"]) or datetime.now(UTC)
    return RecordLine(
        id=str(row["id"])[:64],
        scope=scope,
        thread_id=thread_id,
        resource_id=resource_id,
        origin_type="reflection" if row.get("originType") == "reflection" else "initial",
        generation_count=_int(row.get("generationCount")),
        superseded_by=str(newer)[:64] if newer is not None else None,
        active_observations=row.get("activeObservations") or "",
        observation_token_count=_int(row.get("observationTokenCount")),
        last_observed_seq=cursor,
        last_observed_at=_time(row.get("lastObservedAt")),
        last_buffered_seq=chunks[-1].to_seq if chunks else cursor,
        last_buffered_at_time=_time(row.get("lastBufferedAtTime")),
        last_buffered_at_tokens=_int(row.get("lastBufferedAtTokens")),
        buffered_reflection=row.get("bufferedReflection") or None,
        buffered_reflection_tokens=_int(row.get("bufferedReflectionTokens"))
        if row.get("bufferedReflection")
        else None,
        buffered_reflection_input_tokens=(
            _int(row.get("bufferedReflectionInputTokens")) if row.get("bufferedReflection") else None
        ),
        reflected_observation_line_count=(
            _int(row.get("reflectedObservationLineCount")) if row.get("bufferedReflection") else None
        ),
        pending_message_tokens=_int(row.get("pendingMessageTokens")),
        total_tokens_observed=_int(row.get("totalTokensObserved")),
        observed_timezone=str(row.get("observedTimezone") or "UTC")[:64],
        created_at=created,
        updated_at=_time(row.get("updatedAt")) or created,
        chunks=chunks,
    )


def _chunks(row: Any, cursor: int, seqs: dict[str, Any], thread_id: str | None) -> list[ChunkLine]:
    """The buffered chunks that continue from the cursor in order; the first that does not ends the list."""
    raw = _json(row.get("bufferedObservationChunks"))
    out: list[ChunkLine] = []
    start = cursor
    for position, chunk in enumerate(raw if isinstance(raw, list) else []):
        ids = chunk.get("messageIds") if isinstance(chunk, dict) else None
        if not isinstance(ids, list) or not ids or any(i not in seqs for i in ids):
            break
        end = max(seqs[i][0] for i in ids)
        if end <= start:
            break
        created = _time(chunk.get("createdAt")) or datetime.now(UTC)
        out.append(
            ChunkLine(
                id=str(chunk.get("id") or f"chunk-{position}")[:64],
                position=position,
                state="buffered",
                cycle_id=str(chunk.get("cycleId") or f"mastra-{position}")[:128],
                observations=str(chunk.get("observations") or ""),
                token_count=_int(chunk.get("tokenCount")),
                message_ids=[str(i) for i in ids],
                message_tokens=_int(chunk.get("messageTokens")),
                thread_id=thread_id,
                from_seq=start,
                to_seq=end,
                last_observed_at=_time(chunk.get("lastObservedAt")),
                created_at=created,
                current_task=chunk.get("currentTask") if isinstance(chunk.get("currentTask"), str) else None,
                suggested_continuation=(
                    chunk.get("suggestedContinuation")
                    if isinstance(chunk.get("suggestedContinuation"), str)
                    else None
                ),
                thread_title=chunk.get("threadTitle") if isinstance(chunk.get("threadTitle"), str) else None,
            )
        )
        start = end
    return out
