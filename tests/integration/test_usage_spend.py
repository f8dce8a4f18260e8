"""`GET /v1/usage/spend`: a tenant's memory-model tokens and cost per UTC day and per thread per day, with
the budget the operator set, on Postgres and SQLite (issue 32).

Usage is recorded the way a cycle's commit records it: `usage.count_usage` in the transaction of the
events that report it (here called with events dated on chosen days, so the test spans several days), and
once through `outbox.write_events` for today's. Part of the tenant's deltas is folded by the maintenance
pass's `fold_tenant_deltas` before the read, so the tenant's days add folded rows and unfolded deltas.

- The tenant's days and the threads' days are exact, a day outside the window is not counted, the
  budget state says paused when today's spend is over the operator's budget.
- `thread=` narrows to one thread; another tenant's thread is "not found" and another tenant sees
  nothing of this one's spend.
- A window longer than `OM_USAGE_MAX_DAYS` is cut to it (`first_day` says so); more per-thread rows than
  `OM_USAGE_MAX_ROWS` are cut, with `truncated: true`; `days` outside 1..3660 is a 422.
- Erasing a thread erases its days; the tenant's days keep what was spent.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, select
from starlette.testclient import TestClient

from om_api.app import create_app
from om_api.settings import ApiSettings
from om_core.store import schema
from om_core.store.db import make_engine
from om_core.store.migrate import upgrade
from om_core.store.outbox import write_events
from om_core.store.types import NewEvent, StoredEvent
from om_core.store.usage import count_usage, fold_tenant_deltas
from om_core.tenancy import access
from om_core.tenancy.limits import TenantLimits, set_tenant_limits
from om_core.tenancy.scoped_ids import scoped_id

MAX_DAYS, MAX_ROWS = 30, 2
NOW = datetime.now(UTC)
TODAY, YESTERDAY = NOW.date(), (NOW - timedelta(days=1)).date()


@pytest.fixture(scope="module", params=[pytest.param("postgres", marks=pytest.mark.postgres), "sqlite"])
def database(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    if request.param == "postgres":
        yield request.getfixturevalue("pg_engine")
        return
    engine = make_engine(f"sqlite:///{tmp_path_factory.mktemp('spend') / 'om.db'}")
    upgrade(engine)
    yield engine
    engine.dispose()


@pytest.fixture(scope="module")
def client(database: Engine) -> Iterator[TestClient]:
    settings = ApiSettings(
        database_url=database.url.render_as_string(hide_password=False),
        auth="keys",
        executor="inline",
        model="om-local/extractive",
        usage_max_days=MAX_DAYS,
        usage_max_rows=MAX_ROWS,
    )
    with TestClient(create_app(settings)) as served:
        yield served


class Tenant:
    def __init__(self, client: TestClient, db: Engine) -> None:
        self.client, self.db = client, db
        self.name = f"spend-{uuid.uuid4().hex[:8]}"
        self.key = access.create_key(db, self.name, "k").secret

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        return self.client.request(method, path, headers={"Authorization": f"Bearer {self.key}"}, **kwargs)

    def spend(self, **params: Any) -> dict[str, Any]:
        response = self.call("GET", "/v1/usage/spend", params=params)
        assert response.status_code == 200, response.text
        found: dict[str, Any] = response.json()
        return found

    def thread(self, thread: str) -> str:
        """Create the thread with a turn; its stored id."""
        body = {"messages": [{"id": uuid.uuid4().hex[:8], "role": "user", "text": "hi"}], "resource_id": "r"}
        response = self.call("POST", f"/v1/threads/{thread}/turns", json=body)
        assert response.status_code < 300, response.text
        return scoped_id(self.name, thread)

    def used(self, thread: str, when: datetime, tokens: tuple[int, int], cost: float) -> None:
        """Usage of one cycle of `thread` on `when`'s day, recorded as a cycle's commit records it."""
        stored = scoped_id(self.name, thread)
        event = StoredEvent(
            id=0,
            type="data-om-observation-end",
            thread_id=stored,
            lookup_key=f"thread:{stored}",
            record_id=None,
            cycle_id=uuid.uuid4().hex,
            payload={"usage": {"inputTokens": tokens[0], "outputTokens": tokens[1]}, "cost": cost},
            created_at=when,
        )
        with self.db.begin() as conn:
            count_usage(conn, [event])


def _day(body: dict[str, Any], day: Any) -> dict[str, Any]:
    (found,) = [d for d in body["days"] if d["day"] == day.isoformat()]
    return found


def test_the_tenant_and_its_threads_per_day_with_the_budget(client: TestClient, database: Engine) -> None:
    alice, bob = Tenant(client, database), Tenant(client, database)
    t1, t2 = alice.thread("t1"), alice.thread("t2")
    alice.used("t1", NOW - timedelta(days=40), (1000, 1000), 5.0)  # outside any window asked for
    alice.used("t1", NOW - timedelta(days=1), (10, 5), 0.01)
    fold_tenant_deltas(database)  # yesterday's is folded, today's stays a delta
    alice.used("t2", NOW, (20, 10), 0.02)
    with database.begin() as conn:  # today's t1 usage through the outbox, as a cycle writes it
        write_events(
            conn,
            lookup_key=f"thread:{t1}",
            thread_id=t1,
            resource_id=None,
            record_id=None,
            events=[
                NewEvent(
                    "data-om-observation-end",
                    {"usage": {"inputTokens": 100, "outputTokens": 50}, "cost": 0.1},
                    "c1",
                )
            ],
        )
    set_tenant_limits(database, alice.name, TenantLimits(daily_budget_usd=0.05))

    body = alice.spend(days=7)
    assert (
        body["first_day"] == (TODAY - timedelta(days=6)).isoformat() and body["last_day"] == TODAY.isoformat()
    )
    assert [d["day"] for d in body["days"]] == [YESTERDAY.isoformat(), TODAY.isoformat()]
    yesterday, today = _day(body, YESTERDAY), _day(body, TODAY)
    assert (yesterday["input_tokens"], yesterday["output_tokens"], yesterday["cycles"]) == (10, 5, 1)
    assert (today["input_tokens"], today["output_tokens"], today["total_tokens"]) == (120, 60, 180)
    assert today["cost_usd"] == pytest.approx(0.12) and yesterday["cost_usd"] == pytest.approx(0.01)
    assert [(r["day"], r["thread_id"]) for r in body["threads"]] == [
        (TODAY.isoformat(), "t1"),
        (TODAY.isoformat(), "t2"),
    ], "newest day first, costliest first, cut at OM_USAGE_MAX_ROWS"
    assert body["truncated"] is True
    budget = body["budget"]
    assert budget["daily_budget_usd"] == pytest.approx(0.05) and budget["paused"] is True
    assert budget["spent_today_usd"] == pytest.approx(0.12)

    assert len(alice.spend(days=MAX_DAYS)["days"]) == 2, "40 days ago is outside the widest window"
    one = alice.spend(days=7, thread="t1")
    assert one["thread_id"] == "t1" and one["threads"] == [] and one["truncated"] is False
    assert [(d["day"], d["input_tokens"], d["cost_usd"]) for d in one["days"]] == [
        (YESTERDAY.isoformat(), 10, pytest.approx(0.01)),
        (TODAY.isoformat(), 100, pytest.approx(0.1)),
    ]

    # Another tenant: nothing of alice's, and alice's thread is not found.
    assert bob.spend()["days"] == [] and bob.spend()["threads"] == []
    assert bob.spend()["budget"]["paused"] is False
    refused = bob.call("GET", "/v1/usage/spend", params={"thread": "t1"})
    assert refused.status_code == 404, refused.text

    # Erasing t1 erases its days; the tenant's days keep what was spent.
    assert alice.call("DELETE", "/v1/threads/t1").status_code == 204
    T = schema.usage_thread_days
    with database.connect() as conn:
        assert conn.execute(select(T.c.day).where(T.c.thread_id == t1)).all() == []
        assert conn.execute(select(T.c.day).where(T.c.thread_id == t2)).all() != []
    assert _day(alice.spend(days=7), TODAY)["cost_usd"] == pytest.approx(0.12)


def test_bounds_cut_the_answer_and_bad_values_are_refused(client: TestClient, database: Engine) -> None:
    carol = Tenant(client, database)
    longest = carol.spend(days=MAX_DAYS + 100)
    assert longest["first_day"] == (TODAY - timedelta(days=MAX_DAYS - 1)).isoformat(), "cut to the setting"
    for bad in ({"days": 0}, {"days": 3661}, {"days": "many"}, {"thread": "../x"}):
        response = carol.call("GET", "/v1/usage/spend", params=bad)
        assert response.status_code == 422, (bad, response.text)
    assert carol.call("GET", "/v1/usage/spend", params={"thread": "never-made"}).status_code == 404
    anonymous = client.get("/v1/usage/spend")
    assert anonymous.status_code == 401
