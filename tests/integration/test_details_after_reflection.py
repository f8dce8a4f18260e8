"""The issue's promise, end to end: exact values said early in a long conversation, compressed out of the
observation log by reflection, are found again through search and read back through recall on the range
of the group that observed them. Both vector databases (pgvector, SQLite with sqlite-vec).

The Observer and the Reflector are the test's fake model (at the engine's model boundary), so the test
knows the Reflector dropped each value: its lines are removed from every reflection. Storage, indexing,
search, groups and recall are the real ones.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine

from om_core.config.options import ObservationalMemoryConfig
from om_core.engine import EngineSettings, MemoryEngine
from om_core.messages import text_message
from om_core.models.client import ModelClient
from om_core.search import Searcher, SearchRequest
from om_core.search.embedder import DEFAULT_EMBEDDING_MODEL, ModelEmbedder
from om_core.store import groups, records
from tests.support.fake_models import REFLECT_HEADING, FakeCompletion, FakeModels, user_text

T0 = datetime(2026, 9, 1, 9, 0, tzinfo=UTC)
PLANTED = {2: "ZX48213QV", 6: "KD7731LM", 10: "PX55120XR"}
TOPICS = ["harbor", "orchard", "canyon", "meadow", "lantern", "quartz"]


@dataclass
class ForgetfulReflector(FakeModels):
    """The fake model, whose reflections drop every line holding a planted value."""

    def complete(self, model: Any, *, system: str, user: Any, **kwargs: Any) -> FakeCompletion:
        completion = super().complete(model, system=system, user=user, **kwargs)
        if REFLECT_HEADING not in user_text(user):
            return completion
        kept = [line for line in completion.text.split("\n") if not any(v in line for v in PLANTED.values())]
        return FakeCompletion("\n".join(kept), completion.input_tokens, 0, 0.0, completion.model)


@pytest.fixture(params=[pytest.param("pgvector", marks=pytest.mark.postgres), "sqlite"])
def vector_db(request: pytest.FixtureRequest) -> Engine:
    name = "pgvector_engine" if request.param == "pgvector" else "sqlite_engine"
    return request.getfixturevalue(name)  # type: ignore[no-any-return]


def said(i: int) -> str:
    if i in PLANTED:  # the value among the first words, which the fake Observer keeps
        return f"Reference {PLANTED[i]} is my warranty claim number, please keep it safe."
    topic = TOPICS[i % len(TOPICS)]
    return f"Turn {i} about the {topic} trip: " + " ".join(f"{topic}{i}x{k}" for k in range(40))


def test_values_reflected_out_of_the_log_come_back_through_search_and_the_groups_range(
    vector_db: Engine,
) -> None:
    embedder = ModelEmbedder(DEFAULT_EMBEDDING_MODEL, ModelClient())
    config = ObservationalMemoryConfig.parse(
        {
            "retrieval": {"vector": True, "scope": "thread"},
            "observation": {"messageTokens": 1200, "bufferTokens": False},
            "reflection": {"observationTokens": 400},
        }
    )
    om = MemoryEngine(
        vector_db,
        models=ForgetfulReflector(),
        config=config,
        settings=EngineSettings(index_interval_s=0.001),
        embedder=embedder,
        searcher=Searcher(vector_db, embedder),
    )
    thread, resource = f"t-{uuid.uuid4().hex[:8]}", f"user-{uuid.uuid4().hex[:8]}"
    for i in range(60):
        role = "user" if i % 2 == 0 else "assistant"
        om.ingest_turn(thread, resource, [text_message(f"m{i}", role, said(i), T0 + timedelta(minutes=i))])

    head = records.get_head(vector_db, f"thread:{thread}")
    assert head is not None and head.generation_count >= 1, "the log was reflected"
    for value in PLANTED.values():
        assert value not in head.active_observations, f"{value} was compressed out of the log"

    searcher = om.searcher_for(om.thread_config(thread))
    for index, value in PLANTED.items():
        hits = searcher(SearchRequest(resource_id=resource, query=value))
        message_hits = [h for h in hits if h.kind == "message" and value in h.text]
        group_hits = [h for h in hits if h.kind == "group" and value in h.text]
        assert message_hits and message_hits[0].ref == f"m{index}", [(h.kind, h.ref) for h in hits]
        assert group_hits, f"the observation group that recorded {value} is found although reflected away"

        # The group's range leads back to the raw message: recall pages from its first message.
        ranges = group_hits[0].ranges
        assert ranges is not None
        start, _sep, end = ranges.split(",")[0].partition(":")
        assert int(start.removeprefix("m")) <= index <= int(end.removeprefix("m"))
        # Forward pages start after the cursor; the cursor's own message is read by its part.
        first = om.recall(thread, {"cursor": start, "partIndex": 0})
        page = om.recall(thread, {"cursor": start, "page": 1, "limit": 20})
        assert value in first["text"] + page["messages"], (value, ranges, page)
        with vector_db.connect() as conn:
            stored = groups.find(conn, group_hits[0].ref, resource)
        assert stored is not None and value in stored.text

        answer = om.recall(thread, {"mode": "search", "query": value})
        assert answer["count"] >= 1 and value in answer["results"]
        assert re.search(r"m\d+", answer["results"]), "search results name the raw messages' range"
