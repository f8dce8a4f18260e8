"""Issue 28, item 9: event streams are bounded, and a thread's followers share one outbox poll.

An attacker holding one ordinary key opened as many `GET /v1/threads/{id}/events` streams as it liked,
each polling the database every `OM_SSE_POLL_S` on its own: one key could hold every connection and keep
the database busy for every tenant. Here a key past `OM_SSE_MAX_STREAMS_PER_KEY` gets 429 with
`Retry-After` while another key still opens one, the process stops at `OM_SSE_MAX_STREAMS`, a stream the
client closes gives its slot back, and K followers of one thread cause one outbox read per interval.

The API runs in uvicorn on a loopback port inside the test process (real connections: a slot is freed
because the server sees the client hang up), on SQLite, so a SQLAlchemy listener on the server's engine
counts the outbox reads.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import uvicorn
from fastapi import FastAPI
from sqlalchemy import Engine, event

from om_api.app import create_app
from om_api.client import OMClient
from om_api.schemas import OMEvent
from om_api.settings import ApiSettings
from om_core.store.db import make_engine
from om_core.store.migrate import upgrade
from om_core.tenancy import access
from tests.support.api_server import Follower, free_port

if TYPE_CHECKING:  # the attacker tests also run against code without them (to see them fail there)
    from om_api.sse import ThreadFeeds
    from om_api.stream_slots import StreamSlots

POLL_S = 0.2


def wait_until(what: str, condition: Callable[[], bool], deadline_s: float = 15.0) -> None:
    end = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"not within {deadline_s}s: {what}")
        time.sleep(0.01)  # polling server-side state; the deadline bounds it


class Server:
    """The app served by uvicorn on a loopback port, in a thread of this process."""

    def __init__(self, app: FastAPI, url: str) -> None:
        self.app = app
        self.url = url

    @property
    def slots(self) -> StreamSlots:
        slots: StreamSlots = self.app.state.stream_slots
        return slots

    @property
    def feeds(self) -> ThreadFeeds:
        feeds: ThreadFeeds = self.app.state.thread_feeds
        return feeds

    @property
    def db(self) -> Engine:
        engine: Engine = self.app.state.runtime.db
        return engine

    def key(self, tenant: str) -> access.IssuedKey:
        return access.create_key(self.db, tenant, "streams")

    def thread(self, key: access.IssuedKey) -> str:
        """A thread of `key`'s tenant with one turn (so its stream has a replay)."""
        thread = f"t-{uuid.uuid4().hex[:8]}"
        with OMClient(self.url, key.secret) as om:
            om.post_turn(thread, [{"id": "m0", "role": "user", "text": "hello there"}])
        return thread


@contextlib.contextmanager
def serving(tmp_path: Path, **limits: Any) -> Iterator[Server]:
    url = f"sqlite:///{tmp_path / 'om.db'}"
    engine = make_engine(url)
    upgrade(engine)
    engine.dispose()
    settings = ApiSettings(
        database_url=url,
        auth="keys",
        executor="inline",
        model="om-local/extractive",
        sse_poll_s=POLL_S,
        sse_heartbeat_s=0.5,
        **limits,
    )
    app = create_app(settings)
    port = free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", timeout_graceful_shutdown=2
    )
    server = uvicorn.Server(config)
    runner = threading.Thread(target=server.run, daemon=True)
    runner.start()
    try:
        wait_until("the API is listening", lambda: server.started or not runner.is_alive(), 30)
        assert server.started, "uvicorn did not start"
        yield Server(app, f"http://127.0.0.1:{port}")
    finally:
        server.should_exit = True
        runner.join(15)


class Streams:
    """Event streams held open by one HTTP client (one connection each), closed at the end."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.http = httpx.Client(base_url=server.url, timeout=10, limits=httpx.Limits(max_connections=200))
        self.open: list[httpx.Response] = []
        #: Each open stream's line iterator, kept: dropping one closes its connection.
        self._lines: dict[int, Iterator[str]] = {}

    def start(self, key: access.IssuedKey, thread: str) -> httpx.Response:
        """Open a stream; a refused one is read and closed (an accepted one is kept open)."""
        request = self.http.build_request(
            "GET", f"/v1/threads/{thread}/events", headers={"Authorization": f"Bearer {key.secret}"}
        )
        response = self.http.send(request, stream=True)
        if response.status_code == 200:
            self.open.append(response)
            self._lines[id(response)] = response.iter_lines()
        else:
            response.read()
            response.close()
        return response

    def first_event(self, response: httpx.Response) -> str:
        """Read the stream up to its first event (the end of its replay, for a thread with one)."""
        for line in self._lines[id(response)]:
            if line.startswith("data:"):
                return line
        raise AssertionError("the stream ended before its first event")

    def close(self) -> None:
        for response in self.open:
            response.close()
        self.http.close()


@contextlib.contextmanager
def holding(server: Server) -> Iterator[Streams]:
    """Streams closed before the server stops (else its shutdown waits for them)."""
    held = Streams(server)
    try:
        yield held
    finally:
        held.close()


def assert_refused(response: httpx.Response, setting: str) -> None:
    assert response.status_code == 429, f"answered {response.status_code}, not 429"
    assert int(response.headers["Retry-After"]) > 0
    error = response.json()["error"]
    assert error["code"] == "too_many_streams"
    assert setting in error["message"]


def test_a_key_past_its_cap_gets_429_while_another_key_still_opens_one(tmp_path: Path) -> None:
    with serving(tmp_path, sse_max_streams_per_key=3, sse_max_streams=10) as server, holding(server) as held:
        attacker, other = server.key("attacker"), server.key("other")
        attacked, own = server.thread(attacker), server.thread(other)
        for _ in range(3):
            assert held.start(attacker, attacked).status_code == 200
        assert_refused(held.start(attacker, attacked), "OM_SSE_MAX_STREAMS_PER_KEY")
        assert server.slots.open_streams(attacker.key.id) == 3, "a refused stream holds no slot"
        assert held.start(other, own).status_code == 200, "another key is not held back by the first"


def test_the_process_cap_counts_every_key(tmp_path: Path) -> None:
    with serving(tmp_path, sse_max_streams_per_key=3, sse_max_streams=4) as server, holding(server) as held:
        first, second = server.key("first"), server.key("second")
        one, two = server.thread(first), server.thread(second)
        for _ in range(3):
            assert held.start(first, one).status_code == 200
        assert held.start(second, two).status_code == 200
        assert_refused(held.start(second, two), "OM_SSE_MAX_STREAMS")
        assert server.slots.open_streams() == 4


def test_a_closed_stream_frees_its_slot_and_the_last_one_stops_the_poller(tmp_path: Path) -> None:
    with serving(tmp_path, sse_max_streams_per_key=2, sse_max_streams=10) as server, holding(server) as held:
        key = server.key("closer")
        thread = server.thread(key)
        first = held.start(key, thread)
        assert held.start(key, thread).status_code == 200
        assert held.start(key, thread).status_code == 429
        wait_until("both streams follow the thread's feed", lambda: server.feeds.followers() == 2)

        first.close()  # the client hangs up
        wait_until("the server gives the slot back", lambda: server.slots.open_streams(key.key.id) == 1)
        assert held.start(key, thread).status_code == 200, "the freed slot can be taken again"

        held.close()
        wait_until("every slot is back", lambda: server.slots.open_streams() == 0)
        wait_until("the thread's poller stops with its last follower", lambda: server.feeds.followed() == 0)


class OutboxReads:
    """Counts the outbox SELECTs the server's engine runs, with when each ran."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.times: list[float] = []
        self._changed = threading.Condition()

    def __enter__(self) -> OutboxReads:
        event.listen(self.engine, "before_cursor_execute", self._seen)
        return self

    def __exit__(self, *_: object) -> None:
        event.remove(self.engine, "before_cursor_execute", self._seen)

    def _seen(self, _conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "om_events" in statement:
            with self._changed:
                self.times.append(time.monotonic())
                self._changed.notify_all()

    def reset(self) -> None:
        with self._changed:
            self.times.clear()

    def wait_for(self, count: int, deadline_s: float) -> list[float]:
        with self._changed:
            if not self._changed.wait_for(lambda: len(self.times) >= count, timeout=deadline_s):
                raise AssertionError(f"only {len(self.times)} outbox reads within {deadline_s}s")
            return list(self.times[:count])


def test_k_followers_of_a_thread_cause_one_outbox_read_per_interval_not_k(tmp_path: Path) -> None:
    followers, reads = 8, 10
    with (
        serving(tmp_path, sse_max_streams_per_key=16) as server,
        OutboxReads(server.db) as outbox,
        holding(server) as held,
    ):
        key = server.key("crowd")
        thread = server.thread(key)
        for _ in range(followers):
            stream = held.start(key, thread)
            assert stream.status_code == 200
            held.first_event(stream)

        outbox.reset()
        times = outbox.wait_for(reads, deadline_s=30)
        # Each of K own pollers would read every interval: `reads` reads in about one interval. One shared
        # poller needs (reads - 1) intervals; a slow machine only makes that longer.
        spread = times[-1] - times[0]
        assert spread >= (reads - 1) * POLL_S * 0.75, f"{reads} outbox reads within {spread:.2f}s"
        assert (server.feeds.followed(), server.feeds.followers()) == (1, followers), (
            "one poller, K followers"
        )


def test_every_follower_of_a_shared_feed_gets_each_live_event_once(tmp_path: Path) -> None:
    with serving(tmp_path, sse_max_streams_per_key=16) as server:
        key = server.key("share")
        thread = server.thread(key)
        followers = [Follower(server.url, key.secret, thread) for _ in range(4)]
        try:
            replayed = [f.wait_for(lambda got: len(got) > 0, deadline_s=30) for f in followers]
            with OMClient(server.url, key.secret) as om:
                om.post_turn(thread, [{"id": "m1", "role": "user", "text": "a second turn"}])

            def new_status(before: list[OMEvent]) -> Callable[[list[OMEvent]], bool]:
                newest = max(e.id for e in before)
                return lambda got: any(e.type == "data-om-status" and e.id > newest for e in got)

            got = [f.wait_for(new_status(r), deadline_s=30) for f, r in zip(followers, replayed, strict=True)]
        finally:
            for follower in followers:
                follower.close()
    seen = [[e.id for e in events] for events in got]
    assert all(len(ids) == len(set(ids)) for ids in seen), "no event is sent twice on a stream"
    assert all(ids == seen[0] for ids in seen), f"every follower got the same events: {seen}"
