"""Search through the HTTP API (real server, Postgres, inline executor): a turn of a thread with
retrieval on indexes it, both search routes find an exact value, filters and limits apply, retrieval off
and a database without pgvector are refused with a message saying what to do, and `/metrics` reports the
index lag."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from om_api.client import OMBadRequest, OMClient, OMConflict, OMNotFound
from tests.support.api_server import ApiServer, api_server, new_id, om, tenant_key
from tests.support.workers import wait_until

__all__ = ["api_server", "om", "tenant_key"]  # fixtures used below

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

CODE = "QK-90417-LM"
T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def _history(n: int, planted: dict[int, str]) -> list[dict[str, object]]:
    return [
        {
            "id": f"m{i}",
            "role": "user" if i % 2 == 0 else "assistant",
            "text": planted.get(i, f"Small talk number {i} about gardening, tomatoes and the weather."),
            "created_at": (T0 + timedelta(minutes=i)).isoformat(),
        }
        for i in range(n)
    ]


def test_a_turn_indexes_its_thread_and_both_routes_find_the_exact_code(om: OMClient) -> None:
    user, thread, other = new_id("user"), new_id("t"), new_id("t")
    om.set_resource_config(user, {"retrieval": True})
    om.post_turn(thread, _history(40, {3: f"My gym locker code is {CODE}."}), resource_id=user)
    om.post_turn(other, _history(6, {1: f"{CODE} also opens the bike shed"}), resource_id=user)

    # The API's in-process executor indexes in the background: wait for both threads' documents.
    query = f"what is my locker code {CODE}"
    wait_until(lambda: om.search(user, query, limit=5).count >= 2, deadline_s=60, what="both threads indexed")
    found = om.search(user, query, limit=5)
    assert found.resource_id == user
    assert [(r.kind, r.id, r.thread_id) for r in found.results[:2]] == [
        ("message", "m3", thread),
        ("message", "m1", other),
    ] or [(r.kind, r.id, r.thread_id) for r in found.results[:2]] == [
        ("message", "m1", other),
        ("message", "m3", thread),
    ]
    assert found.results[0].sources == ["lexical"] and CODE in found.results[0].text
    assert found.count == len(found.results) <= 5

    only = om.search(user, CODE, thread_ids=[other])
    assert [(r.id, r.thread_id) for r in only.results] == [("m1", other)]
    in_thread = om.search_thread(thread, CODE)
    assert [(r.id, r.thread_id) for r in in_thread.results] == [("m3", thread)]
    assert in_thread.resource_id == user
    late = om.search(user, CODE, after=T0 + timedelta(minutes=2))
    assert [r.id for r in late.results] == ["m3"]
    assert om.search(user, CODE, kinds=["group"]).results == []


def test_limits_and_refusals_say_what_to_fix(om: OMClient, api_server: ApiServer) -> None:
    user, thread = new_id("user"), new_id("t")
    om.post_turn(thread, _history(4, {}), resource_id=user)
    with pytest.raises(OMConflict) as off:
        om.search(user, "gardening")
    assert off.value.code == "retrieval_disabled" and "retrieval: true" in str(off.value)
    with pytest.raises(OMConflict):
        om.search_thread(thread, "gardening")

    # This suite's Postgres (Debian's) has no pgvector: turning vectors on is refused when it is set,
    # naming what to install, never accepted and then searched by words only.
    with pytest.raises(OMBadRequest) as no_vectors:
        om.set_config(thread, {"retrieval": {"vector": True}})
    assert no_vectors.value.code == "invalid_config" and "pgvector" in str(no_vectors.value)
    assert no_vectors.value.field is not None and no_vectors.value.field.endswith("retrieval.vector")
    with pytest.raises(OMBadRequest):
        om.set_resource_config(user, {"retrieval": {"vector": True}})
    om.set_config(thread, {"retrieval": True})
    assert om.search_thread(thread, "gardening").count == 0  # on now, nothing indexed before the switch

    with pytest.raises(OMBadRequest) as too_many:
        om.search(user, "gardening", limit=51)
    assert too_many.value.field == "limit"
    with pytest.raises(OMBadRequest):
        om.search(user, "")
    with pytest.raises(OMNotFound):
        om.search(new_id("nobody"), "gardening")
    with pytest.raises(OMNotFound):
        om.search_thread(new_id("nothread"), "gardening")


def test_metrics_report_the_index_lag(api_server: ApiServer) -> None:
    text = api_server.metrics()
    lines = [line for line in text.splitlines() if line.startswith("om_search_index_lag_seconds")]
    assert len(lines) == 1 and float(lines[0].split()[-1]) >= 0.0
