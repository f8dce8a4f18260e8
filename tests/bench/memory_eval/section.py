"""The `memory_eval` section of `make bench` (`tests.bench.run`): the evaluation at full size (quick: the
~120-turn conversation) on a stack of its own (`local_stack`: the pgvector Postgres under `testenv.py`, one
worker process for every queue including `om.index`), its figures beside their history.

Each scope reports the share of answers in the final context, in the truncation baseline, their ratio,
in the search's top 10 and in the context or the search; the figure's note gives the share per question
kind, and the whole table (`report.table`) is printed in the log and kept in the results' section.
"""

from __future__ import annotations

from tests.bench.harness import Bench
from tests.bench.memory_eval.conversation import KINDS, generate
from tests.bench.memory_eval.local_stack import local_stack
from tests.bench.memory_eval.report import as_json, context_over_truncation, percent, table
from tests.bench.memory_eval.runner import SCOPES, ScopeResult, evaluate
from tests.bench.results import FigureDef, Target

SECTION = "memory_eval"
SEED = 33
#: The issue's goals: context at least 1.5 × truncation, context or search at least 90 %, a new thread of
#: the resource at least 50 %.
RATIO_TARGET = 1.5
FOUND_TARGET = 90.0
NEW_THREAD_TARGET = 50.0


def context(scope: str) -> FigureDef:
    return FigureDef(f"memory eval, {scope} scope: answers in the context", "%")


def truncation(scope: str) -> FigureDef:
    return FigureDef(f"memory eval, {scope} scope: answers in truncation to the same tokens", "%")


def over_truncation(scope: str) -> FigureDef:
    return FigureDef(f"memory eval, {scope} scope: context ÷ truncation", "×")


def search(scope: str) -> FigureDef:
    return FigureDef(f"memory eval, {scope} scope: answers in search top 10", "%")


def context_or_search(scope: str) -> FigureDef:
    return FigureDef(f"memory eval, {scope} scope: answers in context or search top 10", "%")


def figures(quick: bool) -> list[FigureDef]:
    return [
        make(scope)
        for scope in SCOPES
        for make in (context, truncation, over_truncation, search, context_or_search)
    ]


def _per_kind(result: ScopeResult, measure: str) -> str:
    shares = result.shares()[measure]
    return ", ".join(f"{kind} {percent(shares[kind])}" for kind in KINDS)


def _count(result: ScopeResult, measure: str) -> str:
    return f"{sum(bool(r[measure]) for r in result.rows)}/{len(result.rows)}"


def _missed(result: ScopeResult, measure: str) -> str:
    """The questions a measure missed, by kind and fact (the JSON has their text and answers)."""
    return ", ".join(f"{r['kind']}:{r['key']}" for r in result.rows if not r[measure]) or "none"


def run(bench: Bench) -> None:
    conversation = generate(SEED, "quick" if bench.quick else "full")
    bench.say(
        f"memory eval: {len(conversation.turns)} turns, {conversation.sessions} sessions, "
        f"{len(conversation.questions)} questions, offline model"
    )
    with local_stack(bench.workdir / "memory-eval") as stack:
        results = evaluate(stack, conversation, bench.run_id, on_progress=bench.say)
    for line in table(conversation, results).splitlines():
        bench.say(line)
    bench.section_meta(SECTION, evaluation=as_json(conversation, results))
    size = f"{len(conversation.turns)} turns, {len(conversation.questions)} questions"
    for scope, result in results.items():
        shares = result.shares()
        context_target = Target.at_least(NEW_THREAD_TARGET, " %") if scope == "resource" else None
        bench.results.add(
            SECTION,
            context(scope),
            100 * shares["context"]["all"],
            target=context_target,
            note=f"{size}; {result.context_tokens:,} tokens; {_per_kind(result, 'context')}",
        )
        bench.results.add(
            SECTION,
            truncation(scope),
            100 * shares["truncation"]["all"],
            note=f"newest raw turns, {result.truncation_tokens:,} tokens; {_per_kind(result, 'truncation')}",
        )
        bench.results.add(
            SECTION,
            over_truncation(scope),
            context_over_truncation(result),
            target=Target.at_least(RATIO_TARGET, "×"),
            why=(
                f"{_count(result, 'context')} answers in the context, {_count(result, 'truncation')} in the "
                f"newest raw turns of the same {result.context_tokens:,} tokens"
            ),
        )
        bench.results.add(
            SECTION,
            search(scope),
            100 * shares["search"]["all"],
            note=("words and vectors" if result.vector else "words only (no pgvector)")
            + f"; {_per_kind(result, 'search')}"
            + (f"; search failed: {result.search_error[:200]}" if result.search_error else ""),
        )
        bench.results.add(
            SECTION,
            context_or_search(scope),
            100 * shares["context_or_search"]["all"],
            target=Target.at_least(FOUND_TARGET, " %"),
            why=f"missed: {_missed(result, 'context_or_search')}",
            note=_per_kind(result, "context_or_search"),
        )
