"""The broker transport: kombu's Redis transport with one client per channel, on a real Redis.

Every real-worker test runs through it too (redelivery, acknowledgements, restarts); these pin what it
changes: which brokers get it, that a channel's bookkeeping reuses one client, and that a replaced pool
(after a fork or a failed connect) gets a fresh one.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
import redis
from kombu import Connection, Exchange, Queue

from om_adapters.broker import TRANSPORT
from om_adapters.celery_app import create_app
from om_core.config.settings import Settings
from tests.support.workers import redis_db_url

pytestmark = [pytest.mark.redis]


@pytest.mark.parametrize(
    ("url", "transport"),
    [
        ("redis://127.0.0.1:6379/0", TRANSPORT),
        ("rediss://127.0.0.1:6380/0", "rediss"),  # kombu's own TLS defaults
        ("amqp://guest@127.0.0.1:5672//", "amqp"),
    ],
)
def test_only_plain_redis_brokers_use_the_shared_client_transport(url: str, transport: str) -> None:
    app = create_app(Settings(redis_url="redis://127.0.0.1:6379/0", broker_url=url))
    assert app.connection_for_write().transport_cls == transport


def _counting_clients(channel: Any) -> list[bool]:
    created: list[bool] = []
    original: Callable[..., Any] = channel._create_client

    def create(asynchronous: bool = False) -> Any:
        created.append(asynchronous)
        return original(asynchronous=asynchronous)

    channel._create_client = create
    return created


def test_a_channel_acknowledges_through_one_client_and_rebuilds_it_with_a_new_pool(redis_url: str) -> None:
    url = redis_db_url(redis_url, 5)
    name = f"om-test-broker-{uuid.uuid4().hex[:8]}"
    queue = Queue(name, Exchange(name, "direct"), routing_key=name)
    inspect = redis.Redis.from_url(url)
    with Connection(url, transport=TRANSPORT) as connection:
        channel = connection.channel()
        created = _counting_clients(channel)
        producer = connection.Producer(channel)
        for index in range(20):
            producer.publish({"n": index}, exchange=queue.exchange, routing_key=name, declare=[queue])
        tags = []
        for index in range(20):
            message = queue(channel).get(no_ack=False)  # recorded in kombu's unacked hash
            assert message is not None and message.payload == {"n": index}
            tags.append(message.delivery_tag)
            assert inspect.hexists("unacked", message.delivery_tag)
            message.ack()
        assert not [tag for tag in tags if inspect.hexists("unacked", tag)], "every ack cleared its entry"
        assert created.count(False) == 1, f"{created.count(False)} clients for 20 publishes, gets and acks"

        channel._disconnect_pools()  # what kombu does after a fork: the old pool is gone
        producer.publish({"n": "after"}, exchange=queue.exchange, routing_key=name)
        message = queue(channel).get(no_ack=False)
        assert message is not None and message.payload == {"n": "after"}
        message.ack()
        assert created.count(False) == 2, "a fresh client for the fresh pool"
        queue(channel).delete()
    inspect.close()
