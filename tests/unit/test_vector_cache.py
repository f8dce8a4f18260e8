"""SQLite's nearest-neighbour search from memory (`om_core.search.vector_cache`) answers exactly what
sqlite-vec's own query answers, and stays current through every change a vector can go through: inserts
into a cached chunk, new chunks, deleted documents, a freed slot reused by the next insert, a vector
replaced in place, and an erased resource. Real SQLite with sqlite-vec; vectors are random, so ties are
practically impossible and the order must match exactly."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import numpy as np
import pytest
from sqlalchemy import Engine, delete, text

from om_core.search import vector_cache, vectors
from om_core.search.vector_cache import VectorCache
from om_core.store import erasure, history, schema
from om_core.store.db import sqlite_vectors_available

pytestmark = pytest.mark.skipif(not sqlite_vectors_available(), reason="sqlite-vec is not installed")

DIMS = 16
D = schema.search_docs
T0 = datetime(2026, 5, 1, tzinfo=UTC)


@pytest.fixture
def db(sqlite_engine: Engine) -> Iterator[Engine]:
    yield sqlite_engine


def _count(_part: object) -> tuple[float, float, int]:
    return (1.0, 0.0, 0)


class Corpus:
    """Documents of one resource with random vectors, written the way the indexer writes them."""

    def __init__(self, db: Engine, seed: int = 3) -> None:
        self.db = db
        self.rng = np.random.default_rng(seed)
        self.resource = f"user-{uuid.uuid4().hex[:8]}"
        self.thread = f"{self.resource}-t"
        self.next_ref = 0
        with db.begin() as conn:
            history.append_messages(
                conn, thread_id=self.thread, resource_id=self.resource, incoming=[], count_part=_count
            )

    def vector(self) -> list[float]:
        return [float(v) for v in self.rng.standard_normal(DIMS)]

    def add(self, n: int) -> list[int]:
        rows = [{"ref": f"m{self.next_ref + i}"} for i in range(n)]
        self.next_ref += n
        with self.db.begin() as conn:
            ids = []
            for row in rows:
                doc_id = conn.execute(
                    D.insert().values(
                        resource_id=self.resource,
                        thread_id=self.thread,
                        kind="message",
                        ref=row["ref"],
                        text="x",
                        at=T0,
                        indexed_at=T0,
                        embedding_model="test",
                    )
                ).inserted_primary_key[0]
                ids.append(int(doc_id))
            vectors.store(conn, [vectors.VectorRow(i, self.resource, self.vector()) for i in ids])
        return ids

    def replace(self, doc_id: int) -> None:
        with self.db.begin() as conn:
            vectors.store(conn, [vectors.VectorRow(doc_id, self.resource, self.vector())])

    def remove(self, doc_ids: list[int]) -> None:
        with self.db.begin() as conn:
            conn.execute(delete(D).where(D.c.id.in_(doc_ids)))


def both(db: Engine, cache: VectorCache, corpus: Corpus, k: int = 25) -> tuple[list[int], list[int]]:
    """(sqlite-vec's answer, the cache's answer) for one random query, ids only; distances checked too."""
    query = corpus.vector()
    with db.connect() as conn:
        exact = vectors.nearest(conn, corpus.resource, query, k)
        cached = cache.nearest(conn, vectors.table_name(DIMS), corpus.resource, query, k)
    assert cached is not None, "the cache declined a resource it should hold"
    for (_, want), (_, got) in zip(exact, cached, strict=False):
        assert got == pytest.approx(want, abs=1e-5)
    return [d for d, _ in exact], [d for d, _ in cached]


def test_answers_exactly_what_sqlite_vec_answers_over_several_chunks(db: Engine) -> None:
    corpus = Corpus(db)
    corpus.add(2_500)  # three vec0 chunks of 1,024
    cache = VectorCache(64 * 1024 * 1024)
    for _ in range(20):
        exact, cached = both(db, cache, corpus)
        assert cached == exact and len(exact) == 25


def test_inserts_reload_only_the_chunks_they_changed(db: Engine) -> None:
    corpus = Corpus(db)
    corpus.add(1_500)
    cache = VectorCache(64 * 1024 * 1024)
    both(db, cache, corpus)
    key = (str(db.url), vectors.table_name(DIMS), corpus.resource)
    before = cache._lru.get(key)
    assert before is not None
    corpus.add(5)  # lands in the last chunk
    exact, cached = both(db, cache, corpus, k=1_505)
    assert cached == exact and len(exact) == 1_505
    after = cache._lru.get(key)
    assert after is not None and after.stamp == before.stamp
    first, last = min(before.chunks), max(before.chunks)
    assert after.chunks[first] is before.chunks[first], "an unchanged chunk was read again"
    assert after.chunks[last] is not before.chunks[last]


def test_a_deleted_document_is_never_returned_and_a_reused_slot_holds_the_new_vector(db: Engine) -> None:
    corpus = Corpus(db)
    ids = corpus.add(40)
    cache = VectorCache(64 * 1024 * 1024)
    both(db, cache, corpus, k=40)
    corpus.remove(ids[5:10])
    exact, cached = both(db, cache, corpus, k=40)
    assert cached == exact and not set(ids[5:10]) & set(cached)
    # The next inserts may take the freed slots (same validity bitmap as before the deletes): the stamp
    # the deletes changed is what makes the cache read them.
    corpus.add(5)
    exact, cached = both(db, cache, corpus, k=40)
    assert cached == exact and len(cached) == 40


def test_a_replaced_vector_is_searched_with_its_new_value(db: Engine) -> None:
    corpus = Corpus(db)
    ids = corpus.add(30)
    cache = VectorCache(64 * 1024 * 1024)
    both(db, cache, corpus, k=30)
    for doc_id in ids[:10]:
        corpus.replace(doc_id)
    exact, cached = both(db, cache, corpus, k=30)
    assert cached == exact


def test_vectors_stored_before_stamps_existed_are_searched_by_sqlite_vec_until_written(db: Engine) -> None:
    corpus = Corpus(db)
    corpus.add(20)
    table = vectors.table_name(DIMS)
    with db.begin() as conn:
        conn.execute(text(f"DROP TRIGGER {table}_stamps_delete"))
        conn.execute(text(f"DROP TABLE {table}_stamps"))
    cache = VectorCache(64 * 1024 * 1024)
    query = corpus.vector()
    with db.connect() as conn:
        assert cache.nearest(conn, table, corpus.resource, query, 5) is None
        assert len(vectors.nearest(conn, corpus.resource, query, 5, cache=cache)) == 5
    corpus.add(1)  # the first write after the upgrade makes the stamps table and stamps the resource
    exact, cached = both(db, cache, corpus, k=21)
    assert cached == exact


def test_a_resource_over_the_budget_is_left_to_sqlite_vec(db: Engine) -> None:
    corpus = Corpus(db)
    corpus.add(50)
    cache = VectorCache(10_000)  # under one chunk of 1,024 vectors of 16 floats
    query = corpus.vector()
    with db.connect() as conn:
        assert cache.nearest(conn, vectors.table_name(DIMS), corpus.resource, query, 5) is None
        assert len(vectors.nearest(conn, corpus.resource, query, 5, cache=cache)) == 5
    assert len(cache._lru) == 0


def test_erasing_the_resource_removes_its_stamp_and_its_vectors_from_answers(db: Engine) -> None:
    corpus = Corpus(db)
    corpus.add(30)
    cache = VectorCache(64 * 1024 * 1024)
    both(db, cache, corpus)
    table = vectors.table_name(DIMS)
    with db.begin() as conn:
        erasure.erase_resource(conn, corpus.resource)
    with db.connect() as conn:
        stamps = conn.execute(
            text(f"SELECT count(*) FROM {table}_stamps WHERE resource_id = :r"), {"r": corpus.resource}
        ).scalar()
        assert stamps == 0
        assert cache.nearest(conn, table, corpus.resource, corpus.vector(), 5) is None
        assert vectors.nearest(conn, corpus.resource, corpus.vector(), 5, cache=cache) == []


def test_a_zero_cache_is_off(db: Engine) -> None:
    corpus = Corpus(db)
    corpus.add(5)
    with db.connect() as conn:
        assert (
            VectorCache(0).nearest(conn, vectors.table_name(DIMS), corpus.resource, corpus.vector(), 3)
            is None
        )
    assert vector_cache.stamps_table("om_vec_8") == "om_vec_8_stamps"


def test_hybrid_search_through_the_cache_follows_the_index(db: Engine) -> None:
    """The path the API takes (`Searcher` with the process's cache): a misspelt name only the vector
    ranker can find is found from memory, and a name indexed after the copy was made is found too."""
    from om_core.messages import text_message
    from om_core.models.client import ModelClient
    from om_core.search import Searcher, SearchRequest
    from om_core.search.embedder import DEFAULT_EMBEDDING_MODEL, ModelEmbedder
    from om_core.search.index import index_thread

    embedder = ModelEmbedder(DEFAULT_EMBEDDING_MODEL, ModelClient())
    resource = f"user-{uuid.uuid4().hex[:8]}"
    thread = f"{resource}-t"
    filler = "we compared trail maps, water bottles and the weather for the weekend"

    def say(start: int, planted: str) -> None:
        rows = [text_message(f"m{start + i}", "user", f"{filler} ({start + i})", T0) for i in range(30)]
        rows.append(text_message(f"m{start + 30}", "user", f"the trip to {planted} is booked", T0))
        with db.begin() as conn:
            history.append_messages(
                conn, thread_id=thread, resource_id=resource, incoming=rows, count_part=_count
            )
        index_thread(db, thread, embedder)

    cache = VectorCache(64 * 1024 * 1024)
    searcher = Searcher(db, embedder, cache)
    say(0, "Quillaberga")
    first = searcher(SearchRequest(resource_id=resource, query="Quilaberga", limit=3))
    assert first[0].ref == "m30" and first[0].sources == ("vector",)
    assert len(cache._lru) == 1, "the search did not go through the cache"
    say(31, "Zentorvaldo")
    second = searcher(SearchRequest(resource_id=resource, query="Zentorvldo", limit=3))
    assert second[0].ref == "m61" and second[0].sources == ("vector",)


def test_a_database_replaced_under_the_same_url_is_not_answered_from_what_was_learnt(db: Engine) -> None:
    corpus = Corpus(db)
    corpus.add(10)
    cache = VectorCache(64 * 1024 * 1024)
    both(db, cache, corpus, k=10)
    table = vectors.table_name(DIMS)
    with db.begin() as conn:  # as if the file were swapped for one made before stamps existed
        conn.execute(text(f"DROP TRIGGER {table}_stamps_delete"))
        conn.execute(text(f"DROP TABLE {table}_stamps"))
    query = corpus.vector()
    with db.connect() as conn:
        assert cache.nearest(conn, table, corpus.resource, query, 5) is None
        assert len(vectors.nearest(conn, corpus.resource, query, 5, cache=cache)) == 5
