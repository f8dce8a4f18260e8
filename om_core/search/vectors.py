"""Vector storage and nearest-neighbour search: pgvector on Postgres, sqlite-vec on SQLite.

One table per embedding dimension, `om_vec_<dims>`, made on first use (a deployment's model decides the
dimension; a change of model to another dimension gets a table of its own). Each row is one document's
vector with its `resource_id`, so a search reads only its resource's vectors where the index allows it and
erasing a resource can find them by that column.

- **Postgres**: `doc_id` references `om_search_docs` with ON DELETE CASCADE; an HNSW index with cosine
  distance (`halfvec` above 2,000 dimensions, pgvector's limit for `vector` indexes). HNSW filters after the
  index scan, so a resource holding a small share of all vectors could get fewer than `k` hits from the
  default scan: the search turns on pgvector's iterative scan (0.8+), which keeps scanning until enough
  rows pass the filter.
- **SQLite**: a `vec0` virtual table with `resource_id` as its partition key (a search scans only that
  resource's vectors, exactly) and cosine distance; a trigger on `om_search_docs` deletes the vector with
  its document.

A database without vector support raises `VectorSearchUnavailable` saying what to install.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, text

from om_core.search import vector_cache
from om_core.search.errors import POSTGRES_HINT, SQLITE_HINT, VectorSearchUnavailable
from om_core.search.vector_cache import VectorCache
from om_core.store.db import is_postgres, key_lock, sqlite_vectors_available
from om_core.tenancy.scoped_ids import StoredId

#: pgvector indexes `vector` columns of at most this many dimensions; larger ones are stored as halfvec.
PG_VECTOR_INDEX_MAX_DIMS = 2000
#: Candidates HNSW keeps per search (pgvector's `hnsw.ef_search`, 40 by default).
PG_EF_SEARCH = 100


def table_name(dims: int) -> str:
    """`om_vec_<dims>`: the vector table of one embedding dimension (its name is all it has to say)."""
    if dims < 1:
        raise ValueError("an embedding has at least one dimension")
    return f"om_vec_{int(dims)}"


def _pg_type(dims: int) -> tuple[str, str]:
    if dims > PG_VECTOR_INDEX_MAX_DIMS:
        return f"halfvec({dims})", "halfvec_cosine_ops"
    return f"vector({dims})", "vector_cosine_ops"


def require_support(conn: Connection) -> None:
    """Raise `VectorSearchUnavailable` unless this database can store vectors (installing pgvector in the
    database when the server has it)."""
    if is_postgres(conn):
        if conn.execute(text("SELECT 1 FROM pg_extension WHERE extname = 'vector'")).first() is not None:
            return
        available = conn.execute(text("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")).first()
        if available is None:
            raise VectorSearchUnavailable(POSTGRES_HINT)
        key_lock(conn, "om:vector-extension")
        conn.execute(text("CREATE EXTENSION IF NOT EXISTS vector"))
        return
    if not sqlite_vectors_available():
        raise VectorSearchUnavailable(SQLITE_HINT)


def missing_support(db: Engine) -> str | None:
    """None when the database behind `db` can store vectors (pgvector installed or installable, or
    sqlite-vec loadable), else what to install: checked when a config turns `retrieval.vector` on, so the
    refusal comes when it is set, not at the first search."""
    if db.dialect.name != "postgresql":
        return None if sqlite_vectors_available() else SQLITE_HINT
    with db.connect() as conn:
        found = conn.execute(text("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")).first()
    return None if found is not None else POSTGRES_HINT


def ensure_table(conn: Connection, dims: int) -> str:
    """The vector table of `dims`, made (with its index or trigger) when missing; its name."""
    name = table_name(dims)
    if table_exists(conn, dims):
        if not is_postgres(conn):
            vector_cache.ensure_stamps(conn, name)  # a table made before stamps existed gets them now
        return name
    require_support(conn)
    if is_postgres(conn):
        key_lock(conn, f"om:vector-table:{dims}")
        column, ops = _pg_type(dims)
        conn.execute(
            text(
                f"CREATE TABLE IF NOT EXISTS {name} ("
                "doc_id BIGINT PRIMARY KEY REFERENCES om_search_docs(id) ON DELETE CASCADE, "
                f"resource_id VARCHAR(512) NOT NULL, embedding {column} NOT NULL)"
            )
        )
        conn.execute(text(f"CREATE INDEX IF NOT EXISTS {name}_hnsw ON {name} USING hnsw (embedding {ops})"))
        conn.execute(text(f"CREATE INDEX IF NOT EXISTS {name}_resource ON {name} (resource_id)"))
    else:
        conn.execute(
            text(
                f"CREATE VIRTUAL TABLE IF NOT EXISTS {name} USING vec0("
                "doc_id INTEGER PRIMARY KEY, resource_id TEXT PARTITION KEY, "
                f"embedding FLOAT[{dims}] distance_metric=cosine)"
            )
        )
        conn.execute(
            text(
                f"CREATE TRIGGER IF NOT EXISTS {name}_delete AFTER DELETE ON om_search_docs "
                f"BEGIN DELETE FROM {name} WHERE doc_id = old.id; END"
            )
        )
        vector_cache.ensure_stamps(conn, name)
    return name


def table_exists(conn: Connection, dims: int) -> bool:
    name = table_name(dims)
    if is_postgres(conn):
        return conn.execute(text("SELECT to_regclass(:name)"), {"name": name}).scalar() is not None
    found = conn.execute(text("SELECT 1 FROM sqlite_master WHERE name = :name"), {"name": name}).first()
    return found is not None


def _literal(vector: Sequence[float]) -> str:
    return "[" + ",".join(repr(float(v)) for v in vector) + "]"


@dataclass(frozen=True)
class VectorRow:
    doc_id: int
    resource_id: StoredId
    vector: Sequence[float]


def store(conn: Connection, rows: Sequence[VectorRow]) -> None:
    """Write (or replace) the vectors of documents; all of one dimension."""
    if not rows:
        return
    dims = len(rows[0].vector)
    if any(len(row.vector) != dims for row in rows):
        raise ValueError("vectors of one batch differ in length")
    name = ensure_table(conn, dims)
    if is_postgres(conn):
        # One multi-row INSERT per batch: psycopg2's executemany is one round trip per row.
        column, _ = _pg_type(dims)
        values = []
        params: dict[str, object] = {}
        for i, row in enumerate(rows):
            values.append(f"(:d{i}, :r{i}, CAST(:e{i} AS {column}))")
            params.update({f"d{i}": row.doc_id, f"r{i}": row.resource_id, f"e{i}": _literal(row.vector)})
        conn.execute(
            text(
                f"INSERT INTO {name} (doc_id, resource_id, embedding) VALUES {', '.join(values)} "
                "ON CONFLICT (doc_id) DO UPDATE SET embedding = excluded.embedding, "
                "resource_id = excluded.resource_id"
            ),
            params,
        )
        return
    import sqlite_vec

    replaced = conn.execute(
        text(f"DELETE FROM {name} WHERE doc_id = :doc_id"), [{"doc_id": r.doc_id} for r in rows]
    ).rowcount
    vector_cache.stamp(conn, name, [r.resource_id for r in rows], changed=replaced > 0)
    conn.execute(
        text(
            f"INSERT INTO {name} (doc_id, resource_id, embedding) VALUES (:doc_id, :resource_id, :embedding)"
        ),
        [
            {
                "doc_id": r.doc_id,
                "resource_id": r.resource_id,
                "embedding": sqlite_vec.serialize_float32(list(r.vector)),
            }
            for r in rows
        ],
    )


def nearest(
    conn: Connection,
    resource_id: StoredId,
    vector: Sequence[float],
    k: int,
    *,
    cache: VectorCache | None = None,
) -> list[tuple[int, float]]:
    """The `k` documents of `resource_id` nearest to `vector` by cosine distance, nearest first, as
    `(doc_id, distance)`. Empty when nothing of this dimension was ever stored. On SQLite a `cache`
    answers from memory when it can (`vector_cache`), with the same result."""
    dims = len(vector)
    if not table_exists(conn, dims):
        # Nothing stored yet, or nothing can be: say which (a search only reads; it installs nothing).
        if is_postgres(conn):
            available = conn.execute(
                text("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
            ).first()
            if available is None:
                raise VectorSearchUnavailable(POSTGRES_HINT)
        elif not sqlite_vectors_available():
            raise VectorSearchUnavailable(SQLITE_HINT)
        return []
    name = table_name(dims)
    if is_postgres(conn):
        column, _ = _pg_type(dims)
        conn.execute(text(f"SET LOCAL hnsw.ef_search = {max(PG_EF_SEARCH, k)}"))
        conn.execute(text("SET LOCAL hnsw.iterative_scan = relaxed_order"))
        rows = conn.execute(
            text(
                f"SELECT doc_id, embedding <=> CAST(:q AS {column}) AS distance FROM {name} "
                f"WHERE resource_id = :resource ORDER BY embedding <=> CAST(:q AS {column}) LIMIT :k"
            ),
            {"q": _literal(vector), "resource": resource_id, "k": k},
        ).all()
        rows = sorted(rows, key=lambda row: float(row[1]))  # relaxed order: sort what came back
    else:
        import sqlite_vec

        cached = cache.nearest(conn, name, resource_id, vector, k) if cache is not None else None
        if cached is not None:
            return cached
        rows = conn.execute(
            text(
                f"SELECT doc_id, distance FROM {name} WHERE embedding MATCH :q AND k = :k "
                "AND resource_id = :resource ORDER BY distance"
            ),
            {"q": sqlite_vec.serialize_float32(list(vector)), "k": k, "resource": resource_id},
        ).all()
    return [(int(row[0]), float(row[1])) for row in rows]
