"""One search over a resource: lexical and vector rankers, fused by reciprocal rank (RRF, k = 60).

Each ranker returns its best documents in order; a document's fused score is the sum over the rankers
that found it of `1 / (RRF_K + rank)`. RRF needs no calibration between BM25-like scores and cosine
distances (they are not comparable), and a document both rankers found outranks one only either found.
Each ranker is asked for more than `limit` documents (`max(3 × limit, limit + 10)`, at most 200) so the
fusion has something to merge. `SearchHit.sources` says which rankers found a hit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from sqlalchemy import Connection, Engine, select

from om_core.search import lexical, vectors
from om_core.search.embedder import Embedder
from om_core.search.types import HitKind, SearchHit, SearchRequest
from om_core.search.vector_cache import VectorCache
from om_core.store import schema
from om_core.store.db import read_only

D = schema.search_docs

#: The RRF constant of the original paper (Cormack et al.), which damps the weight of the top ranks.
RRF_K = 60
#: Most hits one search returns (the HTTP API's limit).
MAX_LIMIT = 50
#: Most candidates asked of one ranker.
MAX_CANDIDATES = 200


def _aware(value: datetime | None) -> datetime | None:
    """A filter time without a zone is taken as UTC (stored times are UTC)."""
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


def candidates(limit: int) -> int:
    return min(max(3 * limit, limit + 10), MAX_CANDIDATES)


def fuse(rankings: dict[str, Sequence[int]], k: int = RRF_K) -> list[tuple[int, float, tuple[str, ...]]]:
    """Reciprocal-rank fusion of several rankings of document ids: `(id, score, rankers that found it)`,
    best first (ties: the lexically better, then the newer id)."""
    scores: dict[int, float] = {}
    found_by: dict[int, list[str]] = {}
    for name, ranking in rankings.items():
        for position, doc_id in enumerate(ranking, start=1):
            scores[doc_id] = scores.get(doc_id, 0.0) + 1.0 / (k + position)
            found_by.setdefault(doc_id, []).append(name)
    ordered = sorted(scores, key=lambda doc_id: (-scores[doc_id], -doc_id))
    return [(doc_id, scores[doc_id], tuple(sorted(found_by[doc_id]))) for doc_id in ordered]


def _vector_rank(
    conn: Connection,
    request: SearchRequest,
    model: str,
    query_vector: Sequence[float],
    k: int,
    cache: VectorCache | None,
) -> list[int]:
    """Ids of the `k` nearest documents that pass the request's filters, nearest first. The vector index
    filters by resource only: thread, date and kind filters are applied to what it returns, after asking
    it for more (`4 × k`, at most 1,000)."""
    filtered = (
        request.thread_ids is not None or request.after or request.before or len(set(request.kinds)) < 2
    )
    fetch = min(4 * k, 1000) if filtered else k
    nearest = vectors.nearest(conn, request.resource_id, query_vector, fetch, cache=cache)
    if not nearest:
        return []
    ids = [doc_id for doc_id, _ in nearest]
    rows = conn.execute(
        select(D.c.id, D.c.thread_id, D.c.kind, D.c.at, D.c.embedding_model).where(D.c.id.in_(ids))
    ).all()
    keep = {
        row.id
        for row in rows
        if row.embedding_model == model
        and (request.thread_ids is None or row.thread_id in request.thread_ids)
        and (request.after is None or row.at > request.after)
        and (request.before is None or row.at < request.before)
        and row.kind in request.kinds
    }
    return [doc_id for doc_id in ids if doc_id in keep][:k]


def search(
    db: Engine,
    request: SearchRequest,
    embedder: Embedder | None = None,
    *,
    rrf_k: int = RRF_K,
    cache: VectorCache | None = None,
) -> list[SearchHit]:
    """The best `request.limit` (1-50) documents of the request's resource for its query.

    Lexical search always runs; with an `embedder` the vector ranker runs too (the query embedded by the
    same model as the documents; only documents embedded by that model are considered) and the two are
    fused. Raises `VectorSearchUnavailable` when an embedder is given and the database cannot store
    vectors. Ids in the request and the hits are stored ids. A `cache` answers SQLite's nearest-neighbour
    query from memory (`vector_cache`: the same answer, faster)."""
    if not request.query.strip():
        return []
    request = replace(request, after=_aware(request.after), before=_aware(request.before))
    limit = max(1, min(request.limit, MAX_LIMIT))
    k = candidates(limit)
    # The query's vector first: a model call, never inside a transaction.
    query_vector = embedder.embed([request.query])[0] if embedder is not None else None
    rankings: dict[str, Sequence[int]] = {}
    with read_only(db) as conn:
        if embedder is not None and query_vector is not None:
            rankings["vector"] = _vector_rank(conn, request, embedder.model, query_vector, k, cache)
        rankings["lexical"] = lexical.rank(conn, request, k)
        fused = fuse({name: rankings[name] for name in ("lexical", "vector") if name in rankings}, rrf_k)
        fused = fused[:limit]
        if not fused:
            return []
        rows = {
            row.id: row
            for row in conn.execute(
                select(
                    D.c.id, D.c.kind, D.c.ref, D.c.thread_id, D.c.resource_id, D.c.text, D.c.at, D.c.ranges
                ).where(D.c.id.in_([doc_id for doc_id, _, _ in fused]))
            )
        }
    hits: list[SearchHit] = []
    for doc_id, score, sources in fused:
        row = rows.get(doc_id)
        if row is None:  # erased between the ranking and this read
            continue
        kind: HitKind = "group" if row.kind == "group" else "message"
        hits.append(
            SearchHit(
                kind=kind,
                ref=row.ref,
                thread_id=row.thread_id,
                resource_id=row.resource_id,
                text=row.text,
                at=row.at,
                score=score,
                ranges=row.ranges if kind == "group" else None,
                sources=tuple(s for s in sources if s in ("lexical", "vector")),  # type: ignore[misc]
            )
        )
    return hits


@dataclass(frozen=True)
class Searcher:
    """`search` bound to a database, an embedder (None: lexical only) and the process's vector cache: the
    `Callable[[SearchRequest], list[SearchHit]]` the recall tool takes."""

    db: Engine
    embedder: Embedder | None = None
    cache: VectorCache | None = None

    def __call__(self, request: SearchRequest) -> list[SearchHit]:
        return search(self.db, request, self.embedder, cache=self.cache)
