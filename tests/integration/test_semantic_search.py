"""The offline default embedder understands a paraphrase; the hashing fallback does not.

"I adopted a beagle named Rufus" is planted among everyday messages (some of which say "name", or ask
"what is the ... of ...", so the words of the question alone lead elsewhere) in one thread of a user with
three threads. The question "what is the name of my dog" shares no content word with it: with
`om-local/wordllama-256` (the offline default) the planted message is in the top 5 of both the thread
search and the resource search (2nd and 4th when written: the messages saying "name" are found by both
rankers), on Postgres with pgvector and on SQLite with sqlite-vec (the embedded mode); the same search with
`om-local/hashing-embedding` ranks it lower or misses it (7th and absent), so the figure is the model's
doing. Vectors of one model are never used for a search with another, though both have 256 dimensions and
share a table.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine

from om_core.coordination import Keys
from om_core.engine import MemoryEngine
from om_core.maintenance.sweep import MaintenancePolicy, run_maintenance
from om_core.messages import Message, text_message
from om_core.models.client import ModelClient
from om_core.search import SearchRequest, search
from om_core.search.embedder import (
    DEFAULT_EMBEDDING_MODEL,
    HASHING_EMBEDDING_MODEL,
    WORDLLAMA_EMBEDDING_MODEL,
    ModelEmbedder,
)
from om_core.search.index import index_thread
from om_core.store import history
from om_core.tenancy.scoped_ids import StoredId
from tests.support.workers import set_thread_config

T0 = datetime(2026, 4, 1, 8, 0, tzinfo=UTC)
PLANTED = "I adopted a beagle named Rufus last spring, he sleeps at the foot of my bed."
QUESTION = "what is the name of my dog"
#: Twelve different everyday messages per thread: one says "name", and the fact's thread asks several
#: questions worded like the question ("what is the ... of ...").
FILLER = [
    [
        "The name of the new project at work is Atlas and it starts in June.",
        "My sister moved to Berlin for a job at a bank, she loves the city.",
        "We booked a table at the Italian restaurant on Friday at eight.",
        "The invoice from Brightwater is due next Tuesday, remind me please.",
        "I take the train to the office every morning, it takes forty minutes.",
        "What is the best way to learn Spanish verbs quickly?",
        "My laptop battery drains fast when I run the video editor.",
        "The weather in Porto was rainy and cold the whole weekend.",
        "I need to renew my passport before the trip to Japan in October.",
        "The dentist moved my cleaning appointment to the ninth of May.",
        "Our team retrospective is on Thursday afternoon in room four.",
        "I finally fixed the leaking kitchen tap with a new washer.",
    ],
    [
        "Can you suggest a name for my sourdough starter? Something funny.",
        "What is the size of the box for my new monitor?",
        "I am reading a novel about a lighthouse keeper in Scotland.",
        "What is the capital of Australia, is it Sydney?",
        "We should compare electricity tariffs before the winter.",
        "What is the price of a ticket for the museum of modern art?",
        "I prefer green tea in the morning and coffee after lunch.",
        "The car needs new tyres before the long drive in August.",
        "What is the time of the last train home on Sunday?",
        "My neighbour lent us a ladder to clean the gutters.",
        "Tell me the opening hours of my local library.",
        "I want to run a half marathon next spring.",
    ],
    [
        "Is the name on my passport required to match the airline ticket exactly?",
        "The plumber quoted three hundred euros for the boiler service.",
        "I planted tomatoes and basil on the balcony this week.",
        "Our flight to Lisbon leaves at seven in the morning.",
        "My grandmother turns ninety in November, we plan a party.",
        "The printer in the office keeps jamming on thick paper.",
        "I switched my phone plan to one with more data.",
        "We watched a documentary about deep sea volcanoes.",
        "Remind me to buy milk, eggs and bread on the way home.",
        "The conference talk about databases was too long.",
        "I started learning to play the guitar with online lessons.",
        "The bakery on the corner sells the best croissants.",
    ],
]
MESSAGES = 12
PLANTED_AT = 7
TOP = 5


def _count(_part: object) -> tuple[float, float, int]:
    return (1.0, 0.0, 0)


def _messages(thread: int, count: int, planted_at: int | None) -> list[Message]:
    prefix = f"t{thread}"
    out = []
    for i in range(count):
        body = PLANTED if i == planted_at else FILLER[thread][i % len(FILLER[thread])]
        role = "user" if i % 2 == 0 else "assistant"
        out.append(text_message(f"{prefix}-m{i}", role, body, T0 + timedelta(minutes=i)))
    return out


def _seed(db: Engine) -> tuple[StoredId, StoredId, list[StoredId]]:
    """A resource of three threads of twelve messages; the fact in the second one (resource, that thread,
    all threads)."""
    token = uuid.uuid4().hex[:8]
    resource = StoredId(f"tenant-{token}/user")
    threads = [StoredId(f"tenant-{token}/t{n}") for n in range(3)]
    for n, thread in enumerate(threads):
        with db.begin() as conn:
            history.append_messages(
                conn,
                thread_id=thread,
                resource_id=resource,
                incoming=_messages(n, MESSAGES, PLANTED_AT if n == 1 else None),
                count_part=_count,
            )
    return resource, threads[1], threads


def _rank(db: Engine, model: str, resource: StoredId, thread: StoredId | None) -> int | None:
    """The 1-based rank of the planted message among the top 10 with `model`'s vectors, None if absent."""
    embedder = ModelEmbedder(model, ModelClient())
    request = SearchRequest(
        resource_id=resource, query=QUESTION, limit=10, thread_ids=(thread,) if thread else None
    )
    hits = search(db, request, embedder)
    refs = [hit.ref for hit in hits]
    return refs.index(f"t1-m{PLANTED_AT}") + 1 if f"t1-m{PLANTED_AT}" in refs else None


@pytest.fixture(params=[pytest.param("pgvector", marks=pytest.mark.postgres), "sqlite"])
def vector_db(request: pytest.FixtureRequest) -> Engine:
    name = "pgvector_engine" if request.param == "pgvector" else "sqlite_engine"
    return request.getfixturevalue(name)  # type: ignore[no-any-return]


def test_the_offline_default_is_the_semantic_embedder() -> None:
    assert DEFAULT_EMBEDDING_MODEL == WORDLLAMA_EMBEDDING_MODEL


def test_a_paraphrase_finds_the_planted_fact_with_the_offline_default(vector_db: Engine) -> None:
    resource, thread, threads = _seed(vector_db)
    semantic = ModelEmbedder(DEFAULT_EMBEDDING_MODEL, ModelClient())
    for t in threads:
        index_thread(vector_db, t, semantic)
    by_thread = _rank(vector_db, DEFAULT_EMBEDDING_MODEL, resource, thread)
    by_resource = _rank(vector_db, DEFAULT_EMBEDDING_MODEL, resource, None)
    assert by_thread is not None and by_thread <= TOP, f"thread search ranked it {by_thread}"
    assert by_resource is not None and by_resource <= TOP, f"resource search ranked it {by_resource}"

    # The same documents embedded again by the hashing fallback (a change of model re-embeds them in
    # place): the planted message falls out of the top or behind where the model put it.
    hashing = ModelEmbedder(HASHING_EMBEDDING_MODEL, ModelClient())
    for t in threads:
        assert index_thread(vector_db, t, hashing).embedded == MESSAGES
    lexical_thread = _rank(vector_db, HASHING_EMBEDDING_MODEL, resource, thread)
    lexical_resource = _rank(vector_db, HASHING_EMBEDDING_MODEL, resource, None)
    assert lexical_thread is None or lexical_thread > by_thread, (lexical_thread, by_thread)
    assert lexical_resource is None or lexical_resource > by_resource, (lexical_resource, by_resource)
    assert lexical_resource is None or lexical_resource > TOP


def test_vectors_of_another_model_are_ignored_until_re_embedded(vector_db: Engine) -> None:
    resource, thread, threads = _seed(vector_db)
    hashing = ModelEmbedder(HASHING_EMBEDDING_MODEL, ModelClient())
    for t in threads:
        index_thread(vector_db, t, hashing)
    semantic = ModelEmbedder(WORDLLAMA_EMBEDDING_MODEL, ModelClient())
    request = SearchRequest(resource_id=resource, query=QUESTION, limit=10)
    # Every document has a 256-dimension vector in the same table, all of the other model: none is used.
    hits = search(vector_db, request, semantic)
    assert hits and all(hit.sources == ("lexical",) for hit in hits)
    assert index_thread(vector_db, thread, semantic).embedded == MESSAGES
    hits = search(vector_db, request, semantic)
    assert {hit.thread_id for hit in hits if "vector" in hit.sources} == {thread}


def test_maintenance_re_embeds_idle_threads_after_the_model_changed(sqlite_engine: Engine) -> None:
    """A deployment that embedded with the hashing embedder and now runs the default: the beat's pass asks
    for indexing of every thread holding vectors of the old model, however idle, so the paraphrase is found
    without a new turn; then it stops looking."""
    resource, _thread, threads = _seed(sqlite_engine)
    hashing = ModelEmbedder(HASHING_EMBEDDING_MODEL, ModelClient())
    for t in threads:
        set_thread_config(sqlite_engine, t, {"retrieval": {"vector": True}})
        index_thread(sqlite_engine, t, hashing)
    engine = MemoryEngine(sqlite_engine, models=ModelClient())  # inline executor, the default embedder
    assert engine.embedder.model == DEFAULT_EMBEDDING_MODEL
    report = run_maintenance(engine, MaintenancePolicy(), now=datetime.now(UTC))
    assert sorted(report.reindexed) == sorted(threads)
    rank = _rank(sqlite_engine, DEFAULT_EMBEDDING_MODEL, resource, None)
    assert rank is not None and rank <= TOP
    assert run_maintenance(engine, MaintenancePolicy(), now=datetime.now(UTC)).reindexed == []
    assert engine.coordination.get_int(Keys.index_model_settled(DEFAULT_EMBEDDING_MODEL)) == 1
