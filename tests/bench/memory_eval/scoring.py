"""What each measure reads: the context's text, the truncation baseline, and the shares per kind.

The truncation baseline is the newest raw turns cut to the context's token count (the project's
`TokenCounter`, o200k): whole turns newest first, then the tail of the turn that no longer fits whole.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from om_core.tokens import TokenCounter
from tests.bench.memory_eval.conversation import KINDS

#: The measures, in report order: the context, the truncation baseline, the search's top 10, and the
#: context or the search (what an actor with the recall tool could find).
MEASURES = ("context", "truncation", "search", "context_or_search")


def context_text(context: Mapping[str, Any]) -> str:
    """The actor's context as text: the chat-completions messages the turn API answered with."""
    texts: list[str] = []
    for message in context.get("openai_messages") or []:
        content = message.get("content")
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts.extend(str(b.get("text", "")) for b in content if isinstance(b, dict))
    if not texts:  # another form: the memory messages and the stored messages' text
        texts = [*context.get("system_messages", []), context.get("continuation_reminder") or ""]
        for message in context.get("messages", []):
            texts.extend(str(p.get("text", "")) for p in message.get("parts", []) if p.get("text"))
    return "\n".join(t for t in texts if t)


def truncate(texts: Sequence[str], budget: int, counter: TokenCounter) -> tuple[str, int]:
    """The newest of `texts` (oldest first) within `budget` tokens, the oldest one kept cut to its tail;
    returns the text and its token count."""
    kept: list[str] = []
    used = 0
    for text in reversed(texts):
        tokens = counter.count_string(text)
        if used + tokens <= budget:
            kept.append(text)
            used += tokens
            continue
        words = text.split()
        low, high = 0, len(words)  # the most trailing words that fit
        while low < high:
            middle = (low + high + 1) // 2
            if counter.count_string(" ".join(words[-middle:])) <= budget - used:
                low = middle
            else:
                high = middle - 1
        if low:
            tail = " ".join(words[-low:])
            kept.append(tail)
            used += counter.count_string(tail)
        break
    return "\n".join(reversed(kept)), used


def share(rows: Iterable[Mapping[str, Any]], measure: str, kind: str | None = None) -> float:
    """The share of questions (of `kind`, or all) answered by `measure`; NaN when there are none."""
    chosen = [r for r in rows if kind is None or r["kind"] == kind]
    if not chosen:
        return math.nan
    return sum(bool(r[measure]) for r in chosen) / len(chosen)


def shares(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """{measure: {"all": share, kind: share, ...}}."""
    return {
        measure: {"all": share(rows, measure), **{kind: share(rows, measure, kind) for kind in KINDS}}
        for measure in MEASURES
    }


def ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else math.nan
