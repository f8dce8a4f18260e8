"""The dashboard's API against a real server in its production shape: keys auth, `OM_EXECUTOR=celery`,
Celery worker processes, Postgres and Redis.

What the `/ui` pages read: who the caller is (`/v1/whoami`), the tenant's resources with their totals
(paged, searched), its threads searched by id or title with their counts and cost, the fleet (queue depths
the broker really holds, workers that really answer, the tenant's own failures and spend) and the diff of a
generation a real reflection made. Another tenant's ids answer exactly like ids nobody used.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine

from om_api.client import OMClient
from om_core.engine import QUEUES
from om_core.tenancy import access
from tests.support import fake_providers as fake
from tests.support.api_server import ApiServer, new_id, run_api_server
from tests.support.queues import drain
from tests.support.workers import TEST_WORKER_ENV, Process, WorkerCluster, wait_until, worker_cluster

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

#: No worker consumes this queue, so what is sent to it stays there and its depth is exact.
IDLE_QUEUE = "om.index"
CYCLE = {"observation": {"messageTokens": 1500}, "reflection": {"observationTokens": 600}}
FLOWER = "http://flower.example.invalid:5555/"


@pytest.fixture(scope="module")
def cluster(
    postgres_url: str, redis_url: str, pg_engine: Engine, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerCluster]:
    with worker_cluster(
        postgres_url=postgres_url,
        redis_url=redis_url,
        workdir=tmp_path_factory.mktemp("dashboard-workers"),
        db=8,
        env={"OM_MODEL": "om-local/extractive", "LITELLM_LOG": "ERROR"},
    ) as workers:
        workers.start_worker([q for q in QUEUES if q != IDLE_QUEUE], concurrency=2)
        yield workers


@pytest.fixture(scope="module")
def worker(cluster: WorkerCluster) -> Process:
    [process] = cluster.processes
    return process


@pytest.fixture(scope="module")
def api(
    cluster: WorkerCluster, postgres_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApiServer]:
    env = {
        **TEST_WORKER_ENV,
        "OM_EXECUTOR": "celery",
        "OM_BLOCKING_DEADLINE_S": "60",
        "OM_FLOWER_URL": FLOWER,
    }
    with run_api_server(postgres_url, cluster.redis_url, tmp_path_factory.mktemp("api"), env=env) as server:
        yield server


class Caller:
    """A fresh tenant with a key, calling the server as the dashboard does."""

    def __init__(self, api: ApiServer, db: Engine, prefix: str) -> None:
        self.tenant = new_id(prefix)
        self.key = access.create_key(db, self.tenant, "dashboard").secret
        self.base_url = api.base_url
        self.client = OMClient(api.base_url, self.key, timeout=120)

    def get(self, path: str, **params: Any) -> httpx.Response:
        return httpx.get(
            self.base_url + path,
            params=params,
            headers={"Authorization": f"Bearer {self.key}"},
            timeout=120,
        )

    def ok(self, path: str, **params: Any) -> Any:
        response = self.get(path, **params)
        assert response.status_code == 200, (path, response.text)
        return response.json()

    def say(self, thread: str, resource: str, count: int, *, start: int = 0) -> None:
        for i in range(start, start + count):
            role = "user" if i % 2 == 0 else "assistant"
            text = f"Turn {i}: " + " ".join(f"topic{(i * 13 + k) % 89}" for k in range(70))
            self.client.post_turn(thread, [{"id": f"m{i}", "role": role, "text": text}], resource_id=resource)


@pytest.fixture
def alice(api: ApiServer, pg_engine: Engine) -> Iterator[Caller]:
    caller = Caller(api, pg_engine, "alice")
    yield caller
    caller.client.close()


@pytest.fixture
def mallory(api: ApiServer, pg_engine: Engine) -> Iterator[Caller]:
    caller = Caller(api, pg_engine, "mallory")
    yield caller
    caller.client.close()


def walk(caller: Caller, path: str, **params: Any) -> list[list[dict[str, Any]]]:
    """Every page of a list, following next_cursor (bounded: a cursor that never ends fails)."""
    pages: list[list[dict[str, Any]]] = []
    cursor = None
    for _ in range(50):
        body = caller.ok(path, **params, **({"cursor": cursor} if cursor else {}))
        pages.append(body["items"])
        cursor = body["next_cursor"]
        if cursor is None:
            return pages
    raise AssertionError(f"{path} did not end after 50 pages")


def test_whoami_names_the_keys_tenant_and_flower(alice: Caller, api: ApiServer) -> None:
    assert alice.ok("/v1/whoami") == {"auth": "key", "tenant_id": alice.tenant, "flower_url": FLOWER}
    assert httpx.get(api.base_url + "/v1/whoami").status_code == 401, "no key, no answer"


def test_resources_are_paged_searched_and_summed_per_tenant(alice: Caller, mallory: Caller) -> None:
    alpha, beta, shouting = "user-alpha", "user-beta", "Team-ALPHA-2"
    alice.say("a1", alpha, 3)
    alice.say("a2", alpha, 2)
    alice.say("b1", beta, 1)
    alice.say("s1", shouting, 4)
    alice.client.set_resource_config("no-threads-yet", {"observation": {"messageTokens": 2000}})
    mallory.say("m1", alpha, 5)  # the same resource id, another tenant's

    pages = walk(alice, "/v1/resources", limit=2)
    assert [len(p) for p in pages] == [2, 2]
    rows = {r["id"]: r for page in pages for r in page}
    assert [r["id"] for page in pages for r in page] == sorted(rows), "by id, each once"
    assert set(rows) == {alpha, beta, shouting, "no-threads-yet"}
    assert (rows[alpha]["threads"], rows[alpha]["messages"]) == (2, 5), "mallory's thread is not counted"
    assert (rows[beta]["threads"], rows[beta]["messages"]) == (1, 1)
    assert (rows[shouting]["threads"], rows[shouting]["messages"]) == (1, 4)
    empty = rows["no-threads-yet"]
    assert (empty["threads"], empty["messages"], empty["last_activity_at"]) == (0, 0, None)
    assert rows[alpha]["last_activity_at"] is not None
    assert all(r["cost_usd"] == 0.0 for r in rows.values()), "the offline model has no price"

    assert [r["id"] for r in alice.ok("/v1/resources", q="alpha")["items"]] == [shouting, alpha]
    assert [r["id"] for r in alice.ok("/v1/resources", q="-BETA")["items"]] == [beta]
    assert alice.ok("/v1/resources", q="%")["items"] == [], "a LIKE wildcard matches only itself"
    assert alice.ok("/v1/resources", q=alice.tenant[:8])["items"] == [], "the tenant is not part of an id"
    assert [r["id"] for r in mallory.ok("/v1/resources")["items"]] == [alpha]
    assert mallory.ok("/v1/resources")["items"][0]["messages"] == 5

    refused = alice.get("/v1/resources", cursor="bm90LWEtY3Vyc29y")
    assert refused.status_code == 422 and refused.json()["error"]["field"] == "query.cursor"
    other_list = alice.ok("/v1/threads", limit=1)["next_cursor"]
    assert alice.get("/v1/resources", cursor=other_list).status_code == 422, "a thread cursor is refused"


def test_threads_are_searched_by_id_or_title_with_their_counts(alice: Caller, mallory: Caller) -> None:
    alice.say("support-ticket-7", "u1", 3)
    alice.say("chat-1", "u1", 2)
    alice.say("chat-2", "u2", 1)
    alice.client.update_thread("chat-1", title="Planning the TRIP to Lisbon")
    mallory.say("trip-notes", "u1", 2)

    found = alice.ok("/v1/threads", q="trip")["items"]
    assert [t["thread_id"] for t in found] == ["chat-1"], "the title matches, any case; mallory's id not"
    assert found[0]["messages"] == 2 and found[0]["cost_usd"] == 0.0
    assert [t["thread_id"] for t in alice.ok("/v1/threads", q="TICKET")["items"]] == ["support-ticket-7"]
    assert [t["thread_id"] for t in alice.ok("/v1/threads", q="chat", resource_id="u1")["items"]] == [
        "chat-1"
    ]
    pages = walk(alice, "/v1/threads", q="T", limit=1)
    assert [t["thread_id"] for page in pages for t in page] == ["chat-1", "chat-2", "support-ticket-7"]
    assert {t["thread_id"]: t["messages"] for page in pages for t in page} == {
        "chat-1": 2,
        "chat-2": 1,
        "support-ticket-7": 3,
    }
    listed = alice.ok("/v1/resources/u1/threads")["items"]
    assert {t["thread_id"]: t["messages"] for t in listed} == {"support-ticket-7": 3, "chat-1": 2}
    detail = alice.ok("/v1/threads/support-ticket-7")
    assert detail["messages"] == detail["counts"]["messages"] == 3
    assert detail["cost_usd"] == detail["usage"]["cost_usd"]
    assert alice.get("/v1/threads", q="").status_code == 422


def fleet_seeing(caller: Caller, worker: Process) -> dict[str, Any]:
    """`GET /v1/fleet` until `worker` is among the workers: a worker busy with a task can miss one
    ping's reply window (about 1 s), and the page, like this, simply asks again."""

    def answered() -> dict[str, Any]:
        fleet: dict[str, Any] = caller.ok("/v1/fleet")
        return fleet if worker.name in {w["name"] for w in fleet["workers"]} else {}

    return wait_until(answered, deadline_s=60, what=f"{worker.name} to answer the fleet's ping", every_s=0.5)


def test_the_fleet_shows_queues_workers_and_only_the_callers_failures_and_spend(
    alice: Caller, mallory: Caller, cluster: WorkerCluster, worker: Process
) -> None:
    namespace = f"ns{uuid.uuid4().hex[:8]}"
    cluster.redis.set(fake.default_key(namespace), "degenerate")
    thread = "looping"
    # No buffering: the turn that crosses the threshold observes in the turn, and the model loops.
    observation = {"messageTokens": 1500, "bufferTokens": False}
    alice.client.set_config(
        thread, {"model": f"om-fake/{namespace}", "observation": observation}, resource_id="u-fleet"
    )
    alice.say(thread, "u-fleet", 12)
    assert cluster.redis.llen(fake.calls_key(namespace)) > 0, "the looping model was called"
    mallory.say("quiet", "u-fleet", 1)

    parked = 3
    before = int(cluster.redis.llen(IDLE_QUEUE))
    for _ in range(parked):
        cluster.app.send_task("om.index_thread", args=[{}], queue=IDLE_QUEUE)
    try:
        fleet = fleet_seeing(alice, worker)
    finally:
        cluster.redis.delete(IDLE_QUEUE)

    assert fleet["executor"] == "celery" and fleet["flower_url"] == FLOWER
    depths = {q["name"]: q["depth"] for q in fleet["queues"]}
    assert set(depths) == set(QUEUES)
    assert depths[IDLE_QUEUE] == before + parked, "the broker's messages, counted"
    seen = {w["name"]: w["queues"] for w in fleet["workers"]}
    assert seen.get(worker.name) == sorted(q for q in QUEUES if q != IDLE_QUEUE), fleet["workers"]

    failures = fleet["recent_failures"]
    assert failures and {f["thread_id"] for f in failures} == {thread}
    assert failures[0]["type"] == "data-om-observation-failed"
    assert "OBSERVER_DEGENERATE" in failures[0]["error"] and failures[0]["at"]
    assert fleet["om_usage"]["cost_usd"] > 0 and fleet["om_usage"]["cycles"] >= 1, "failed calls cost"
    assert fleet["usage"]["tenant_id"] == alice.tenant and fleet["usage"]["calls"] == 0

    listed = alice.ok("/v1/threads", q=thread)["items"]
    assert listed[0]["cost_usd"] == pytest.approx(fleet["om_usage"]["cost_usd"])
    [resource] = alice.ok("/v1/resources", q="u-fleet")["items"]
    assert resource["cost_usd"] == pytest.approx(fleet["om_usage"]["cost_usd"])

    theirs = fleet_seeing(mallory, worker)
    assert theirs["recent_failures"] == [], "another tenant's failures are not shown"
    assert theirs["om_usage"]["cost_usd"] == 0 and theirs["usage"]["tenant_id"] == mallory.tenant
    assert {w["name"] for w in theirs["workers"]} >= {worker.name}, "workers are the operator's facts"


def test_a_reflection_diff_accounts_for_both_generations(
    alice: Caller, mallory: Caller, cluster: WorkerCluster
) -> None:
    thread = new_id("reflected")
    alice.client.set_config(thread, CYCLE, resource_id=thread)
    alice.say(thread, thread, 24)
    done = alice.client.reflect(thread, prompt="keep only what matters")
    assert done.completed and done.applied, done
    assert drain(cluster, 120) is None

    view = alice.client.observations(thread)
    assert view.active is not None and view.generations
    generation = view.active.generation_count
    previous = view.generations[0]
    diff = alice.ok(f"/v1/threads/{thread}/generations/{generation}/diff")
    assert diff["generation"] == generation
    assert diff["previous_generation"] == previous.generation_count < generation
    ops = {line["op"] for line in diff["lines"]}
    assert "removed" in ops and "kept" in ops, "the (offline, extractive) Reflector dropped lines"
    assert [x["text"] for x in diff["lines"] if x["op"] != "added"] == previous.observations.splitlines()
    assert [x["text"] for x in diff["lines"] if x["op"] != "removed"] == view.active.observations.splitlines()

    first = min(g.generation_count for g in view.generations)
    opening = alice.ok(f"/v1/threads/{thread}/generations/{first}/diff")
    assert opening["previous_generation"] is None and {x["op"] for x in opening["lines"]} <= {"added"}

    missing = alice.get(f"/v1/threads/{thread}/generations/{generation + 5}/diff")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "generation_not_found"

    stolen = mallory.get(f"/v1/threads/{thread}/generations/{generation}/diff")
    ghost = new_id("ghost")
    unused = mallory.get(f"/v1/threads/{ghost}/generations/{generation}/diff")
    assert stolen.status_code == unused.status_code == 404
    # Each answer carries its own request id; everything else must be the same.
    stolen_error, unused_error = stolen.json()["error"], unused.json()["error"]
    assert stolen_error.pop("request_id") != unused_error.pop("request_id")
    unused_error["message"] = unused_error["message"].replace(ghost, thread)
    assert stolen_error == unused_error, "another tenant's thread is like no thread"
