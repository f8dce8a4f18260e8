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
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from om_core import StoredEvent

log = logging.getLogger("om.api.sse")

CHANNEL_PREFIX = "om:events:"
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

    def subscriber_count(self) -> int:
        with self._guard:
            return sum(len(w) for w in self._waiters.values())


async def listen_redis(redis_url: str, fanout: EventFanout, stop: asyncio.Event) -> None:
    """Forward Redis pub/sub notifications of every thread to local streams, reconnecting with back-off."""
    from redis import asyncio as aioredis

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


async def stream(
    *,
    thread_id: str,
    cursor: str | None,
    follow: bool,
    read: Callable[[int, int], Any],
    fanout: EventFanout,
    poll_s: float,
    heartbeat_s: float,
    settle_s: float,
    is_disconnected: Callable[[], Any],
) -> AsyncIterator[str]:
    """The SSE body: replay everything the cursor has not seen, then (if `follow`) the live tail.

    `read(after_id, limit)` is an awaitable outbox read for this thread, in id order.
    """
    floor, delivered = parse_cursor(cursor)
    tail = _Tail(floor, delivered, settle_s)
    with fanout.subscribe(thread_id) as wake:
        yield "retry: 2000\n\n"
        position = floor
        while True:
            page: list[StoredEvent] = await read(position, REPLAY_PAGE)
            for event in page:
                position = event.id
                if tail.replayed(event):
                    yield format_event(event, tail.cursor())
            if len(page) < REPLAY_PAGE:
                break
        if not follow:
            return
        last_sent = time.monotonic()
        while True:
            with suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), timeout=poll_s)
            wake.clear()
            if await is_disconnected():
                return
            rows: list[StoredEvent] = await read(tail.floor, 2_000)
            for event in tail.fresh(rows, 2_000):
                yield format_event(event, tail.delivered(event))
                last_sent = time.monotonic()
            tail.settle()
            if time.monotonic() - last_sent >= heartbeat_s:
                yield ": keep-alive\n\n"
                last_sent = time.monotonic()
