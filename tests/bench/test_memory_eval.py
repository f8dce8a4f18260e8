"""The memory evaluation (tests/bench/memory_eval/): its conversations are deterministic and every answer is
in them verbatim, an updated fact's old value is never an answer, and a tiny conversation played through
the real stack gives every share in [0, 1], measured against a real truncation.
"""

from __future__ import annotations

import math
import time
import uuid
from pathlib import Path

import pytest

from om_core.tokens import TokenCounter
from tests.bench.memory_eval.conversation import KINDS, Question, contains, generate
from tests.bench.memory_eval.local_stack import local_stack
from tests.bench.memory_eval.report import table
from tests.bench.memory_eval.runner import SCOPES, evaluate
from tests.bench.memory_eval.scoring import MEASURES, truncate


@pytest.mark.parametrize("size", ["tiny", "quick", "full"])
def test_a_seed_gives_the_same_conversation_and_every_answer_is_in_it(size: str) -> None:
    first, again, other = generate(7, size), generate(7, size), generate(8, size)
    assert first.turns == again.turns and first.questions == again.questions
    assert first.turns != other.turns
    assert {q.kind for q in first.questions} == set(KINDS)
    for question in first.questions:
        for value in (*question.answers, *question.stale):
            stated = [t for t in first.turns if contains(t.text, value)]
            assert stated and all(t.role == "user" and question.key in t.plants for t in stated), value
        if question.kind == "multi_session":
            sessions = {t.session for a in question.answers for t in first.turns if contains(t.text, a)}
            assert len(sessions) == 2, question
        if question.kind == "updated":
            [old] = [t for t in first.turns if contains(t.text, question.stale[0])]
            [new] = [t for t in first.turns if contains(t.text, question.answers[0])]
            assert old.session < new.session, question
    # Questions are not the statements' words: the question never holds its answer.
    assert not any(q.answered(q.text) for q in first.questions)


def test_the_full_size_is_the_issues_and_the_dates_move_forward() -> None:
    conversation = generate(33, "full")
    assert len(conversation.turns) == 600 and conversation.sessions == 8
    assert 19_000 < TokenCounter().count_string(conversation.text) < 25_000
    times = [t.at for t in conversation.turns]
    assert times == sorted(times) and (times[-1] - times[0]).days >= 21


def test_an_updated_facts_old_value_is_not_an_answer() -> None:
    question = Question("updated", "rent", "What do we pay for housing monthly?", ("€1,420",), ("€1,150",))
    assert not question.answered("Our rent is €1,150 a month.")
    assert question.answered("Our rent is €1,150 a month. The landlord raised our rent to €1,420.")
    both = Question("multi_session", "siblings", "?", ("Anselm", "Rosalind"))
    assert not both.answered("My brother Anselm is visiting.") and both.answered("Anselm and Rosalind")
    # A value matches as a phrase, never inside a longer number or word.
    assert not contains("starts at 12:30 pm", "2:30 pm") and not contains("Icelandic", "Iceland")
    assert contains("MY FLIGHT IS lh  4417.", "LH 4417")


def test_truncation_keeps_the_newest_text_within_the_budget() -> None:
    counter = TokenCounter()
    texts = [f"turn {i}: " + "word " * 30 for i in range(20)]
    budget = counter.count_string(texts[-1]) * 2 + 5
    cut, used = truncate(texts, budget, counter)
    assert used <= budget and cut.endswith(texts[-1]) and "turn 17" not in cut and "turn 18" in cut
    assert truncate(texts, 0, counter) == ("", 0)


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_tiny_conversation_runs_end_to_end_against_a_real_truncation(
    postgres_url: str, redis_url: str, tmp_path: Path
) -> None:
    # Every fact in the first exchanges, and the smallest message threshold the server allows (the
    # conversation passes it about three times): the newest raw turns of the context's size hold no answer.
    conversation = generate(5, "tiny", facts_at_start=True)
    started = time.monotonic()
    with local_stack(tmp_path / "stack", concurrency=2) as stack:
        results = evaluate(stack, conversation, uuid.uuid4().hex[:8])
    print(table(conversation, results), f"\n{time.monotonic() - started:.0f} s")
    assert set(results) == set(SCOPES)
    for scope, result in results.items():
        shares = result.shares()
        for measure in MEASURES:
            for kind, value in shares[measure].items():
                assert 0.0 <= value <= 1.0 and not math.isnan(value), (scope, measure, kind)
        assert result.search_error is None, result.search_error
        assert result.newest_turn_in_context, scope
        assert 0 < result.truncation_tokens <= result.context_tokens, scope
        assert shares["truncation"]["all"] == 0.0, result.truncation
        assert contains(result.truncation, conversation.turns[-1].text.split()[-1]), scope
        # The observations kept at least one planted fact the truncation lost.
        assert shares["context"]["all"] > 0.0, result.context
