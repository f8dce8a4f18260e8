"""The Redis event publisher sends after the caller moved on (issue 29): a turn queues its status event and
answers; the sender thread publishes. Against the real Redis that `make test` starts."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
import redis

from om_adapters.redis_events import RedisPublisher, channel_for
from om_core import StoredEvent

pytestmark = [pytest.mark.redis]


def _event(thread_id: str, event_id: int) -> StoredEvent:
    return StoredEvent(
        id=event_id,
        type="data-om-status",
        thread_id=thread_id,
        lookup_key=f"thread:{thread_id}",
        record_id="rec",
        cycle_id=None,
        payload={"n": event_id},
        created_at=datetime.now(UTC),
    )


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    connection = redis.Redis.from_url(redis_url)
    yield connection
    connection.client_unpause()
    connection.close()


def _received(subscriber: redis.client.PubSub, count: int, deadline_s: float = 10.0) -> list[int]:
    ids: list[int] = []
    end = time.monotonic() + deadline_s
    while len(ids) < count and time.monotonic() < end:
        message = subscriber.get_message(ignore_subscribe_messages=True, timeout=0.5)
        if message is not None:
            ids.append(json.loads(message["data"])["id"])
    return ids


def test_publish_returns_while_redis_holds_the_sender_then_everything_arrives(client: redis.Redis) -> None:
    thread = f"pub-{uuid.uuid4().hex[:8]}"
    subscriber = client.pubsub()  # type: ignore[no-untyped-call]
    subscriber.subscribe(channel_for(thread))
    assert subscriber.get_message(timeout=5) is not None  # the subscribe confirmation
    publisher = RedisPublisher(client)
    try:
        client.client_pause(10_000, all=False)  # PUBLISH waits while paused
        publisher.publish([_event(thread, 1)])
        publisher.publish([_event(thread, 2), _event(thread, 3)])
        assert not publisher.flush(timeout_s=0.3), "the sender is held by the pause, the callers were not"
        client.client_unpause()
        assert publisher.flush(timeout_s=10)
        assert sorted(_received(subscriber, 3)) == [1, 2, 3]
    finally:
        publisher.close()
        subscriber.close()


def test_a_broker_that_is_gone_loses_only_the_notifications(redis_url: str) -> None:
    """Publishing never raises to the caller; what could not be sent is dropped (the outbox keeps it)."""
    dead = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
    publisher = RedisPublisher(dead)
    try:
        publisher.publish([_event("gone", 1)])
        assert publisher.flush(timeout_s=10), "a failed send still empties the queue"
        publisher.publish([_event("gone", 2)])
        assert publisher.flush(timeout_s=10), "and the sender keeps serving"
    finally:
        publisher.close()
