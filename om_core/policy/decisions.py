"""Pure turn policy: every threshold, interval and boundary decision OM makes, as plain functions.

Nothing here reads storage, a clock or the network. The engine gathers the numbers (pending tokens,
chunk weights, flags that the in-flight registry already resolved) and asks these functions what to do,
so the arithmetic of §4.2–§4.6 can be tested table by table without any fixtures.

Token totals are rounded half away from zero (`round_half_up`), never with Python's banker's `round()`,
so that e.g. a 0.2 interval of 30 001 tokens lands where the reference lands.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal, Protocol, TypedDict

from om_core.messages import TOOL_KIND, Message
from om_core.tenancy.scoped_ids import StoredId, public_id
from om_core.tokens.rounding import round_half_up


class TokenBounds(Protocol):
    """Anything with `min`/`max` (e.g. the config's shared-budget `TokenRange`), without importing it."""

    @property
    def min(self) -> int: ...

    @property
    def max(self) -> int: ...


Scope = Literal["thread", "resource"]
#: A plain message threshold, or the shared budget as `(min, max)` / any `TokenBounds`.
MessageTokens = int | tuple[int, int] | TokenBounds
ReflectionTrigger = Literal["threshold", "provider_change", "ttl"]
NoBufferAction = Literal["sync", "start_buffered", "none"]
GuardVerdict = Literal["composition", "size"]

#: Activation never leaves fewer raw tokens than this (or the retention floor, when that is smaller).
MIN_REMAINING_TOKENS = 1000
#: Going "over" the removal target may eat at most this share of the retention floor.
MAX_OVERSHOOT_SHARE = 0.95
#: Shared budget: the observation window shown in status never drops below this.
MIN_SHARED_OBSERVATION_THRESHOLD = 1000
#: Buffered reflections are asked to compress their slice to this share of its size.
REFLECTION_COMPRESSION_SHARE = 0.75
#: Absolute `bufferActivation` values at or above this are a retention in tokens, not a ratio.
ABSOLUTE_ACTIVATION_MIN = 1000
#: Buffer cursors sit one millisecond after the newest buffered message.
ONE_MS = timedelta(milliseconds=1)


def _bounds(budget: tuple[int, int] | TokenBounds) -> tuple[int, int]:
    return budget if isinstance(budget, tuple) else (budget.min, budget.max)


# --------------------------------------------------------------------------------------------------
# Thresholds (§4.2)
# --------------------------------------------------------------------------------------------------


def dynamic_threshold(message_tokens: MessageTokens, observation_tokens: int) -> int:
    """The message threshold for this step.

    Under a shared budget `(min, max)` messages may borrow whatever the observation log does not use,
    but never fall below their own minimum.
    """
    if isinstance(message_tokens, int):
        return message_tokens
    minimum, maximum = _bounds(message_tokens)
    return round_half_up(max(maximum - observation_tokens, minimum))


def effective_observation_threshold(
    message_tokens: MessageTokens, observation_threshold: int, current_message_threshold: int
) -> int:
    """The observation window shown to clients: under a shared budget it is what messages leave free."""
    if isinstance(message_tokens, int):
        return observation_threshold
    total_budget = _bounds(message_tokens)[1]
    return max(total_budget - current_message_threshold, MIN_SHARED_OBSERVATION_THRESHOLD)


def _max_of(value: MessageTokens) -> int:
    return value if isinstance(value, int) else _bounds(value)[1]


# --------------------------------------------------------------------------------------------------
# Buffering trigger (§4.3)
# --------------------------------------------------------------------------------------------------


def interval_crossed(pending: int, last_boundary: int, buffer_tokens: int, threshold: int) -> bool:
    """True when `pending` sits in a later buffering interval than the last trigger did.

    Near the threshold the interval halves so chunks get finer and activation can land closer to the
    retention target. The comparison is done in integers (10·P ≥ 10·T − 11·B, and ⌊2P/B⌋ for the
    halved interval) so no float noise moves a boundary.
    """
    if buffer_tokens <= 0:
        return False
    halved = 10 * pending >= 10 * threshold - 11 * buffer_tokens
    if halved:
        return (2 * pending) // buffer_tokens > (2 * last_boundary) // buffer_tokens
    return pending // buffer_tokens > last_boundary // buffer_tokens


def should_buffer(
    *,
    async_enabled: bool,
    pending: int,
    buffer_ceiling: int | None,
    last_boundary: int,
    buffer_tokens: int | None,
    threshold: int,
    buffering_in_flight: bool,
) -> bool:
    """Whether this step launches a background Observer run.

    Band semantics: buffering keeps going above the threshold until the ceiling (`blockAfter`), because
    between the two nothing blocks and buffering is the only thing making progress. `buffering_in_flight`
    must come from the in-flight registry; a durable flag with no live registry entry is stale and must
    be passed as False. Without a ceiling (cannot happen through config defaults) buffering stops at the
    threshold, which is the reference's non-band behaviour.
    """
    if not async_enabled or buffer_tokens is None or buffering_in_flight:
        return False
    ceiling = buffer_ceiling if buffer_ceiling is not None else threshold
    if pending >= ceiling:
        return False
    return interval_crossed(pending, last_boundary, buffer_tokens, threshold)


def stale_boundary_reset(last_boundary: int, unobserved_tokens: int) -> int:
    """The boundary to use at step 0: a boundary more than twice the current context is left over from
    an earlier turn (the context was pruned since), so the next interval starts from scratch."""
    if last_boundary > 0 and 2 * unobserved_tokens < last_boundary:
        return 0
    return last_boundary


def meets_minimum(new_tokens: int, buffer_tokens: int, skip_minimum: bool) -> bool:
    """A buffering run needs at least half an interval of new content, except idle (turn-end) buffering,
    which exists precisely to observe short turns."""
    return skip_minimum or 2 * new_tokens >= buffer_tokens


def _has_pending_call(message: Message) -> bool:
    return any(part.type == TOOL_KIND and part.state == "call" for part in message.parts)


def _tool_call_ids(messages: Sequence[Message]) -> set[str]:
    return {part.tool_call_id for m in messages for part in m.parts if part.tool_call_id is not None}


def select_safe_buffer_prefix(messages: Sequence[Message]) -> list[Message]:
    """The chronological prefix that can be sealed and buffered without splitting a live tool exchange.

    Only a `call` on the newest message is pending; an older one is an orphan the conversation moved
    past and is buffered like any content. The prefix is refused (empty) when the +1 ms buffer cursor of
    the prefix would reach the retained message (it would then never be seen again), or when a tool call
    ID straddles the split.
    """
    ordered = sorted(messages, key=lambda m: m.created_at)
    if not ordered or not _has_pending_call(ordered[-1]):
        return ordered
    prefix, retained = ordered[:-1], ordered[-1:]
    first_retained_at = retained[0].created_at
    if any(m.created_at + ONE_MS >= first_retained_at for m in prefix):
        return []
    if _tool_call_ids(prefix) & _tool_call_ids(retained):
        return []
    return prefix


# --------------------------------------------------------------------------------------------------
# Activation (§4.4)
# --------------------------------------------------------------------------------------------------


def retention_floor(buffer_activation: float, threshold: int) -> float:
    """Raw tokens one activation aims to keep: an absolute value is the retention itself."""
    if buffer_activation >= ABSOLUTE_ACTIVATION_MIN:
        return float(buffer_activation)
    return threshold - threshold * buffer_activation


def _choose_boundary(
    chunk_message_tokens: Sequence[int], pending: int, floor: float, force: bool
) -> tuple[int, int]:
    """(chunks to activate, message tokens they remove) per §4.4: prefer going slightly over the target
    so what stays lands at or under the floor, unless that eats most of the floor or leaves too little."""
    if not chunk_message_tokens:
        return 0, 0
    target = max(0.0, pending - floor)
    cumulative = 0
    best_over, over_tokens = 0, 0
    best_under, under_tokens = 0, 0
    for index, tokens in enumerate(chunk_message_tokens):
        cumulative += tokens
        if cumulative >= target:
            if best_over == 0 or cumulative < over_tokens:
                best_over, over_tokens = index + 1, cumulative
        elif cumulative > under_tokens:
            best_under, under_tokens = index + 1, cumulative
    max_overshoot = MAX_OVERSHOOT_SHARE * floor
    overshoot = over_tokens - target
    remaining_over = pending - over_tokens
    remaining_under = pending - under_tokens
    min_remaining = min(float(MIN_REMAINING_TOKENS), floor)
    if force and best_over > 0 and remaining_over >= min_remaining:
        return best_over, over_tokens
    if best_over > 0 and overshoot <= max_overshoot and remaining_over >= min_remaining:
        return best_over, over_tokens
    if best_under > 0 and remaining_under >= min_remaining:
        return best_under, under_tokens
    if best_over > 0:
        return best_over, over_tokens
    return 1, chunk_message_tokens[0]


def select_activation_boundary(
    chunk_message_tokens: Sequence[int], pending: int, floor: float, force: bool
) -> int:
    """How many leading chunks one activation moves into the active log (0 when there are none)."""
    return _choose_boundary(chunk_message_tokens, pending, floor, force)[0]


def projected_message_removal(chunk_message_tokens: Sequence[int], pending: int, floor: float) -> int:
    """Message tokens the next (unforced) activation would remove; shown in `data-om-status`."""
    return _choose_boundary(chunk_message_tokens, pending, floor, False)[1]


# --------------------------------------------------------------------------------------------------
# blockAfter and the sync fallback (§4.5)
# --------------------------------------------------------------------------------------------------


def force_activation(pending: int, block_after: int | None) -> bool:
    """At or above `blockAfter` activation relaxes its overshoot check and clears as much as it can."""
    return block_after is not None and pending >= block_after


def must_block(*, async_enabled: bool, pending: int, threshold: int, block_after: int | None) -> bool:
    """Whether a blocking Observer run is needed after activating everything that was ready.

    Async off: at the threshold. Async on: only at `blockAfter` (the band below it never blocks). An
    async configuration without `blockAfter` blocks at the threshold rather than never.
    """
    if pending < threshold:
        return False
    if not async_enabled:
        return True
    ceiling = block_after if block_after is not None else threshold
    return pending >= ceiling


# --------------------------------------------------------------------------------------------------
# Status (§4.2, §10.1)
# --------------------------------------------------------------------------------------------------


RunStatus = Literal["running", "complete", "idle"]


class TokensAgainstThreshold(TypedDict):
    tokens: int
    threshold: int


class ActiveWindows(TypedDict):
    messages: TokensAgainstThreshold
    observations: TokensAgainstThreshold


class BufferedObservations(TypedDict):
    chunks: int
    messageTokens: int
    projectedMessageRemoval: int
    observationTokens: int
    status: RunStatus


class BufferedReflection(TypedDict):
    inputObservationTokens: int
    observationTokens: int
    status: RunStatus


class BufferedWindows(TypedDict):
    observations: BufferedObservations
    reflection: BufferedReflection


class StatusWindows(TypedDict):
    active: ActiveWindows
    buffered: BufferedWindows


class StatusPayload(TypedDict):
    """The `data` object of a `data-om-status` part (§10.1), camelCase as clients expect."""

    windows: StatusWindows
    recordId: str
    threadId: str | None
    stepNumber: int
    generationCount: int


def _run_status(running: bool, has_content: bool) -> RunStatus:
    if running:
        return "running"
    return "complete" if has_content else "idle"


@dataclass(frozen=True)
class Status:
    """Everything one step decides from token counts, plus what `data-om-status` reports."""

    pending: int
    threshold: int
    should_observe: bool
    should_buffer: bool
    should_reflect: bool
    can_activate: bool
    buffered_chunk_tokens: int
    unbuffered_pending: int
    reflect_threshold: int
    effective_observation_threshold: int
    projected_message_removal: int
    observation_token_count: int
    async_observation_enabled: bool
    async_reflection_enabled: bool
    scope: Scope
    chunk_count: int
    buffered_observation_tokens: int
    buffering_observation: bool
    buffering_reflection: bool
    has_buffered_reflection: bool
    buffered_reflection_tokens: int
    buffered_reflection_input_tokens: int

    def to_status_payload(
        self, record_id: str, thread_id: StoredId | None, step_number: int, generation_count: int
    ) -> StatusPayload:
        """The status as clients read it (`StatusPayload`)."""
        return {
            "windows": {
                "active": {
                    "messages": {"tokens": self.pending, "threshold": self.threshold},
                    "observations": {
                        "tokens": self.observation_token_count,
                        "threshold": self.effective_observation_threshold,
                    },
                },
                "buffered": {
                    "observations": {
                        "chunks": self.chunk_count,
                        "messageTokens": min(self.buffered_chunk_tokens, self.pending),
                        "projectedMessageRemoval": self.projected_message_removal,
                        "observationTokens": self.buffered_observation_tokens,
                        "status": _run_status(self.buffering_observation, self.chunk_count > 0),
                    },
                    "reflection": {
                        "inputObservationTokens": self.buffered_reflection_input_tokens,
                        "observationTokens": self.buffered_reflection_tokens,
                        "status": _run_status(self.buffering_reflection, self.has_buffered_reflection),
                    },
                },
            },
            "recordId": record_id,
            "threadId": public_id(thread_id) if thread_id is not None else None,
            "stepNumber": step_number,
            "generationCount": generation_count,
        }


def compute_status(
    *,
    pending: int,
    message_tokens: MessageTokens,
    observation_token_count: int,
    reflection_threshold: MessageTokens,
    async_observation_enabled: bool,
    async_reflection_enabled: bool,
    block_after: int | None,
    buffer_tokens: int | None,
    last_boundary: int,
    buffering_in_flight: bool,
    chunk_message_tokens: Sequence[int],
    chunk_observation_tokens: Sequence[int],
    buffer_activation: float | None,
    buffering_observation: bool = False,
    buffering_reflection: bool = False,
    has_buffered_reflection: bool = False,
    buffered_reflection_tokens: int | None = None,
    buffered_reflection_input_tokens: int | None = None,
    scope: Scope = "thread",
) -> Status:
    """`get_status` steps 5–12 of §4.2 over numbers the engine already gathered.

    `buffering_observation` / `buffering_reflection` are the "running" hints shown to clients (pass the
    registry-corrected value). Without a resolved `bufferActivation` (async off) the projection assumes
    everything would be activated; chunks do not exist in that configuration anyway.
    """
    pending = max(0, pending)
    threshold = dynamic_threshold(message_tokens, observation_token_count)
    reflect_threshold = _max_of(reflection_threshold)
    buffered_chunk_tokens = sum(chunk_message_tokens)
    floor = retention_floor(buffer_activation, threshold) if buffer_activation is not None else 0.0
    return Status(
        pending=pending,
        threshold=threshold,
        should_observe=pending >= threshold,
        should_buffer=should_buffer(
            async_enabled=async_observation_enabled,
            pending=pending,
            buffer_ceiling=block_after,
            last_boundary=last_boundary,
            buffer_tokens=buffer_tokens,
            threshold=threshold,
            buffering_in_flight=buffering_in_flight,
        ),
        should_reflect=observation_token_count >= reflect_threshold,
        can_activate=len(chunk_message_tokens) > 0,
        buffered_chunk_tokens=buffered_chunk_tokens,
        unbuffered_pending=max(0, pending - buffered_chunk_tokens),
        reflect_threshold=reflect_threshold,
        effective_observation_threshold=effective_observation_threshold(
            message_tokens, reflect_threshold, threshold
        ),
        projected_message_removal=projected_message_removal(chunk_message_tokens, pending, floor),
        observation_token_count=observation_token_count,
        async_observation_enabled=async_observation_enabled,
        async_reflection_enabled=async_reflection_enabled,
        scope=scope,
        chunk_count=len(chunk_message_tokens),
        buffered_observation_tokens=sum(chunk_observation_tokens),
        buffering_observation=buffering_observation,
        buffering_reflection=buffering_reflection,
        has_buffered_reflection=has_buffered_reflection,
        buffered_reflection_tokens=buffered_reflection_tokens or 0,
        buffered_reflection_input_tokens=buffered_reflection_input_tokens or 0,
    )


# --------------------------------------------------------------------------------------------------
# Reflection (§4.6, §6.4)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReflectionDecision:
    """What `maybe_reflect` does this time, in the order the engine performs it.

    1. `start_buffered`: launch a background reflection now (step 1).
    2. If `triggered_by` is None, stop.
    3. If `try_activate`: try to activate the buffered reflection; activated or suppressed → stop;
       no buffer → do `on_no_buffer`.
    4. Otherwise do `on_no_buffer` directly ("sync" when async reflection is off, "none" when a
       reflection is already live for the record).
    Before a "sync" the engine still applies `sync_reflection_suppressed`.
    """

    start_buffered: bool
    triggered_by: ReflectionTrigger | None
    try_activate: bool
    on_no_buffer: NoBufferAction

    @property
    def sync_now(self) -> bool:
        """A blocking reflection runs without an activation attempt (async reflection is off)."""
        return self.triggered_by is not None and not self.try_activate and self.on_no_buffer == "sync"


def reflection_action(
    *,
    obs: int,
    R: int,
    a: float | None,
    RB: int | None,
    async_enabled: bool,
    has_buffered_reflection: bool,
    reflection_in_flight: bool,
    boundary_recorded: bool,
    ttl_expired: bool,
    provider_changed: bool,
    reflection_live: bool = False,
) -> ReflectionDecision:
    """`maybe_reflect` steps 1–7 as a decision.

    `reflection_in_flight` is a background (buffered) reflection registered for the key;
    `reflection_live` is a sync reflection registered for the record (step 5). `ttl_expired` and
    `provider_changed` must already be gated by the reflection-phase options (they do not inherit).
    Async reflection counts as enabled only when `a` is resolved.
    """
    async_reflection = async_enabled and a is not None
    activation_point = R * a if a is not None else float(R)
    start_buffered = (
        async_reflection
        and activation_point <= obs < R
        and not has_buffered_reflection
        and not reflection_in_flight
        and not boundary_recorded
    )
    if obs < R and not ttl_expired and not provider_changed:
        return ReflectionDecision(start_buffered, None, False, "none")
    triggered_by: ReflectionTrigger = (
        "threshold" if obs >= R else ("provider_change" if provider_changed else "ttl")
    )
    if reflection_live:
        return ReflectionDecision(start_buffered, triggered_by, False, "none")
    if not async_reflection:
        return ReflectionDecision(start_buffered, triggered_by, False, "sync")
    on_no_buffer: NoBufferAction
    if RB is not None and obs >= RB:
        on_no_buffer = "sync"
    elif obs < activation_point:
        on_no_buffer = "none"
    elif start_buffered or reflection_in_flight:
        on_no_buffer = "none"  # one background reflection at a time
    else:
        on_no_buffer = "start_buffered"
    return ReflectionDecision(start_buffered, triggered_by, True, on_no_buffer)


def reflection_slice(lines_count: int, obs: int, R: int, a: float) -> tuple[int, int, int]:
    """(lines to reflect, token estimate of that slice, compression target) for a buffered reflection.

    The slice is the leading lines worth about `R × a` tokens, estimated from the average line weight,
    so later lines (added while the Reflector runs) survive activation untouched.
    """
    average = obs / lines_count if lines_count > 0 else 0.0
    n_lines = min(math.floor(R * a / average), lines_count) if average > 0 else lines_count
    slice_estimate = round_half_up(average * n_lines)
    target = round_half_up(REFLECTION_COMPRESSION_SHARE * slice_estimate)
    return n_lines, slice_estimate, target


def early_trigger_size_floor(R: int, a: float) -> int:
    return round_half_up(REFLECTION_COMPRESSION_SHARE * R * (1 - a))


def early_trigger_guard(
    tail_tokens: int, buffered_reflection_tokens: int, combined_tokens: int, R: int, a: float
) -> GuardVerdict | None:
    """For ttl / provider-change triggers only: refuse to swap in a buffered reflection that would
    collapse the log (its own tail smaller than the reflection, or the result under the size floor)."""
    if tail_tokens < buffered_reflection_tokens:
        return "composition"
    if combined_tokens < early_trigger_size_floor(R, a):
        return "size"
    return None


def sync_reflection_suppressed(last_unproductive_obs: int | None, obs: int, triggered_by: str) -> bool:
    """Skip a threshold-triggered sync reflection on exactly the input the ladder already failed on."""
    return triggered_by == "threshold" and last_unproductive_obs is not None and last_unproductive_obs == obs


def suppression_after_reflection(output_tokens: int, R: int) -> int | None:
    """The suppression value to store after a committed sync reflection: its output still at or over
    the threshold is the next input, so an identical retry is pointless; under it, clear (None)."""
    return output_tokens if output_tokens >= R else None


def compression_start_level(reflector_model_id: str | None, manual: bool) -> int:
    """Manual calls start gentle (0); gemini-2.5-flash transcribes faithfully and needs pressure (2)."""
    if manual:
        return 0
    if reflector_model_id is not None and "gemini-2.5-flash" in reflector_model_id:
        return 2
    return 1
