"""What a turn sends to Redis: nothing it waits for, unless background work is due (issue 29).

The API runs in its production shape (`OM_EXECUTOR=celery`) against a Redis of its own, so the server's
command statistics count exactly what this API sent. Between two buffering intervals a turn needs no lock,
counter or broker answer from Redis: its only trace there is the status event's PUBLISH, which a sender
thread makes after the turn answered. A turn that crosses an interval does read the coordination state and
enqueue the buffering task, which is the positive control: the counting sees commands when there are some.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis
from sqlalchemy import Engine

from om_app.embedded import start_redis, stop_process
from tests.support.api_server import ApiServer, new_id, run_api_server

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

#: A buffering interval of 50 tokens: small turns stay inside one, a long one crosses it.
SMALL_INTERVAL = {"observation": {"messageTokens": 200, "bufferTokens": 0.25}}


@pytest.fixture(scope="module")
def own_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    process, url = start_redis(tmp_path_factory.mktemp("redis"))
    try:
        yield url
    finally:
        stop_process(process)


@pytest.fixture(scope="module")
def server(
    postgres_url: str, own_redis: str, pg_engine: Engine, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApiServer]:
    env = {"OM_EXECUTOR": "celery", "OM_AUTH": "none"}
    with run_api_server(postgres_url, own_redis, tmp_path_factory.mktemp("api"), env=env) as api:
        yield api


def _commands(client: redis.Redis) -> Counter[str]:
    stats = client.info("commandstats")
    return Counter({name.removeprefix("cmdstat_"): int(s["calls"]) for name, s in stats.items()})


def _sent_since(client: redis.Redis, before: Counter[str]) -> Counter[str]:
    """Commands sent since `before`, the statistics reads of this test left out."""
    delta = _commands(client) - before
    del delta["info"]
    return delta


def _settled(client: redis.Redis, before: Counter[str], deadline_s: float = 10.0) -> Counter[str]:
    """The commands since `before` once the count stops moving (the publisher sends after the answer)."""
    end = time.monotonic() + deadline_s
    last = _sent_since(client, before)
    while time.monotonic() < end:
        time.sleep(0.2)  # sampling a counter until two reads agree; the deadline bounds it
        now = _sent_since(client, before)
        if now == last:
            return now
        last = now
    return last


def _turn(http: httpx.Client, thread: str, role: str, text: str, context: str) -> None:
    body = {"messages": [{"role": role, "text": text}], "resource_id": f"user-{thread}", "context": context}
    response = http.post(f"/v1/threads/{thread}/turns", json=body)
    assert response.status_code == 200, response.text


def test_a_turn_between_intervals_waits_on_no_redis_command(server: ApiServer, own_redis: str) -> None:
    client = redis.Redis.from_url(own_redis)
    thread = new_id("quiet")
    with httpx.Client(base_url=server.base_url, timeout=30) as http:
        for i in range(3):  # creates the thread; the connection pool grows to what two threads use
            _turn(http, thread, "user", f"hello {i}", "openai")
            _turn(http, thread, "assistant", f"hi {i}", "none")
        _settled(client, Counter())
        before = _commands(client)
        for i in range(5):
            _turn(http, thread, "user", f"short question {i}", "openai")
            _turn(http, thread, "assistant", f"short answer {i}", "none")
        sent = _settled(client, before)
    assert set(sent) == {"publish"}, f"a quiet turn sent {dict(sent)}"
    assert 1 <= sent["publish"] <= 10, "one status event per call, published in batches"


def test_a_turn_that_crosses_an_interval_reads_the_locks_and_enqueues(
    server: ApiServer, own_redis: str
) -> None:
    client = redis.Redis.from_url(own_redis)
    thread = new_id("due")
    with httpx.Client(base_url=server.base_url, timeout=30) as http:
        response = http.put(
            f"/v1/threads/{thread}/config",
            json={"overrides": SMALL_INTERVAL, "resource_id": f"user-{thread}"},
        )
        assert response.status_code == 200, response.text
        _turn(http, thread, "user", "hi", "openai")
        _settled(client, Counter())
        before = _commands(client)
        _turn(http, thread, "user", "a longer message about the garden and the roses " * 6, "openai")
        sent = _settled(client, before)
    assert sent["mget"] >= 1, f"the due turn reads the coordination state: {dict(sent)}"
    assert sent["lpush"] >= 1, f"and sends the buffering task: {dict(sent)}"


def test_a_stopped_broker_still_refuses_the_turn_before_anything_is_stored(
    postgres_url: str, pg_engine: Engine, tmp_path: Path
) -> None:
    """The broker check costs no round trip, yet a Redis that stopped after the API connected is noticed
    on the next turn: its connections were closed, and reconnecting fails."""
    process, url = start_redis(tmp_path / "redis")
    env = {"OM_EXECUTOR": "celery", "OM_AUTH": "none"}
    try:
        with (
            run_api_server(postgres_url, url, tmp_path / "api", env=env) as api,
            httpx.Client(base_url=api.base_url, timeout=30) as http,
        ):
            thread = new_id("stopped")
            _turn(http, thread, "user", "first", "openai")
            stop_process(process)
            body = {"messages": [{"id": "second", "role": "user", "text": "second"}], "context": "none"}
            refused = http.post(f"/v1/threads/{thread}/turns", json={**body, "resource_id": f"user-{thread}"})
            assert refused.status_code == 503, refused.text
            assert refused.json()["error"]["code"] == "broker_unavailable"
            items = http.get(f"/v1/threads/{thread}/messages", params={"limit": 10}).json()["items"]
            assert len(items) == 1 and items[0]["id"] != "second", "the refused turn stored nothing"
    finally:
        stop_process(process)
