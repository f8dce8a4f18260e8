"""The client's retries against a scripted loopback server: waits read from the server's own clock (when
each request arrived), never from sleeps in the test. Every test is bounded by its pytest timeout."""

from __future__ import annotations

import asyncio
import socket
import time
from email.utils import formatdate

import httpx
import pytest

from om_client import (
    AsyncOMClient,
    OMBadRequest,
    OMClient,
    OMRateLimited,
    OMRetriesExhausted,
    OMUnavailable,
    RetryPolicy,
)
from tests.client.loopback import Answer, scripted, unavailable

pytestmark = pytest.mark.timeout(60)

OK = Answer(200, {"status": "ok"})
QUICK = RetryPolicy(attempts=3, backoff_s=0.01, max_backoff_s=0.05, budget_s=10)


def test_a_503_is_retried_no_sooner_than_its_retry_after() -> None:
    with scripted([unavailable(retry_after="1"), OK]) as server:
        with OMClient(server.base_url, "omk_test", timeout=10, retry=QUICK) as om:
            assert om.health().status == "ok"
        assert [s.path for s in server.seen] == ["/healthz", "/healthz"]
        (gap,) = server.gaps()
        assert gap >= 1.0, f"the retry came {gap:.3f}s after a 503 that said Retry-After: 1"


def test_the_async_client_honours_a_429_retry_after_given_as_a_date() -> None:
    not_before = int(time.time()) + 2  # an HTTP date has whole seconds
    when = formatdate(not_before, usegmt=True)
    limited = Answer(429, {"error": {"code": "rate_limited", "message": "slow down"}}, {"Retry-After": when})

    async def call(base_url: str) -> str:
        async with AsyncOMClient(base_url, "omk_test", timeout=10, retry=QUICK) as om:
            return (await om.health()).status

    with scripted([limited, OK]) as server:
        assert asyncio.run(call(server.base_url)) == "ok"
        first, retry = server.seen
    assert retry.wall >= not_before, f"the retry came {not_before - retry.wall:.3f}s before {when}"
    assert retry.at - first.at >= 0.5, "the date asked for a wait: QUICK's backoff alone is 10 ms"


def test_retries_stop_at_the_attempt_limit_with_a_clear_error() -> None:
    with scripted([unavailable(retry_after="0")]) as server:
        om = OMClient(server.base_url, "omk_test", retry=QUICK)
        with om, pytest.raises(OMRetriesExhausted) as caught:
            om.status("t-1")
        assert len(server.seen) == 3
    error = caught.value
    assert isinstance(error, OMUnavailable) and error.attempts == 3 and error.status == 503
    assert isinstance(error.last_error, OMUnavailable) and error.last_error.code == "database_unavailable"
    assert "gave up after 3 attempt(s)" in str(error) and "database_unavailable" in str(error)


def test_a_retry_after_longer_than_the_budget_gives_up_at_once() -> None:
    policy = RetryPolicy(attempts=5, budget_s=2)
    with scripted([unavailable(retry_after="60")]) as server:
        om = OMClient(server.base_url, "omk_test", retry=policy)
        with om, pytest.raises(OMRetriesExhausted) as caught:
            om.health()
        assert len(server.seen) == 1
    assert "budget" in str(caught.value) and caught.value.attempts == 1


def test_a_retried_turn_sends_the_same_message_ids() -> None:
    with scripted([unavailable(retry_after="0")]) as server:
        with OMClient(server.base_url, "omk_test", retry=QUICK) as om, pytest.raises(OMRetriesExhausted):
            messages = [{"role": "user", "text": "hello"}, {"id": "mine", "role": "user", "text": "x"}]
            om.post_turn("t-1", messages)
        bodies = [s.body for s in server.seen]
    assert len(bodies) == 3 and bodies[0] == bodies[1] == bodies[2]
    ids = [m["id"] for m in bodies[0]["messages"]]
    assert ids[0].startswith("msg-") and ids[1] == "mine", "a message without an id gets one before sending"


def test_a_call_that_is_not_idempotent_is_not_retried_after_a_503_but_is_after_a_429() -> None:
    with scripted([unavailable(retry_after="0")]) as server:
        with OMClient(server.base_url, "omk_test", retry=QUICK) as om, pytest.raises(OMUnavailable) as caught:
            om.observe("t-1")
        assert not isinstance(caught.value, OMRetriesExhausted) and len(server.seen) == 1
    limited = Answer(429, {"error": {"code": "rate_limited", "message": "slow down"}}, {"Retry-After": "0"})
    with scripted([limited]) as server:
        om = OMClient(server.base_url, "omk_test", retry=QUICK)
        with om, pytest.raises(OMRetriesExhausted) as more:
            om.observe("t-1")
        assert len(server.seen) == 3 and isinstance(more.value.last_error, OMRateLimited)


def test_a_refused_connection_is_retried_then_reported() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with OMClient(f"http://127.0.0.1:{port}", retry=QUICK) as om, pytest.raises(OMRetriesExhausted) as caught:
        om.health()
    assert caught.value.attempts == 3 and caught.value.status == 0
    assert isinstance(caught.value.last_error, httpx.ConnectError)
    assert isinstance(caught.value.__cause__, httpx.ConnectError)


def test_retries_can_be_turned_off() -> None:
    with scripted([unavailable(retry_after="0"), OK]) as server:
        with OMClient(server.base_url, retry=RetryPolicy.off()) as om, pytest.raises(OMUnavailable) as caught:
            om.health()
        assert not isinstance(caught.value, OMRetriesExhausted) and len(server.seen) == 1
        assert caught.value.retry_after_s == 0


def test_the_backoff_doubles_with_jitter_and_never_undercuts_retry_after() -> None:
    policy = RetryPolicy(backoff_s=1.0, max_backoff_s=4.0, jitter=0.5)
    for retry, ceiling in ((1, 1.0), (2, 2.0), (3, 4.0), (4, 4.0), (9, 4.0)):
        waits = [policy.wait_s(retry) for _ in range(200)]
        assert all(ceiling * 0.5 <= w <= ceiling for w in waits), (retry, min(waits), max(waits))
        assert len(set(waits)) > 1, "jitter spreads the waits"
    assert all(policy.wait_s(1, retry_after_s=7.0) >= 7.0 for _ in range(50))


def test_a_turn_sends_the_context_form_only_when_one_is_asked_for() -> None:
    """Omitted, the server picks the cheap form for the call; `full` (no longer the server's default) is
    sent like any other form."""
    refused = Answer(400, {"error": {"code": "invalid_request", "message": "no"}})
    hello = [{"id": "m1", "role": "user", "text": "hello"}]
    with scripted([refused]) as server:
        with OMClient(server.base_url, "omk_test", retry=QUICK) as om:
            for form in (None, "full", "none"):
                with pytest.raises(OMBadRequest):
                    om.post_turn("t-1", hello, context=form)
        bodies = [s.body for s in server.seen]
    assert ["context" in body for body in bodies] == [False, True, True]
    assert [body.get("context") for body in bodies] == [None, "full", "none"]
