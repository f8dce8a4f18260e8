"""The size-bounded LRU under the per-process caches, and the part cache's estimate of what a part costs."""

from __future__ import annotations

import gc
import json
import tracemalloc

import pytest

from om_core.messages import Part
from om_core.sized_lru import SizedLRU
from om_core.store.part_cache import estimated_bytes


def test_the_least_recently_used_entries_leave_first_to_stay_within_the_budget() -> None:
    lru: SizedLRU[str, int] = SizedLRU(max_bytes=100)
    lru.put("a", 1, 40)
    lru.put("b", 2, 40)
    assert lru.get("a") == 1  # "b" is now the least recently used
    lru.put("c", 3, 40)
    assert (lru.get("b"), lru.get("a"), lru.get("c")) == (None, 1, 3)
    assert lru.size_bytes == 80 and len(lru) == 2
    assert (lru.hits, lru.misses) == (3, 1)


def test_a_value_larger_than_the_budget_is_not_kept_and_a_replaced_entry_is_recharged() -> None:
    lru: SizedLRU[str, str] = SizedLRU(max_bytes=100)
    lru.put("huge", "x", 101)
    assert lru.get("huge") is None and lru.size_bytes == 0
    lru.put("k", "small", 10)
    lru.put("k", "bigger", 60)
    assert lru.get("k") == "bigger" and lru.size_bytes == 60 and len(lru) == 1


def _parsed_size(body: str) -> int:
    """Bytes a part parsed from its stored JSON holds, measured."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        part = Part.model_validate_json(body)
        size = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert part.type
    return size


@pytest.mark.parametrize(
    "part",
    [
        Part(type="text", text="We moved the launch to the 14th of March, after the audit. " * 25),
        Part(type="text", text="Trip notes 🏔️: the tent zip is broken, bring the spare. " * 25),
        Part(
            type="tool-invocation",
            tool_call_id="call-1",
            tool_name="search_flights",
            state="result",
            args={"from": "LIS", "to": "OSL", "dates": ["2026-03-14", "2026-03-21"]},
            result={"flights": [{"id": f"TP{n}", "price": 180 + n, "stops": n % 2} for n in range(60)]},
        ),
    ],
    ids=["ascii text", "text with emoji", "tool result"],
)
def test_the_part_estimate_is_close_to_what_a_parsed_part_holds(part: Part) -> None:
    """The cache's budget is only a bound if the estimate does not undercount (it once did, threefold)."""
    actual = _parsed_size(json.dumps(part.model_dump(mode="json", exclude_none=True)))
    estimate = estimated_bytes(part)
    assert 0.9 * actual <= estimate <= 2.0 * actual, (estimate, actual)
