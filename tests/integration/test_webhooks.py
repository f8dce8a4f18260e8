"""Webhooks end to end: the API registers endpoints, the API process serves turns, and real Celery
processes (beat, the maintenance queue, the `om.webhook` queue) deliver the outbox to loopback receivers.

- Every request's Standard Webhooks signature verifies with the secret shown at registration.
- A receiver that fails three times then recovers gets every event of its tenant once, in order.
- A receiver that accepts and never answers does not slow turns: they complete while its delivery hangs,
  as fast as a tenant's turns without an endpoint, and another tenant's endpoint keeps receiving.
- Bad targets are refused with a 422 that says why; another tenant's endpoint is "not found".
- A thread's OM model usage is read back with the thread.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine
from starlette.testclient import TestClient

from om_api.app import create_app
from om_api.settings import ApiSettings
from om_core.engine import MAINTENANCE_QUEUE, WEBHOOK_QUEUE
from om_core.store.outbox import list_events
from om_core.tenancy import access
from om_core.tenancy.scoped_ids import scoped_id
from om_core.webhooks.signing import verify_standard
from tests.support.api_server import METRICS_HEADERS, METRICS_TOKEN
from tests.support.workers import WorkerCluster, wait_until, worker_cluster

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

#: Fast retries and a short settle age, so the failure paths run in seconds.
WEBHOOK_ENV = {
    "OM_MODEL": "om-local/extractive",
    "LITELLM_LOG": "ERROR",
    "OM_WEBHOOK_ALLOW_PRIVATE": "true",
    "OM_WEBHOOK_RETRY_BASE_S": "0.3",
    "OM_WEBHOOK_RETRY_MAX_S": "1",
    "OM_WEBHOOK_SETTLE_S": "2",
    "OM_WORKER_BEAT_INTERVAL_S": "0.5",
}


# ------------------------------------------------------------------------------------------ receivers


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: bytes
    status: int

    @property
    def event(self) -> dict[str, Any]:
        document: dict[str, Any] = json.loads(self.body)
        return document


@dataclass
class Receiver:
    """A loopback HTTP server: `/ok/*` answers 204, `/flaky/*` answers 500 to its first three requests
    then 200, `/hang/*` reads the request and never answers until the test ends."""

    server: ThreadingHTTPServer
    requests: list[Request] = field(default_factory=list)
    flaky_failures: int = 3
    hanging: int = 0
    release: threading.Event = field(default_factory=threading.Event)
    guard: threading.Lock = field(default_factory=threading.Lock)

    @property
    def base(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def accepted(self, prefix: str) -> list[Request]:
        with self.guard:
            return [r for r in self.requests if r.path.startswith(prefix) and r.status < 300]

    def all(self, prefix: str) -> list[Request]:
        with self.guard:
            return [r for r in self.requests if r.path.startswith(prefix)]


def _handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            headers = {k: v for k, v in self.headers.items()}
            if self.path.startswith("/hang"):
                with receiver.guard:
                    receiver.hanging += 1
                    receiver.requests.append(Request(self.path, headers, body, 599))
                try:
                    receiver.release.wait(120)
                finally:
                    with receiver.guard:
                        receiver.hanging -= 1
                return
            with receiver.guard:
                flaky_seen = sum(1 for r in receiver.requests if r.path == self.path)
                status = (
                    500 if self.path.startswith("/flaky") and flaky_seen < receiver.flaky_failures else 200
                )
                if self.path.startswith("/ok"):
                    status = 204
                receiver.requests.append(Request(self.path, headers, body, status))
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

    return Handler


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    found = Receiver(server)
    server.RequestHandlerClass = _handler(found)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield found
    found.release.set()
    server.shutdown()
    server.server_close()


# ------------------------------------------------------------------------------------- stack and API


@pytest.fixture(scope="module")
def cluster(postgres_url: str, redis_url: str, tmp_path_factory: Any) -> Iterator[WorkerCluster]:
    workdir: Path = tmp_path_factory.mktemp("webhooks")
    with worker_cluster(
        postgres_url=postgres_url,
        redis_url=redis_url,
        workdir=workdir,
        db=14,
        env=WEBHOOK_ENV,
        pool="threads",
    ) as c:
        c.start_workers([([WEBHOOK_QUEUE], 4), ([MAINTENANCE_QUEUE], 1)], beats=1)
        yield c


@dataclass
class Tenant:
    name: str
    key: str


@dataclass
class Api:
    client: TestClient
    db: Engine

    def tenant(self, prefix: str) -> Tenant:
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        return Tenant(name, access.create_key(self.db, name, "webhooks").secret)

    def call(self, who: Tenant, method: str, path: str, **kwargs: Any) -> Any:
        return self.client.request(method, path, headers={"Authorization": f"Bearer {who.key}"}, **kwargs)

    def ok(self, who: Tenant, method: str, path: str, **kwargs: Any) -> Any:
        response = self.call(who, method, path, **kwargs)
        assert response.status_code < 300, (method, path, response.status_code, response.text)
        return response.json() if response.content else None

    def turn(self, who: Tenant, thread: str, index: int) -> float:
        """One turn (a short message: no memory work, one status event); its latency in seconds."""
        began = time.perf_counter()
        self.ok(
            who,
            "POST",
            f"/v1/threads/{thread}/turns",
            json={
                "messages": [{"id": f"m{index}", "role": "user", "text": f"note {index}"}],
                "resource_id": "r",
            },
        )
        return time.perf_counter() - began


def _api(engine: Engine, **settings: Any) -> Iterator[Api]:
    api_settings = ApiSettings(
        database_url=engine.url.render_as_string(hide_password=False),
        auth="keys",
        executor="inline",
        model="om-local/extractive",
        metrics_token=METRICS_TOKEN,
        **settings,
    )
    with TestClient(create_app(api_settings)) as client:
        yield Api(client, engine)


@pytest.fixture
def api(pg_engine: Engine) -> Iterator[Api]:
    yield from _api(pg_engine, webhook_allow_private=True)


def register(api: Api, who: Tenant, url: str, events: list[str] | None = None) -> dict[str, Any]:
    created: dict[str, Any] = api.ok(
        who, "POST", "/v1/webhooks", json={"url": url, "events": events or ["*"]}
    )
    return created


def outbox_ids(db: Engine, who: Tenant, threads: list[str]) -> list[int]:
    return sorted(
        e.id for t in threads for e in list_events(db, thread_id=scoped_id(who.name, t), limit=10_000)
    )


# ------------------------------------------------------------------------------------------------ tests


def test_a_receiver_that_fails_three_times_then_recovers_gets_every_event_once_in_order(
    cluster: WorkerCluster, api: Api, receiver: Receiver
) -> None:
    alice, bob = api.tenant("alice"), api.tenant("bob")
    path = f"/flaky/{uuid.uuid4().hex[:6]}"
    endpoint = register(api, alice, receiver.base + path)
    assert endpoint["secret"].startswith("whsec_") and endpoint["state"] == "active"
    assert "secret" not in api.ok(alice, "GET", f"/v1/webhooks/{endpoint['id']}"), "the secret is shown once"
    bob_path = f"/ok/{uuid.uuid4().hex[:6]}"
    register(api, bob, receiver.base + bob_path)

    threads = ["t-one", "t-two"]
    for index in range(5):
        for thread in threads:
            api.turn(alice, thread, index)
        api.turn(bob, "t-one", index)
    expected = outbox_ids(api.db, alice, threads)
    assert len(expected) >= 10

    wait_until(
        lambda: [r.event["id"] for r in receiver.accepted(path)] == expected,
        deadline_s=90,
        what="every event of alice's threads delivered once, in order",
    )
    requests = receiver.all(path)
    assert [r.status for r in requests[:3]] == [500, 500, 500]
    assert {r.event["id"] for r in requests[:4]} == {expected[0]}, "the failed event is retried, not skipped"
    for request in requests:
        assert verify_standard(endpoint["secret"], request.headers, request.body)
        assert request.headers["OM-Event-Id"] == str(request.event["id"])
        assert request.headers["OM-Event-Type"] == request.event["type"]
        assert request.event["threadId"] in threads, "public ids only, and alice's threads only"
    per_thread = {
        t: [r.event["id"] for r in receiver.accepted(path) if r.event["threadId"] == t] for t in threads
    }
    assert all(ids == sorted(ids) for ids in per_thread.values())

    wait_until(
        lambda: len(receiver.accepted(bob_path)) == len(outbox_ids(api.db, bob, ["t-one"])),
        deadline_s=60,
        what="bob's own endpoint gets bob's events",
    )
    deliveries = wait_until(
        lambda: (
            (d := api.ok(alice, "GET", f"/v1/webhooks/{endpoint['id']}/deliveries?limit=500"))["pending"] == 0
            and d
        ),
        deadline_s=30,
        what="the cursor past the last event",
    )
    oldest_first = list(reversed(deliveries["items"]))
    assert [(a["outcome"], a["status_code"], a["attempt"]) for a in oldest_first[:4]] == [
        ("failed", 500, 1),
        ("failed", 500, 2),
        ("failed", 500, 3),
        ("delivered", 200, 4),
    ]
    assert [a["event_id"] for a in oldest_first if a["outcome"] == "delivered"] == expected
    assert deliveries["state"] == "active" and deliveries["failures"] == 0
    info = api.ok(alice, "GET", f"/v1/webhooks/{endpoint['id']}")
    assert info["delivered_total"] == len(expected) and info["failed_total"] == 3

    metrics = api.client.get("/metrics", headers=METRICS_HEADERS).text
    delivered = next(
        float(line.split()[-1])
        for line in metrics.splitlines()
        if line.startswith('om_webhook_deliveries_total{outcome="delivered"}')
    )
    assert delivered >= len(expected)


def test_a_receiver_that_never_answers_slows_no_turn_and_no_other_tenant(
    cluster: WorkerCluster, api: Api, receiver: Receiver
) -> None:
    carol, dave, erin = api.tenant("carol"), api.tenant("dave"), api.tenant("erin")
    register(api, carol, receiver.base + f"/hang/{uuid.uuid4().hex[:6]}")
    dave_path = f"/ok/{uuid.uuid4().hex[:6]}"
    register(api, dave, receiver.base + dave_path)

    api.turn(carol, "t-1", 0)
    wait_until(lambda: receiver.hanging >= 1, deadline_s=60, what="a delivery to carol's receiver hanging")

    for warm in range(3):  # both threads exist before timing
        api.turn(erin, "t-1", warm)
    baseline: list[float] = []
    hung: list[float] = []
    for index in range(1, 11):
        hung.append(api.turn(carol, "t-1", index))
        assert receiver.hanging >= 1, "the turn completed while a delivery of its thread's events hung"
        baseline.append(api.turn(erin, "t-1", index + 3))
        api.turn(dave, "t-1", index)
    assert max(hung) < 5, "no turn waits on the receiver (it holds each request for 10 s)"
    assert statistics.median(hung) <= max(3 * statistics.median(baseline), statistics.median(baseline) + 0.5)

    wait_until(
        lambda: len(receiver.accepted(dave_path)) == len(outbox_ids(api.db, dave, ["t-1"])),
        deadline_s=60,
        what="another tenant's endpoint keeps receiving while carol's hangs",
    )
    assert receiver.hanging >= 1


def test_targets_are_checked_and_endpoints_are_the_tenants_own(engine: Engine) -> None:
    for api in _api(engine):  # the operator has not allowed private targets
        owner, other = api.tenant("owner"), api.tenant("other")
        for url, words in (
            ("http://127.0.0.1:9/hook", "loopback"),
            ("http://localhost:9/hook", "loopback"),
            ("http://10.0.0.7/hook", "private"),
            ("http://169.254.169.254/latest", "link-local"),
            ("ftp://example.com/x", "http:// or https://"),
        ):
            response = api.call(owner, "POST", "/v1/webhooks", json={"url": url, "events": ["*"]})
            assert response.status_code == 422, (url, response.text)
            error = response.json()["error"]
            assert error["code"] == "webhook_target_refused" and words in error["message"], error
        bad_events = api.call(
            owner, "POST", "/v1/webhooks", json={"url": "https://a.example", "events": ["x"]}
        )
        assert bad_events.status_code == 422

    for api in _api(engine, webhook_allow_private=True):
        owner, other = api.tenant("owner"), api.tenant("other")
        created = register(api, owner, "http://127.0.0.1:9/hook", ["data-om-observation-end"])
        hook = f"/v1/webhooks/{created['id']}"
        assert created["events"] == ["data-om-observation-end"] and created["state"] == "active"
        for method, path, body in (
            ("GET", hook, None),
            ("PATCH", hook, {"enabled": False}),
            ("DELETE", hook, None),
            ("GET", f"{hook}/deliveries", None),
        ):
            response = api.call(other, method, path, json=body)
            assert response.status_code == 404, (method, path, response.text)
            assert response.json()["error"]["code"] == "webhook_not_found"
        assert api.ok(other, "GET", "/v1/webhooks")["items"] == []
        assert [w["id"] for w in api.ok(owner, "GET", "/v1/webhooks")["items"]] == [created["id"]]
        patched = api.ok(owner, "PATCH", hook, json={"events": ["*"], "description": "all of it"})
        assert patched["events"] == ["*"] and patched["description"] == "all of it"
        assert api.call(owner, "PATCH", hook, json={}).status_code == 422
        assert api.call(owner, "PATCH", hook, json={"url": "gopher://x"}).status_code == 422
        empty = api.ok(owner, "GET", f"{hook}/deliveries")
        assert empty["items"] == [] and empty["state"] == "active"
        assert api.call(owner, "DELETE", hook).status_code == 204
        assert api.call(owner, "GET", hook).status_code == 404


def test_a_thread_shows_what_oms_own_model_calls_used(engine: Engine) -> None:
    for api in _api(engine):
        who = api.tenant("usage")
        api.ok(
            who,
            "PUT",
            "/v1/threads/t-usage/config",
            json={
                "overrides": {"observation": {"messageTokens": 400, "bufferTokens": False}},
                "resource_id": "r",
            },
        )
        fresh = api.ok(who, "GET", "/v1/threads/t-usage")["usage"]
        assert fresh == {
            "input_tokens": 0,
            "output_tokens": 0,
            "total_tokens": 0,
            "cost_usd": 0.0,
            "cycles": 0,
        }
        words = " ".join(["harbor lantern copper meadow signal"] * 30)
        for index in range(6):
            api.ok(
                who,
                "POST",
                "/v1/threads/t-usage/turns",
                json={
                    "messages": [{"id": f"m{index}", "role": "user", "text": f"{index} {words}"}],
                    "resource_id": "r",
                },
            )
        usage = api.ok(who, "GET", "/v1/threads/t-usage")["usage"]
        reported = [
            e.payload
            for e in list_events(api.db, thread_id=scoped_id(who.name, "t-usage"), limit=10_000)
            if "usage" in e.payload
        ]
        assert reported, "the turns ran an observation"
        assert usage["cycles"] == len(reported)
        assert usage["input_tokens"] == sum(p["usage"]["inputTokens"] for p in reported) > 0
        assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
        metrics = api.client.get("/metrics", headers=METRICS_HEADERS).text
        assert f'om_memory_tenant_model_tokens_total{{direction="input",tenant="{who.name}"}}' in metrics
