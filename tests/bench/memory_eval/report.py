"""The evaluation's figures as a table (per scope, per measure, overall and per question kind) and JSON."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from tests.bench.memory_eval.conversation import KINDS, Conversation
from tests.bench.memory_eval.runner import ScopeResult
from tests.bench.memory_eval.scoring import MEASURES, ratio

LABELS = {
    "context": "final context",
    "truncation": "truncation, same tokens",
    "search": "search top 10",
    "context_or_search": "context or search top 10",
}


def percent(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{100 * value:.0f} %"


def context_over_truncation(result: ScopeResult) -> float:
    figures = result.shares()
    return ratio(figures["context"]["all"], figures["truncation"]["all"])


def table(conversation: Conversation, results: Mapping[str, ScopeResult]) -> str:
    """A plain-text table: one block per scope, one row per measure, a column per question kind."""
    counts = {kind: sum(q.kind == kind for q in conversation.questions) for kind in KINDS}
    header = ["measure", f"all ({len(conversation.questions)})", *(f"{k} ({counts[k]})" for k in KINDS)]
    lines = [
        f"memory evaluation: {conversation.size.name} conversation (seed {conversation.seed}), "
        f"{len(conversation.turns)} turns in {conversation.sessions} sessions, "
        f"{len(conversation.questions)} questions; messageTokens {conversation.size.message_tokens:,}, "
        f"observationTokens {conversation.size.observation_tokens:,}"
    ]
    for scope, result in results.items():
        figures = result.shares()
        rows = [[LABELS[m], *(percent(figures[m][k]) for k in ("all", *KINDS))] for m in MEASURES]
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
        lines.append("")
        lines.append(
            f"{scope} scope: context {result.context_tokens:,} tokens, truncation "
            f"{result.truncation_tokens:,} tokens; context ÷ truncation "
            f"{_times(context_over_truncation(result))}; search "
            + ("by words and vectors" if result.vector else "by words only (no pgvector)")
        )
        for row in [header, *rows]:
            lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
        if result.search_error:
            lines.append(f"search failed (every search counted as a miss): {result.search_error}")
    return "\n".join(lines)


def _times(value: float) -> str:
    return "n/a (truncation found none)" if math.isnan(value) else f"{value:.2f}×"


def as_json(conversation: Conversation, results: Mapping[str, ScopeResult]) -> dict[str, Any]:
    return {
        "size": conversation.size.name,
        "seed": conversation.seed,
        "turns": len(conversation.turns),
        "sessions": conversation.sessions,
        "questions": len(conversation.questions),
        "message_tokens": conversation.size.message_tokens,
        "observation_tokens": conversation.size.observation_tokens,
        "scopes": {
            scope: {**result.as_json(), "context_over_truncation": context_over_truncation(result)}
            for scope, result in results.items()
        },
    }
