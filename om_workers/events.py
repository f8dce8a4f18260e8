"""Live fan-out of `data-om-*` events on Redis pub/sub, for the actor's stream (SSE in `om_api`).

The durable copy is the outbox row written in the transaction of the change; pub/sub is fire-and-forget,
so a subscriber that was not listening replays from the outbox by event id. Every message carries that
id for exactly this reason.
"""

from __future__ import annotations

import json
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


class RedisPublisher:
    """Implements the engine's `EventPublisher`: one PUBLISH per event, pipelined per batch."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def publish(self, events: Sequence[StoredEvent]) -> None:
        if not events:
            return
        pipe = self.client.pipeline(transaction=False)
        for event in events:
            channel = channel_for(event.thread_id or event.lookup_key)
            pipe.publish(channel, json.dumps(event_message(event), default=str))
        pipe.execute()
