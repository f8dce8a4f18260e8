"""Stream a thread, a resource or a tenant as transfer lines (`records`), in the order an import needs.

Rows are read with server-side cursors in batches (`yield_per`), and a message is written as soon as its
last part is read, so an export holds one batch and one message at a time however long the history. The
ids written are public ids: the file names no tenant (`om_core.tenancy.scoped_ids`). Every read names the
stored ids of the one tenant, so an export can only ever hold that tenant's rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Engine, select

from om_core.messages import Part
from om_core.store import schema
from om_core.store.history import resource_overrides
from om_core.tenancy.scoped_ids import PublicId, StoredId, public_id, scoped_id
from om_core.transfer.records import (
    ChunkLine,
    GroupLine,
    HeaderLine,
    Line,
    MessageLine,
    RecordLine,
    ResourceLine,
    ThreadLine,
    WorkingMemoryLine,
)

__all__ = ["ExportNotFound", "export_resource", "export_tenant", "export_thread"]

_BATCH = 500
T, R, M, P = schema.threads, schema.resources, schema.messages, schema.parts
REC, CH, G, WM = schema.records, schema.chunks, schema.observation_groups, schema.working_memory


class ExportNotFound(LookupError):
    """The thread or resource to export does not exist for this tenant."""


def _header(scope: str) -> HeaderLine:
    return HeaderLine(scope=scope, exported_at=datetime.now(UTC))


def _public(value: str | None) -> str | None:
    return public_id(StoredId(value)) if value is not None else None


def export_thread(db: Engine, tenant_id: str | None, thread: str) -> Iterator[Line]:
    """The thread's resource line (with its overrides), then the thread. Raises `ExportNotFound` before the
    first line when the tenant has no such thread."""
    stored = scoped_id(tenant_id, PublicId(thread))
    with db.connect() as conn:
        row = conn.execute(select(T).where(T.c.id == stored)).mappings().first()
        if row is None or (tenant_id is not None and row["tenant_id"] != tenant_id):
            raise ExportNotFound(f"no thread {thread!r}")
    return _stream(db, "thread", lambda conn: _thread_resource_and_thread(conn, row))


def export_resource(db: Engine, tenant_id: str | None, resource: str) -> Iterator[Line]:
    """The resource, its shared log and working memory, then every thread of it in id order."""
    stored = scoped_id(tenant_id, PublicId(resource))
    with db.connect() as conn:
        row = conn.execute(select(R).where(R.c.id == stored)).mappings().first()
        if row is None:
            raise ExportNotFound(f"no resource {resource!r}")
    return _stream(db, "resource", lambda conn: _resource(conn, row))


def export_tenant(db: Engine, tenant_id: str | None) -> Iterator[Line]:
    """Every resource of the tenant (all of them without tenancy), in id order."""

    def lines(conn: Connection) -> Iterator[Line]:
        query = select(R.c.id).order_by(R.c.id)
        if tenant_id is not None:
            query = query.where(R.c.id.startswith(scoped_id(tenant_id, PublicId("")), autoescape=True))
        for resource_id in list(conn.execute(query).scalars()):
            row = conn.execute(select(R).where(R.c.id == resource_id)).mappings().first()
            if row is not None:
                yield from _resource(conn, row)

    return _stream(db, "tenant", lines)


def _stream(db: Engine, scope: str, body: Any) -> Iterator[Line]:
    yield _header(scope)
    with db.connect() as conn:
        yield from body(conn)


def _rows(conn: Connection, query: Any) -> Iterator[Any]:
    result = conn.execution_options(stream_results=True, yield_per=_BATCH).execute(query).mappings()
    yield from result


def _resource_line(row: Any) -> ResourceLine:
    return ResourceLine(
        id=public_id(row["id"]),
        config_overrides=resource_overrides(row["metadata"]),
        created_at=row["created_at"],
    )


def _resource(conn: Connection, row: Any) -> Iterator[Line]:
    yield _resource_line(row)
    yield from _records(conn, f"resource:{row['id']}")
    yield from _working_memory(conn, f"resource:{row['id']}")
    # The thread ids first (a list of ids, small): each thread's own reads then run one at a time.
    ids = list(conn.execute(select(T.c.id).where(T.c.resource_id == row["id"]).order_by(T.c.id)).scalars())
    for thread_id in ids:
        thread = conn.execute(select(T).where(T.c.id == thread_id)).mappings().first()
        if thread is not None:
            yield from _thread(conn, thread)


def _thread_resource_and_thread(conn: Connection, thread: Any) -> Iterator[Line]:
    resource = conn.execute(select(R).where(R.c.id == thread["resource_id"])).mappings().first()
    if resource is not None:
        yield _resource_line(resource)
    yield from _thread(conn, thread)


def _thread(conn: Connection, row: Any) -> Iterator[Line]:
    stored = row["id"]
    yield ThreadLine(
        id=public_id(stored),
        resource_id=public_id(row["resource_id"]),
        title=row["title"],
        metadata=dict(row["om_metadata"] or {}),
        config_overrides=row["config_overrides"],
        last_seq=int(row["last_seq"]),
        last_actor_model=row["last_actor_model"],
        last_activity_at=row["last_activity_at"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )
    yield from _messages(conn, stored)
    yield from _records(conn, f"thread:{stored}")
    yield from _groups(conn, stored)
    yield from _working_memory(conn, f"thread:{stored}")


def _messages(conn: Connection, thread_id: StoredId) -> Iterator[MessageLine]:
    """Messages in the order of their first part, each with its parts in index order: one join, read in
    batches, a message written when the next one starts."""
    query = (
        select(M.c.id, M.c.role, M.c.created_at, M.c.metadata, P.c.body, P.c.seq)
        .join(P, (P.c.thread_id == M.c.thread_id) & (P.c.message_id == M.c.id))
        .where(M.c.thread_id == thread_id)
        .order_by(M.c.first_seq, M.c.id, P.c.part_index)
    )
    current: Any = None
    parts: list[Part] = []
    public = public_id(thread_id)
    for row in _rows(conn, query):
        if current is not None and row["id"] != current["id"]:
            yield _message(public, current, parts)
            parts = []
        current = row
        parts.append(Part.model_validate({**row["body"], "seq": int(row["seq"])}))
    if current is not None:
        yield _message(public, current, parts)


def _message(thread_id: str, row: Any, parts: list[Part]) -> MessageLine:
    return MessageLine(
        thread_id=thread_id,
        id=row["id"],
        role=row["role"],
        created_at=row["created_at"],
        metadata=dict(row["metadata"] or {}),
        parts=parts,
    )


def _records(conn: Connection, lookup_key: str) -> Iterator[RecordLine]:
    query = (
        select(REC)
        .where(REC.c.lookup_key == lookup_key)
        .order_by(REC.c.generation_count, REC.c.created_at, REC.c.id)
    )
    for row in conn.execute(query).mappings().all():
        chunks = conn.execute(
            select(CH).where(CH.c.record_id == row["id"]).order_by(CH.c.position, CH.c.id)
        ).mappings()
        yield RecordLine(
            id=row["id"],
            scope=row["scope"],
            thread_id=_public(row["thread_id"]),
            resource_id=public_id(row["resource_id"]),
            origin_type=row["origin_type"],
            generation_count=row["generation_count"],
            superseded_by=row["superseded_by"],
            active_observations=row["active_observations"],
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
            observed_timezone=row["observed_timezone"],
            metadata=dict(row["metadata"] or {}),
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            chunks=[_chunk(c) for c in chunks],
        )


def _chunk(row: Any) -> ChunkLine:
    return ChunkLine(
        id=row["id"],
        position=row["position"],
        state=row["state"],
        cycle_id=row["cycle_id"],
        observations=row["observations"],
        token_count=row["token_count"],
        message_ids=list(row["message_ids"] or []),
        message_tokens=row["message_tokens"],
        thread_id=_public(row["thread_id"]),
        from_seq=row["from_seq"],
        to_seq=row["to_seq"],
        last_observed_at=row["last_observed_at"],
        created_at=row["created_at"],
        activated_at=row["activated_at"],
        current_task=row["current_task"],
        suggested_continuation=row["suggested_continuation"],
        thread_title=row["thread_title"],
    )


def _groups(conn: Connection, thread_id: str) -> Iterator[GroupLine]:
    query = select(G).where(G.c.thread_id == thread_id).order_by(G.c.created_at, G.c.id)
    for row in conn.execute(query).mappings().all():
        yield GroupLine(
            id=row["id"],
            scope="resource" if row["lookup_key"].startswith("resource:") else "thread",
            thread_id=public_id(row["thread_id"]),
            resource_id=public_id(row["resource_id"]),
            cycle_id=row["cycle_id"],
            group_kind=row["kind"],
            ranges=row["ranges"],
            text=row["text"],
            observed_at=row["observed_at"],
            created_at=row["created_at"],
        )


def _working_memory(conn: Connection, lookup_key: str) -> Iterator[WorkingMemoryLine]:
    row = conn.execute(select(WM).where(WM.c.lookup_key == lookup_key)).mappings().first()
    if row is None:
        return
    yield WorkingMemoryLine(
        scope=row["scope"],
        thread_id=_public(row["thread_id"]),
        resource_id=public_id(row["resource_id"]),
        content=row["content"],
        format=row["format"],
        version=max(1, int(row["version"])),
        updated_at=row["updated_at"],
        updated_by=row["updated_by"],
    )
