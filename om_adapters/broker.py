"""kombu's Redis transport, sharing one client per channel for its bookkeeping commands.

With `acks_late`, kombu records every delivered message in its "unacked" hash and removes it on the ack
(`QoS.append`, `QoS.ack`); each of those calls, and every publish, went through
`Channel.conn_or_acquire`, which builds a new `redis.Redis` for the one command. Building one costs
~170 µs of CPU with the GIL held (its response-callback table is rebuilt each time), and a worker does two
per task: sampled under a 16-thread backlog of buffered observations, 4.4 % of a worker's GIL time went
there. A `redis.Redis` is safe to share between threads (each command checks a connection out of the
pool), so this channel keeps one and builds a new one only when kombu replaces the pool (after a fork or
a failed connect). Everything else is kombu's Redis transport unchanged.

Only plain `redis://` brokers use it (`transport_for`): `rediss://` keeps kombu's own TLS defaults and
any other broker its own transport.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlparse

from kombu.transport import redis as kombu_redis

#: What Celery's `broker_transport` names for a `redis://` broker.
TRANSPORT = "om_adapters.broker:Transport"


class Channel(kombu_redis.Channel):
    @contextmanager
    def conn_or_acquire(self, client: Any = None) -> Iterator[Any]:
        if client:
            yield client
            return
        pool = self.pool
        shared = self.__dict__.get("_shared_client")
        if shared is None or shared.connection_pool is not pool:
            shared = self._create_client()  # type: ignore[no-untyped-call]
            self.__dict__["_shared_client"] = shared
        yield shared


class Transport(kombu_redis.Transport):
    Channel = Channel


def transport_for(broker_url: str) -> str | None:
    """Our transport for a `redis://` broker; None (Celery picks by scheme) for any other."""
    return TRANSPORT if urlparse(broker_url).scheme == "redis" else None


def restore_unacked(broker_url: str, *, queues: Collection[str] | None = None, timeout_s: float = 5.0) -> int:
    """Put every message delivered but not acknowledged back on its queue (only those of `queues` when
    given); returns how many.

    Only for queues whose consumers are all known to be dead: the embedded stack calls it before it
    (re)starts a worker, with that worker's queues (no other process of the stack consumes them). Without
    it, the tasks a SIGKILLed worker held (the synchronous observation a turn waits for, a buffering cycle)
    stay invisible for the whole visibility timeout (20 minutes by default) before kombu hands them out
    again. With a live consumer this would run its messages twice, which is why the other worker's
    messages, recognised by their routing key (each queue's own: `om_adapters.celery_app`), stay where
    they are.
    """
    from kombu.connection import Connection

    options = {"socket_connect_timeout": timeout_s, "socket_timeout": timeout_s}
    connection = Connection(  # type: ignore[no-untyped-call]
        broker_url, transport=Transport, transport_options=options
    )
    with connection:
        channel: Any = connection.default_channel
        client = channel.client
        held: dict[bytes, bytes] = client.hgetall(channel.unacked_key)
        tags = [tag for tag, entry in held.items() if queues is None or _routing_key(entry) in queues]
        for tag in tags:
            channel.qos.restore_by_tag(tag, client)
    return len(tags)


def _routing_key(entry: bytes) -> str | None:
    """The routing key of an entry of kombu's unacked hash (`[message, exchange, routing_key]` as JSON)."""
    try:
        _message, _exchange, routing_key = json.loads(entry)
    except (ValueError, TypeError):
        return None
    return routing_key if isinstance(routing_key, str) else None
