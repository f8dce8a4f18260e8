"""A Celery task that holds a worker's slot until the test lets it go, to fill a worker's pool for real.

Workers load it with `OM_WORKER_IMPORTS=tests.support.held_tasks`; a test sends `HOLD` by name to the queue
whose worker it wants to fill (`send_held`). Each run counts itself in Redis (`OM_REDIS_URL`) under the
test's prefix: `running` now, `most` at once, `done`; it returns when the test pushes a token on
`release` (one per task), or after `timeout_s` so a failed test never leaves a worker busy.
"""

from __future__ import annotations

import os
import time

import redis

from om_workers.app import app

HOLD = "om.test.hold"

#: Raise `most` to the running count if it is higher, atomically.
_RAISE_MOST = """
local now = tonumber(ARGV[1])
if now > tonumber(redis.call('GET', KEYS[1]) or '0') then redis.call('SET', KEYS[1], now) end
"""


def key(prefix: str, name: str) -> str:
    return f"om-test:held:{prefix}:{name}"


def hold(prefix: str, timeout_s: float = 240.0) -> None:
    # Its own socket timeout: the worker's default one (a few seconds) would end the wait early.
    client = redis.Redis.from_url(os.environ["OM_REDIS_URL"], socket_timeout=30)
    running = client.incr(key(prefix, "running"))
    client.eval(_RAISE_MOST, 1, key(prefix, "most"), running)
    end = time.monotonic() + timeout_s
    try:
        while time.monotonic() < end and client.blpop([key(prefix, "release")], timeout=5) is None:
            pass
    finally:
        client.decr(key(prefix, "running"))
        client.incr(key(prefix, "done"))


app.task(name=HOLD)(hold)


def send_held(broker_url: str, queue: str, prefix: str, count: int) -> None:
    """`count` held tasks on `queue`, sent by name as the API sends its tasks (producer only)."""
    from celery import Celery

    producer = Celery("om-test", broker=broker_url)
    for _ in range(count):
        producer.send_task(HOLD, args=[prefix], queue=queue, routing_key=queue, ignore_result=True)


def counts(client: redis.Redis, prefix: str) -> dict[str, int]:
    names = ("running", "most", "done")
    values = client.mget([key(prefix, name) for name in names])
    return {name: int(value or 0) for name, value in zip(names, values, strict=True)}
