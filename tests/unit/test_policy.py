"""Policy decisions of §4.2–§4.6, checked against the spec's numbers (§13.2–§13.6).

Defaults throughout: T = 30 000 message tokens, bufferTokens 0.2 → B = 6 000, bufferActivation 0.8 →
floor 6 000, blockAfter 1.2 → 36 000; reflection R = 40 000, a = 0.5, RB = 48 000.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from om_core.messages import Message, Part, text_message
from om_core.policy.decisions import (
    ReflectionDecision,
    Status,
    compression_start_level,
    compute_status,
    dynamic_threshold,
    early_trigger_guard,
    effective_observation_threshold,
    force_activation,
    interval_crossed,
    meets_minimum,
    must_block,
    projected_message_removal,
    reflection_action,
    reflection_slice,
    retention_floor,
    round_half_up,
    select_activation_boundary,
    select_safe_buffer_prefix,
    should_buffer,
    stale_boundary_reset,
    suppression_after_reflection,
    sync_reflection_suppressed,
)

T = 30_000
B = 6_000
BLOCK_AFTER = 36_000
FLOOR = 6_000.0
R = 40_000
A = 0.5
RB = 48_000


def buffer_now(pending: int, boundary: int, *, buffer_tokens: int = B, in_flight: bool = False) -> bool:
    return should_buffer(
        async_enabled=True,
        pending=pending,
        buffer_ceiling=BLOCK_AFTER,
        last_boundary=boundary,
        buffer_tokens=buffer_tokens,
        threshold=T,
        buffering_in_flight=in_flight,
    )


# --------------------------------------------------------------------------------------------------
# §13.2 Status and buffering trigger
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pending", "boundary", "expected"),
    [
        (5_999, 0, False),  # case 1
        (6_000, 0, True),
        (11_999, 6_100, False),  # case 2: boundary is the pending count at trigger time
        (12_000, 6_100, True),
        (23_399, 18_000, False),  # case 3: below the ramp point the interval is 6000 (3 vs 3)
        (23_400, 18_000, True),  # at the ramp point the interval halves to 3000 (7 vs 6)
        (26_999, 24_000, False),
        (27_000, 24_000, True),
        (30_000, 27_000, True),  # case 4: band semantics keep buffering above the threshold
        (35_999, 32_999, True),
        (36_000, 32_999, False),  # ... but not at blockAfter
    ],
)
def test_buffer_trigger_intervals(pending: int, boundary: int, expected: bool) -> None:
    assert buffer_now(pending, boundary) is expected


def test_growing_context_triggers_every_6k_then_every_3k_near_the_threshold() -> None:
    boundary, triggers = 0, []
    for pending in range(0, 30_001, 100):
        if buffer_now(pending, boundary):
            triggers.append(pending)
            boundary = pending
    assert triggers == [6_000, 12_000, 18_000, 23_400, 24_000, 27_000, 30_000]


def test_in_flight_buffering_blocks_the_trigger_regardless_of_tokens() -> None:  # case 5
    assert buffer_now(6_000, 0, in_flight=True) is False
    assert buffer_now(30_000, 0, in_flight=True) is False


def test_absolute_buffer_tokens_halve_from_24500() -> None:  # case 7
    # Interval 5000 below the ramp point: 24499 and 22000 share interval 4.
    assert interval_crossed(24_499, 22_000, 5_000, T) is False
    # At the ramp point the effective interval is 2500: 9 > 8.
    assert interval_crossed(24_500, 22_000, 5_000, T) is True
    assert interval_crossed(24_999, 22_500, 5_000, T) is False  # both in 2500-interval 9


def test_buffering_disabled_never_triggers() -> None:
    assert not should_buffer(
        async_enabled=False,
        pending=12_000,
        buffer_ceiling=None,
        last_boundary=0,
        buffer_tokens=None,
        threshold=T,
        buffering_in_flight=False,
    )


def test_without_a_ceiling_buffering_stops_at_the_threshold() -> None:
    kwargs: dict[str, Any] = {
        "async_enabled": True,
        "last_boundary": 27_000,
        "buffer_tokens": B,
        "threshold": T,
    }
    assert should_buffer(pending=29_999, buffer_ceiling=None, buffering_in_flight=False, **kwargs) is False
    assert should_buffer(pending=30_000, buffer_ceiling=None, buffering_in_flight=False, **kwargs) is False
    assert should_buffer(pending=30_000, buffer_ceiling=36_000, buffering_in_flight=False, **kwargs) is True


@pytest.mark.parametrize(
    ("new_tokens", "skip_minimum", "expected"),
    [(2_999, False, False), (3_000, False, True), (2_999, True, True), (1, True, True)],
)
def test_buffer_minimum_is_half_an_interval_unless_idle(
    new_tokens: int, skip_minimum: bool, expected: bool
) -> None:  # case 8
    assert meets_minimum(new_tokens, B, skip_minimum) is expected


@pytest.mark.parametrize(
    ("observation_tokens", "threshold"), [(30_000, 70_000), (0, 100_000), (90_000, 20_000)]
)
def test_shared_budget_threshold(observation_tokens: int, threshold: int) -> None:  # case 9
    assert dynamic_threshold((20_000, 100_000), observation_tokens) == threshold


def test_shared_budget_observation_threshold_for_status() -> None:  # case 9
    assert effective_observation_threshold((20_000, 100_000), 80_000, 70_000) == 30_000
    assert effective_observation_threshold((20_000, 100_000), 80_000, 100_000) == 1_000
    assert effective_observation_threshold(30_000, 40_000, 30_000) == 40_000


@dataclass(frozen=True)
class BudgetRange:
    """Stands in for the config's `TokenRange`: policy accepts anything with `min`/`max`."""

    min: int
    max: int


def test_shared_budget_accepts_a_range_object() -> None:
    budget = BudgetRange(20_000, 100_000)
    assert dynamic_threshold(budget, 30_000) == 70_000
    assert effective_observation_threshold(budget, 80_000, 70_000) == 30_000
    status = default_status(
        0, [], message_tokens=budget, observation_token_count=90_000, reflection_threshold=80_000
    )
    assert status.threshold == 20_000
    assert status.effective_observation_threshold == 80_000


def test_plain_threshold_ignores_observation_tokens() -> None:
    assert dynamic_threshold(30_000, 39_000) == 30_000


@pytest.mark.parametrize(
    ("boundary", "unobserved", "expected"),
    [(20_000, 9_000, 0), (20_000, 9_999, 0), (20_000, 10_000, 20_000), (0, 0, 0), (6_000, 12_000, 6_000)],
)
def test_stale_boundary_reset(boundary: int, unobserved: int, expected: int) -> None:  # case 10
    assert stale_boundary_reset(boundary, unobserved) == expected


def test_round_half_up_is_not_bankers_rounding() -> None:
    assert [round_half_up(x) for x in (0.5, 1.5, 2.5, 2.4999, -2.5, 0.49999999999999994)] == [
        1,
        2,
        3,
        2,
        -3,
        0,
    ]


# --------------------------------------------------------------------------------------------------
# Status and the data-om-status payload
# --------------------------------------------------------------------------------------------------


def default_status(pending: int, chunks: list[int], **overrides: Any) -> Status:
    kwargs: dict[str, Any] = {
        "pending": pending,
        "message_tokens": T,
        "observation_token_count": 12_000,
        "reflection_threshold": R,
        "async_observation_enabled": True,
        "async_reflection_enabled": True,
        "block_after": BLOCK_AFTER,
        "buffer_tokens": B,
        "last_boundary": 27_000,
        "buffering_in_flight": False,
        "chunk_message_tokens": chunks,
        "chunk_observation_tokens": [400] * len(chunks),
        "buffer_activation": 0.8,
    }
    kwargs.update(overrides)
    return compute_status(**kwargs)


def test_status_at_the_threshold() -> None:  # §13.2 case 4
    status = default_status(30_500, [6_000, 6_000, 6_000, 6_000, 3_000])
    assert status.threshold == T
    assert status.should_observe is True
    assert status.should_buffer is True
    assert status.should_reflect is False
    assert status.can_activate is True
    assert status.buffered_chunk_tokens == 27_000
    assert status.unbuffered_pending == 3_500
    assert status.projected_message_removal == 27_000
    assert status.effective_observation_threshold == R


def test_status_below_threshold_without_chunks() -> None:
    status = default_status(-5, [], last_boundary=0)
    assert status.pending == 0
    assert status.should_observe is False
    assert status.can_activate is False
    assert status.projected_message_removal == 0


def test_status_reflection_due_at_exactly_the_threshold() -> None:
    assert default_status(0, [], observation_token_count=39_999).should_reflect is False
    assert default_status(0, [], observation_token_count=40_000).should_reflect is True


def test_status_shared_budget() -> None:  # §13.2 case 9
    status = default_status(
        69_999,
        [],
        message_tokens=(20_000, 100_000),
        observation_token_count=30_000,
        reflection_threshold=80_000,
        async_observation_enabled=False,
        async_reflection_enabled=False,
        block_after=None,
        buffer_tokens=None,
        buffer_activation=None,
    )
    assert status.threshold == 70_000
    assert status.should_observe is False
    assert status.should_buffer is False
    assert status.effective_observation_threshold == 30_000


def test_status_payload_shape() -> None:
    status = compute_status(
        pending=30_500,
        message_tokens=T,
        observation_token_count=12_000,
        reflection_threshold=R,
        async_observation_enabled=True,
        async_reflection_enabled=True,
        block_after=BLOCK_AFTER,
        buffer_tokens=B,
        last_boundary=27_000,
        buffering_in_flight=False,
        chunk_message_tokens=[6_000, 6_000, 6_000, 6_000, 3_000],
        chunk_observation_tokens=[400, 400, 400, 400, 200],
        buffer_activation=0.8,
        buffering_observation=True,
        buffering_reflection=False,
        has_buffered_reflection=True,
        buffered_reflection_tokens=4_000,
        buffered_reflection_input_tokens=20_000,
    )
    assert status.to_status_payload("rec-1", "thread-1", 3, 2) == {
        "windows": {
            "active": {
                "messages": {"tokens": 30_500, "threshold": 30_000},
                "observations": {"tokens": 12_000, "threshold": 40_000},
            },
            "buffered": {
                "observations": {
                    "chunks": 5,
                    "messageTokens": 27_000,
                    "projectedMessageRemoval": 27_000,
                    "observationTokens": 1_800,
                    "status": "running",
                },
                "reflection": {
                    "inputObservationTokens": 20_000,
                    "observationTokens": 4_000,
                    "status": "complete",
                },
            },
        },
        "recordId": "rec-1",
        "threadId": "thread-1",
        "stepNumber": 3,
        "generationCount": 2,
    }


def test_status_payload_idle_and_message_tokens_capped_by_pending() -> None:
    status = default_status(5_000, [6_000])
    payload = status.to_status_payload("r", None, 0, 0)
    observations = payload["windows"]["buffered"]["observations"]
    assert observations["messageTokens"] == 5_000
    assert observations["status"] == "complete"
    reflection = payload["windows"]["buffered"]["reflection"]
    assert reflection == {"inputObservationTokens": 0, "observationTokens": 0, "status": "idle"}
    empty = default_status(5_000, []).to_status_payload("r", None, 0, 0)
    assert empty["windows"]["buffered"]["observations"]["status"] == "idle"


# --------------------------------------------------------------------------------------------------
# §13.3 Safe buffer prefix
# --------------------------------------------------------------------------------------------------

BASE = datetime(2026, 4, 20, 10, 0, tzinfo=UTC)


def at(ms: int) -> datetime:
    return BASE + timedelta(milliseconds=ms)


def msg(index: int, ms: int, *, pending_call: str | None = None, result_for: str | None = None) -> Message:
    parts = [Part(type="text", text=f"message {index}")]
    if pending_call is not None:
        parts.append(Part(type="tool-invocation", tool_call_id=pending_call, tool_name="t", state="call"))
    if result_for is not None:
        parts.append(Part(type="tool-invocation", tool_call_id=result_for, tool_name="t", state="result"))
    return Message(id=f"m{index}", role="assistant", parts=parts, created_at=at(ms))


def ids(messages: list[Message]) -> list[str]:
    return [m.id for m in messages]


def test_prefix_before_the_pending_call() -> None:  # case 1
    messages = [msg(0, 100), msg(1, 200), msg(2, 300), msg(3, 400, pending_call="c9")]
    assert ids(select_safe_buffer_prefix(messages)) == ["m0", "m1", "m2"]
    assert ids(select_safe_buffer_prefix(list(reversed(messages)))) == ["m0", "m1", "m2"]


def test_cursor_collision_defers_buffering() -> None:  # case 2
    messages = [msg(0, 100), msg(1, 200), msg(2, 399), msg(3, 400, pending_call="c9")]
    safe = select_safe_buffer_prefix(messages)
    assert safe == []


def test_split_tool_exchange_is_refused() -> None:  # case 3
    messages = [msg(0, 100), msg(1, 200, result_for="c7"), msg(2, 300), msg(3, 400, pending_call="c7")]
    assert select_safe_buffer_prefix(messages) == []


def test_no_pending_call_buffers_everything() -> None:  # case 4
    messages = [msg(2, 300), msg(0, 100), msg(1, 200), msg(3, 400)]
    assert ids(select_safe_buffer_prefix(messages)) == ["m0", "m1", "m2", "m3"]


def test_orphan_call_on_an_older_message_is_buffered() -> None:
    messages = [msg(0, 100, pending_call="old"), msg(1, 200), msg(2, 300)]
    assert ids(select_safe_buffer_prefix(messages)) == ["m0", "m1", "m2"]


def test_single_message_with_pending_call_has_no_safe_prefix() -> None:
    assert select_safe_buffer_prefix([msg(0, 100, pending_call="c1")]) == []
    assert select_safe_buffer_prefix([]) == []


def test_prefix_two_ms_before_the_retained_message_is_safe() -> None:
    messages = [text_message("u", "user", "hi", created_at=at(398)), msg(3, 400, pending_call="c9")]
    assert ids(select_safe_buffer_prefix(messages)) == ["u"]


# --------------------------------------------------------------------------------------------------
# §13.4 Activation
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("buffer_activation", "floor"),
    [(0.8, 6_000), (0.7, 9_000), (4_000, 4_000), (1, 0)],
)
def test_retention_floor(buffer_activation: float, floor: float) -> None:  # case 5
    assert retention_floor(buffer_activation, T) == pytest.approx(floor)


@pytest.mark.parametrize(
    ("chunks", "pending", "floor", "force", "expected"),
    [
        # case 1: target 24500, over at 5 chunks (27000, overshoot 2500), 3500 left raw
        ([6_000, 6_000, 6_000, 6_000, 3_000], 30_500, FLOOR, False, 5),
        # case 2: exactly the target → keeps about 6000
        ([6_000] * 4, 30_000, FLOOR, False, 4),
        # case 3: going over would leave 0 < 1000 → best under: 1 chunk, 12000 kept
        ([20_000, 12_000], 32_000, FLOOR, False, 1),
        # case 4: overshoot 38500 > 38000 → under without force; force takes the over boundary
        ([80_000, 43_500], 125_000, 40_000.0, False, 1),
        ([80_000, 43_500], 125_000, 40_000.0, True, 2),
        # case 6: floor 0 activates everything that reaches pending
        ([6_000, 6_000, 6_000], 18_000, 0.0, False, 3),
        ([6_000, 6_000, 6_000], 30_000, 0.0, False, 3),
        # case 7: no chunks → nothing to activate
        ([], 30_000, FLOOR, False, 0),
        # last resort: a single chunk that eats everything still activates
        ([30_000], 30_000, FLOOR, False, 1),
    ],
)
def test_activation_boundary(
    chunks: list[int], pending: int, floor: float, force: bool, expected: int
) -> None:
    assert select_activation_boundary(chunks, pending, floor, force) == expected


def test_force_never_leaves_less_than_the_minimum() -> None:
    # Over boundary would leave 500 (< 1000): even forced, fall back to the under boundary.
    assert select_activation_boundary([20_000, 15_500], 36_000, FLOOR, True) == 1


def test_case4_numbers_come_from_the_config_formulas() -> None:
    floor = retention_floor(0.6, 100_000)
    assert floor == pytest.approx(40_000)
    assert force_activation(125_000, round_half_up(100_000 * 1.2)) is True
    assert select_activation_boundary([80_000, 43_500], 125_000, floor, True) == 2


@pytest.mark.parametrize(
    ("chunks", "pending", "expected"),
    [
        ([6_000, 6_000, 6_000, 6_000, 3_000], 30_500, 27_000),  # case 12
        ([], 30_500, 0),
        ([20_000, 12_000], 32_000, 20_000),
        ([30_000], 30_000, 30_000),
    ],
)
def test_projected_message_removal(chunks: list[int], pending: int, expected: int) -> None:
    assert projected_message_removal(chunks, pending, FLOOR) == expected


# --------------------------------------------------------------------------------------------------
# §13.5 blockAfter and the sync fallback
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("async_enabled", "pending", "block_after", "expected"),
    [
        (True, 29_999, BLOCK_AFTER, False),
        (True, 33_000, BLOCK_AFTER, False),  # case 1: the band never blocks
        (True, 35_999, BLOCK_AFTER, False),
        (True, 36_000, BLOCK_AFTER, True),  # case 2
        (False, 30_000, None, True),  # case 4: no band without buffering
        (False, 29_999, None, False),
        (True, 30_000, None, True),  # async without blockAfter degrades to the threshold
    ],
)
def test_must_block(async_enabled: bool, pending: int, block_after: int | None, expected: bool) -> None:
    decision = must_block(async_enabled=async_enabled, pending=pending, threshold=T, block_after=block_after)
    assert decision is expected


def test_band_keeps_buffering_instead_of_blocking() -> None:  # case 1
    assert must_block(async_enabled=True, pending=33_000, threshold=T, block_after=BLOCK_AFTER) is False
    assert buffer_now(33_000, 30_000) is True


@pytest.mark.parametrize(
    ("pending", "block_after", "expected"),
    [
        (35_999, BLOCK_AFTER, False),
        (36_000, BLOCK_AFTER, True),
        (36_500, BLOCK_AFTER, True),
        (99_999, None, False),
    ],
)
def test_force_activation(pending: int, block_after: int | None, expected: bool) -> None:
    assert force_activation(pending, block_after) is expected


def test_forced_activation_then_no_sync_observation() -> None:  # case 3
    pending, chunks = 36_500, [20_000]
    assert force_activation(pending, BLOCK_AFTER) is True
    n = select_activation_boundary(chunks, pending, FLOOR, True)
    assert n == 1
    remaining = pending - sum(chunks[:n])
    assert remaining == 16_500
    assert must_block(async_enabled=True, pending=remaining, threshold=T, block_after=BLOCK_AFTER) is False


# --------------------------------------------------------------------------------------------------
# §13.6 Reflection
# --------------------------------------------------------------------------------------------------


def decide(obs: int, **overrides: Any) -> ReflectionDecision:
    kwargs: dict[str, Any] = {
        "obs": obs,
        "R": R,
        "a": A,
        "RB": RB,
        "async_enabled": True,
        "has_buffered_reflection": False,
        "reflection_in_flight": False,
        "boundary_recorded": False,
        "ttl_expired": False,
        "provider_changed": False,
    }
    kwargs.update(overrides)
    return reflection_action(**kwargs)


def test_background_reflection_starts_at_half_the_threshold() -> None:  # case 1
    assert decide(19_999) == ReflectionDecision(False, None, False, "none")
    assert decide(20_000) == ReflectionDecision(True, None, False, "none")
    assert decide(39_999).start_buffered is True


@pytest.mark.parametrize("blocker", ["has_buffered_reflection", "reflection_in_flight", "boundary_recorded"])
def test_background_reflection_starts_only_once(blocker: str) -> None:  # case 1
    assert decide(20_000, **{blocker: True}).start_buffered is False


def test_buffered_reflection_slice() -> None:  # case 2
    assert reflection_slice(240, 24_000, R, A) == (200, 20_000, 15_000)
    assert reflection_slice(100, 10_000, R, A) == (100, 10_000, 7_500)  # whole log under the point
    assert reflection_slice(0, 0, R, A) == (0, 0, 0)


def test_threshold_with_a_buffered_reflection_activates_it() -> None:  # case 3
    decision = decide(40_000, has_buffered_reflection=True, boundary_recorded=True)
    assert decision.start_buffered is False
    assert decision.triggered_by == "threshold"
    assert decision.try_activate is True


@pytest.mark.parametrize(
    ("obs", "on_no_buffer"),
    [(40_000, "start_buffered"), (45_000, "start_buffered"), (47_999, "start_buffered"), (48_000, "sync")],
)
def test_no_buffered_reflection_buffers_until_block_after(obs: int, on_no_buffer: str) -> None:  # case 4
    decision = decide(obs)
    assert decision.triggered_by == "threshold"
    assert decision.try_activate is True
    assert decision.on_no_buffer == on_no_buffer
    assert decision.sync_now is False


def test_no_second_background_reflection_while_one_runs() -> None:
    assert decide(45_000, reflection_in_flight=True).on_no_buffer == "none"
    assert decide(48_000, reflection_in_flight=True).on_no_buffer == "sync"


def test_without_block_after_reflection_never_blocks_while_async() -> None:
    assert decide(90_000, RB=None).on_no_buffer == "start_buffered"


def test_sync_reflection_when_async_is_off() -> None:
    decision = decide(40_000, async_enabled=False, a=None, RB=None)
    assert decision == ReflectionDecision(False, "threshold", False, "sync")
    assert decision.sync_now is True
    assert decide(39_999, async_enabled=False, a=None, RB=None).triggered_by is None


def test_live_reflection_skips_this_turn() -> None:
    decision = decide(48_000, reflection_live=True)
    assert decision.triggered_by == "threshold"
    assert decision.try_activate is False
    assert decision.on_no_buffer == "none"
    assert decision.sync_now is False


@pytest.mark.parametrize(
    ("tail", "buffered", "combined", "verdict"),
    [
        (5_000, 9_000, 14_000, "composition"),  # tail smaller than the reflection
        (7_000, 6_000, 13_000, "size"),  # combined under round(0.75 × 40000 × 0.5) = 15000
        (9_000, 8_000, 17_000, None),  # activated
        (7_500, 7_500, 15_000, None),  # both floors are inclusive
    ],
)
def test_early_trigger_guard(tail: int, buffered: int, combined: int, verdict: str | None) -> None:  # case 5
    assert early_trigger_guard(tail, buffered, combined, R, A) == verdict


def test_ttl_trigger_tries_activation_but_never_falls_through() -> None:  # case 5 / §13.7.5
    decision = decide(17_000, ttl_expired=True, has_buffered_reflection=True)
    assert decision.triggered_by == "ttl"
    assert decision.try_activate is True
    assert decision.on_no_buffer == "none"  # below R × a: nothing else happens


def test_reflection_precedence_threshold_then_provider_then_ttl() -> None:  # §13.7.5
    assert decide(40_000, ttl_expired=True, provider_changed=True).triggered_by == "threshold"
    assert decide(30_000, ttl_expired=True, provider_changed=True).triggered_by == "provider_change"
    assert decide(30_000, ttl_expired=True).triggered_by == "ttl"


def test_unproductive_sync_reflection_is_suppressed_on_identical_input() -> None:  # case 11
    stored = suppression_after_reflection(41_000, R)
    assert stored == 41_000
    assert sync_reflection_suppressed(stored, 41_000, "threshold") is True
    assert sync_reflection_suppressed(stored, 41_001, "threshold") is False
    assert sync_reflection_suppressed(stored, 41_000, "ttl") is False
    assert sync_reflection_suppressed(stored, 41_000, "provider_change") is False
    assert suppression_after_reflection(25_000, R) is None
    assert sync_reflection_suppressed(None, 41_000, "threshold") is False


def test_suppression_is_per_lookup_key() -> None:  # case 12
    suppressions = {"thread:A": 41_000}
    assert sync_reflection_suppressed(suppressions.get("thread:A"), 41_000, "threshold") is True
    assert sync_reflection_suppressed(suppressions.get("thread:B"), 41_000, "threshold") is False


@pytest.mark.parametrize(
    ("model", "manual", "level"),
    [
        ("google/gemini-2.5-flash", False, 2),
        ("gemini-2.5-flash-lite", False, 2),
        ("openai/gpt-5-mini", False, 1),
        (None, False, 1),
        ("google/gemini-2.5-flash", True, 0),
    ],
)
def test_compression_start_level(model: str | None, manual: bool, level: int) -> None:
    assert compression_start_level(model, manual) == level
