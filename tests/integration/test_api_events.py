"""Live events over SSE against a real server: they arrive while the conversation runs, carry the outbox
payloads, and a client that drops and reconnects with Last-Event-ID misses nothing and gets nothing twice."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from sqlalchemy import Engine

from om_api.client import AsyncOMClient, OMClient
from om_api.schemas import OMEvent
from om_api.sse import _Tail, parse_cursor
from om_core.store.outbox import list_events
from om_core.store.types import StoredEvent
from om_core.tenancy.scoped_ids import scoped_id
from tests.support.api_server import ApiServer, Follower, api_server, new_id, om, tenant_key

__all__ = ["api_server", "om", "tenant_key"]  # fixtures used below

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

CYCLE = {"observation": {"messageTokens": 1500}, "reflection": {"observationTokens": 600}}


def say(client: OMClient, thread_id: str, start: int, count: int) -> None:
    for i in range(start, start + count):
        role = "user" if i % 2 == 0 else "assistant"
        text = f"Turn {i}: " + " ".join(f"word{(i * 31 + k) % 97}" for k in range(60))
        client.post_turn(thread_id, [{"id": f"m{i}", "role": role, "text": text}])


def statuses(events: list[OMEvent]) -> int:
    return sum(1 for e in events if e.type == "data-om-status")


_STARTS = {"data-om-buffering-start", "data-om-observation-start"}
_ENDS = {
    "data-om-buffering-end",
    "data-om-buffering-failed",
    "data-om-observation-end",
    "data-om-observation-failed",
}


def settled(engine: Engine, stored_thread: str, delivered: list[OMEvent]) -> bool:
    """Every stored event up to the newest delivered one was delivered, and no background cycle is in
    flight (each start has its end or failure). Only then can a client drop without a lower-id event still
    to commit: such an event, committed after the stream's settle window, is the known problem of
    docs/architecture/known-problems.md, not what a reconnect is tested for here."""
    if not delivered:
        return False
    stored = list_events(engine, thread_id=stored_thread, limit=10_000)
    ids = {e.id for e in delivered}
    if not {e.id for e in stored if e.id <= max(ids)} <= ids:
        return False
    started = {e.cycle_id for e in stored if e.type in _STARTS}
    ended = {e.cycle_id for e in stored if e.type in _ENDS}
    return started <= ended


def test_events_arrive_live_and_replay_after_a_reconnect(
    om: OMClient, api_server: ApiServer, tenant_key: str, pg_engine: Engine, tenant: str
) -> None:
    thread = new_id("live")
    om.set_config(thread, CYCLE, resource_id=thread)

    first = Follower(api_server.base_url, tenant_key, thread)
    say(om, thread, 0, 10)
    # Background buffering started a few turns ago; waiting for its chunk makes the threshold crossing
    # below an activation however slow the machine is (otherwise a race with the next turns).
    seen = first.wait_for(
        lambda got: (
            statuses(got) >= 10
            and any(e.type == "data-om-buffering-end" for e in got)
            and settled(pg_engine, scoped_id(tenant, thread), got)
        )
    )
    first.close()  # the client drops

    say(om, thread, 10, 10)  # ... and misses these turns
    resumed = Follower(api_server.base_url, tenant_key, thread, last_event_id=seen[-1].cursor)
    say(om, thread, 20, 2)

    def caught_up(got: list[OMEvent]) -> bool:
        """All 22 statuses, and every stored event up to the newest delivered one. Background work may
        commit an event with a lower id after a later one was delivered; the stream owes it too."""
        if statuses(seen) + statuses(got) < 22:
            return False
        delivered = {e.id for e in seen + got}
        stored = {e.id for e in list_events(pg_engine, thread_id=scoped_id(tenant, thread), limit=10_000)}
        return {i for i in stored if i <= max(delivered)} <= delivered

    def missing(got: list[OMEvent]) -> str:
        delivered = {e.id for e in seen + got}
        stored = list_events(pg_engine, thread_id=scoped_id(tenant, thread), limit=10_000)
        late = [(e.id, e.type) for e in stored if e.id <= max(delivered) and e.id not in delivered]
        return f"statuses {statuses(seen)}+{statuses(got)}, undelivered {late}, from {seen[-1].cursor}"

    rest = resumed.wait_for(caught_up, explain=missing)
    resumed.close()

    delivered = seen + rest
    ids = [e.id for e in delivered]
    assert len(ids) == len(set(ids)), "no event is delivered twice"
    stored = {e.id: e for e in list_events(pg_engine, thread_id=scoped_id(tenant, thread), limit=10_000)}
    assert set(ids) == {i for i in stored if i <= max(ids)}, "no event is missed across the reconnect"
    for event in delivered:
        assert event.type == stored[event.id].type and event.data == stored[event.id].payload
    turn_order = [e.id for e in delivered if e.type == "data-om-status"]
    assert turn_order == sorted(turn_order), "each turn's status arrives in turn order"
    kinds = {e.type for e in delivered}
    assert {"data-om-buffering-start", "data-om-buffering-end", "data-om-activation"} <= kinds


def test_background_work_is_streamed_without_another_turn(
    om: OMClient, api_server: ApiServer, tenant_key: str
) -> None:
    thread = new_id("background")
    om.set_config(thread, CYCLE, resource_id=thread)
    say(om, thread, 0, 3)  # crosses the first buffering interval; the turns do not wait for it
    follower = Follower(api_server.base_url, tenant_key, thread)
    try:
        ended = follower.wait_for(lambda got: any(e.type == "data-om-buffering-end" for e in got))
    finally:
        follower.close()
    started = [e for e in ended if e.type == "data-om-buffering-start"]
    end = next(e for e in ended if e.type == "data-om-buffering-end")
    assert end.data["cycleId"] in {e.data["cycleId"] for e in started}
    assert end.data["observations"].strip()


def test_a_replay_is_ordered_and_the_async_client_sees_the_same(
    om: OMClient, api_server: ApiServer, tenant_key: str
) -> None:
    thread = new_id("replay")
    say(om, thread, 0, 6)
    replay = list(om.events(thread, follow=False))
    assert [e.id for e in replay] == sorted(e.id for e in replay)
    middle = replay[len(replay) // 2].id
    assert [e.id for e in om.events(thread, last_event_id=middle, follow=False)] == [
        e.id for e in replay if e.id > middle
    ]

    async def read() -> list[OMEvent]:
        async with AsyncOMClient(api_server.base_url, tenant_key) as client:
            return [e async for e in client.events(thread, follow=False)]

    assert asyncio.run(read()) == replay


def test_the_stream_speaks_sse(om: OMClient, api_server: ApiServer, tenant_key: str) -> None:
    thread = new_id("wire")
    say(om, thread, 0, 1)
    response = httpx.get(
        f"{api_server.base_url}/v1/threads/{thread}/events",
        params={"follow": "false"},
        headers={"Authorization": f"Bearer {tenant_key}", "Last-Event-ID": "0"},
    )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    blocks = [b for b in response.text.split("\n\n") if b.startswith("id:")]
    assert blocks
    event_id, data = blocks[0].split("\n")
    assert event_id.startswith("id: ") and data.startswith("data: {")


# ------------------------------------------------------------------- resume cursors, without a server


def _event(event_id: int, age_s: float = 0.0) -> StoredEvent:
    return StoredEvent(
        id=event_id,
        type="data-om-status",
        thread_id="t",
        lookup_key="thread:t",
        record_id=None,
        cycle_id=None,
        payload={},
        created_at=datetime.now(UTC) - timedelta(seconds=age_s),
    )


def _send(tail: _Tail, rows: list[StoredEvent]) -> list[tuple[int, str]]:
    """What the live loop sends for one read: each new event with its cursor."""
    sent = [(event.id, tail.delivered(event)) for event in tail.fresh(rows, 100)]
    tail.settle()
    return sent


def test_an_event_that_commits_late_with_a_lower_id_is_still_delivered_once() -> None:
    tail = _Tail(0, frozenset(), settle_s=60)
    assert [i for i, _ in _send(tail, [_event(1), _event(3)])] == [1, 3]
    assert [i for i, _ in _send(tail, [_event(1), _event(2), _event(3)])] == [2], "2 committed after 3"
    assert parse_cursor(tail.cursor()) == (0, frozenset({1, 2, 3}))

    resumed = _Tail(*parse_cursor(tail.cursor()), settle_s=60)
    assert [e.id for e in [_event(i) for i in (1, 2, 3, 4)] if resumed.replayed(e)] == [4]


@pytest.mark.parametrize(
    ("cursor", "parsed"),
    [(None, (0, frozenset())), ("17", (17, frozenset())), ("17~1,4", (17, frozenset({18, 21})))],
)
def test_cursors_parse(cursor: str | None, parsed: tuple[int, frozenset[int]]) -> None:
    assert parse_cursor(cursor) == parsed


def test_each_message_cursor_covers_only_the_events_sent_up_to_it() -> None:
    """A client that stops reading after the first of two events read together resumes from that event's
    cursor: it must get the second one (the cursor once named both, and the second was lost)."""
    tail = _Tail(0, frozenset(), settle_s=60)
    (first_id, first_cursor), (second_id, second_cursor) = _send(tail, [_event(1), _event(2)])
    assert (first_id, second_id) == (1, 2)
    assert parse_cursor(first_cursor) == (0, frozenset({1}))
    assert parse_cursor(second_cursor) == (0, frozenset({1, 2}))
    resumed = _Tail(*parse_cursor(first_cursor), settle_s=60)
    assert [e.id for e in [_event(1), _event(2)] if resumed.replayed(e)] == [2]


def test_old_events_settle_during_a_replay_so_the_cursor_stays_short() -> None:
    tail = _Tail(0, frozenset(), settle_s=2)
    for event in [_event(1, age_s=60), _event(2, age_s=60), _event(5, age_s=0)]:
        tail.replayed(event)
    assert tail.cursor() == "2~3"
