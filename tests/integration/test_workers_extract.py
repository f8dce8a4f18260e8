"""Extractors in the production shape: the API with `OM_EXECUTOR=celery`, real Celery workers, the offline
model through litellm. The Observer's cycle runs on `om.observe` and makes the structured extractor's
follow-up call itself, so both values are on its `data-om-observation-end`; they are read back through
`GET /v1/threads/{id}`. The inline extractor's tag never reaches the stored log."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine

from om_api.client import OMClient
from om_api.schemas import ThreadDetail
from om_core.engine import events as ev
from om_core.engine.tasks import OBSERVE_QUEUE, REFLECT_QUEUE
from om_core.store import records
from om_core.store.outbox import list_events
from om_core.tenancy import access
from om_core.tenancy.scoped_ids import scoped_id
from tests.support.api_server import ApiServer, new_id, run_api_server
from tests.support.workers import TEST_WORKER_ENV, WorkerCluster, wait_until, worker_cluster

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

PROFILE = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "timezone": {"type": "string"}},
}
CONFIG: dict[str, Any] = {
    "observation": {
        "messageTokens": 400,
        "bufferTokens": False,
        "extract": [
            {"name": "Profile", "instructions": "Stable facts about the user.", "schema": PROFILE},
            {"name": "Favorite drink", "instructions": "The drink the user prefers.", "context": True},
        ],
    }
}


@pytest.fixture(scope="module")
def cluster(
    postgres_url: str, redis_url: str, pg_engine: Engine, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerCluster]:
    with worker_cluster(
        postgres_url=postgres_url,
        redis_url=redis_url,
        workdir=tmp_path_factory.mktemp("workers-extract"),
        db=9,
        env={"OM_MODEL": "om-local/extractive"},
    ) as workers:
        workers.start_worker([OBSERVE_QUEUE, REFLECT_QUEUE])
        yield workers


@pytest.fixture(scope="module")
def api(
    cluster: WorkerCluster, postgres_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApiServer]:
    env = {**TEST_WORKER_ENV, "OM_EXECUTOR": "celery", "OM_BLOCKING_DEADLINE_S": "60"}
    with run_api_server(postgres_url, cluster.redis_url, tmp_path_factory.mktemp("api-x"), env=env) as server:
        yield server


def test_a_structured_extractor_reports_on_the_observation_end_and_reads_back_through_the_api(
    api: ApiServer, cluster: WorkerCluster, pg_engine: Engine
) -> None:
    tenant = new_id("tenant")
    key = access.create_key(pg_engine, tenant, "extract").secret
    thread = new_id("extract")
    stored = scoped_id(tenant, thread)
    with OMClient(api.base_url, key) as om:
        om.set_config(thread, CONFIG, resource_id=thread)
        lines = [
            "Hello! My name is Ada Lovelace, and my timezone is Europe/London.",
            "Noted, Ada. How can I help today?",
            "My favorite drink is green tea with honey, please remember that.",
            "I will remember green tea with honey.",
        ]
        for i in range(14):
            role = "user" if i % 2 == 0 else "assistant"
            text = lines[i % 4] + " " + " ".join(f"detail{(i * 7 + k) % 41}" for k in range(30))
            om.post_turn(thread, [{"id": f"m{i}", "role": role, "text": text}])

        def with_profile() -> ThreadDetail | None:
            detail = om.thread(thread)
            return detail if "profile" in detail.extracted else None

        detail = wait_until(
            with_profile,
            deadline_s=120,
            what="the structured value on GET /v1/threads/{id}",
        )
        assert detail.extracted["profile"] == {"name": "Ada Lovelace", "timezone": "Europe/London"}
        assert "green tea with honey" in detail.extracted["favorite-drink"]

        # `context: true`: the actor sees the drink in the volatile part of the next turn's context.
        turn = om.post_turn(thread, [{"id": "m99", "role": "user", "text": "What should I order?"}])
        messages = turn.context.system_messages
        drink = [i for i, m in enumerate(messages) if "<favorite-drink>" in m]
        log = [i for i, m in enumerate(messages) if "<observations>" in m]
        assert drink and log and min(drink) > max(log), messages

    # Both values on the observation's own end event, as the original documents; no extraction task.
    events = list_events(pg_engine, thread_id=stored, limit=10_000)
    observed = [e for e in events if e.type == ev.OBSERVATION_END and "extractedValues" in e.payload]
    profiled = [e for e in observed if "profile" in e.payload["extractedValues"]]
    assert profiled and profiled[0].payload["extractedValues"]["profile"]["name"] == "Ada Lovelace"
    assert "favorite-drink" in profiled[0].payload["extractedValues"]
    assert not [e for e in events if e.type == ev.EXTRACTION_END]
    head = records.get_head(pg_engine, f"thread:{stored}")
    assert head is not None and head.active_observations.strip()
    assert "<favorite-drink>" not in head.active_observations and "<profile>" not in head.active_observations
    assert "extracted-values" not in head.active_observations
