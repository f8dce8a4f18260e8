"""Working memory (§8.7) on Postgres and SQLite: read and replaced through the API per thread and per
resource, validated against its schema, fenced by its version, reported by an event, shown to the actor
after the stable observation prefix (which a memory update leaves byte-identical), kept current by the
Observer's `working-memory` extractor, erased with its thread or resource, and invisible to other tenants.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, select
from starlette.testclient import TestClient

from om_api.app import create_app
from om_api.settings import ApiSettings
from om_core.config.options import ObservationalMemoryConfig
from om_core.engine import EngineSettings, MemoryEngine
from om_core.extractors import compose
from om_core.extractors.definition import ExtractedContext, RunContext
from om_core.messages import text_message
from om_core.store import schema
from om_core.store.outbox import list_events
from om_core.tenancy import access
from om_core.tenancy.scoped_ids import scoped_id
from om_core.working_memory import document as wm
from om_core.working_memory.extractor import EXTRACTOR_SLUG, apply_extracted, build_extractor
from tests.support.fake_models import FakeModels

pytestmark = [pytest.mark.postgres]

PROFILE = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "city": {"type": "string"}, "age": {"type": "integer"}},
    "additionalProperties": False,
}
#: Observation in the turn after a few messages, no buffering, no reflection.
CYCLE = {
    "observation": {"messageTokens": 400, "bufferTokens": False},
    "reflection": {"observationTokens": 100_000},
}
WORDS = ("harbor", "lantern", "copper", "meadow", "signal", "orchard", "velvet", "canyon", "ember", "quartz")


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
    other_key: str

    def call(self, method: str, path: str, *, other: bool = False, **kwargs: Any) -> Any:
        headers = {"Authorization": f"Bearer {self.other_key if other else self.key}"}
        return self.client.request(method, path, headers=headers, **kwargs)

    def ok(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.call(method, path, **kwargs)
        assert response.status_code < 300, (method, path, response.status_code, response.text)
        return response.json() if response.content else None

    def configure(self, thread: str, resource: str, config: dict[str, Any]) -> None:
        self.ok("PUT", f"/v1/threads/{thread}/config", json={"overrides": config, "resource_id": resource})

    def turn(self, thread: str, resource: str, i: int) -> Any:
        message = {"id": f"m{i}", "role": "user" if i % 2 == 0 else "assistant", "text": chatter(i)}
        return self.ok(
            "POST",
            f"/v1/threads/{thread}/turns",
            json={"messages": [message], "resource_id": resource, "context": "full"},
        )


@pytest.fixture
def api(engine: Engine) -> Iterator[Api]:
    tenant = new_id("wm")
    key = access.create_key(engine, tenant, "wm").secret
    other = access.create_key(engine, new_id("intruder"), "wm").secret
    settings = ApiSettings(
        database_url=engine.url.render_as_string(hide_password=False),
        auth="keys",
        executor="inline",
        model="om-local/extractive",
    )
    with TestClient(create_app(settings)) as client:
        yield Api(client, engine, tenant, key, other)


def _error(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert error["message"], "every refusal says what to fix"
    return error


# ---------------------------------------------------------------------------------------------- API


def test_a_thread_memory_round_trips_with_versions_and_an_event(api: Api) -> None:
    thread, resource = new_id("t"), new_id("user")
    api.configure(
        thread, resource, {"workingMemory": {"enabled": True, "scope": "thread", "template": "# Me\n- Name:"}}
    )
    path = f"/v1/threads/{thread}/working-memory"

    fresh = api.ok("GET", path)
    assert fresh == {
        "scope": "thread",
        "format": "markdown",
        "content": "# Me\n- Name:",
        "version": 0,
        "updated_at": None,
        "updated_by": None,
        "thread_id": thread,
        "resource_id": resource,
    }, "never written: the template at version 0"
    first = api.ok("PUT", path, json={"content": "# Me\n- Name: Ada", "expected_version": 0})
    assert (first["content"], first["version"], first["updated_by"]) == ("# Me\n- Name: Ada", 1, "api")
    second = api.ok("PUT", path, json={"content": "# Me\n- Name: Ada Lovelace", "expectedVersion": 1})
    assert second["version"] == 2
    assert api.ok("GET", path)["content"] == "# Me\n- Name: Ada Lovelace"

    stale = _error(api.call("PUT", path, json={"content": "# Me\n- Name: Bob", "expected_version": 1}), 409)
    assert stale["code"] == "version_conflict" and "version 2" in stale["message"]
    assert api.ok("GET", path)["content"] == "# Me\n- Name: Ada Lovelace", "a refused write changes nothing"
    assert api.ok("PUT", path, json={"content": "# Me\n- Name: Bob"})["version"] == 3, "no version: last wins"

    assert _error(api.call("PUT", path, json={"content": {"name": "Ada"}}), 422)["field"] == "content"
    assert _error(api.call("PUT", path, json={"content": "x", "expected_version": -1}), 422)
    assert _error(api.call("PUT", path, json={"text": "x"}), 422)

    events = list_events(api.db, thread_id=scoped_id(api.tenant, thread), after_id=0, limit=100)
    memory_events = [e for e in events if e.type == wm.WORKING_MEMORY_EVENT]
    assert [e.payload["version"] for e in memory_events] == [1, 2, 3]
    assert memory_events[-1].payload == {
        "scope": "thread",
        "threadId": thread,
        "resourceId": resource,
        "version": 3,
        "format": "markdown",
        "updatedBy": "api",
        "content": "# Me\n- Name: Bob",
    }


def test_a_resource_memory_is_shared_by_its_threads_and_its_own_route(api: Api) -> None:
    resource = new_id("user")
    api.ok(
        "PUT",
        f"/v1/resources/{resource}/config",
        json={"overrides": {"workingMemory": {"enabled": True, "schema": PROFILE}}},
    )
    first, second = new_id("t"), new_id("t")
    for thread in (first, second):
        api.configure(thread, resource, {})
    empty = api.ok("GET", f"/v1/resources/{resource}/working-memory")
    assert (empty["scope"], empty["format"], empty["content"], empty["version"]) == (
        "resource",
        "json",
        {},
        0,
    )

    written = api.ok(
        "PUT", f"/v1/threads/{first}/working-memory", json={"content": {"name": "Ada", "age": 36}}
    )
    assert (written["scope"], written["thread_id"], written["resource_id"]) == ("resource", None, resource)
    for path in (f"/v1/threads/{second}/working-memory", f"/v1/resources/{resource}/working-memory"):
        assert api.ok("GET", path)["content"] == {"name": "Ada", "age": 36}, path
    updated = api.ok(
        "PUT",
        f"/v1/resources/{resource}/working-memory",
        json={"content": '{"name": "Ada", "city": "Oslo"}', "expected_version": 1},
    )
    assert updated["version"] == 2 and updated["content"] == {"name": "Ada", "city": "Oslo"}

    invalid = _error(
        api.call("PUT", f"/v1/resources/{resource}/working-memory", json={"content": {"age": "old"}}), 422
    )
    assert (
        invalid["code"] == "invalid_working_memory"
        and "at age: 'old' is not of type 'integer'" in invalid["message"]
    )
    extra = _error(
        api.call("PUT", f"/v1/threads/{first}/working-memory", json={"content": {"shoe": 42}}), 422
    )
    assert "Additional properties" in extra["message"]
    assert api.ok("GET", f"/v1/resources/{resource}/working-memory")["version"] == 2


def test_memory_that_is_off_or_per_thread_is_not_found_on_the_routes_that_do_not_serve_it(api: Api) -> None:
    thread, resource = new_id("t"), new_id("user")
    api.configure(thread, resource, {})
    off = _error(api.call("GET", f"/v1/threads/{thread}/working-memory"), 404)
    assert off["code"] == "working_memory_disabled" and "workingMemory.enabled" in off["message"]
    assert _error(api.call("PUT", f"/v1/threads/{thread}/working-memory", json={"content": "x"}), 404)
    api.ok(
        "PUT",
        f"/v1/resources/{resource}/config",
        json={"overrides": {"workingMemory": {"enabled": True, "scope": "thread"}}},
    )
    per_thread = _error(api.call("GET", f"/v1/resources/{resource}/working-memory"), 404)
    assert "/v1/threads/{id}/working-memory" in per_thread["message"]
    assert api.ok("GET", f"/v1/threads/{thread}/working-memory")["scope"] == "thread"


def test_another_tenant_finds_neither_memory(api: Api) -> None:
    thread, resource = new_id("t"), new_id("user")
    api.ok(
        "PUT",
        f"/v1/resources/{resource}/config",
        json={"overrides": {"workingMemory": {"enabled": True}}},
    )
    api.configure(thread, resource, {})
    api.ok("PUT", f"/v1/threads/{thread}/working-memory", json={"content": "- Name: Ada"})
    for path in (f"/v1/threads/{thread}/working-memory", f"/v1/resources/{resource}/working-memory"):
        assert _error(api.call("GET", path, other=True), 404)["code"] in (
            "thread_not_found",
            "resource_not_found",
        )
        assert _error(api.call("PUT", path, other=True, json={"content": "- Name: Mallory"}), 404)
    assert api.ok("GET", f"/v1/resources/{resource}/working-memory")["content"] == "- Name: Ada"


def test_concurrent_writers_of_one_version_cannot_both_win(api: Api) -> None:
    thread, resource = new_id("t"), new_id("user")
    api.configure(thread, resource, {"workingMemory": {"enabled": True}})
    cfg = ObservationalMemoryConfig.parse({"workingMemory": {"enabled": True}}).resolve()
    target = wm.Target(
        f"resource:{scoped_id(api.tenant, resource)}", "resource", None, scoped_id(api.tenant, resource)
    )
    outcomes: list[str] = []
    barrier = threading.Barrier(4)

    def write(n: int) -> None:
        barrier.wait()
        try:
            wm.update(api.db, target, cfg, f"- writer {n}", expected_version=0, by="api")
            outcomes.append("won")
        except wm.WorkingMemoryConflict:
            outcomes.append("refused")
        except Exception as exc:  # SQLite may report the writers' contention as "database is locked"
            outcomes.append(f"error: {exc}")

    workers = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=30)
    assert outcomes.count("won") == 1, outcomes
    assert wm.read(api.db, target, cfg).version == 1


# ------------------------------------------------------------------------------------ the actor's view


def _engine(db: Engine, config: dict[str, Any]) -> MemoryEngine:
    return MemoryEngine(
        db, models=FakeModels(), config=ObservationalMemoryConfig.parse(config), settings=EngineSettings()
    )  # type: ignore[arg-type]


def _talk(om: MemoryEngine, thread: str, resource: str, start: int, count: int) -> Any:
    t0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
    result = None
    for i in range(start, start + count):
        message = text_message(
            f"m{i}", "user" if i % 2 == 0 else "assistant", chatter(i), t0 + timedelta(minutes=i)
        )
        result = om.ingest_turn(thread, resource, [message])
    return result


def _stable(result: Any) -> list[str]:
    return list(result.context.system_messages[: result.context.stable_count])


@pytest.mark.parametrize("signal", [True, False])
def test_a_memory_update_leaves_the_stable_prefix_byte_identical(engine: Engine, signal: bool) -> None:
    config = {**CYCLE, "workingMemory": {"enabled": True, "useStateSignals": signal}}
    om = _engine(engine, config)
    thread, resource = new_id("t"), new_id("user")
    observed = _talk(om, thread, resource, 0, 12)
    assert observed.context.stable_count > 0 and "<observations>" in observed.context.system_messages
    cfg = om.thread_config(thread)
    target = wm.target_for_resource(resource, cfg)

    before = om.ingest_turn(thread, resource, [])
    wm.update(engine, target, cfg, "- Name: Ada\n- City: Oslo", by="api")
    after = om.ingest_turn(thread, resource, [])
    assert after.record_id == before.record_id, "no activation in between"
    assert _stable(after) == _stable(before), "byte-identical stable prefix"
    volatile = after.system_messages[after.context.stable_count :]
    assert any("- City: Oslo" in m for m in volatile)
    assert not any("- City: Oslo" in m for m in _stable(after))
    memory_at = next(i for i, m in enumerate(after.system_messages) if "<working-memory>" in m)
    assert memory_at >= after.context.stable_count
    # The memory, then the actor's update instruction (agentManaged by default).
    assert wm.UPDATE_TOOL_NAME in after.system_messages[memory_at + 1]
    if signal:
        assert memory_at == len(after.system_messages) - 2, "a state signal: after every other memory message"
    else:
        assert memory_at == after.context.stable_count, "else the first of the volatile messages"
    assert [t["function"]["name"] for t in after.tools] == ["updateWorkingMemory"], "agentManaged by default"


def test_the_memory_reaches_the_actor_through_turns_and_the_openai_messages(api: Api) -> None:
    thread, resource = new_id("t"), new_id("user")
    api.configure(
        thread,
        resource,
        {
            **CYCLE,
            "workingMemory": {"enabled": True},
            "observation": {**CYCLE["observation"], "manageWorkingMemory": True},
        },
    )
    api.ok("PUT", f"/v1/threads/{thread}/working-memory", json={"content": "- Name: Ada"})
    first = api.turn(thread, resource, 0)["context"]
    assert first["system_messages"] and "- Name: Ada" in first["system_messages"][-1], (
        "shown before any observation"
    )
    assert first["tools"] == [], "Observer-managed: no tool and no instruction for the actor"
    assert not any(wm.UPDATE_TOOL_NAME in m for m in first["system_messages"])
    for i in range(1, 12):
        last = api.turn(thread, resource, i)["context"]
    closing = last["system_messages"].index("</observations>")
    memory_at = next(i for i, m in enumerate(last["system_messages"]) if "<working-memory>" in m)
    assert memory_at > closing
    assert any(
        "<working-memory>" in str(m.get("content")) for m in last["openai_messages"] if m["role"] == "system"
    )


# ------------------------------------------------------------------------------ the Observer's extractor


def _RunContext(source: Any, thread: str, resource: str) -> RunContext:
    return RunContext(source, thread, resource)


def _Extracted(
    source: Any, extractor: Any, thread: str, resource: str, previous: Any, current: Any
) -> ExtractedContext:
    return ExtractedContext(source, extractor, thread, resource, previous, current)


def test_the_observer_keeps_the_memory_current_across_turns(engine: Engine) -> None:
    config = {
        **CYCLE,
        "observation": {**CYCLE["observation"], "manageWorkingMemory": True},
        "workingMemory": {"enabled": True, "scope": "thread"},
    }
    om = _engine(engine, config)
    thread, resource = new_id("t"), new_id("user")
    _talk(om, thread, resource, 0, 12)
    cfg = om.thread_config(thread)
    ctx = _RunContext("observer", thread, resource)
    assert build_extractor(engine, cfg, _RunContext("reflector", thread, resource)) is None, "Observer only"
    extractor = build_extractor(engine, cfg, ctx)
    assert extractor.slug == EXTRACTOR_SLUG
    assert (extractor.include_previous, extractor.metadata_key_path, extractor.schema) == (False, None, None)

    prefixes = []
    for n, memory in enumerate(
        [
            "# User Information\n- **First Name**: Ada",
            "# User Information\n- **First Name**: Ada\n- **Location**: Oslo",
        ]
    ):
        run = build_extractor(engine, cfg, ctx)
        shown = run.instructions(ctx)
        assert "durable facts" in shown and ("First Name**: Ada" in shown) == (n > 0)
        assert run.on_extracted(_Extracted("observer", run, thread, resource, None, memory)) is None
        result = om.ingest_turn(thread, resource, [])
        prefixes.append(_stable(result))
        assert any(memory in m for m in result.system_messages[result.context.stable_count :])
    assert prefixes[0] == prefixes[1], "the stable prefix stays byte-identical while the Observer updates"
    target = wm.target_for_thread(_thread(om, thread), cfg)
    stored = wm.read(engine, target, cfg)
    assert (stored.version, stored.updated_by) == (2, "observer")
    with engine.connect() as conn:
        meta = conn.execute(
            select(schema.threads.c.om_metadata).where(schema.threads.c.id == thread)
        ).scalar_one()
    assert "Oslo" not in str(meta), "metadataKeyPath false: nothing of the memory in OM metadata"

    run = build_extractor(engine, cfg, ctx)
    run.instructions(ctx)
    for nothing in (None, "", "   ", stored.content):
        run.on_extracted(_Extracted("observer", run, thread, resource, None, nothing))
    assert wm.read(engine, target, cfg).version == 2, "null, empty or unchanged content writes nothing"

    wm.update(engine, target, cfg, "- written by the API meanwhile", by="api")
    with pytest.raises(wm.WorkingMemoryConflict):
        apply_extracted(engine, cfg, target, "- a rewrite of the older memory", shown_version=2)
    assert wm.read(engine, target, cfg).content == "- written by the API meanwhile"


def test_in_schema_mode_only_a_valid_object_updates_the_memory(engine: Engine) -> None:
    config = {
        "observation": {"manageWorkingMemory": True},
        "workingMemory": {"enabled": True, "schema": PROFILE},
    }
    om = _engine(engine, config)
    thread, resource = new_id("t"), new_id("user")
    _talk(om, thread, resource, 0, 1)
    cfg = om.thread_config(thread)
    ctx = _RunContext("observer", thread, resource)
    run = build_extractor(engine, cfg, ctx)
    assert run.schema == {"anyOf": [PROFILE, {"type": "null"}]}
    composed = compose.compose_extractors(cfg, RunContext("observer", thread, resource, memory=engine))
    assert compose.compose_extractors(cfg, RunContext("observer", thread, resource)) == [], "needs the store"
    assert [e.slug for e in composed] == [EXTRACTOR_SLUG]
    assert compose.compose_extractors(cfg, RunContext("reflector", thread, resource, memory=engine)) == []
    run.on_extracted(_Extracted("observer", run, thread, resource, None, None))
    with pytest.raises(wm.WorkingMemoryInvalid):
        run.on_extracted(_Extracted("observer", run, thread, resource, None, {"age": "old"}))
    target = wm.target_for_thread(_thread(om, thread), cfg)
    assert wm.read(engine, target, cfg).version == 0, "null and invalid objects write nothing"
    run.on_extracted(_Extracted("observer", run, thread, resource, None, {"name": "Ada", "age": 36}))
    assert wm.read(engine, target, cfg).value == {"name": "Ada", "age": 36}


def _thread(om: MemoryEngine, thread_id: str) -> Any:
    from om_core.store import history

    row = history.get_thread(om.db, thread_id)
    assert row is not None
    return row


# ---------------------------------------------------------------------------------------------- erasure


def _memory_rows(db: Engine) -> set[str]:
    with db.connect() as conn:
        return set(conn.execute(select(schema.working_memory.c.lookup_key)).scalars())


def test_erasure_takes_a_thread_memory_with_its_thread_and_a_resource_memory_with_its_resource(
    api: Api,
) -> None:
    resource = new_id("user")
    own, shared = new_id("t"), new_id("t")
    api.configure(own, resource, {"workingMemory": {"enabled": True, "scope": "thread"}})
    api.configure(shared, resource, {"workingMemory": {"enabled": True}})
    api.ok("PUT", f"/v1/threads/{own}/working-memory", json={"content": "- per thread"})
    api.ok("PUT", f"/v1/threads/{shared}/working-memory", json={"content": "- per resource"})
    stored_resource = scoped_id(api.tenant, resource)
    thread_key, resource_key = f"thread:{scoped_id(api.tenant, own)}", f"resource:{stored_resource}"
    assert {thread_key, resource_key} <= _memory_rows(api.db)

    assert api.call("DELETE", f"/v1/threads/{own}").status_code == 204
    assert thread_key not in _memory_rows(api.db)
    assert resource_key in _memory_rows(api.db), "the resource's memory is the resource's, not the thread's"
    assert _error(api.call("DELETE", f"/v1/resources/{resource}", other=True), 404)
    assert api.call("DELETE", f"/v1/resources/{resource}").status_code == 204
    assert resource_key not in _memory_rows(api.db)
