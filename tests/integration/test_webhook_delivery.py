"""One endpoint's delivery run on a real database (both), against a loopback receiver, without Celery: the
tenant rule, event filters, the failure bound and revival, the target check at delivery time, the bounded
attempt log. (The queue, beat and the workers are `test_webhooks.py`.)"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from sqlalchemy import Engine

from om_core.engine import EngineSettings, MemoryEngine
from om_core.messages import text_message
from om_core.store.outbox import list_events
from om_core.tenancy.scoped_ids import scoped_id
from om_core.webhooks import store
from om_core.webhooks.delivery import deliver_endpoint
from om_core.webhooks.policy import WebhookPolicy
from tests.support.fake_models import FakeModels

pytestmark = [pytest.mark.postgres]

OPEN = WebhookPolicy(allow_private=True, settle_s=0, retry_base_s=0.001, retry_max_s=0.001, max_failures=2)


class Receiver:
    def __init__(self) -> None:
        self.status = 200
        self.bodies: list[bytes] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: Any) -> None:
                pass

            def do_POST(self) -> None:
                outer.bodies.append(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                self.send_response(outer.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def event_ids(self) -> list[int]:
        return [json.loads(b)["id"] for b in self.bodies]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    yield found
    found.server.shutdown()
    found.server.server_close()


def now() -> datetime:
    return datetime.now(UTC)


def turns(db: Engine, tenant: str, thread: str, count: int) -> list[int]:
    """`count` turns on the tenant's thread (each writes a status event); the thread's event ids."""
    om = MemoryEngine(db, models=FakeModels(), settings=EngineSettings())  # type: ignore[arg-type]
    stored = scoped_id(tenant, thread)
    for i in range(count):
        om.ingest_turn(stored, scoped_id(tenant, "r"), [text_message(f"m{i}", "user", f"hello {i}", now())])
    return [e.id for e in list_events(db, thread_id=stored, limit=10_000)]


def new_tenant() -> str:
    return f"wh-{uuid.uuid4().hex[:8]}"


def test_a_tenant_gets_its_own_events_only_even_when_another_tenants_name_extends_its_own(
    engine: Engine, receiver: Receiver
) -> None:
    tenant = new_tenant()
    endpoint = store.create(
        engine, tenant_id=tenant, url=receiver.url, events=["*"], description=None, now=now()
    )
    nested = turns(engine, f"{tenant}/sub", "t", 2)  # tenant "<tenant>/sub": its ids start with "<tenant>/"
    own = turns(engine, tenant, "t", 3)
    report = deliver_endpoint(engine, endpoint.id, OPEN, clock=now)
    assert receiver.event_ids() == own and report.delivered == 3
    after = store.get(engine, endpoint.id, tenant_id=tenant)
    assert after is not None and after.cursor >= max(own + nested) and store.backlog(engine, after) == 0


def test_unsubscribed_events_are_passed_over_without_a_request(engine: Engine, receiver: Receiver) -> None:
    tenant = new_tenant()
    endpoint = store.create(
        engine,
        tenant_id=tenant,
        url=receiver.url,
        events=["data-om-observation-end"],
        description=None,
        now=now(),
    )
    turns(engine, tenant, "t", 3)
    report = deliver_endpoint(engine, endpoint.id, OPEN, clock=now)
    assert receiver.bodies == [] and report.skipped == 3
    after = store.get(engine, endpoint.id, tenant_id=tenant)
    assert after is not None and store.backlog(engine, after) == 0


def test_an_endpoint_dies_after_the_bound_and_resumes_where_it_stopped_when_enabled(
    engine: Engine, receiver: Receiver
) -> None:
    tenant = new_tenant()
    endpoint = store.create(
        engine, tenant_id=tenant, url=receiver.url, events=["*"], description=None, now=now()
    )
    ids = turns(engine, tenant, "t", 2)
    receiver.status = 503
    for expected_state in ("failing", "dead"):
        deliver_endpoint(engine, endpoint.id, OPEN, clock=now)
        state = store.get(engine, endpoint.id, tenant_id=tenant)
        assert state is not None and state.state == expected_state and state.last_error == "HTTP 503"
    assert state.next_attempt_at is None, "a dead endpoint is not scheduled"
    attempts_before = len(receiver.bodies)
    deliver_endpoint(engine, endpoint.id, OPEN, clock=now)
    assert len(receiver.bodies) == attempts_before, "a dead endpoint gets no request"
    assert store.due(engine, now(), 1000) == [] or endpoint.id not in {
        e.id for e in store.due(engine, now(), 1000)
    }

    receiver.status = 200
    revived = store.patch(engine, endpoint.id, tenant, {"enabled": True}, now())
    assert revived is not None and revived.state == "active" and revived.failures == 0
    deliver_endpoint(engine, endpoint.id, OPEN, clock=now)
    assert receiver.event_ids()[attempts_before:] == ids, "it resumed at the event it stopped at"
    log = store.attempts(engine, endpoint.id, limit=10)
    assert [a.outcome for a in reversed(log)] == ["failed", "failed", "delivered", "delivered"]


def test_a_target_that_turned_private_is_refused_at_delivery(engine: Engine, receiver: Receiver) -> None:
    tenant = new_tenant()
    endpoint = store.create(
        engine, tenant_id=tenant, url=receiver.url, events=["*"], description=None, now=now()
    )
    turns(engine, tenant, "t", 1)
    closed = WebhookPolicy(allow_private=False, settle_s=0)
    report = deliver_endpoint(engine, endpoint.id, closed, clock=now)
    state = store.get(engine, endpoint.id, tenant_id=tenant)
    assert report.failed and receiver.bodies == []
    assert state is not None and state.state == "failing" and "loopback" in (state.last_error or "")


def test_the_attempt_log_keeps_the_last_attempts_only(
    engine: Engine, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store, "KEEP_ATTEMPTS", 3)
    tenant = new_tenant()
    endpoint = store.create(
        engine, tenant_id=tenant, url=receiver.url, events=["*"], description=None, now=now()
    )
    ids = turns(engine, tenant, "t", 5)
    deliver_endpoint(engine, endpoint.id, OPEN, clock=now)
    assert [a.event_id for a in store.attempts(engine, endpoint.id, limit=50)] == ids[::-1][:3]
