"""Live `data-om-*` events as Server-Sent Events, with replay from the outbox.

The outbox is the only source of what a stream sends: every event is read from `om_events`, so a
reconnecting client gets exactly what it missed and the live tail can never disagree with the replay.
Notifications only say "look again": events published in this process (inline mode) and on Redis pub/sub
channels `om:events:<thread_id>` (workers, other replicas) wake the streams of that thread; without them
a stream still reads the outbox every `sse_poll_s`.

Outbox ids come from a database sequence, and two transactions can commit out of id order, so "resume
after the last id I saw" could skip an event that committed late with a lower id. The stream therefore
keeps re-reading the ids it sent in the last `sse_settle_s` seconds, and each message's SSE `id:` is a
resume cursor rather than the event id: `<floor>` or `<floor>~<d1>,<d2>,...`, meaning "everything up to
`floor`, plus the events `floor + d1`, `floor + d2`, ...". A client that reconnects with it (browsers
send it as `Last-Event-ID` on their own) gets every event it has not seen, once. A plain event id is a
valid cursor too (it names a floor), only without that protection.

Many clients may follow one thread (dashboards, tabs, replicas of a chat backend). The live tail of a
thread is therefore read by ONE poller per process (`ThreadFeeds`), woken by the notifications and at
least every `sse_poll_s`; its reads are shared by every stream of that thread, so K followers cost one
outbox read per interval, not K. Each stream keeps its own cursor (`_Tail`) and takes from a shared read
only what it has not sent; the poller reads after the lowest floor of its followers, so each read holds
everything any of them still needs. Replays stay per stream: each starts from its own cursor, once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from om_core import StoredEvent

log = logging.getLogger("om.api.sse")

REPLAY_PAGE = 500


@dataclass(frozen=True)
class _Waiter:
    loop: asyncio.AbstractEventLoop
    event: asyncio.Event


class EventFanout:
    """Wakes the streams of a thread; thread-safe, because the engine publishes from worker threads."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._waiters: dict[str, set[_Waiter]] = {}

    def publish(self, events: Sequence[StoredEvent]) -> None:
        for thread_id in {e.thread_id for e in events if e.thread_id}:
            self.notify(thread_id)

    def notify(self, thread_id: str) -> None:
        with self._guard:
            waiters = list(self._waiters.get(thread_id, ()))
        for waiter in waiters:
            try:
                waiter.loop.call_soon_threadsafe(waiter.event.set)
            except RuntimeError:  # the stream's loop is closed: it is going away
                continue

    @contextmanager
    def subscribe(self, thread_id: str) -> Iterator[asyncio.Event]:
        waiter = _Waiter(asyncio.get_running_loop(), asyncio.Event())
        with self._guard:
            self._waiters.setdefault(thread_id, set()).add(waiter)
        try:
            yield waiter.event
        finally:
            with self._guard:
                remaining = self._waiters.get(thread_id)
                if remaining is not None:
                    remaining.discard(waiter)
                    if not remaining:
                        del self._waiters[thread_id]


async def listen_redis(redis_url: str, fanout: EventFanout, stop: asyncio.Event) -> None:
    """Forward Redis pub/sub notifications of every thread to local streams, reconnecting with back-off.
    The channels are the ones the workers' publisher writes (`om_adapters.redis_events`)."""
    from redis import asyncio as aioredis

    from om_adapters.redis_events import CHANNEL_PREFIX

    delay = 0.5
    while not stop.is_set():
        client = aioredis.from_url(redis_url)
        pubsub = client.pubsub()
        try:
            await pubsub.psubscribe(CHANNEL_PREFIX + "*")
            delay = 0.5
            while not stop.is_set():
                message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                if message is None:
                    continue
                channel = message.get("channel")
                name = channel.decode() if isinstance(channel, bytes) else str(channel)
                if name.startswith(CHANNEL_PREFIX):
                    fanout.notify(name[len(CHANNEL_PREFIX) :])
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("event notifications from Redis interrupted (%s); streams poll the outbox", exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 15.0)
        finally:
            with suppress(Exception):
                await pubsub.aclose()  # type: ignore[no-untyped-call]
                await client.aclose()


def format_event(event: StoredEvent, cursor: str) -> str:
    """One SSE message: the resume cursor as `id:`, and the data part `{id, type, data}` as JSON."""
    body = json.dumps({"id": event.id, "type": event.type, "data": event.payload}, ensure_ascii=False)
    return f"id: {cursor}\ndata: {body}\n\n"


#: Past this many recent ids a cursor keeps only its floor (a reconnect may then repeat a few events).
MAX_CURSOR_IDS = 200
CURSOR_PATTERN = r"^[0-9]{1,19}(~[0-9]{1,19}(,[0-9]{1,19})*)?$"


def parse_cursor(cursor: str | None) -> tuple[int, frozenset[int]]:
    """(floor, ids above it already delivered) of a resume cursor; `None` means from the start."""
    if not cursor:
        return 0, frozenset()
    floor_text, _, extra = cursor.partition("~")
    floor = int(floor_text)
    return floor, frozenset(floor + int(d) for d in extra.split(",") if d) if extra else frozenset()


class _Tail:
    """What a stream delivered: everything up to `floor`, plus the recent ids in `sent` (re-read until they
    are `settle_s` old, so an event that commits late with a lower id is still found)."""

    def __init__(self, floor: int, delivered: frozenset[int], settle_s: float) -> None:
        self.floor = floor
        self.settle_s = settle_s
        now = time.monotonic()
        self.sent: dict[int, float] = {event_id: now for event_id in delivered if event_id > floor}
        self.replay_settled = True

    def cursor(self) -> str:
        extra = sorted(self.sent)
        if not extra or len(extra) > MAX_CURSOR_IDS:
            return str(self.floor)
        return f"{self.floor}~{','.join(str(i - self.floor) for i in extra)}"

    def replayed(self, event: StoredEvent) -> bool:
        """Record a replayed event; False if the client already has it. Old events settle at once."""
        if event.id in self.sent or event.id <= self.floor:
            return False
        old = event.created_at <= datetime.now(UTC) - timedelta(seconds=self.settle_s)
        if self.replay_settled and old and not self.sent:
            self.floor = event.id
        else:
            self.replay_settled = False
            self.sent[event.id] = time.monotonic()
        return True

    def fresh(self, rows: Sequence[StoredEvent], limit: int) -> list[StoredEvent]:
        """The rows of a live read the client does not have yet, in id order. Each is recorded by
        `delivered` only as it is sent: a message's cursor must not claim the events after it."""
        out = [row for row in rows if row.id not in self.sent and row.id > self.floor]
        if rows and len(rows) >= limit and not out:
            self.floor = max(self.floor, rows[-1].id)  # a full page of delivered ids: step past it
        return out

    def delivered(self, event: StoredEvent) -> str:
        """Record a live event as sent; returns the cursor that covers it and everything before it."""
        self.sent[event.id] = time.monotonic()
        return self.cursor()

    def settle(self) -> None:
        """Fold the ids sent more than `settle_s` ago into the floor: no lower id can commit after that."""
        now = time.monotonic()
        for event_id, at in sorted(self.sent.items()):
            if now - at < self.settle_s:
                continue
            self.floor = max(self.floor, event_id)
            del self.sent[event_id]
        for event_id in [i for i in self.sent if i <= self.floor]:
            del self.sent[event_id]


#: Most rows one live read returns; a full page means there may be more (read again next interval).
LIVE_PAGE = 2_000

#: `read(after_id, limit)`: an awaitable outbox read of one thread, in id order.
Read = Callable[[int, int], Awaitable[list[StoredEvent]]]


@dataclass(frozen=True)
class FeedRead:
    """One shared outbox read of a thread: every row after `after_id`, up to `LIVE_PAGE` of them.
    `generation` counts the reads of the feed; `failed` says the read raised (the poller logged why)."""

    generation: int
    after_id: int
    rows: Sequence[StoredEvent]
    failed: bool = False


class FeedMember:
    """One stream following a thread's feed. `floor` is what it still needs: everything after it."""

    def __init__(self, feed: ThreadFeed, floor: int) -> None:
        self.feed = feed
        self.floor = floor
        #: Reads up to this one started before the member joined: they may not cover its floor.
        self.seen = feed.latest.generation

    async def next_read(self, timeout_s: float) -> FeedRead | None:
        """The newest read the member has not taken yet, or None when none came within `timeout_s`."""
        read = await self.feed.newer_than(self.seen, timeout_s)
        if read is not None:
            self.seen = read.generation
        return read


class ThreadFeed:
    """The one poller of a thread's outbox in this process (and event loop), shared by its streams.

    It reads when a notification wakes it and at least every `poll_s`, after the lowest floor of its
    members, and keeps only the newest read: a member that fell behind takes the newest, which holds
    everything an older one did (floors only rise, rows are only added)."""

    def __init__(self, thread_id: str, read: Read, fanout: EventFanout, poll_s: float) -> None:
        self.thread_id = thread_id
        self._read = read
        self._fanout = fanout
        self._poll_s = poll_s
        self.members: set[FeedMember] = set()
        self.latest = FeedRead(generation=0, after_id=0, rows=())
        self._published = asyncio.Event()
        self._failing = False
        self._task = asyncio.get_running_loop().create_task(self._poll(), name=f"om-feed-{thread_id}")

    def stop(self) -> None:
        self._task.cancel()

    async def newer_than(self, generation: int, timeout_s: float) -> FeedRead | None:
        if self.latest.generation <= generation:
            published = self._published  # replaced at each read: wait for the next one
            with suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    await published.wait()
        return self.latest if self.latest.generation > generation else None

    async def _poll(self) -> None:
        with self._fanout.subscribe(self.thread_id) as wake:
            while True:
                with suppress(TimeoutError):
                    async with asyncio.timeout(self._poll_s):
                        await wake.wait()
                wake.clear()
                if self.members:
                    self._publish(await self._read_after(min(m.floor for m in self.members)))

    async def _read_after(self, after_id: int) -> FeedRead:
        generation = self.latest.generation + 1
        try:
            rows = await self._read(after_id, LIVE_PAGE)
        except Exception as exc:
            # The members keep their cursors and wait for the next read: an outage of the database
            # does not end every stream at once (nor make all their clients reconnect together).
            if not self._failing:
                log.warning("reading the events of a followed thread failed (%s); retrying", exc)
            self._failing = True
            return FeedRead(generation, after_id, (), failed=True)
        self._failing = False
        return FeedRead(generation, after_id, rows)

    def _publish(self, read: FeedRead) -> None:
        self.latest = read
        published, self._published = self._published, asyncio.Event()
        published.set()


class ThreadFeeds:
    """The feeds of this process, one per followed thread and event loop, each stopped when its last
    member leaves. Thread-safe: test clients run apps on loops of their own threads."""

    def __init__(self, fanout: EventFanout, poll_s: float) -> None:
        self.fanout = fanout
        self.poll_s = poll_s
        self._guard = threading.Lock()
        self._feeds: dict[tuple[asyncio.AbstractEventLoop, str], ThreadFeed] = {}

    @contextmanager
    def follow(self, thread_id: str, read: Read, floor: int) -> Iterator[FeedMember]:
        """Membership of the thread's feed from `floor` on. Leaving is synchronous, so a stream closed
        by cancellation or by `aclose` leaves at once."""
        key = (asyncio.get_running_loop(), thread_id)
        with self._guard:
            feed = self._feeds.get(key)
            if feed is None:
                feed = self._feeds[key] = ThreadFeed(thread_id, read, self.fanout, self.poll_s)
            member = FeedMember(feed, floor)
            feed.members.add(member)
        try:
            yield member
        finally:
            with self._guard:
                feed.members.discard(member)
                if not feed.members and self._feeds.get(key) is feed:
                    del self._feeds[key]
                    feed.stop()

    def followed(self) -> int:
        """How many threads have a poller now."""
        with self._guard:
            return len(self._feeds)

    def followers(self) -> int:
        """How many live streams share those pollers."""
        with self._guard:
            return sum(len(feed.members) for feed in self._feeds.values())


async def stream(
    *,
    thread_id: str,
    cursor: str | None,
    follow: bool,
    read: Read,
    feeds: ThreadFeeds,
    heartbeat_s: float,
    settle_s: float,
    is_disconnected: Callable[[], Awaitable[bool]],
) -> AsyncIterator[str]:
    """The SSE body: replay everything the cursor has not seen (own reads), then, if `follow`, the live
    tail from the thread's shared feed."""
    floor, delivered = parse_cursor(cursor)
    tail = _Tail(floor, delivered, settle_s)
    yield "retry: 2000\n\n"
    position = floor
    while True:
        page = await read(position, REPLAY_PAGE)
        for event in page:
            position = event.id
            if tail.replayed(event):
                yield format_event(event, tail.cursor())
        if len(page) < REPLAY_PAGE:
            break
    if not follow:
        return
    with feeds.follow(thread_id, read, tail.floor) as member:
        last_sent = time.monotonic()
        while True:
            shared = await member.next_read(feeds.poll_s)
            if await is_disconnected():
                return
            # A read that started below this stream's floor holds all it needs; one that started above
            # (before the stream joined) may not, and the next read will.
            if shared is not None and not shared.failed and shared.after_id <= tail.floor:
                for event in tail.fresh(shared.rows, LIVE_PAGE):
                    yield format_event(event, tail.delivered(event))
                    last_sent = time.monotonic()
            tail.settle()
            member.floor = tail.floor
            if time.monotonic() - last_sent >= heartbeat_s:
                yield ": keep-alive\n\n"
                last_sent = time.monotonic()
