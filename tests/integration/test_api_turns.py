"""The turn API against a real server process and Postgres: the documented cycle, blocking and its
deadline, manual observe/reflect, reading memory, deleting, and the error answers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine

from om_api.client import OMClient, OMNotFound
from om_core.messages import text_message
from om_core.store import history, records
from om_core.store.outbox import list_events
from om_core.tenancy.scoped_ids import scoped_id
from tests.support.api_server import (
    ApiServer,
    api_server,
    collect_events,
    new_id,
    om,
    run_api_server,
    tenant_key,
)
from tests.support.conversation import generate
from tests.support.invariants import check_thread

__all__ = ["api_server", "om", "tenant_key"]  # fixtures used below

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

#: Small thresholds so a short conversation goes through buffering, activation and reflection.
CYCLE = {"observation": {"messageTokens": 1500}, "reflection": {"observationTokens": 600}}
BLOCK_AFTER = 1800  # 1.2 × messageTokens, the default band ceiling


def chatter(i: int, words: int = 70) -> str:
    vocabulary = ("harbor", "lantern", "copper", "meadow", "signal", "orchard", "velvet", "canyon", "ember")
    return f"Message {i} is about " + " ".join(
        vocabulary[(i * 7 + k * k) % len(vocabulary)] for k in range(words)
    )


def all_message_ids(client: OMClient, thread_id: str, page_size: int = 7) -> list[str]:
    ids: list[str] = []
    before: int | None = None
    while True:
        page = client.messages(thread_id, limit=page_size, before_seq=before)
        ids = [m.id for m in page.messages] + ids
        if page.next_before_seq is None:
            return ids
        before = page.next_before_seq


def test_a_conversation_posted_turn_by_turn_follows_the_documented_cycle(
    om: OMClient, pg_engine: Engine, tenant: str
) -> None:
    thread, resource = new_id("cycle"), new_id("user")
    om.set_config(thread, CYCLE, resource_id=resource)
    messages = list(generate(seed=5, target_tokens=14_000).turns())
    turns = [om.post_turn(thread, [m], resource_id=resource, context="full") for m in messages]

    raw = [t.status.windows.active.messages.tokens for t in turns]
    assert max(raw) <= BLOCK_AFTER + 600, raw  # one message may overshoot by its own size
    first_memory = next(i for i, t in enumerate(turns) if t.context.system_messages)
    assert first_memory > 0, "the first turn has nothing to remember"
    assert all(not t.context.system_messages for t in turns[:first_memory])
    for index, turn in enumerate(turns[first_memory:], start=first_memory):
        context = turn.context
        assert "<observations>" in context.system_messages
        assert len(context.messages) < index + 1, "observed messages left the raw context"
        assert context.messages[-1].id == messages[index].id, "the newest message always stays raw"
        sent = context.openai_messages
        assert [m["content"] for m in sent[: len(context.system_messages)]] == context.system_messages
        assert sent[len(context.system_messages)]["content"] == context.continuation_reminder
    assert not any(t.degraded for t in turns)

    assert check_thread(pg_engine, scoped_id(tenant, thread)).violations == []
    assert all_message_ids(om, thread) == [m.id for m in messages]

    replay = list(om.events(thread, follow=False))
    assert [e.id for e in replay] == sorted({e.id for e in replay}), "events come in outbox order, once"
    kinds = {e.type for e in replay}
    assert {
        "data-om-status",
        "data-om-buffering-start",
        "data-om-buffering-end",
        "data-om-activation",
    } <= kinds
    reflections = [
        e
        for e in replay
        if e.data.get("operationType") == "reflection"
        and e.type in ("data-om-activation", "data-om-observation-end")
    ]
    view = om.observations(thread)
    assert view.active is not None and view.active.observations.strip()
    assert view.active.generation_count == len(reflections) >= 1
    assert len(view.generations) == min(view.active.generation_count, 20)
    assert [t.thread_id for t in om.threads(resource).threads] == [thread]


def test_past_the_threshold_without_buffering_the_turn_waits_for_the_observation(om: OMClient) -> None:
    thread = new_id("sync")
    om.set_config(thread, {"observation": {"messageTokens": 1500, "bufferTokens": False}}, resource_id=thread)
    turns = [om.post_turn(thread, [{"id": f"m{i}", "role": "user", "text": chatter(i)}]) for i in range(20)]
    blocked = [t for t in turns if t.blocked]
    assert blocked, "the threshold was crossed"
    first = blocked[0]
    assert not first.degraded
    assert {"data-om-observation-start", "data-om-observation-end"} <= {e.type for e in first.events}
    assert "<observations>" in first.context.system_messages
    assert first.status.windows.active.messages.tokens < 1500


@pytest.fixture
def impatient_server(
    postgres_url: str, redis_url: str, pg_engine: Engine, tmp_path: Path
) -> Iterator[ApiServer]:
    """A server whose turns wait no time at all for blocking work."""
    with run_api_server(postgres_url, redis_url, tmp_path, env={"OM_BLOCKING_DEADLINE_S": "0.001"}) as server:
        yield server


def test_a_missed_deadline_returns_the_whole_context_and_loses_nothing(
    impatient_server: ApiServer, tenant_key: str
) -> None:
    thread = new_id("deadline")
    with OMClient(impatient_server.base_url, tenant_key) as client:
        client.set_config(
            thread, {"observation": {"messageTokens": 1500, "bufferTokens": False}}, resource_id=thread
        )
        posted: list[str] = []
        for i in range(20):
            posted.append(f"m{i}")
            turn = client.post_turn(
                thread, [{"id": f"m{i}", "role": "user", "text": chatter(i)}], context="messages"
            )
            if turn.blocked:
                break
        assert turn.blocked and turn.degraded and "deadline" in (turn.degraded_reason or "")
        assert [m.id for m in turn.context.messages] == posted, "the uncompressed context holds every message"
        done = collect_events(
            impatient_server.base_url,
            tenant_key,
            thread,
            lambda got: any(e.type == "data-om-observation-end" for e in got),
        )
        assert done
        after = client.post_turn(
            thread, [{"id": "late", "role": "user", "text": "and one more thing"}], context="full"
        )
        assert "<observations>" in after.context.system_messages
        assert len(after.context.messages) < len(posted) + 1


def test_manual_observe_and_reflect(om: OMClient) -> None:
    thread = new_id("manual")
    for i in range(12):
        om.post_turn(
            thread, [text_message(f"m{i}", "user" if i % 2 == 0 else "assistant", chatter(i, words=120))]
        )
    # Manual observation runs once the messages reach the threshold: lower it below what is waiting.
    om.set_config(thread, {"observation": {"messageTokens": 1500, "bufferTokens": False}})
    observed = om.observe(thread)
    assert observed.completed and observed.applied and observed.error is None
    assert {"data-om-observation-start", "data-om-observation-end"} <= {e.type for e in observed.events}
    assert observed.status is not None and observed.status.windows.active.observations.tokens > 0
    before = om.observations(thread)
    assert before.active is not None and before.active.observed_through_seq > 0

    reflected = om.reflect(thread, prompt="Keep every number.")
    assert reflected.completed and reflected.error is None
    after = om.observations(thread)
    assert after.active is not None
    if reflected.applied:
        assert after.active.generation_count == before.active.generation_count + 1
        assert after.generations[0].observations == before.active.observations
    else:  # a log too small to shrink is kept as it is, and the refusal is reported as an event
        assert after.active.observations == before.active.observations
        assert any(e.type == "data-om-observation-failed" for e in reflected.events)


def test_deleting_a_thread_removes_everything_and_frees_its_id(
    om: OMClient, pg_engine: Engine, tenant: str
) -> None:
    thread = new_id("gone")
    om.set_config(thread, CYCLE, resource_id=thread)
    for i in range(14):
        om.post_turn(
            thread, [{"id": f"m{i}", "role": "user" if i % 2 == 0 else "assistant", "text": chatter(i)}]
        )
    om.observe(thread)
    om.delete_thread(thread)

    with pytest.raises(OMNotFound):
        om.status(thread)
    with pytest.raises(OMNotFound):
        list(om.events(thread, follow=False))
    stored = scoped_id(tenant, thread)
    assert history.get_thread(pg_engine, stored) is None
    assert records.get_head(pg_engine, f"thread:{stored}") is None
    assert list_events(pg_engine, thread_id=stored) == []
    with pytest.raises(OMNotFound):
        om.delete_thread(thread)

    again = om.post_turn(thread, [{"id": "m0", "role": "user", "text": "starting over"}])
    assert again.status.generation_count == 0 and again.status.windows.active.observations.tokens == 0
    assert all_message_ids(om, thread) == ["m0"]


def test_metrics_report_requests_and_memory_cycles(
    om: OMClient, api_server: ApiServer, tenant_key: str
) -> None:
    thread = new_id("metrics")
    om.set_config(thread, CYCLE, resource_id=thread)
    for i in range(8):
        om.post_turn(thread, [{"id": f"m{i}", "role": "user", "text": chatter(i)}])
    collect_events(
        api_server.base_url,
        tenant_key,
        thread,
        lambda got: any(e.type == "data-om-buffering-end" for e in got),
    )
    text = api_server.metrics()
    assert 'om_http_requests_total{method="POST",route="/v1/threads/{thread_id}/turns",status="200"}' in text
    # An inline API ran the buffering itself, so it reports it (a celery-mode API leaves it to the workers).
    assert 'om_memory_cycles_total{kind="buffering",operation="observation",outcome="end"}' in text
    tokens = 'om_memory_model_tokens_total{direction="input",model="om-local/extractive",role="observer"}'
    assert tokens in text
    assert "\nprocess_cpu_seconds_total " in text and "python_gc_objects_collected_total{" in text
    assert "om_http_request_duration_seconds_bucket" in text
    assert "om_memory_compression_ratio_bucket" in text


# ------------------------------------------------------------------------------------------------ errors


def _post(
    server: ApiServer, key: str, path: str, body: Any = None, *, content: bytes | None = None
) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"}
    if content is not None:
        return httpx.post(
            server.base_url + path,
            content=content,
            headers={**headers, "content-type": "application/json"},
            timeout=60,
        )
    return httpx.post(server.base_url + path, json=body, headers=headers, timeout=60)


INVALID_TURNS = [
    ({"messages": [{"role": "robot", "text": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "user"}]}, "messages[0]"),
    ({"messages": [{"role": "user", "text": "x", "parts": [{"type": "text", "text": "y"}]}]}, "messages[0]"),
    ({"messages": [{"role": "user", "text": "x", "colour": "red"}]}, "messages[0].colour"),
    ({"messages": [{"role": "user", "parts": [{"type": "bogus"}]}]}, "messages[0].parts[0].type"),
    ({"messages": [{"role": "user", "text": "nul \u0000 byte"}]}, "messages[0]"),
    ({"resource_id": "has spaces", "messages": []}, "resource_id"),
    ({"step_number": -1, "messages": []}, "step_number"),
    ({"messages": "hello"}, "messages"),
]


@pytest.mark.parametrize(("body", "field"), INVALID_TURNS)
def test_a_malformed_turn_is_refused_naming_the_field(
    api_server: ApiServer, tenant_key: str, body: dict[str, Any], field: str
) -> None:
    response = _post(api_server, tenant_key, f"/v1/threads/{new_id('bad')}/turns", body)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] == field
    assert field in error["message"]


def test_a_body_that_is_not_json_is_refused(api_server: ApiServer, tenant_key: str) -> None:
    response = _post(api_server, tenant_key, f"/v1/threads/{new_id('bad')}/turns", content=b"{not json")
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "invalid_request"


def _deeply_nested_part(depth: int) -> bytes:
    data = "[" * depth + "]" * depth
    return b'{"messages": [{"role": "user", "parts": [{"type": "data-x", "data": ' + data.encode() + b"}]}]}"


HOSTILE_BODIES = [
    ("invalid-utf8", b'{"messages": [{"role": "user", "text": "caf\xe9 \xff\xfe"}]}', (400, 422)),
    ("unpaired-surrogate", b'{"messages": [{"role": "user", "text": "half \\ud800 pair"}]}', (422,)),
    ("deep-nesting", _deeply_nested_part(100_000), (400, 413, 422)),
    (
        "too-many-parts",
        json.dumps({"messages": [{"role": "user", "parts": [{"type": "text", "text": "p"}] * 501}]}).encode(),
        (413,),
    ),
    ("wrong-types", b'{"messages": [{"role": 7, "text": ["a", "b"]}], "turn_end": "maybe"}', (422,)),
    ("top-level-array", b"[1, 2, 3]", (422,)),
]


@pytest.mark.parametrize(
    ("body", "statuses"), [(b, s) for _, b, s in HOSTILE_BODIES], ids=[n for n, _, _ in HOSTILE_BODIES]
)
def test_a_hostile_body_gets_a_clear_4xx_and_stores_nothing(
    api_server: ApiServer, tenant_key: str, body: bytes, statuses: tuple[int, ...]
) -> None:
    thread = new_id("hostile")
    response = _post(api_server, tenant_key, f"/v1/threads/{thread}/turns", content=body)
    assert response.status_code in statuses, response.text[:500]
    error = response.json()["error"]
    assert error["code"] and len(error["message"]) > 10, error
    headers = {"Authorization": f"Bearer {tenant_key}"}
    listed = httpx.get(f"{api_server.base_url}/v1/threads/{thread}/messages", headers=headers)
    assert listed.status_code == 404 or listed.json()["messages"] == [], "nothing of the refused turn stored"
    assert httpx.get(f"{api_server.base_url}/readyz", timeout=30).status_code == 200, "the server is still up"


def test_an_oversized_message_is_refused_with_the_limit(api_server: ApiServer, tenant_key: str) -> None:
    thread = new_id("big")
    body = {"messages": [{"id": "huge", "role": "user", "text": "x" * 2_000_001}]}
    response = _post(api_server, tenant_key, f"/v1/threads/{thread}/turns", body)
    assert response.status_code == 413
    error = response.json()["error"]
    assert error["limit"] == 2_000_000 and error["field"] == "messages[0]"
    assert "2000000" in error["message"]
    assert _post(api_server, tenant_key, f"/v1/threads/{thread}/turns", {"messages": []}).status_code == 200
    assert (
        httpx.get(
            f"{api_server.base_url}/v1/threads/{thread}/messages",
            headers={"Authorization": f"Bearer {tenant_key}"},
        ).json()["messages"]
        == []
    ), "nothing of the refused turn was stored"


def test_an_oversized_body_is_refused_before_it_is_read(api_server: ApiServer, tenant_key: str) -> None:
    response = _post(api_server, tenant_key, f"/v1/threads/{new_id('big')}/turns", content=b" " * 8_000_001)
    assert response.status_code == 413
    assert response.json()["error"]["limit"] == 8_000_000


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/status"),
        ("GET", "/observations"),
        ("GET", "/messages"),
        ("GET", "/config"),
        ("GET", "/events?follow=false"),
        ("POST", "/observe"),
        ("POST", "/reflect"),
        ("DELETE", ""),
    ],
)
def test_an_unknown_thread_is_404(api_server: ApiServer, tenant_key: str, method: str, path: str) -> None:
    response = httpx.request(
        method,
        f"{api_server.base_url}/v1/threads/{new_id('nobody')}{path}",
        headers={"Authorization": f"Bearer {tenant_key}"},
    )
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "thread_not_found"


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"observation": {"messageTokenz": 5}}, "overrides.observation.messageTokenz"),
        ({"observation": {"messageTokens": "many"}}, "overrides.observation.messageTokens"),
        (
            {"observation": {"messageTokens": 1000, "bufferTokens": 5000}},
            "overrides.observation.bufferTokens",
        ),
        ({"colour": "red"}, "overrides.colour"),
    ],
)
def test_an_invalid_config_is_refused_naming_the_option_and_nothing_changes(
    om: OMClient, api_server: ApiServer, tenant_key: str, overrides: dict[str, Any], field: str
) -> None:
    thread = new_id("config")
    om.set_config(thread, CYCLE, resource_id=thread)
    response = httpx.put(
        f"{api_server.base_url}/v1/threads/{thread}/config",
        json={"overrides": overrides},
        headers={"Authorization": f"Bearer {tenant_key}"},
    )
    assert response.status_code == 422, response.text
    assert response.json()["error"]["field"] == field
    assert om.get_config(thread).overrides == CYCLE


def test_a_message_id_reused_with_another_role_is_a_conflict(
    om: OMClient, api_server: ApiServer, tenant_key: str
) -> None:
    thread = new_id("conflict")
    om.post_turn(thread, [{"id": "same", "role": "user", "text": "hello"}])
    response = _post(
        api_server,
        tenant_key,
        f"/v1/threads/{thread}/turns",
        {"messages": [{"id": "same", "role": "assistant", "text": "hi"}]},
    )
    assert response.status_code == 409
    assert "new id" in response.json()["error"]["message"]


def test_a_request_without_a_valid_key_is_401(api_server: ApiServer) -> None:
    path = f"{api_server.base_url}/v1/threads/{new_id('t')}/turns"
    missing = httpx.post(path, json={"messages": []})
    wrong = httpx.post(
        path,
        json={"messages": []},
        headers={"Authorization": "Bearer omk_000000000000_nope-nope-nope-nope-nope"},
    )
    for response in (missing, wrong):
        assert response.status_code == 401
        assert response.headers["www-authenticate"] == "Bearer"
        assert (
            "om keys create" in response.json()["error"]["message"]
            or "unknown" in response.json()["error"]["message"]
        )


@pytest.fixture
def server_without_database(redis_url: str, tmp_path: Path) -> Iterator[ApiServer]:
    from tests.support.api_server import free_port

    dead = f"postgresql+psycopg2://om@127.0.0.1:{free_port()}/om_test"
    with run_api_server(dead, redis_url, tmp_path, env={"OM_AUTH": "none"}, probe="/healthz") as server:
        yield server


def test_the_database_down_is_503_and_readiness_says_why(server_without_database: ApiServer) -> None:
    base = server_without_database.base_url
    ready = httpx.get(base + "/readyz")
    assert ready.status_code == 503
    assert ready.json()["checks"]["database"]["ok"] is False
    turn = httpx.post(base + "/v1/threads/t1/turns", json={"messages": [{"role": "user", "text": "hi"}]})
    assert turn.status_code == 503
    assert turn.json()["error"]["code"] == "database_unavailable"
    assert turn.headers["retry-after"] == "5"


def test_readiness_names_the_migration_a_database_behind_needs(redis_url: str, tmp_path: Path) -> None:
    from om_core.store.db import make_engine
    from om_core.store.migrate import upgrade
    from om_core.store.revision import SCHEMA_HEAD

    database = f"sqlite:///{tmp_path / 'behind.db'}"
    upgrade(make_engine(database), "0001")
    with run_api_server(database, redis_url, tmp_path, env={"OM_AUTH": "none"}, probe="/healthz") as server:
        ready = httpx.get(server.base_url + "/readyz")
    assert ready.status_code == 503
    detail = ready.json()["checks"]["database"]["detail"]
    assert detail == f"schema at 0001, code needs {SCHEMA_HEAD}: run `om migrate`"
