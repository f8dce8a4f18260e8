"""Building a thread's search documents: new raw messages and new observation groups, then their vectors.

`index_thread` is idempotent: run twice (or by a redelivered task) it leaves the same documents.

- **Messages** are read by sequence number past the thread's `om_index_state.message_seq`, so a message
  that grew (a tool result appended to it) is seen again and its document rewritten whole; the cursor moves
  in the transaction that writes the documents. A document whose text changed loses its vector (its
  `embedding_model` is cleared) and is embedded again.
- **Groups** are found by the document they lack (or whose text differs: a line corrected or forgotten
  through managing memory rewrites the group), not by a time cursor: groups commit in whatever order
  their cycles finish, and a cursor over their times could pass one committed late.
- **Vectors**: documents without a vector of the configured model are embedded in batches, outside any
  transaction (a model call), then written with a version check (`indexed_at` unchanged), so a document
  rewritten meanwhile keeps no stale vector.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Engine, bindparam, func, literal, literal_column, or_, select, true, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from om_core.messages import Part
from om_core.search import vectors
from om_core.search.documents import message_text
from om_core.search.embedder import Embedder
from om_core.store import schema
from om_core.store.db import is_postgres, read_only
from om_core.tenancy.scoped_ids import StoredId

D = schema.search_docs
S = schema.index_state
P = schema.parts
M = schema.messages
G = schema.observation_groups
T = schema.threads

#: Parts read per transaction while catching up a long history (100k messages index in bounded steps).
PARTS_PER_STEP = 2_000
#: Groups written per transaction.
GROUPS_PER_STEP = 500


@dataclass(frozen=True)
class IndexResult:
    """What one run did: documents written (new or rewritten) per kind, and vectors stored."""

    messages: int = 0
    groups: int = 0
    embedded: int = 0

    def __add__(self, other: IndexResult) -> IndexResult:
        return IndexResult(
            self.messages + other.messages, self.groups + other.groups, self.embedded + other.embedded
        )


def _now() -> datetime:
    return datetime.now(UTC)


def _upsert(conn: Connection, rows: list[dict[str, Any]]) -> int:
    """Insert documents, or rewrite those whose text changed (and clear their vector); an unchanged one
    is left alone. Returns how many were offered."""
    if not rows:
        return 0
    if is_postgres(conn):
        pg = pg_insert(D).values(
            resource_id=bindparam("resource_id"),
            thread_id=bindparam("thread_id"),
            kind=bindparam("kind"),
            ref=bindparam("ref"),
            ranges=bindparam("ranges"),
            text=bindparam("text"),
            at=bindparam("at", type_=schema.Timestamp),
            indexed_at=bindparam("indexed_at", type_=schema.Timestamp),
            tsv=func.to_tsvector(literal_column("'simple'::regconfig"), bindparam("text")),
        )
        statement: Any = pg.on_conflict_do_update(
            constraint="uq_om_search_docs_ref",
            set_={
                "text": pg.excluded.text,
                "ranges": pg.excluded.ranges,
                "at": pg.excluded.at,
                "indexed_at": pg.excluded.indexed_at,
                "tsv": pg.excluded.tsv,
                "embedding_model": None,
            },
            where=D.c.text != pg.excluded.text,
        )
    else:
        lite = sqlite_insert(D)
        statement = lite.on_conflict_do_update(
            index_elements=[D.c.thread_id, D.c.kind, D.c.ref],
            set_={
                "text": lite.excluded.text,
                "ranges": lite.excluded.ranges,
                "at": lite.excluded.at,
                "indexed_at": lite.excluded.indexed_at,
                "embedding_model": None,
            },
            where=D.c.text != lite.excluded.text,
        )
    conn.execute(statement, rows)
    return len(rows)


def _state(conn: Connection, thread_id: StoredId) -> tuple[StoredId, int] | None:
    """The thread's resource and how far its messages are indexed (0 before the first run); None when
    the thread does not exist."""
    row = conn.execute(
        select(T.c.resource_id, S.c.message_seq)
        .select_from(T.outerjoin(S, S.c.thread_id == T.c.id))
        .where(T.c.id == thread_id)
    ).first()
    if row is None:
        return None
    return StoredId(row.resource_id), int(row.message_seq or 0)


def _save_state(conn: Connection, thread_id: StoredId, resource_id: StoredId, seq: int, vector: bool) -> None:
    values = {"thread_id": thread_id, "resource_id": resource_id, "message_seq": seq, "vector": vector}
    stamp = {"updated_at": _now()}
    if is_postgres(conn):
        pg = pg_insert(S).values(**values, **stamp)
        conn.execute(
            pg.on_conflict_do_update(
                index_elements=[S.c.thread_id],
                set_={
                    "message_seq": func.greatest(S.c.message_seq, pg.excluded.message_seq),
                    "vector": pg.excluded.vector,
                    "updated_at": pg.excluded.updated_at,
                },
            )
        )
    else:
        lite = sqlite_insert(S).values(**values, **stamp)
        conn.execute(
            lite.on_conflict_do_update(
                index_elements=[S.c.thread_id],
                set_={
                    "message_seq": func.max(S.c.message_seq, lite.excluded.message_seq),
                    "vector": lite.excluded.vector,
                    "updated_at": lite.excluded.updated_at,
                },
            )
        )


def _index_messages_step(
    conn: Connection, thread_id: StoredId, resource_id: StoredId, after_seq: int
) -> tuple[int, int]:
    """Documents for the messages holding the next `PARTS_PER_STEP` parts past `after_seq`; returns
    (documents written, the last sequence number covered), or (0, after_seq) when nothing is new."""
    new = conn.execute(
        select(P.c.message_id, P.c.seq)
        .where(P.c.thread_id == thread_id, P.c.seq > after_seq)
        .order_by(P.c.seq)
        .limit(PARTS_PER_STEP)
    ).all()
    if not new:
        return 0, after_seq
    upto = int(new[-1].seq)
    ids = sorted({row.message_id for row in new})
    bodies: dict[str, list[tuple[int, Part]]] = {}
    for row in conn.execute(
        select(P.c.message_id, P.c.part_index, P.c.body).where(
            P.c.thread_id == thread_id, P.c.message_id.in_(ids)
        )
    ):
        bodies.setdefault(row.message_id, []).append((int(row.part_index), Part.model_validate(row.body)))
    created = {
        row.id: row.created_at
        for row in conn.execute(
            select(M.c.id, M.c.created_at).where(M.c.thread_id == thread_id, M.c.id.in_(ids))
        )
    }
    now = _now()
    rows = []
    for message_id in ids:
        text = message_text(part for _, part in sorted(bodies.get(message_id, []), key=lambda item: item[0]))
        if not text.strip() or message_id not in created:
            continue
        rows.append(
            {
                "resource_id": resource_id,
                "thread_id": thread_id,
                "kind": "message",
                "ref": message_id,
                "ranges": None,
                "text": text,
                "at": created[message_id],
                "indexed_at": now,
            }
        )
    return _upsert(conn, rows), upto


def _group_outdated() -> Any:
    """A group whose document is missing or holds other text (a line of it was corrected or forgotten)."""
    return (
        ~select(D.c.id)
        .where(D.c.thread_id == G.c.thread_id, D.c.kind == "group", D.c.ref == G.c.id, D.c.text == G.c.text)
        .exists()
    )


def _index_groups_step(conn: Connection, thread_id: StoredId) -> int:
    missing = conn.execute(
        select(G.c.id, G.c.resource_id, G.c.ranges, G.c.text, G.c.observed_at)
        .where(G.c.thread_id == thread_id, _group_outdated())
        .order_by(G.c.created_at, G.c.id)
        .limit(GROUPS_PER_STEP)
    ).all()
    now = _now()
    rows = [
        {
            "resource_id": row.resource_id,
            "thread_id": thread_id,
            "kind": "group",
            "ref": row.id,
            "ranges": row.ranges,
            "text": row.text,
            "at": row.observed_at,
            "indexed_at": now,
        }
        # Every group gets its document, even an empty one: groups are found by the document they lack,
        # so a group left without one would be found (and asked for) forever.
        for row in missing
    ]
    _upsert(conn, rows)
    return len(missing)


def index_documents(db: Engine, thread_id: StoredId, *, vector: bool = False) -> IndexResult:
    """Write the thread's missing or outdated documents (no model call). `vector` is recorded in the
    thread's index state: whether its documents are waiting for vectors (the lag counts them then)."""
    messages = groups = 0
    while True:
        with db.begin() as conn:
            state = _state(conn, thread_id)
            if state is None:
                return IndexResult(messages, groups)
            resource_id, after_seq = state
            written, upto = _index_messages_step(conn, thread_id, resource_id, after_seq)
            _save_state(conn, thread_id, resource_id, upto, vector)
        messages += written
        if upto == after_seq:
            break
    while True:
        with db.begin() as conn:
            found = _index_groups_step(conn, thread_id)
        groups += found
        if found < GROUPS_PER_STEP:
            break
    return IndexResult(messages, groups)


def embed_documents(db: Engine, thread_id: StoredId, embedder: Embedder, *, batch_size: int = 64) -> int:
    """Vectors for the thread's documents that have none of `embedder.model`; returns how many were
    stored. Each batch: read, embed (no transaction open), write with a version check."""
    stored = 0
    skipped: set[int] = set()
    while True:
        with db.connect() as conn:
            pending = conn.execute(
                select(D.c.id, D.c.resource_id, D.c.text, D.c.indexed_at)
                .where(
                    D.c.thread_id == thread_id,
                    or_(D.c.embedding_model.is_(None), D.c.embedding_model != embedder.model),
                    D.c.id.not_in(skipped) if skipped else true(),
                )
                .order_by(D.c.id)
                .limit(batch_size)
            ).all()
        if not pending:
            return stored
        embedded = embedder.embed([row.text for row in pending])
        with db.begin() as conn:
            seen = {row.id: row.indexed_at for row in pending}
            current = {
                row.id
                for row in conn.execute(select(D.c.id, D.c.indexed_at).where(D.c.id.in_(list(seen))))
                if row.indexed_at == seen[row.id]
            }
            rows = [
                vectors.VectorRow(row.id, row.resource_id, vector)
                for row, vector in zip(pending, embedded, strict=True)
                if row.id in current
            ]
            vectors.store(conn, rows)
            if rows:
                conn.execute(
                    update(D)
                    .where(D.c.id.in_([r.doc_id for r in rows]))
                    .values(embedding_model=embedder.model)
                )
        stored += len(rows)
        # A document rewritten during the call (its message grew) is embedded by the index run that the
        # growth triggers; one erased meanwhile is gone. Neither may loop here: skip what was tried.
        skipped.update(row.id for row in pending if row.id not in current)


def index_thread(
    db: Engine, thread_id: StoredId, embedder: Embedder | None = None, *, batch_size: int = 64
) -> IndexResult:
    """Index one thread: its documents, then (with an embedder) their vectors."""
    result = index_documents(db, thread_id, vector=embedder is not None)
    if embedder is None:
        return result
    return result + IndexResult(embedded=embed_documents(db, thread_id, embedder, batch_size=batch_size))


def track(db: Engine, thread_ids: Sequence[StoredId]) -> None:
    """Give each thread an index state if it has none (cursor 0, stamped now), when its indexing is first
    asked for: from then on the lag counts what it waits for, even before its first run."""
    if not thread_ids:
        return
    now = _now()
    source = select(
        T.c.id,
        T.c.resource_id,
        literal(0).label("message_seq"),
        literal(False).label("vector"),
        literal(now, schema.Timestamp).label("updated_at"),
    ).where(T.c.id.in_(list(thread_ids)))
    columns = ["thread_id", "resource_id", "message_seq", "vector", "updated_at"]
    with db.begin() as conn:
        insert = pg_insert(S) if is_postgres(conn) else sqlite_insert(S)
        conn.execute(insert.from_select(columns, source).on_conflict_do_nothing())


def stragglers(db: Engine, *, quiet_since: datetime, limit: int) -> list[StoredId]:
    """Threads being indexed (with an index state) that have parts past their cursor and no write since
    `quiet_since`: what throttled turn requests left behind."""
    with db.connect() as conn:
        rows = conn.execute(
            select(S.c.thread_id)
            .select_from(S.join(T, T.c.id == S.c.thread_id))
            .where(T.c.last_seq > S.c.message_seq, T.c.updated_at < quiet_since)
            .order_by(T.c.updated_at)
            .limit(limit)
        ).scalars()
        return [StoredId(thread_id) for thread_id in rows]


def other_model_threads(db: Engine, model: str, *, limit: int) -> list[StoredId]:
    """Threads with vectors on whose documents hold vectors of another embedding model than `model` (the
    server's model changed): indexing them embeds those documents again. Such vectors are never compared
    with `model`'s (a search keeps only documents of its model), so until then they are only missing."""
    with db.connect() as conn:
        rows = conn.execute(
            select(D.c.thread_id)
            .select_from(D.join(S, S.c.thread_id == D.c.thread_id))
            .where(S.c.vector.is_(True), D.c.embedding_model.is_not(None), D.c.embedding_model != model)
            .distinct()
            .limit(limit)
        ).scalars()
        return [StoredId(thread_id) for thread_id in rows]


def has_pending_work(db: Engine, thread_id: StoredId) -> bool:
    """Whether the thread has parts past its index cursor or groups without a document (what a run
    that just ended may have missed). Vectors are not checked: a run embeds everything it finds."""
    with db.connect() as conn:
        row = conn.execute(
            select(T.c.last_seq, S.c.message_seq)
            .select_from(T.outerjoin(S, S.c.thread_id == T.c.id))
            .where(T.c.id == thread_id)
        ).first()
        if row is None:
            return False
        if int(row.last_seq) > int(row.message_seq or 0):
            return True
        missing = conn.execute(
            select(G.c.id).where(G.c.thread_id == thread_id, _group_outdated()).limit(1)
        ).first()
        return missing is not None


def index_lag_seconds(db: Engine, now: datetime | None = None) -> float:
    """How far indexing is behind, in seconds: the age of the oldest thing waiting among the threads
    being indexed (those with an index state): a message not yet in a document, a group without its
    document, a document of a vector-searching thread without a vector. 0 when nothing waits.

    A message's wait starts at the later of its `created_at` (the client's clock) and the thread's last
    index run, so an imported history with old dates does not read as days of lag; a message that only
    grew counts from the thread's last write. A thread never indexed yet is not counted."""
    now = now or _now()
    oldest: list[datetime] = []
    with read_only(db) as conn:
        newest_unindexed = (
            select(func.min(M.c.created_at))
            .where(M.c.thread_id == S.c.thread_id, M.c.first_seq > S.c.message_seq)
            .scalar_subquery()
        )
        for row in conn.execute(
            select(S.c.updated_at, T.c.updated_at.label("thread_updated_at"), newest_unindexed.label("first"))
            .select_from(S.join(T, T.c.id == S.c.thread_id))
            .where(T.c.last_seq > S.c.message_seq)
        ):
            waiting_since = row.first if row.first is not None else row.thread_updated_at
            oldest.append(max(_aware(row.updated_at), _aware(waiting_since)))
        group = conn.execute(
            select(func.min(G.c.created_at))
            .select_from(G.join(S, S.c.thread_id == G.c.thread_id))
            .where(_group_outdated())
        ).scalar()
        if group is not None:
            oldest.append(_aware(group))
        document = conn.execute(
            select(func.min(D.c.indexed_at))
            .select_from(D.join(S, S.c.thread_id == D.c.thread_id))
            .where(S.c.vector.is_(True), D.c.embedding_model.is_(None))
        ).scalar()
        if document is not None:
            oldest.append(_aware(document))
    if not oldest:
        return 0.0
    return max(0.0, (now - min(oldest)).total_seconds())


def _aware(value: datetime) -> datetime:
    """Raw SQL results on SQLite come back naive (UTC); typed columns already aware."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
