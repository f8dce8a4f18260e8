"""Live fan-out of `data-om-*` events on Redis pub/sub, for the actor's stream (SSE in `om_api`).

The durable copy is the outbox row written in the transaction of the change; pub/sub is fire-and-forget,
so a subscriber that was not listening replays from the outbox by event id. Every message carries that
id for exactly this reason.

Because a notification is only a hint, nothing waits for it to be sent: a turn that reports its status
answers the chat without a round trip to Redis, and a task acknowledges without one. The caller queues the
events; one sender thread per process publishes them, pipelined in batches.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections import deque
from collections.abc import Sequence
from typing import Any

import redis

from om_core import StoredEvent

CHANNEL_PREFIX = "om:events:"


def channel_for(thread_id: str) -> str:
    """The pub/sub channel of a thread (resource-scope events without a thread use their lookup key)."""
    return f"{CHANNEL_PREFIX}{thread_id}"


def event_message(event: StoredEvent) -> dict[str, Any]:
    """The JSON body of one published event; `type` and `data` match the stream part clients receive."""
    return {
        "id": event.id,
        "type": event.type,
        "threadId": event.thread_id,
        "lookupKey": event.lookup_key,
        "recordId": event.record_id,
        "cycleId": event.cycle_id,
        "createdAt": event.created_at.isoformat().replace("+00:00", "Z"),
        "data": event.payload,
    }


log = logging.getLogger("om.workers.events")

#: Notifications kept while Redis is slow or down; past this the oldest are dropped (streams still read
#: every event from the outbox, at most `sse_poll_s` later).
MAX_PENDING = 10_000


class RedisPublisher:
    """Implements the engine's `EventPublisher`: `publish` queues, a sender thread PUBLISHes.

    The thread starts on the first publish (again in a forked child, which does not inherit it) and sends
    everything queued so far in one pipeline, so under load many events share a round trip.
    """

    def __init__(self, client: redis.Redis, *, max_pending: int = MAX_PENDING) -> None:
        # A connection of its own: sharing the caller's pool would make a turn that checks the broker
        # while the sender holds the only idle connection open another one (a round trip) for nothing.
        pool = client.connection_pool
        self.client = redis.Redis(
            connection_pool=redis.ConnectionPool(
                connection_class=pool.connection_class, max_connections=1, **pool.connection_kwargs
            )
        )
        self._pending: deque[StoredEvent] = deque(maxlen=max_pending)
        self._wake = threading.Condition()
        self._sending = 0
        self._sender: threading.Thread | None = None
        self._pid = os.getpid()
        self._closed = False

    def publish(self, events: Sequence[StoredEvent]) -> None:
        if not events:
            return
        with self._wake:
            self._ensure_sender()
            self._pending.extend(events)
            self._wake.notify()

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Wait until everything queued so far was sent (or dropped); False if that took too long."""
        with self._wake:
            return self._wake.wait_for(lambda: not self._pending and not self._sending, timeout=timeout_s)

    def close(self, timeout_s: float = 2.0) -> None:
        """Send what is queued (within `timeout_s`), then stop the sender."""
        self.flush(timeout_s)
        with self._wake:
            self._closed = True
            self._wake.notify_all()

    def _ensure_sender(self) -> None:
        if self._pid != os.getpid():  # forked: the parent's queue and thread are not ours
            self._pending.clear()
            self._sender, self._sending, self._pid = None, 0, os.getpid()
        if self._sender is None or not self._sender.is_alive():
            self._closed = False
            self._sender = threading.Thread(target=self._run, name="om-event-publisher", daemon=True)
            self._sender.start()

    def _run(self) -> None:
        while True:
            with self._wake:
                self._wake.wait_for(lambda: self._pending or self._closed)
                if self._closed and not self._pending:
                    return
                batch = list(self._pending)
                self._pending.clear()
                self._sending = len(batch)
            try:
                self._send(batch)
            except redis.RedisError as exc:
                log.warning(
                    "publishing %d events failed (%s); streams read them from the outbox", len(batch), exc
                )
            except Exception:
                log.exception("publishing %d events failed; streams read them from the outbox", len(batch))
            finally:
                with self._wake:
                    self._sending = 0
                    self._wake.notify_all()

    def _send(self, events: Sequence[StoredEvent]) -> None:
        pipe = self.client.pipeline(transaction=False)
        for event in events:
            channel = channel_for(event.thread_id or event.lookup_key)
            pipe.publish(channel, json.dumps(event_message(event), default=str))
        pipe.execute()
