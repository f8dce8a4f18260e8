"""The unobserved window: which stored parts are after the cursor and what they weigh.

Token weights come from the per-part counts stored at insert time, so a turn never re-tokenises history:
its cost depends on the unobserved window only (behaviour §4.10, issue 7's flatness target).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from om_core.context.tool_exchanges import Span, safe_cut, safe_cut_backward
from om_core.store.history import PartTokens
from om_core.tokens import CONVERSATION_OVERHEAD, PartCount, TokenCounter


def _is_visible(part_type: str) -> bool:
    return not part_type.startswith("data-") and part_type != "step-start"


@dataclass(frozen=True)
class WindowMessage:
    """One message's unobserved slice: its parts after the cursor and their total weight."""

    message_id: str
    role: str
    first_seq: int
    last_seq: int
    tokens: int


@dataclass(frozen=True)
class Window:
    messages: tuple[WindowMessage, ...]

    @property
    def tokens(self) -> int:
        if not self.messages:
            return 0
        return CONVERSATION_OVERHEAD + sum(m.tokens for m in self.messages)

    @property
    def max_seq(self) -> int:
        return max((m.last_seq for m in self.messages), default=0)

    @property
    def lowest_cut(self) -> int:
        """The cut that observes nothing of this window: just before its first part."""
        return min((m.first_seq for m in self.messages), default=1) - 1

    @property
    def user_seqs(self) -> tuple[int, ...]:
        """Where user messages start: a user message after an open tool call abandons it."""
        return tuple(m.first_seq for m in self.messages if m.role == "user")

    def tokens_upto(self, seq: int) -> int:
        """Weight of the messages whose unobserved parts all lie at or before `seq`."""
        inside = [m.tokens for m in self.messages if m.last_seq <= seq]
        return CONVERSATION_OVERHEAD + sum(inside) if inside else 0


def build_window(rows: Sequence[PartTokens], counter: TokenCounter) -> Window:
    """Group stored part weights by message. A message whose unobserved parts are only `data-*` markers
    or step boundaries has nothing to observe and weighs nothing (the reference's H6)."""
    grouped: dict[str, list[PartTokens]] = {}
    for row in rows:
        grouped.setdefault(row.message_id, []).append(row)
    out: list[WindowMessage] = []
    for message_id, parts in grouped.items():
        if not any(_is_visible(p.type) for p in parts):
            continue
        counts = [PartCount(p.tokens, p.overhead_delta, p.extra_messages) for p in parts]
        out.append(
            WindowMessage(
                message_id=message_id,
                role=parts[0].role,
                first_seq=min(p.seq for p in parts),
                last_seq=max(p.seq for p in parts),
                tokens=counter.message_total(parts[0].role, counts),
            )
        )
    out.sort(key=lambda m: m.first_seq)
    return Window(tuple(out))


def cut_for_budget(window: Window, budget: int, spans: Sequence[Span] = ()) -> int:
    """The largest sequence number such that the parts up to it fit in `budget` tokens, cutting only after
    a whole message; at least the first message is taken even if it alone is larger than the budget (a
    single huge message is still observed: no dead zone). A cut inside a tool exchange (`spans`) moves
    back before its call, or, if that leaves nothing, forward past its result: a pair larger than the
    budget is observed whole, like a single huge message."""
    cut = _budget_cut(window, budget)
    if not spans or not cut:
        return cut
    moved = safe_cut(cut, spans, lowest=window.lowest_cut)
    return moved if moved > window.lowest_cut else 0


def _budget_cut(window: Window, budget: int) -> int:
    total = CONVERSATION_OVERHEAD
    cut = 0
    for message in sorted(window.messages, key=lambda m: m.last_seq):
        if cut and total + message.tokens > budget:
            break
        total += message.tokens
        cut = message.last_seq
    return cut


def cut_keeping_tail(window: Window, keep_tokens: float, max_keep: int, spans: Sequence[Span] = ()) -> int:
    """The sequence number to observe up to, keeping the newest messages raw.

    Newest messages stay raw while the kept tail is under `keep_tokens` (the retention floor; pass at
    least 1 to keep the prompt being answered) and adding one keeps the tail within `max_keep`. A newest
    message larger than `max_keep` is observed too, so a single huge message never sits in a dead zone.
    A cut inside a tool exchange (`spans`) moves back before its call: the pair stays raw together, and
    it is never moved forward, which would observe the prompt being answered. Returns 0 when nothing is
    to be observed.
    """
    cut = _tail_cut(window, keep_tokens, max_keep)
    if not spans or not cut:
        return cut
    moved = safe_cut_backward(cut, spans)
    return moved if moved > window.lowest_cut else 0


def _tail_cut(window: Window, keep_tokens: float, max_keep: int) -> int:
    ordered = sorted(window.messages, key=lambda m: m.last_seq)
    kept = 0
    first_kept = len(ordered)
    while first_kept > 0 and kept < keep_tokens:
        candidate = ordered[first_kept - 1].tokens
        if kept + candidate > max_keep:
            break
        kept += candidate
        first_kept -= 1
    if first_kept == 0:
        return 0
    return ordered[first_kept - 1].last_seq


def start_of_recent(window: Window, budget: int) -> int | None:
    """The sequence number after which the newest messages of `window` fit in `budget` tokens, cutting only
    before a whole message; the newest message is kept however large. None when every message fits (the
    caller decides whether that is the whole history or only the part it has read so far)."""
    total = CONVERSATION_OVERHEAD
    start: int | None = None
    for message in sorted(window.messages, key=lambda m: m.last_seq, reverse=True):
        if start is not None and total + message.tokens > budget:
            return start
        total += message.tokens
        start = message.first_seq - 1 if start is None else min(start, message.first_seq - 1)
    return None
