"""Tool exchanges and where a cut may fall (behaviour §4.10: a tool call and its result stay together).

A chat API refuses a tool result that answers no call, and a call shown without its result reads as a
question never answered. So a cut (the sequence number observation runs up to) must not land between a
call and its result: either both are observed or both stay raw. An exchange is the span of sequence
numbers from the call part to the first part that ends it (a result, an error or a denial), whether that
part was appended to the assistant message (AI SDK style) or sent as a `tool` message (OpenAI style).

A call with no result yet is open: no cut may pass it, because the result will arrive raw while its call
sits in the observations. A user message after an open call means the conversation moved on without
the result (the spec's "orphan" call, §4.3): that call no longer holds cuts back, or one abandoned call
would keep the whole rest of the thread raw forever. If its result does arrive later, the actor is shown
the call again next to it (`engine.companions`).

Pure: callers pass what they read (parts with their sequence numbers and the window's messages).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from om_core.messages import TOOL_KIND, Message

#: States that end an exchange: the call has been answered one way or another.
ENDING_STATES = frozenset({"result", "output-error", "output-denied"})


@dataclass(frozen=True)
class ToolPart:
    """The identity of one stored tool part: enough to pair calls with results without its body."""

    seq: int
    call_id: str
    state: str | None
    has_result: bool = False

    @property
    def ends_exchange(self) -> bool:
        return self.state in ENDING_STATES or (self.state is None and self.has_result)


@dataclass(frozen=True)
class Span:
    """A call at `call_seq` answered at `result_seq` (None: still open). A cut `c` splits the exchange
    when `call_seq <= c < result_seq`."""

    call_seq: int
    result_seq: int | None

    def splits(self, cut: int) -> bool:
        return self.call_seq <= cut and (self.result_seq is None or cut < self.result_seq)


def tool_parts_of(messages: Iterable[Message]) -> list[ToolPart]:
    """The stored tool parts of `messages` (parts without a sequence number are not stored yet)."""
    return [
        ToolPart(part.seq, part.tool_call_id, part.state, part.result is not None)
        for message in messages
        for part in message.parts
        if part.type == TOOL_KIND and part.tool_call_id and part.seq is not None
    ]


def exchange_spans(parts: Sequence[ToolPart], user_seqs: Sequence[int]) -> list[Span]:
    """The exchanges a cut must not split: calls whose result came later, and open calls no user message
    has moved past. A part that is call and result at once (an updated AI SDK part) spans nothing, nor
    does a result whose call is not among `parts` (already observed: nothing left to keep together)."""
    calls: dict[str, int] = {}
    results: dict[str, int] = {}
    for part in sorted(parts, key=lambda p: p.seq):
        if part.ends_exchange:
            results.setdefault(part.call_id, part.seq)
        else:
            calls.setdefault(part.call_id, part.seq)
    spans: list[Span] = []
    for call_id, call_seq in calls.items():
        result_seq = results.get(call_id)
        if result_seq is not None:
            if result_seq > call_seq:
                spans.append(Span(call_seq, result_seq))
        elif not any(seq > call_seq for seq in user_seqs):
            spans.append(Span(call_seq, None))
    return spans


def safe_cut(cut: int, spans: Sequence[Span], *, lowest: int) -> int:
    """`cut` moved so that it splits no exchange: back to just before the earliest call it would split
    (the pair stays raw), or, when that leaves nothing above `lowest` to observe, forward past the
    results (the pair is observed together, as a single message larger than the budget is). `lowest`
    when neither is possible (an open call at the start: nothing can be observed until it is answered).
    """
    backward = _backward(cut, spans)
    if backward > lowest:
        return backward
    return _forward(cut, spans, lowest=lowest)


def safe_cut_backward(cut: int, spans: Sequence[Span]) -> int:
    """`cut` moved back until it splits no exchange (used where waiting costs nothing: buffering)."""
    return _backward(cut, spans)


def _backward(cut: int, spans: Sequence[Span]) -> int:
    moved = cut
    while True:
        splitting = [span.call_seq for span in spans if span.splits(moved)]
        if not splitting:
            return moved
        moved = min(splitting) - 1


def _forward(cut: int, spans: Sequence[Span], *, lowest: int) -> int:
    moved = cut
    while True:
        splitting = [span for span in spans if span.splits(moved)]
        if not splitting:
            return moved
        ends = [span.result_seq for span in splitting]
        if any(end is None for end in ends):
            return lowest
        moved = max(end for end in ends if end is not None)


#: Message metadata naming the calls a message shows again beside their results (already observed).
REPEATED_CALLS_KEY = "omRepeatedCalls"


def orphan_result_ids(messages: Sequence[Message]) -> list[str]:
    """Call ids of results in `messages` whose call is not among them (it was observed before them)."""
    called: set[str] = set()
    orphans: list[str] = []
    for message in messages:
        for part in message.parts:
            if part.type != TOOL_KIND or not part.tool_call_id:
                continue
            ends = part.state in ENDING_STATES or (part.state is None and part.result is not None)
            if not ends or part.args is not None:
                called.add(part.tool_call_id)  # a call, or a result that carries its call's arguments
            elif part.tool_call_id not in called and part.tool_call_id not in orphans:
                orphans.append(part.tool_call_id)
    return orphans


def with_companions(messages: Sequence[Message], calls: Sequence[Message]) -> list[Message]:
    """`messages` with the observed `calls` shown again right before their results: merged into the
    result's own message when the call was part of it (AI SDK style), else as a copy of the call's
    message placed just before the first message answering it (OpenAI style). Each message that shows a
    call again names it under `REPEATED_CALLS_KEY`, so a client can tell it was already observed."""
    out = list(messages)
    for call_message in calls:
        call_ids = [p.tool_call_id for p in call_message.parts if p.tool_call_id]
        same = next((i for i, m in enumerate(out) if m.id == call_message.id), None)
        if same is not None:
            merged = sorted([*call_message.parts, *out[same].parts], key=lambda p: p.seq or 0)
            out[same] = _repeating(out[same].with_parts(merged), call_ids)
            continue
        answering = next((i for i, m in enumerate(out) if _answers(m, call_ids)), len(out))
        out.insert(answering, _repeating(call_message, call_ids))
    return out


def _answers(message: Message, call_ids: Sequence[str]) -> bool:
    return any(p.type == TOOL_KIND and p.tool_call_id in call_ids for p in message.parts)


def _repeating(message: Message, call_ids: Sequence[str]) -> Message:
    already = list(message.metadata.get(REPEATED_CALLS_KEY) or [])
    metadata = {**message.metadata, REPEATED_CALLS_KEY: already + [c for c in call_ids if c not in already]}
    return message.model_copy(update={"metadata": metadata})
