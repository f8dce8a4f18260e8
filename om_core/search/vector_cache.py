"""Exact nearest neighbours of a SQLite resource's vectors, computed from a copy held in memory.

**Why.** sqlite-vec answers a KNN query by scanning the resource's partition and computing every cosine
distance in scalar code: about 37 ms for 100k vectors of 256 dimensions on this machine, most of a
search's time. The same scan as one numpy matrix product takes about 2 ms. The vectors stay stored in the
`vec0` table (the record; erasure and the vec0 query are unchanged); a process keeps a copy of each chunk
of a partition, read in bulk from vec0's shadow tables (`<table>_chunks`, `<table>_vector_chunks00`), and
checks before each search that the copy is current, in the search's own read transaction:

- Every insert sets a bit of its chunk's validity bitmap and every delete clears one, so an unchanged
  bitmap means an unchanged chunk, with one exception: an insert can reuse the slot a delete freed,
  leaving the bitmap as it was. So every delete and every replaced vector also changes the resource's
  stamp (`<table>_stamps`, a random value written by `vectors.store` and by a trigger on
  `om_search_docs`), and a changed stamp reloads the resource whole. Inserts, the common change while a
  conversation is indexed, reload only the chunks whose bitmap moved.
- A resource with no stamp yet (vectors stored before this table existed) and a vec0 layout this module
  does not know (another sqlite-vec release) get None, and the caller runs vec0's own query.

The result equals vec0's: the same vectors, the same cosine distance, nearest first (ties by doc id).
Memory is bounded (`OM_VECTOR_CACHE_MB`, least recently used resources out first); a resource larger than
the whole budget is searched by vec0 every time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from sqlalchemy import Connection, text
from sqlalchemy.exc import OperationalError

from om_core.sized_lru import SizedLRU
from om_core.tenancy.scoped_ids import StoredId

#: The vec0 shadow-table columns this module reads; another layout is left to vec0's query.
_CHUNK_COLUMNS = ("chunk_id", "size", "partition00", "validity", "rowids")

Floats = npt.NDArray[np.float32]
Ints = npt.NDArray[np.int64]


def stamps_table(table: str) -> str:
    return f"{table}_stamps"


def ensure_stamps(conn: Connection, table: str) -> None:
    """The stamps table of a vec0 table and the trigger that changes a resource's stamp when one of its
    documents is deleted (which deletes its vector): made with the vector table, or on the first write
    after an upgrade."""
    stamps = stamps_table(table)
    conn.execute(
        text(f"CREATE TABLE IF NOT EXISTS {stamps} (resource_id TEXT PRIMARY KEY, stamp INTEGER NOT NULL)")
    )
    conn.execute(
        text(
            f"CREATE TRIGGER IF NOT EXISTS {stamps}_delete AFTER DELETE ON om_search_docs BEGIN "
            f"INSERT INTO {stamps} (resource_id, stamp) VALUES (old.resource_id, random()) "
            "ON CONFLICT (resource_id) DO UPDATE SET stamp = random(); END"
        )
    )


def stamp(conn: Connection, table: str, resource_ids: Sequence[StoredId], *, changed: bool) -> None:
    """Give each resource a stamp (a new one when `changed`: vectors of it were replaced)."""
    conflict = "DO UPDATE SET stamp = random()" if changed else "DO NOTHING"
    conn.execute(
        text(
            f"INSERT INTO {stamps_table(table)} (resource_id, stamp) VALUES (:resource_id, random()) "
            f"ON CONFLICT (resource_id) {conflict}"
        ),
        [{"resource_id": r} for r in dict.fromkeys(resource_ids)],
    )


@dataclass(frozen=True)
class _Chunk:
    validity: bytes
    ids: Ints
    unit: Floats  # the valid rows, each scaled to unit length (zero rows stay zero)
    zero: npt.NDArray[np.bool_]  # rows with no length: cosine distance undefined, never returned

    @property
    def nbytes(self) -> int:
        return int(self.ids.nbytes + self.unit.nbytes + self.zero.nbytes) + len(self.validity)


@dataclass(frozen=True)
class _Resource:
    stamp: int
    chunks: dict[int, _Chunk]

    @property
    def nbytes(self) -> int:
        return sum(c.nbytes for c in self.chunks.values())


def _valid_slots(validity: bytes, size: int) -> npt.NDArray[np.intp]:
    bits = np.unpackbits(np.frombuffer(validity, dtype=np.uint8), bitorder="little")[:size]
    return np.flatnonzero(bits)


def _chunk(validity: bytes, size: int, rowids: bytes, vectors: bytes, dims: int) -> _Chunk:
    slots = _valid_slots(validity, size)
    ids = np.frombuffer(rowids, dtype=np.int64)[slots].copy()
    matrix = np.frombuffer(vectors, dtype=np.float32).reshape(-1, dims)[slots]
    norms = np.linalg.norm(matrix, axis=1)
    zero = norms == 0
    unit = (matrix / np.where(zero, 1.0, norms)[:, None]).astype(np.float32)
    return _Chunk(validity, ids, unit, zero)


class VectorCache:
    """Per process, shared by its threads; `max_bytes` 0 turns it off (every search asks vec0)."""

    def __init__(self, max_bytes: int) -> None:
        self._lru: SizedLRU[tuple[str, str, str], _Resource] = SizedLRU(max_bytes)
        self._layouts: dict[tuple[str, str], bool] = {}

    @property
    def enabled(self) -> bool:
        return self._lru.max_bytes > 0

    def nearest(
        self, conn: Connection, table: str, resource_id: StoredId, vector: Sequence[float], k: int
    ) -> list[tuple[int, float]] | None:
        """The `k` documents nearest to `vector` as `(doc_id, cosine distance)`, nearest first; None when
        this cache cannot answer (off, unknown layout, no stamp, over budget)."""
        if not self.enabled or not self._known_layout(conn, table):
            return None
        try:
            resource = self._current(conn, table, resource_id, len(vector))
        except OperationalError:  # the database was replaced by one without the stamps (same URL)
            self._layouts.pop((str(conn.engine.url), table), None)
            return None
        if resource is None:
            return None
        return _rank(resource, np.asarray(vector, dtype=np.float32), k)

    def _known_layout(self, conn: Connection, table: str) -> bool:
        key = (str(conn.engine.url), table)
        known = self._layouts.get(key)
        if known is None:
            columns = {row[1] for row in conn.execute(text(f"PRAGMA table_info({table}_chunks)"))}
            stamps = conn.execute(
                text("SELECT 1 FROM sqlite_master WHERE name = :name"), {"name": stamps_table(table)}
            ).first()
            known = set(_CHUNK_COLUMNS) <= columns and stamps is not None
            if not known and stamps is None:
                return False  # not remembered: the first write after an upgrade makes the stamps table
            self._layouts[key] = known
        return known

    def _current(self, conn: Connection, table: str, resource_id: StoredId, dims: int) -> _Resource | None:
        now = conn.execute(
            text(f"SELECT stamp FROM {stamps_table(table)} WHERE resource_id = :r"), {"r": resource_id}
        ).scalar()
        if now is None:
            return None
        chunks = conn.execute(
            text(f"SELECT chunk_id, size, validity FROM {table}_chunks WHERE partition00 = :r"),
            {"r": resource_id},
        ).all()
        if sum(int(row[1]) for row in chunks) * (dims * 4 + 9) > self._lru.max_bytes:
            return None
        key = (str(conn.engine.url), table, resource_id)
        held = self._lru.get(key)
        kept = held.chunks if held is not None and held.stamp == now else {}
        current = {int(row[0]): bytes(row[2]) for row in chunks}
        stale = [c for c, validity in current.items() if c not in kept or kept[c].validity != validity]
        if held is not None and held.stamp == now and not stale and len(current) == len(kept):
            return held
        fresh = _Resource(int(now), {c: kept[c] for c in current if c not in stale})
        fresh.chunks.update(_load(conn, table, stale, dims))
        self._lru.put(key, fresh, fresh.nbytes)
        return fresh


def _load(conn: Connection, table: str, chunk_ids: list[int], dims: int) -> dict[int, _Chunk]:
    if not chunk_ids:
        return {}
    loaded: dict[int, _Chunk] = {}
    for start in range(0, len(chunk_ids), 500):
        batch = chunk_ids[start : start + 500]
        names = ", ".join(f":c{i}" for i in range(len(batch)))
        rows = conn.execute(
            text(
                f"SELECT c.chunk_id, c.size, c.validity, c.rowids, v.vectors FROM {table}_chunks c "
                f"JOIN {table}_vector_chunks00 v ON v.rowid = c.chunk_id WHERE c.chunk_id IN ({names})"
            ),
            {f"c{i}": chunk_id for i, chunk_id in enumerate(batch)},
        )
        for chunk_id, size, validity, rowids, vectors in rows:
            loaded[int(chunk_id)] = _chunk(bytes(validity), int(size), bytes(rowids), bytes(vectors), dims)
    return loaded


def _rank(resource: _Resource, vector: Floats, k: int) -> list[tuple[int, float]]:
    norm = float(np.linalg.norm(vector))
    if norm == 0 or k < 1:
        return []
    query = vector / norm
    ids: list[Ints] = []
    distances: list[Floats] = []
    for chunk in resource.chunks.values():
        if not len(chunk.ids):
            continue
        d = (1.0 - chunk.unit @ query).astype(np.float32)
        d[chunk.zero] = np.inf
        if len(d) > k:
            best = np.argpartition(d, k)[:k]
            d, chunk_ids = d[best], chunk.ids[best]
        else:
            chunk_ids = chunk.ids
        ids.append(chunk_ids)
        distances.append(d)
    if not ids:
        return []
    all_ids = np.concatenate(ids)
    all_d = np.concatenate(distances)
    order = np.lexsort((all_ids, all_d))[:k]
    return [(int(all_ids[i]), float(all_d[i])) for i in order if np.isfinite(all_d[i])]
