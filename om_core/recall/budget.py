"""Token budgets of recall results (behaviour §9.4): cutting a text to a number of tokens, the low-detail part
budgets with their re-expansion, and the result budget.

Counting uses the project's estimator (`om_core.tokens`, behaviour §7), the same one thresholds use. A cut
never reads more than `CHARS_PER_TOKEN_BOUND` characters per token of the limit, so cutting a 2 MB part
to 100 tokens costs a few counts of a short prefix, not a count of the whole part.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from om_core.observations.degenerate import safe_cut_index

__all__ = [
    "RESULT_BUDGET",
    "TOOL_RESULT_CAP",
    "Budgeted",
    "Count",
    "cut_to_tokens",
    "expand_within",
    "limit_result",
]

Count = Callable[[str], int]

#: Tokens one recall result may hold (behaviour §9.4).
RESULT_BUDGET = 2000
#: Tokens of a serialised tool result, at any detail (behaviour §9.4).
TOOL_RESULT_CAP = 4000
#: No token of the estimator spans more characters than this, so a prefix this long per token of the
#: limit always holds at least the limit (or the whole text).
CHARS_PER_TOKEN_BOUND = 32


def cut_to_tokens(text: str, limit: int, count: Count) -> str | None:
    """The longest prefix of `text` within `limit` tokens (never splitting a character cluster), or None
    when the whole text fits."""
    bound = max(limit, 1) * CHARS_PER_TOKEN_BOUND
    probe = text[:bound]
    tokens = count(probe)
    if tokens <= limit:
        return None if len(probe) == len(text) else probe[: safe_cut_index(probe, len(probe))]
    low, high = 0, len(probe)  # count(probe[:low]) <= limit < count(probe[:high])
    guess = int(len(probe) * limit / tokens)
    while high - low > 1:
        middle = guess if low < guess < high else (low + high) // 2
        guess = -1
        if count(probe[:middle]) <= limit:
            low = middle
        else:
            high = middle
    return probe[: safe_cut_index(probe, low)]


def limit_result(text: str, count: Count, budget: int = RESULT_BUDGET) -> tuple[str, int]:
    """`text` within the result budget: (text, tokens cut). Over budget it is cut hard and ends with
    `... [truncated ~N tokens]`, N being what was cut (the caller reports it as `tokenOffset`)."""
    total = _measure(text, count)
    if total <= budget:
        return text, 0
    kept = cut_to_tokens(text, budget, count) or text
    cut = max(total - budget, 1)
    return f"{kept}\n... [truncated ~{cut} tokens]", cut


#: Past this many characters a result's size is estimated from its first `_SAMPLE` characters: only the
#: `tokenOffset` of a huge part depends on it, and the spec asks for an approximate figure there.
_EXACT_UP_TO, _SAMPLE = 400_000, 200_000


def _measure(text: str, count: Count) -> int:
    if len(text) <= _EXACT_UP_TO:
        return count(text)
    return round(count(text[:_SAMPLE]) * len(text) / _SAMPLE)


@dataclass
class Budgeted:
    """One part's text in a low-detail page: its full text, what is shown, and how it may grow."""

    full: str
    shown: str
    #: Tokens of `shown` (hint excluded).
    tokens: int
    #: Where it stands in the re-expansion order (lower first) and the most it may grow to.
    priority: int
    expand_to: int
    hint: str
    truncated: bool

    @property
    def text(self) -> str:
        return f"{self.shown} {self.hint}" if self.truncated else self.shown


def budgeted(full: str, first: int, expand_to: int, priority: int, hint: str, count: Count) -> Budgeted:
    """A part cut to its first low-detail budget."""
    cut = cut_to_tokens(full, first, count)
    if cut is None:
        return Budgeted(full, full, count(full), priority, expand_to, hint, truncated=False)
    return Budgeted(full, cut, count(cut), priority, expand_to, hint, truncated=True)


def expand_within(parts: Sequence[Budgeted], leftover: int, count: Count) -> None:
    """Spend `leftover` tokens re-expanding cut parts, by priority then position (behaviour §9.4); a part that
    can grow only partly is cut again with its hint."""
    order = sorted(
        (i for i, part in enumerate(parts) if part.truncated), key=lambda i: (parts[i].priority, i)
    )
    for i in order:
        if leftover <= 0:
            return
        part = parts[i]
        target = min(part.expand_to, part.tokens + leftover)
        if target <= part.tokens:
            continue
        cut = cut_to_tokens(part.full, target, count)
        shown = part.full if cut is None else cut
        tokens = count(shown)
        leftover -= max(tokens - part.tokens, 0)
        part.shown, part.tokens, part.truncated = shown, tokens, cut is not None
