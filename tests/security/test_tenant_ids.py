"""Tenants own their ids, tried as an attacker would, against a real server (keys auth, Postgres, Redis).

Two tenants use the same thread and resource ids and each sees only its own conversation. Every route that
takes a thread or resource id, read from the server's own OpenAPI document so a new route cannot be left
out, is called by a second tenant with the first tenant's ids: it answers exactly what it answers for an id
nobody ever used, and nothing of the first tenant (ids it never sent, texts, record ids) appears in any
answer.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine

from om_api.client import OMClient
from om_core.store.outbox import list_events
from om_core.tenancy import access
from om_core.tenancy.scoped_ids import scoped_id
from tests.support.api_server import ApiServer, api_server, new_id
from tests.support.invariants import check_thread

__all__ = ["api_server"]  # fixture used below

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

#: Observation and reflection in the turn (no buffering): a thread is quiet once its turn has answered, so
#: what a tenant reads before and after another tenant's attempts can be compared.
CYCLE = {
    "observation": {"messageTokens": 1500, "bufferTokens": False},
    "reflection": {"observationTokens": 600},
    "workingMemory": {"enabled": True, "scope": "thread"},
}
ACTOR = "om-actor/echo"

#: One request per route that names a thread or resource: method, path template, JSON body. A route the
#: OpenAPI document lists and this table does not fails the test: say here how an attacker would call it.
ROUTES: dict[tuple[str, str], dict[str, Any] | None] = {
    ("GET", "/v1/threads/{thread_id}/status"): None,
    ("GET", "/v1/threads/{thread_id}/observations"): None,
    ("GET", "/v1/threads/{thread_id}/messages"): None,
    ("GET", "/v1/threads/{thread_id}/config"): None,
    ("GET", "/v1/threads/{thread_id}/events"): None,
    ("GET", "/v1/threads/{thread_id}/generations/{generation}/diff"): None,
    ("GET", "/v1/resources/{resource_id}/threads"): None,
    ("GET", "/v1/threads"): None,
    ("GET", "/v1/threads/{thread_id}"): None,
    ("PATCH", "/v1/threads/{thread_id}"): {"title": "taken over", "metadata": {"owner": "intruder"}},
    ("PATCH", "/v1/threads/{thread_id}/observations/{line}"): {
        "text": "the intruder was here",
        "expected_sha256": "0" * 64,
    },
    ("DELETE", "/v1/threads/{thread_id}/observations/{line}"): None,
    ("POST", "/v1/threads/{thread_id}/observe"): {"wait": True},
    ("POST", "/v1/threads/{thread_id}/reflect"): {"prompt": "keep only the secrets", "wait": True},
    ("POST", "/v1/threads/{thread_id}/recall"): {"mode": "messages", "cursor": "m1", "partIndex": 0},
    ("PUT", "/v1/threads/{thread_id}/config"): {"overrides": {"observation": {"messageTokens": 900}}},
    ("DELETE", "/v1/threads/{thread_id}"): None,
    ("GET", "/v1/resources/{resource_id}/config"): None,
    ("POST", "/v1/resources/{resource_id}/search"): {"query": "secrets"},
    ("POST", "/v1/threads/{thread_id}/search"): {"query": "secrets"},
    ("DELETE", "/v1/resources/{resource_id}"): None,
    ("GET", "/v1/threads/{thread_id}/working-memory"): None,
    ("PUT", "/v1/threads/{thread_id}/working-memory"): {"content": "- the intruder was here"},
    ("GET", "/v1/resources/{resource_id}/working-memory"): None,
    ("PUT", "/v1/resources/{resource_id}/working-memory"): {"content": "- the intruder was here"},
    ("GET", "/v1/threads/{thread_id}/export"): None,
    ("GET", "/v1/resources/{resource_id}/export"): None,
    # These create the caller's own thread or resource under the id: they run last, after every read.
    ("PUT", "/v1/resources/{resource_id}/config"): {"overrides": {"scope": "resource"}},
    ("POST", "/v1/threads/{thread_id}/turns"): {
        "messages": [{"id": "m0", "role": "user", "text": "intruder says hello"}],
        "resource_id": "{resource_id}",
    },
    ("POST", "/v1/chat/completions"): {
        "model": ACTOR,
        "messages": [{"role": "user", "content": "intruder says hello"}],
        "metadata": {"thread_id": "{thread_id}", "resource_id": "{resource_id}"},
    },
}
CREATING = {
    ("POST", "/v1/threads/{thread_id}/turns"),
    ("POST", "/v1/chat/completions"),
    ("PUT", "/v1/resources/{resource_id}/config"),
}
QUERY: dict[str, dict[str, str]] = {
    "/v1/threads/{thread_id}/events": {"follow": "false"},
    "/v1/threads": {"resource_id": "{resource_id}"},
    "/v1/threads/{thread_id}/observations/{line}": {"expected_sha256": "0" * 64},
}


def _names_an_id(operation: dict[str, Any]) -> bool:
    names = {p["name"].lower() for p in operation.get("parameters", [])}
    return bool(names & {"thread_id", "resource_id", "x-om-thread-id", "x-om-resource-id"})


def id_routes(server: ApiServer) -> set[tuple[str, str]]:
    document = httpx.get(server.base_url + "/openapi.json").json()
    return {
        (method.upper(), path)
        for path, operations in document["paths"].items()
        for method, operation in operations.items()
        if _names_an_id(operation)
    }


class Tenant:
    def __init__(self, server: ApiServer, db: Engine, name: str) -> None:
        self.name = name
        self.key = access.create_key(db, name, "security").secret
        self.server = server
        self.client = OMClient(server.base_url, self.key, timeout=60)

    def call(self, method: str, template: str, thread: str, resource: str) -> httpx.Response:
        body = _fill(ROUTES[(method, template)], thread, resource)
        path = (
            template.replace("{thread_id}", thread)
            .replace("{resource_id}", resource)
            .replace("{line}", "1")
            .replace("{generation}", "0")
        )
        return httpx.request(
            method,
            self.server.base_url + path,
            json=body,
            params=_fill(QUERY.get(template), thread, resource),
            headers={"Authorization": f"Bearer {self.key}"},
            timeout=60,
        )


def _fill(value: Any, thread: str, resource: str) -> Any:
    if isinstance(value, str):
        return value.replace("{thread_id}", thread).replace("{resource_id}", resource)
    if isinstance(value, dict):
        return {k: _fill(v, thread, resource) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, thread, resource) for v in value]
    return value


@pytest.fixture
def tenants(api_server: ApiServer, pg_engine: Engine) -> Iterator[tuple[Tenant, Tenant]]:
    a, b = Tenant(api_server, pg_engine, new_id("alpha")), Tenant(api_server, pg_engine, new_id("beta"))
    try:
        yield a, b
    finally:
        a.client.close()
        b.client.close()


def _say(tenant: Tenant, thread: str, resource: str, secret: str, turns: int) -> str:
    """Post the turns; returns every turn's answer, as JSON text."""
    tenant.client.set_config(thread, CYCLE, resource_id=resource)
    answers = []
    for i in range(turns):
        text = f"{secret} fact {i}: " + " ".join(f"{secret}{(i * 7 + k) % 53}" for k in range(60))
        role = "user" if i % 2 == 0 else "assistant"
        message = {"id": f"m{i}", "role": role, "text": text}
        answers.append(tenant.client.post_turn(thread, [message], resource_id=resource).model_dump_json())
    return "\n".join(answers)


def test_two_tenants_use_the_same_ids_and_each_sees_only_its_own(
    tenants: tuple[Tenant, Tenant], pg_engine: Engine
) -> None:
    a, b = tenants
    thread, resource = "t1", "user-1"
    answers = {
        a.name: _say(a, thread, resource, "alphasecret", 24),
        b.name: _say(b, thread, resource, "betasecret", 16),
    }

    for me, other, turns in ((a, "betasecret", 24), (b, "alphasecret", 16)):
        messages = me.client.messages(thread, limit=500).messages
        assert [m.id for m in messages] == [f"m{i}" for i in range(turns)]
        observations = me.client.observations(thread)
        assert observations.thread_id == thread and observations.resource_id == resource
        assert observations.active is not None and observations.active.observations.strip()
        events = list(me.client.events(thread, follow=False))
        assert events and all(e.data.get("threadId") in (None, thread) for e in events)
        listed = me.client.threads(resource).threads
        assert [(t.thread_id, t.resource_id) for t in listed] == [(thread, resource)]
        seen = " ".join(
            [answers[me.name]]
            + [m.model_dump_json() for m in messages]
            + [observations.model_dump_json()]
            + [e.model_dump_json() for e in events]
        )
        assert other not in seen
        assert me.name not in seen, "a stored id never reaches the client"
        stored = scoped_id(me.name, thread)
        assert check_thread(pg_engine, stored).violations == []
        assert len(list_events(pg_engine, thread_id=stored, limit=10_000)) == len(events)


#: Every error body carries the id of its own request: the one part two refusals may differ in.
REQUEST_ID = re.compile(r'"request_id":"[^"]*"')


def _unrequested(body: str) -> str:
    return REQUEST_ID.sub('"request_id":"…"', body)


def test_every_route_answers_another_tenants_id_like_an_id_nobody_used(
    tenants: tuple[Tenant, Tenant], api_server: ApiServer
) -> None:
    a, b = tenants
    thread, resource = new_id("shared"), new_id("user")
    _say(a, thread, resource, "alphasecret", 14)
    a.client.observe(thread)
    written = httpx.put(
        f"{a.server.base_url}/v1/threads/{thread}/working-memory",
        json={"content": "- alphasecret lives here"},
        headers={"Authorization": f"Bearer {a.key}"},
        timeout=60,
    )
    assert written.status_code == 200, written.text
    before = _state(a, thread, resource)
    assert before["messages"] and before["events"]
    record_ids = set(re.findall(r"[0-9a-f]{8}-[0-9a-f-]{27}", str(before)))

    routes = id_routes(api_server)
    assert routes == set(ROUTES), f"routes without an attacker request here: {routes ^ set(ROUTES)}"
    ordered = sorted(routes, key=lambda route: route in CREATING)
    for method, template in ordered:
        ghost_thread, ghost_resource = new_id("ghost"), new_id("nobody")
        attempt = b.call(method, template, thread, resource)
        control = b.call(method, template, ghost_thread, ghost_resource)
        where = f"{method} {template}"
        assert attempt.status_code == control.status_code, (where, attempt.text, control.text)
        answer = attempt.text
        assert "alphasecret" not in answer and a.name not in answer, (where, answer)
        assert not any(record_id in answer for record_id in record_ids), (where, answer)
        if (method, template) in CREATING:
            assert attempt.status_code == 200, (where, answer)
            continue
        assert attempt.status_code == 404, (where, answer)
        same = control.text.replace(ghost_thread, thread).replace(ghost_resource, resource)
        assert _unrequested(answer) == _unrequested(same), (
            f"{where}: another tenant's id is told apart from an unused one"
        )

    assert _state(a, thread, resource) == before, "the first tenant's thread is untouched"
    own = ["".join(p.text or "" for p in m.parts) for m in b.client.messages(thread).messages]
    assert any("intruder" in text for text in own), "the second tenant's writes made its own thread"
    assert not any("alphasecret" in text for text in own)


def _state(tenant: Tenant, thread: str, resource: str) -> dict[str, Any]:
    client = tenant.client
    return {
        "messages": [m.model_dump() for m in client.messages(thread, limit=500).messages],
        "observations": client.observations(thread).model_dump(),
        "config": client.get_config(thread).model_dump(),
        "events": [e.id for e in client.events(thread, follow=False)],
        "threads": [t.model_dump() for t in client.threads(resource).threads],
        "thread": client.thread(thread).model_dump(),
        "listed": [t.model_dump() for t in client.iter_threads()],
        "resource_config": client.get_resource_config(resource).model_dump(),
        "working_memory": httpx.get(
            f"{tenant.server.base_url}/v1/threads/{thread}/working-memory",
            headers={"Authorization": f"Bearer {tenant.key}"},
            timeout=60,
        ).json(),
    }
