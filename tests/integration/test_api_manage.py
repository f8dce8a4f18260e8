"""Managing memory through the API on Postgres and SQLite: reading and patching a thread, paging every list
with one convention, correcting or forgetting one observation line, and erasing a thread or a resource
so that no table of the database holds anything of it afterwards."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, String, inspect, select, text
from starlette.testclient import TestClient

from om_api.app import create_app
from om_api.client import line_sha256
from om_api.settings import ApiSettings
from om_core.config.options import ObservationalMemoryConfig
from om_core.coordination import Keys
from om_core.engine import (
    BufferObservation,
    EngineSettings,
    MemoryEngine,
    Observe,
    Reflect,
    lookup_key,
    new_cycle_id,
)
from om_core.engine.log_edit import is_structural
from om_core.messages import text_message
from om_core.store import erasure, records
from om_core.store.outbox import list_events, write_events
from om_core.store.types import NewEvent
from om_core.tenancy import access
from om_core.tenancy.scoped_ids import scoped_id
from tests.support.fake_models import FakeModels

pytestmark = [pytest.mark.postgres]

#: Observation in the turn once a few messages are in (no buffering), no reflection: a few turns and one
#: manual observe give a log with several lines.
CYCLE = {
    "observation": {"messageTokens": 400, "bufferTokens": False},
    "reflection": {"observationTokens": 100_000},
}
WORDS = ("harbor", "lantern", "copper", "meadow", "signal", "orchard", "velvet", "canyon", "ember", "quartz")


def chatter(i: int, marker: str) -> str:
    return f"{marker} fact {i}: my code is {marker}{i} and " + " ".join(
        WORDS[(i * 7 + k * k) % len(WORDS)] for k in range(40)
    )


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


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

    def talk(self, thread: str, resource: str, turns: int, marker: str, config: Any = None) -> None:
        self.ok(
            "PUT",
            f"/v1/threads/{thread}/config",
            json={"overrides": config or CYCLE, "resource_id": resource},
        )
        for i in range(turns):
            message = {
                "id": f"m{i}",
                "role": "user" if i % 2 == 0 else "assistant",
                "text": chatter(i, marker),
            }
            self.ok(
                "POST", f"/v1/threads/{thread}/turns", json={"messages": [message], "resource_id": resource}
            )

    def claim(self, thread: str, resource: str) -> None:
        """A thread with no messages (a config PUT creates it): cheap, for the paging tests."""
        self.ok("PUT", f"/v1/threads/{thread}/config", json={"overrides": None, "resource_id": resource})


def _url(db: Engine) -> str:
    return db.url.render_as_string(hide_password=False)


@pytest.fixture
def api(engine: Engine) -> Iterator[Api]:
    tenant = new_id("mgr")
    key = access.create_key(engine, tenant, "manage").secret
    other = access.create_key(engine, new_id("intruder"), "manage").secret
    settings = ApiSettings(
        database_url=_url(engine), auth="keys", executor="inline", model="om-local/extractive"
    )
    with TestClient(create_app(settings)) as client:
        yield Api(client, engine, tenant, key, other)


def _error(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert error["message"], "every refusal says what to fix"
    return error


# ------------------------------------------------------------------------------------------- threads


def test_a_thread_is_read_with_its_counts_and_patched_with_title_and_metadata(api: Api) -> None:
    thread, resource = new_id("t"), new_id("user")
    api.talk(thread, resource, 6, "alpha", config={"enabled": False})
    fresh = api.ok("GET", f"/v1/threads/{thread}")
    assert fresh["thread_id"] == thread and fresh["resource_id"] == resource and fresh["scope"] == "thread"
    assert fresh["metadata"] == {}
    assert fresh["counts"] == {
        "messages": 6,
        "observed_messages": 0,
        "unobserved_messages": 6,
        "observation_tokens": 0,
        "generations": 1,
        "buffered_chunks": 0,
    }
    api.talk(thread, resource, 12, "alpha")  # the first six again (stored once), then six more, with OM on
    observed = api.ok("GET", f"/v1/threads/{thread}")["counts"]
    assert observed["messages"] == 12
    assert (
        observed["observed_messages"] > 0
        and observed["observed_messages"] + observed["unobserved_messages"] == 12
    )
    assert observed["observation_tokens"] > 0 and observed["generations"] == 1

    patched = api.ok(
        "PATCH", f"/v1/threads/{thread}", json={"title": "Trip planning", "metadata": {"crm": 42}}
    )
    assert patched["title"] == "Trip planning" and patched["metadata"] == {"crm": 42}
    kept = api.ok("PATCH", f"/v1/threads/{thread}", json={"metadata": {"crm": 43, "tags": ["a"]}})
    assert kept["title"] == "Trip planning", "a field left out is kept"
    assert kept["metadata"] == {"crm": 43, "tags": ["a"]}, "metadata is replaced as a whole"
    listed = api.ok("GET", f"/v1/resources/{resource}/threads")["items"]
    assert listed[0]["metadata"] == {"crm": 43, "tags": ["a"]} and listed[0]["title"] == "Trip planning"
    cleared = api.ok("PATCH", f"/v1/threads/{thread}", json={"metadata": None, "title": None})
    assert cleared["metadata"] == {} and cleared["title"] is None
    assert api.ok("GET", f"/v1/threads/{thread}")["counts"] == observed, "OM's own state is untouched"

    assert _error(api.call("PATCH", f"/v1/threads/{thread}", json={}), 422)["message"]
    assert _error(api.call("PATCH", f"/v1/threads/{thread}", json={"title": "  "}), 422)["field"] == "title"
    assert (
        _error(api.call("PATCH", f"/v1/threads/{thread}", json={"colour": "red"}), 422)["field"] == "colour"
    )
    huge = {"blob": "x" * 20_000}
    assert (
        _error(api.call("PATCH", f"/v1/threads/{thread}", json={"metadata": huge}), 422)["field"]
        == "metadata"
    )
    assert (
        _error(api.call("PATCH", f"/v1/threads/{thread}", json={"metadata": [1]}), 422)["field"] == "metadata"
    )

    for method, body in (("GET", None), ("PATCH", {"title": "mine now"})):
        assert _error(api.call(method, f"/v1/threads/{thread}", other=True, json=body), 404)["code"] == (
            "thread_not_found"
        )
    assert api.ok("GET", f"/v1/threads/{thread}")["title"] is None


def _walk(api: Api, path: str, limit: int, during: Any = None, **params: Any) -> list[str]:
    seen: list[str] = []
    cursor: str | None = None
    while True:
        query = {"limit": limit, **params, **({"cursor": cursor} if cursor else {})}
        page = api.ok("GET", path, params=query)
        assert len(page["items"]) <= limit
        seen.extend(item["thread_id"] for item in page["items"])
        if during is not None:
            during()
        cursor = page["next_cursor"]
        if cursor is None:
            return seen


def test_every_list_pages_each_thread_exactly_once_while_threads_are_added(api: Api) -> None:
    resource, elsewhere = new_id("user"), new_id("user")
    original = [new_id("t") for _ in range(11)]
    for thread in original:
        api.claim(thread, resource)
    api.claim(new_id("t"), elsewhere)
    added: list[str] = []

    def add_one() -> None:
        added.append(new_id("t"))
        api.claim(added[-1], resource)

    for path, params in (
        (f"/v1/resources/{resource}/threads", {}),
        ("/v1/threads", {"resource_id": resource}),
        ("/v1/threads", {}),
    ):
        before = set(added)
        seen = _walk(api, path, 4, add_one, **params)
        assert len(seen) == len(set(seen)), f"{path}: a thread on two pages"
        assert set(original) | before <= set(seen), f"{path}: a thread that existed throughout was skipped"
        if params or "resources" in path:
            assert set(seen) <= set(original) | set(added), f"{path}: a thread of another resource"

    by_resource = api.ok("GET", f"/v1/resources/{resource}/threads", params={"limit": 500})
    assert by_resource["threads"] == by_resource["items"], "the old field still holds the page"
    created = [(t["created_at"], t["thread_id"]) for t in by_resource["items"]]
    assert created == sorted(created), "a resource's threads come oldest first"
    mine = _walk(api, "/v1/threads", 500)
    assert mine == sorted(mine) and elsewhere not in mine
    assert not set(mine) & set(_walk_other(api)), "another tenant lists none of them"


def _walk_other(api: Api) -> list[str]:
    page = api.call("GET", "/v1/threads", other=True, params={"limit": 500}).json()
    return [t["thread_id"] for t in page["items"]]


def test_a_bad_page_request_says_what_to_fix(api: Api) -> None:
    resource = new_id("user")
    for _ in range(3):
        api.claim(new_id("t"), resource)
    page = api.ok("GET", "/v1/threads", params={"limit": 1, "resource_id": resource})
    assert page["next_cursor"]
    for params in ({"limit": 0}, {"limit": 501}, {"cursor": "not a cursor"}):
        field = _error(api.call("GET", "/v1/threads", params=params), 422)["field"]
        assert field in ("query.limit", "query.cursor"), params
    assert (
        _error(api.call("GET", "/v1/threads", params={"cursor": "eyJ4Ijox"}), 422)["field"] == "query.cursor"
    )
    other_list = api.call("GET", "/v1/threads", params={"cursor": page["next_cursor"]})
    assert "start from the first page" in _error(other_list, 422)["message"], "a cursor of another list"
    assert _error(api.call("GET", "/v1/threads", params={"resource_id": new_id("nobody")}), 404)["code"] == (
        "resource_not_found"
    )
    assert _error(api.call("GET", "/v1/threads", other=True, params={"resource_id": resource}), 404)


def test_messages_page_with_the_same_cursor_convention(api: Api) -> None:
    thread, resource = new_id("t"), new_id("user")
    api.talk(thread, resource, 7, "beta", config={"enabled": False})
    ids: list[str] = []
    cursor: str | None = None
    while True:
        page = api.ok(
            "GET",
            f"/v1/threads/{thread}/messages",
            params={"limit": 3, **({"cursor": cursor} if cursor else {})},
        )
        assert page["items"] == page["messages"]
        ids = [m["id"] for m in page["items"]] + ids
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert ids == [f"m{i}" for i in range(7)]


# ------------------------------------------------------------------------------------ line editing


def _log(api: Api, thread: str) -> tuple[str, list[str]]:
    active = api.ok("GET", f"/v1/threads/{thread}/observations")["active"]
    return active["record_id"], active["observations"].split("\n")


def _editable(lines: list[str]) -> list[int]:
    return [i for i, line in enumerate(lines) if not is_structural(line) and lines.count(line) == 1]


def test_a_line_edit_is_a_new_generation_reported_on_the_event_stream(api: Api) -> None:
    thread, resource = new_id("t"), new_id("user")
    api.talk(thread, resource, 12, "gamma")
    api.ok("POST", f"/v1/threads/{thread}/observe", json={"wait": True})
    record_id, lines = _log(api, thread)
    index = _editable(lines)[0]
    old = lines[index]
    path = f"/v1/threads/{thread}/observations/{index}"

    edited = api.ok(
        "PATCH", path, json={"text": "User's code is now corrected-77", "expected_sha256": line_sha256(old)}
    )
    assert edited["previous_record_id"] == record_id and edited["record_id"] != record_id
    assert edited["observations"].split("\n")[index] == "User's code is now corrected-77"
    view = api.ok("GET", f"/v1/threads/{thread}/observations")
    assert view["active"]["record_id"] == edited["record_id"]
    assert view["active"]["generation_count"] == edited["generation_count"] == 1
    assert view["generations"][0]["record_id"] == record_id, "the old generation records what was edited"
    head = records.get_head(api.db, lookup_key(scoped_id(api.tenant, thread)))
    assert head is not None and head.origin_type == "edit"
    events = _events(api, thread)
    edit = [e for e in events if e["type"] == "data-om-observation-edit"]
    assert len(edit) == 1 and edit[0]["data"]["recordId"] == edited["record_id"]
    assert edit[0]["data"]["action"] == "update" and edit[0]["data"]["line"] == index
    assert edit[0]["data"]["cycleId"] == edited["cycle_id"]

    stale = api.call("PATCH", path, json={"text": "again", "expected_sha256": line_sha256(old)})
    assert _error(stale, 409)["code"] == "observation_line_changed", "the line is not what the caller read"
    past_end = f"/v1/threads/{thread}/observations/{len(lines) + 5}"
    assert _error(api.call("DELETE", past_end, params={"expected_sha256": line_sha256(old)}), 409)

    structural = next((i for i, line in enumerate(lines) if is_structural(line)), None)
    if structural is not None:
        refused = api.call(
            "PATCH",
            f"/v1/threads/{thread}/observations/{structural}",
            json={"text": "x y z", "expected_sha256": line_sha256(lines[structural])},
        )
        assert _error(refused, 422)["field"] == "line"
    current = edited["observations"].split("\n")[index]
    for bad in ("two\nlines", "   ", '<thread id="x">', "y" * 10_001):
        body = {"text": bad, "expected_sha256": line_sha256(current)}
        assert _error(api.call("PATCH", path, json=body), 422)["field"] == "text", bad
    assert _error(api.call("PATCH", path, json={"text": "ok", "expected_sha256": "abc"}), 422)["field"] == (
        "expected_sha256"
    )
    assert _error(
        api.call("PATCH", path, other=True, json={"text": "ok", "expected_sha256": line_sha256(current)}), 404
    )
    assert _log(api, thread)[0] == edited["record_id"], "refusals change nothing"


def test_an_edit_waits_for_no_reflection_it_refuses_while_one_runs(api: Api) -> None:
    thread, resource = new_id("t"), new_id("user")
    api.talk(thread, resource, 12, "delta")
    api.ok("POST", f"/v1/threads/{thread}/observe", json={"wait": True})
    _, lines = _log(api, thread)
    index = _editable(lines)[0]
    body = {"text": "corrected while reflecting", "expected_sha256": line_sha256(lines[index])}
    coordination = api.client.app.state.runtime.engine.coordination  # type: ignore[attr-defined]
    key = lookup_key(scoped_id(api.tenant, thread))
    token = coordination.try_lock(Keys.reflect_lock(key), 30)
    assert token is not None
    try:
        busy = api.call("PATCH", f"/v1/threads/{thread}/observations/{index}", json=body)
        assert _error(busy, 409)["code"] == "observation_log_busy"
    finally:
        coordination.release(Keys.reflect_lock(key), token)
    assert api.ok("PATCH", f"/v1/threads/{thread}/observations/{index}", json=body)["line"] == index


def test_a_deleted_line_is_forgotten_everywhere_the_memory_holds_it(api: Api) -> None:
    thread, resource = new_id("t"), new_id("user")
    api.talk(thread, resource, 12, "epsilon", config={**CYCLE, "retrieval": True})
    api.ok("POST", f"/v1/threads/{thread}/observe", json={"wait": True})
    _, lines = _log(api, thread)
    index = _editable(lines)[-1]
    forgotten = lines[index]
    # An edit of another line first, so a retired generation holds the line too.
    other = _editable(lines)[0]
    api.ok(
        "PATCH",
        f"/v1/threads/{thread}/observations/{other}",
        json={"text": "kept line", "expected_sha256": line_sha256(lines[other])},
    )
    holders = {row.split(":")[0] for row in _rows_naming(api.db, [forgotten.strip()])}
    assert {"om_records", "om_events", "om_observation_groups"} <= holders, holders
    deleted = api.ok(
        "DELETE",
        f"/v1/threads/{thread}/observations/{index}",
        params={"expected_sha256": line_sha256(forgotten)},
    )
    assert forgotten not in deleted["observations"].split("\n")
    assert "kept line" in deleted["observations"]
    readable = json.dumps(
        [
            api.ok("GET", f"/v1/threads/{thread}/observations", params={"history_limit": 200}),
            _events(api, thread),
        ]
    )
    assert forgotten.strip() not in readable
    assert json.dumps(forgotten.strip())[1:-1] not in readable
    edit = [e for e in _events(api, thread) if e["type"] == "data-om-observation-edit"]
    assert [e["data"]["action"] for e in edit] == ["update", "delete"] and "text" not in edit[1]["data"]
    assert _rows_naming(api.db, [forgotten.strip()]) == [], "no table holds the line any more"


def _events(api: Api, thread: str) -> list[dict[str, Any]]:
    response = api.call("GET", f"/v1/threads/{thread}/events", params={"follow": "false"})
    assert response.status_code == 200, response.text
    return [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]


# ------------------------------------------------------------------------------------------- erasure


def _rows_naming(db: Engine, needles: list[str]) -> list[str]:
    """Every row of every table of the database (found by the inspector, so tables created later, virtual
    tables and their shadow tables are included) with a column value that contains one of `needles`:
    text, JSON and binary values alike."""
    found = []
    # JSON columns may hold a needle escaped (SQLite stores JSON as text, non-ASCII as \\u escapes).
    needles = sorted(
        {form for n in needles for form in (n, json.dumps(n)[1:-1], json.dumps(n, ensure_ascii=False)[1:-1])}
    )
    raw = [n.encode() for n in needles]
    with db.connect() as conn:
        for name in inspect(conn).get_table_names():
            for row in conn.execute(text(f'SELECT * FROM "{name}"')):
                for value in row:
                    if isinstance(value, bytes | bytearray | memoryview):
                        hit = any(n in bytes(value) for n in raw)
                    else:
                        shown = (
                            json.dumps(value, default=str) if isinstance(value, dict | list) else str(value)
                        )
                        hit = any(n in shown for n in needles)
                    if hit:
                        found.append(f"{name}: {str(value)[:120]}")
    return found


@pytest.fixture
def vector_table(engine: Engine) -> Iterator[str]:
    """A run-time table as the search index creates them (`om_vec_*` with a resource_id column), dropped
    afterwards so that no other test meets it."""
    name = f"om_vec_test_{uuid.uuid4().hex[:8]}"
    with engine.begin() as conn:
        conn.execute(text(f"CREATE TABLE {name} (doc_id VARCHAR(64), resource_id VARCHAR(600))"))
    try:
        yield name
    finally:
        with engine.begin() as conn:
            conn.execute(text(f"DROP TABLE {name}"))


def _plant(db: Engine, name: str, rows: dict[str, str]) -> None:
    with db.begin() as conn:
        for doc, resource in rows.items():
            conn.execute(text(f"INSERT INTO {name} VALUES (:d, :r)"), {"d": doc, "r": resource})


def test_erasing_a_resource_leaves_no_row_of_it_in_any_table(api: Api, vector_table: str) -> None:
    resource, keep = new_id("erase"), new_id("keep")
    shared = {**CYCLE, "scope": "resource", "retrieval": True}
    api.ok(
        "PUT",
        f"/v1/resources/{resource}/config",
        json={"overrides": {"scope": "resource", "retrieval": True}},
    )
    threads = [new_id("gone"), new_id("gone")]
    for thread in threads:
        api.talk(thread, resource, 12, "zeta", config=shared)
        api.ok("POST", f"/v1/threads/{thread}/observe", json={"wait": True})
    survivor = new_id("stays")
    api.talk(survivor, keep, 12, "eta")
    api.ok("POST", f"/v1/threads/{survivor}/observe", json={"wait": True})
    stored = scoped_id(api.tenant, resource)
    _plant(api.db, vector_table, {new_id("doc"): stored, new_id("doc"): scoped_id(api.tenant, keep)})
    needles = [resource, *threads]
    assert len(_rows_naming(api.db, needles)) > 10, "the check sees the resource's rows before the erase"
    assert api.ok("GET", f"/v1/threads/{threads[0]}/observations")["active"]["observations"]

    assert _error(api.call("DELETE", f"/v1/resources/{resource}", other=True), 404)
    assert _rows_naming(api.db, needles), "another tenant's delete erased nothing"
    assert api.call("DELETE", f"/v1/resources/{resource}").status_code == 204

    assert _rows_naming(api.db, needles) == []
    assert _rows_naming(api.db, [keep, survivor]), "another resource keeps its rows"
    for path in (
        *(
            f"/v1/threads/{t}{tail}"
            for t in threads
            for tail in ("", "/observations", "/messages", "/status", "/config", "/events")
        ),
        f"/v1/resources/{resource}/threads",
        f"/v1/resources/{resource}/config",
    ):
        assert api.call("GET", path, params={"follow": "false"}).status_code == 404, path
    assert _error(api.call("GET", "/v1/threads", params={"resource_id": resource}), 404)
    assert not set(threads) & set(_walk(api, "/v1/threads", 500))
    assert api.call("DELETE", f"/v1/resources/{resource}").status_code == 404


def test_erasing_a_thread_leaves_no_row_of_it_and_its_resource_keeps_the_rest(api: Api) -> None:
    resource = new_id("user")
    gone, stays = new_id("gone"), new_id("stays")
    for thread in (gone, stays):
        api.talk(thread, resource, 12, "theta", config={**CYCLE, "retrieval": True})
        api.ok("POST", f"/v1/threads/{thread}/observe", json={"wait": True})
    assert api.call("DELETE", f"/v1/threads/{gone}").status_code == 204
    assert _rows_naming(api.db, [gone]) == []
    assert api.call("GET", f"/v1/threads/{gone}").status_code == 404
    assert [t["thread_id"] for t in api.ok("GET", f"/v1/resources/{resource}/threads")["items"]] == [stays]
    assert api.ok("GET", f"/v1/threads/{stays}/observations")["active"]["observations"]


# -------------------------------------------------------------------- late work after an erase


class ErasingModels(FakeModels):
    """Erases the thread while its Observer call runs, as a data-subject request would mid-cycle."""

    def __init__(self, db: Engine, thread_id: str) -> None:
        super().__init__()
        self.db, self.thread_id, self.armed = db, thread_id, False

    def complete(self, model: Any, **kwargs: Any) -> Any:
        if self.armed:
            with self.db.begin() as conn:
                assert erasure.erase_thread(conn, self.thread_id) is not None
        return super().complete(model, **kwargs)


def test_a_task_running_or_delivered_after_the_erase_stores_nothing(engine: Engine) -> None:
    config = ObservationalMemoryConfig.parse(
        {
            "observation": {"messageTokens": 3000, "bufferTokens": 300},
            "reflection": {"observationTokens": 9000},
        }
    )
    t0 = datetime(2026, 3, 1, 9, tzinfo=UTC)
    for mid_cycle in (True, False):
        thread = new_id("late")
        models = ErasingModels(engine, thread)
        om = MemoryEngine(engine, models=models, config=config, settings=EngineSettings())  # type: ignore[arg-type]
        om.executor.runner = lambda _task: None  # type: ignore[attr-defined]  # tasks wait to be delivered by hand
        messages = [
            text_message(
                f"m{i}", "user" if i % 2 == 0 else "assistant", chatter(i, "iota"), t0 + timedelta(minutes=i)
            )
            for i in range(6)
        ]
        om.ingest_turn(thread, "late-user", messages)
        task = BufferObservation(thread, new_cycle_id("buffer-obs"), 600, skip_minimum=True)
        if mid_cycle:
            models.armed = True  # the Observer call erases the thread; the commit comes after
        else:
            with engine.begin() as conn:
                assert erasure.erase_thread(conn, thread) is not None
        assert om.run_task(task) is False
        assert bool(models.calls) is mid_cycle, "a task delivered after the erase calls no model"
        if not mid_cycle:  # every other kind of work, delivered late, finds nothing to do either
            for late in (
                Observe(thread, new_cycle_id("observe"), trigger="manual"),
                Reflect(thread, new_cycle_id("reflect"), trigger="manual"),
            ):
                om.run_task(late)
            assert not models.calls
        assert _rows_naming(engine, [thread]) == [], f"mid_cycle={mid_cycle}"


def test_the_outbox_writes_no_event_of_a_thread_or_resource_that_is_gone(engine: Engine) -> None:
    thread = new_id("ghost")
    with engine.begin() as conn:
        for kwargs in (
            {"thread_id": thread, "resource_id": None},
            {"thread_id": None, "resource_id": new_id("ghost-user")},
        ):
            written = write_events(
                conn,
                lookup_key=lookup_key(thread),
                record_id=None,
                events=[NewEvent("data-om-status", {})],
                **kwargs,
            )
            assert written == []
    assert list_events(engine, thread_id=thread) == []


# ------------------------------------------------------------------------------ resource scope, client


def test_a_line_of_a_shared_log_is_edited_through_any_of_its_threads_and_every_thread_hears_it(
    api: Api,
) -> None:
    resource = new_id("user")
    shared = {**CYCLE, "scope": "resource"}
    api.ok("PUT", f"/v1/resources/{resource}/config", json={"overrides": {"scope": "resource"}})
    first, second = new_id("t"), new_id("t")
    for thread in (first, second):
        api.talk(thread, resource, 12, "kappa", config=shared)
    assert api.ok("GET", f"/v1/threads/{first}")["scope"] == "resource"
    _, lines = _log(api, first)
    index = _editable(lines)[0]
    edited = api.ok(
        "PATCH",
        f"/v1/threads/{first}/observations/{index}",
        json={"text": "User corrected the shared fact", "expected_sha256": line_sha256(lines[index])},
    )
    assert _log(api, second) == (edited["record_id"], edited["observations"].split("\n"))
    for thread in (first, second):
        edits = [e for e in _events(api, thread) if e["type"] == "data-om-observation-edit"]
        assert len(edits) == 1 and edits[0]["data"]["scope"] == "resource", thread
        assert edits[0]["data"]["threadId"] == thread


def test_the_clients_page_read_patch_and_edit(api: Api) -> None:
    import asyncio

    import httpx

    from om_api.client import AsyncOMClient, OMClient, OMConflict

    resource, thread = new_id("user"), new_id("t")
    api.talk(thread, resource, 12, "lambda")
    for _ in range(3):
        api.claim(new_id("t"), resource)

    class ThroughTestClient(httpx.BaseTransport):
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            answer = api.client.request(
                request.method, str(request.url), headers=dict(request.headers), content=request.read()
            )
            return httpx.Response(answer.status_code, headers=answer.headers, content=answer.content)

    with OMClient("http://testserver", api.key, transport=ThroughTestClient()) as om:
        assert len(list(om.iter_threads(resource_id=resource, page_size=2))) == 4
        assert om.threads(resource, limit=2).next_cursor is not None
        assert om.update_thread(thread, title="Client title").title == "Client title"
        assert om.update_thread(thread, metadata={"k": 1}).title == "Client title"
        detail = om.thread(thread)
        assert detail.metadata == {"k": 1} and detail.counts.messages == 12
        lines = om.observations(thread).active.observations.split("\n")  # type: ignore[union-attr]
        index = _editable(lines)[0]
        om.edit_observation(thread, index, "client corrected", expected=lines[index])
        with pytest.raises(OMConflict):
            om.delete_observation(thread, index, expected=lines[index])

    async def walk() -> tuple[int, str | None, str]:
        async_transport = httpx.ASGITransport(app=api.client.app)  # type: ignore[arg-type]
        async with AsyncOMClient("http://testserver", api.key, transport=async_transport) as om:
            listed = [t async for t in om.iter_threads(resource_id=resource, page_size=3)]
            title = (await om.update_thread(thread, title=None)).title
            current = (await om.observations(thread)).active.observations.split("\n")  # type: ignore[union-attr]
            deleted = await om.delete_observation(thread, index, expected=current[index])
            return len(listed), title, deleted.action

    assert asyncio.run(walk()) == (4, None, "delete")


def test_a_reflection_computed_before_an_edit_never_brings_the_old_text_back(engine: Engine) -> None:
    """The storage fence behind the 409 (locks only save wasted work): an edit retires the head, so a
    reflection or buffered reflection computed from the old text is refused at commit."""
    from sqlalchemy import update

    from om_core.store import log_edits, schema

    key = f"thread:{new_id('fence')}"
    with engine.begin() as conn:
        head = records.initialize(
            conn,
            lookup_key=key,
            scope="thread",
            thread_id=None,
            resource_id="r",
            config={},
            observed_timezone="UTC",
        )
        old_text = "* kept one\n* the secret line\n* kept two"
        conn.execute(
            update(schema.records).where(schema.records.c.id == head.id).values(active_observations=old_text)
        )
    snapshot = records.get_head(engine, key)
    assert snapshot is not None
    with engine.begin() as conn:
        edit, _ = log_edits.edit_line(
            conn,
            key,
            index=1,
            expected_sha256=log_edits.line_digest("* the secret line"),
            replacement=None,
            count_tokens=len,
            thread_ids=[],
        )
        assert edit.reason is None and edit.record is not None
        stale, _ = log_edits.edit_line(
            conn,
            key,
            index=1,
            expected_sha256=log_edits.line_digest("* the secret line"),
            replacement="* again",
            count_tokens=len,
            thread_ids=[],
        )
        assert stale.reason == "changed", "the same precondition cannot apply twice"
    with engine.begin() as conn:
        _, applied, _ = records.create_reflection_generation(
            conn,
            snapshot,
            reflection="* the secret line, condensed",
            token_count=3,
            compose=lambda s, t, r: r,
        )
        assert not applied
        buffered, _ = records.update_buffered_reflection(
            conn,
            snapshot.id,
            text="* the secret line",
            token_count=3,
            input_token_count=9,
            reflected_line_count=3,
            cycle_id="late",
        )
        assert buffered.reason == "retired"
    live = records.get_head(engine, key)
    assert live is not None and live.id == edit.record.id and "secret" not in live.active_observations
    assert [r.active_observations for r in records.history(engine, key)] == ["* kept one\n* kept two"]


@pytest.fixture
def search_docs(engine: Engine) -> Iterator[Any]:
    """The search index's documents table: the real one once the search part is installed, else a stand-in
    with the columns a forget reads, registered in the schema for the test only."""
    from sqlalchemy import BigInteger, Column, DateTime, Integer, Table, Text

    from om_core.store import schema

    real = schema.metadata.tables.get("om_search_docs")
    if real is not None:
        yield real
        return
    stand_in = Table(
        "om_search_docs",
        schema.metadata,
        Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
        Column("resource_id", String(600), nullable=False),
        Column("thread_id", String(600), nullable=False),
        Column("kind", String(16), nullable=False),
        Column("ref", String(255), nullable=False),
        Column("text", Text, nullable=False),
        Column("at", DateTime(timezone=True), nullable=False),
        Column("indexed_at", DateTime(timezone=True), nullable=False),
    )
    stand_in.create(engine)
    try:
        yield stand_in
    finally:
        schema.metadata.remove(stand_in)
        stand_in.drop(engine)


def test_a_forgotten_line_leaves_the_search_index_through_its_groups_documents(
    engine: Engine, search_docs: Any
) -> None:
    from sqlalchemy import update

    from om_core.store import history, log_edits, schema

    thread, resource = new_id("search-forget"), new_id("user")
    key = lookup_key(thread)
    now = datetime.now(UTC)
    with engine.begin() as conn:
        history.ensure_thread(conn, thread, resource)
        head = records.initialize(
            conn,
            lookup_key=key,
            scope="thread",
            thread_id=thread,
            resource_id=resource,
            config={},
            observed_timezone="UTC",
        )
        conn.execute(
            update(schema.records)
            .where(schema.records.c.id == head.id)
            .values(active_observations="* kept\n* the card number is 4242")
        )
        docs = [
            ("group", "g1", "* kept\n* the card number is 4242"),
            ("group", "g2", "* kept elsewhere"),
            ("message", "m1", "my card number is 4242"),
        ]
        for kind, ref, body in docs:
            conn.execute(
                search_docs.insert().values(
                    resource_id=resource,
                    thread_id=thread,
                    kind=kind,
                    ref=ref,
                    text=body,
                    at=now,
                    indexed_at=now,
                )
            )
        log_edits.edit_line(
            conn,
            key,
            index=1,
            expected_sha256=log_edits.line_digest("* the card number is 4242"),
            replacement=None,
            count_tokens=len,
            thread_ids=[thread],
        )
    with engine.connect() as conn:
        left = sorted(
            conn.execute(select(search_docs.c.ref).where(search_docs.c.thread_id == thread)).scalars()
        )
    assert left == ["g2", "m1"], "the group's document goes (to be indexed again); messages are not forgotten"


@pytest.mark.parametrize("through", ["engine", "storage"])
def test_concurrent_edits_of_one_line_apply_exactly_once(engine: Engine, through: str) -> None:
    """Through the engine the reflection locks turn most racers away; straight at the storage (as when a
    lock expired) the digest under the row lock alone lets exactly one apply."""
    import threading

    from sqlalchemy import update

    from om_core.engine import LineEditError
    from om_core.store import history, log_edits, schema

    om = MemoryEngine(engine, models=FakeModels(), settings=EngineSettings())  # type: ignore[arg-type]
    thread = new_id("race")
    with engine.begin() as conn:
        history.ensure_thread(conn, thread, "race-user")
        head = records.initialize(
            conn,
            lookup_key=lookup_key(thread),
            scope="thread",
            thread_id=thread,
            resource_id="race-user",
            config={},
            observed_timezone="UTC",
        )
        conn.execute(
            update(schema.records)
            .where(schema.records.c.id == head.id)
            .values(active_observations="* a\n* b\n* c")
        )
    digest = log_edits.line_digest("* b")
    start = threading.Barrier(4)
    outcomes: list[str] = []

    def edit(n: int) -> None:
        start.wait()
        if through == "storage":
            with engine.begin() as conn:
                done, _ = log_edits.edit_line(
                    conn,
                    lookup_key(thread),
                    index=1,
                    expected_sha256=digest,
                    replacement=f"* b corrected by {n}",
                    count_tokens=len,
                    thread_ids=[thread],
                    events=lambda successor, previous: [
                        (lookup_key(thread), thread, NewEvent("data-om-observation-edit", {}, f"edit-{n}"))
                    ],
                )
            outcomes.append(done.reason or "applied")
            return
        try:
            om.edit_observation_line(thread, 1, digest, f"* b corrected by {n}")
            outcomes.append("applied")
        except LineEditError as exc:
            outcomes.append(exc.code)

    workers = [threading.Thread(target=edit, args=(n,)) for n in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    assert outcomes.count("applied") == 1, outcomes
    assert set(outcomes) <= {"applied", "changed", "OBSERVATION_LINE_CHANGED", "OBSERVATION_LOG_BUSY"}
    live = records.get_head(engine, lookup_key(thread))
    assert live is not None and live.generation_count == 1
    assert live.active_observations.count("corrected") == 1
    edits = [e for e in list_events(engine, thread_id=thread) if e.type == "data-om-observation-edit"]
    assert len(edits) == 1 and edits[0].record_id == live.id
