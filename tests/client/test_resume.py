"""A followed event stream survives a dropped connection by itself: a real API server behind a loopback
TCP proxy that cuts every connection mid-stream (and refuses new ones for a while); the client reconnects
with `Last-Event-ID` and delivers every event exactly once. Without the cursor a reconnect would replay the
thread from its start (duplicates); without the reconnect the events posted during the cut never arrive.

Turns here are small (no observation starts), so every event is written by its turn before the turn
answers: none can commit later with a lower id (the known problem docs/architecture/known-problems.md
names is not what this tests)."""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Iterator

import pytest

from om_client import AsyncOMClient, OMClient, RetryPolicy
from om_client.models import OMEvent
from tests.support.api_server import ApiServer, new_id
from tests.support.tcp_proxy import tcp_proxy

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.timeout(120)]

#: Reconnect quickly and keep trying through the cut (the server's `retry: 2000` still sets the floor).
PATIENT = RetryPolicy(attempts=100, backoff_s=0.1, max_backoff_s=0.5, budget_s=60)
DEADLINE_S = 60.0


@pytest.fixture
def om(stack: ApiServer, key: str) -> Iterator[OMClient]:
    with OMClient(stack.base_url, key, timeout=60) as client:
        yield client


def say(client: OMClient, thread_id: str, start: int, count: int) -> None:
    for i in range(start, start + count):
        client.post_turn(thread_id, [{"id": f"m{i}", "role": "user", "text": f"Turn {i}: the river cafe"}])


def take(received: queue.Queue[OMEvent | BaseException], got: list[OMEvent], want: set[int]) -> None:
    """Move events from the reader into `got` until every id of `want` is there (deadline bound)."""
    end = time.monotonic() + DEADLINE_S
    while not want <= {e.id for e in got}:
        remaining = end - time.monotonic()
        assert remaining > 0, f"timed out: missing {sorted(want - {e.id for e in got})}"
        try:
            item = received.get(timeout=remaining)
        except queue.Empty:
            continue
        if isinstance(item, BaseException):
            raise item
        got.append(item)


def test_a_dropped_stream_resumes_from_the_last_event_and_delivers_each_event_once(
    om: OMClient, stack: ApiServer, key: str
) -> None:
    thread = new_id("resume")
    say(om, thread, 0, 3)
    before = {e.id for e in om.events(thread, follow=False)}
    assert before, "the turns wrote events"
    received: queue.Queue[OMEvent | BaseException] = queue.Queue()
    with tcp_proxy(stack.base_url) as proxy:
        follower = OMClient(proxy.base_url, key, retry=PATIENT)

        def read() -> None:
            try:
                for event in follower.events(thread):
                    received.put(event)
            except BaseException as exc:  # the test closes the client at the end: ignored there
                received.put(exc)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        got: list[OMEvent] = []
        take(received, got, before)
        proxy.drop()  # mid-stream: the connection dies under the reader, new ones are refused
        say(om, thread, 3, 3)  # written while the follower is cut off
        proxy.resume()
        every = {e.id for e in om.events(thread, follow=False)}
        assert every > before
        take(received, got, every)
        follower.close()
        reader.join(timeout=30)
        assert proxy.accepted >= 2, "the follower reconnected"
    ids = [e.id for e in got]
    assert ids == sorted(every), "every event once, in order"


def test_the_async_client_resumes_too(om: OMClient, stack: ApiServer, key: str) -> None:
    thread = new_id("resume-async")
    say(om, thread, 0, 2)
    before = {e.id for e in om.events(thread, follow=False)}

    async def follow(proxy_url: str, cut: threading.Event, done: set[int]) -> list[OMEvent]:
        got: list[OMEvent] = []
        async with AsyncOMClient(proxy_url, key, retry=PATIENT) as client:
            async for event in client.events(thread):
                got.append(event)
                ids = {e.id for e in got}
                if before <= ids and not cut.is_set():
                    cut.set()
                    await asyncio.to_thread(cut_and_write)
                if done and done <= ids:
                    return got
        raise AssertionError("the stream ended")

    with tcp_proxy(stack.base_url) as proxy:
        every: set[int] = set()

        def cut_and_write() -> None:
            proxy.drop()
            say(om, thread, 2, 2)
            proxy.resume()
            every.update(e.id for e in om.events(thread, follow=False))

        got = asyncio.run(asyncio.wait_for(follow(proxy.base_url, threading.Event(), every), DEADLINE_S))
        assert proxy.accepted >= 2, "the follower reconnected"
    assert every > before
    assert [e.id for e in got] == sorted(every), "every event once, in order"


def test_a_turn_sent_again_stores_each_message_once(om: OMClient) -> None:
    """What makes a retried turn safe (`OMClient.post_turn`): the same messages posted again, as a retry
    sends them (tests/client/test_retries.py: the same body on every try), store nothing twice."""
    thread = new_id("again")
    messages = [
        {"id": "m0", "role": "user", "text": "Hi, I'm Dana"},
        {"id": "m1", "role": "assistant", "text": "Hi"},
    ]
    first = om.post_turn(thread, messages, context="none")
    again = om.post_turn(thread, messages, context="none")
    stored = om.messages(thread).messages
    assert [(m.id, m.role, m.parts[0].text) for m in stored] == [
        ("m0", "user", "Hi, I'm Dana"),
        ("m1", "assistant", "Hi"),
    ]
    assert first.record_id == again.record_id
