"""Export and import on Postgres through the API: a thread with an observation log (several generations,
buffered chunks), working memory and config is exported, erased and imported, and the next turn's context
is byte-identical to the one the original thread gave; importing the file again changes nothing; a
resource exports with its threads.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from sqlalchemy import Engine, func, select
from starlette.testclient import TestClient

from om_api.app import create_app
from om_api.settings import ApiSettings
from om_core.store import schema
from om_core.tenancy import access
from om_core.tenancy.scoped_ids import scoped_id

pytestmark = [pytest.mark.postgres]

WORDS = ("harbor", "lantern", "copper", "meadow", "signal", "orchard", "velvet", "canyon", "ember", "quartz")
#: Observation every few messages, buffered in between, reflection after a few observations, working
#: memory per thread: every kind of row an export carries.
CONFIG = {
    "observation": {"messageTokens": 300, "bufferTokens": 100, "bufferActivation": 0.8},
    "reflection": {"observationTokens": 120},
    "workingMemory": {"enabled": True, "scope": "thread", "template": "# Me\n- Name:"},
}


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def chatter(i: int) -> str:
    return f"fact {i}: my code is c{i} and " + " ".join(
        WORDS[(i * 7 + k * k) % len(WORDS)] for k in range(40)
    )


@dataclass
class Api:
    client: TestClient
    db: Engine
    tenant: str
    key: str

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        headers = {"Authorization": f"Bearer {self.key}", **kwargs.pop("headers", {})}
        return self.client.request(method, path, headers=headers, **kwargs)

    def ok(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.call(method, path, **kwargs)
        assert response.status_code < 300, (method, path, response.status_code, response.text)
        return response

    def turn(self, thread: str, resource: str, i: int, *, context: str = "none") -> Any:
        message = {
            "id": f"m{i}",
            "role": "user" if i % 2 == 0 else "assistant",
            "text": chatter(i),
            "created_at": f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}Z",
        }
        body = {"messages": [message], "resource_id": resource, "context": context}
        return self.ok("POST", f"/v1/threads/{thread}/turns", json=body).json()


@pytest.fixture
def api(pg_engine: Engine) -> Iterator[Api]:
    tenant = new_id("transfer")
    key = access.create_key(pg_engine, tenant, "transfer").secret
    settings = ApiSettings(
        database_url=pg_engine.url.render_as_string(hide_password=False),
        auth="keys",
        executor="inline",
        model="om-local/extractive",
    )
    with TestClient(create_app(settings)) as client:
        yield Api(client, pg_engine, tenant, key)


def _count(db: Engine, table: Any, thread_id: str) -> int:
    with db.connect() as conn:
        return int(
            conn.execute(
                select(func.count()).select_from(table).where(table.c.thread_id == thread_id)
            ).scalar_one()
        )


def _kinds(body: bytes) -> list[str]:
    return [json.loads(line)["kind"] for line in body.splitlines() if line.strip()]


def test_export_erase_import_gives_the_same_next_context(api: Api) -> None:
    thread, resource = new_id("t"), new_id("user")
    api.ok("PUT", f"/v1/threads/{thread}/config", json={"overrides": CONFIG, "resource_id": resource})
    for i in range(20):
        api.turn(thread, resource, i)
    api.ok("PUT", f"/v1/threads/{thread}/working-memory", json={"content": "# Me\n- Name: Ada"})
    stored = scoped_id(api.tenant, thread)
    generations = _count(api.db, schema.records, stored)
    assert generations >= 2, "the thread needs a reflection for the export to carry several generations"

    exported = api.ok("GET", f"/v1/threads/{thread}/export")
    assert exported.headers["content-type"].startswith("application/x-ndjson")
    kinds = _kinds(exported.content)
    header = json.loads(exported.content.splitlines()[0])
    assert header["format"] == "om-memory" and header["version"] == 1 and header["scope"] == "thread"
    assert kinds.count("message") == 20 and kinds.count("record") == generations
    assert kinds.count("working_memory") == 1 and "resource" in kinds
    assert api.tenant not in exported.text, "an export names no tenant"

    before = api.turn(thread, resource, 100, context="full")["context"]

    api.ok("DELETE", f"/v1/threads/{thread}")
    assert _count(api.db, schema.messages, stored) == 0
    report = api.ok(
        "POST", "/v1/import", content=exported.content, headers={"Content-Type": "application/x-ndjson"}
    ).json()
    assert report["threads"] == 1 and report["messages"] == 20 and report["records"] == generations
    assert report["working_memory"] == 1

    after = api.turn(thread, resource, 100, context="full")["context"]
    assert json.dumps(after, sort_keys=True) == json.dumps(before, sort_keys=True)
    assert before["system_messages"], "the context holds the observation log"

    # The same file again: every message and the log are found, nothing is written twice.
    again = api.ok("POST", "/v1/import", content=exported.content).json()
    assert again["threads"] == 0 and again["threads_existing"] == 1
    assert (
        again["messages"] == 0 and again["messages_skipped"] == 20 and again["records_skipped"] == generations
    )
    assert _count(api.db, schema.messages, stored) == 21


def test_a_resource_exports_with_every_thread(api: Api) -> None:
    resource = new_id("user")
    threads = [new_id("t"), new_id("t")]
    for thread in threads:
        for i in range(3):
            api.turn(thread, resource, i)
    body = api.ok("GET", f"/v1/resources/{resource}/export").content
    lines = [json.loads(line) for line in body.splitlines()]
    assert lines[0]["scope"] == "resource"
    assert sorted(line["id"] for line in lines if line["kind"] == "thread") == sorted(threads)
    assert sum(1 for line in lines if line["kind"] == "message") == 6
    missing = api.call("GET", f"/v1/resources/{new_id('nobody')}/export")
    assert missing.status_code == 404 and "check the id" in missing.json()["error"]["message"]
