"""The docs (README.md and every page under docs/) state the design and name the bench figure that measures
it; they keep no performance history. Recorded values ("was 16, now 9", a day's timings) belong in
`tests/bench/history.json`, which the bench prints beside the current run's figures.

Each pattern below is a phrase of a measurement diary; the positive controls show each one catches the
kind of sentence it was written for and lets the design statements the docs do make pass.
"""

from __future__ import annotations

import re

import pytest

from tests.support.docs import REPO, doc_paths

#: Pages that hold no design statement to measure: the behaviour document's worked examples map inputs to
#: outputs ("20,000 → 30,000"), which is what the memory computes, not how fast it was.
NOT_DESIGN = {"docs/behaviour.md"}
#: Every other page, by its path from the repository root (ARCHITECTURE.md is a pointer to docs/ now).
DOCS = [str(p.relative_to(REPO)) for p in doc_paths() if str(p.relative_to(REPO)) not in NOT_DESIGN]
DOCS.append("ARCHITECTURE.md")
NUMBER = r"[~≈]?[0-9][0-9.,]*"
UNIT = r"(?:ms|µs|s|MB|GB|kB|%|×|x|obs/s|MB/s)(?!\w)"

#: name -> pattern of a history-style phrase.
HISTORY_PHRASES: dict[str, re.Pattern[str]] = {
    "went/fell/rose from N": re.compile(rf"\b(?:went|fell|rose|dropped|grew|improved) from {NUMBER}"),
    "was N unit / (was N": re.compile(rf"\bwas {NUMBER} ?{UNIT}|\(was:? {NUMBER}"),
    "took N": re.compile(rf"\btook (?:about )?{NUMBER}"),
    "now N / now takes / now under": re.compile(rf"\bnow (?:takes |under |at |only )?{NUMBER}"),
    "N -> N": re.compile(rf"{NUMBER} ?(?:{UNIT} ?)?(?:->|→) ?{NUMBER}"),
    "instead of N": re.compile(rf"\binstead of {NUMBER}"),
    "a dated run": re.compile(r"\b20[0-9]{2}-[01][0-9]-[0-3][0-9]\b"),
}

#: Sentences removed from the docs (one per pattern), each of which must be caught.
CAUGHT = {
    "went/fell/rose from N": "bytes tokenised per byte stored went from 4.8 to 2.5.",
    "was N unit / (was N": "makes about 9 SQL statements in 2 transactions (was 16 in 3, plus 3 in the API)",
    "took N": "rendering a 15k-token log took ~12 ms on both calls of every turn",
    "now N / now takes / now under": "a worker took 2-3 s to exit after its warm shutdown, now under 1.2 s",
    "N -> N": "loads the encoding before its other imports (peak 166 -> 160 MB)",
    "instead of N": "Tool results over 10k tokens are cut in 2-7 prefix counts instead of ~17.",
    "a dated run": "Latest runs, 2026-11-30, 2 cores: the quick run",
}

#: Statements the docs make on purpose: limits, defaults, targets, figures by name.
ALLOWED = (
    "`RememberedCounts`, at most 64k counts, ~9 MB",
    "is restarted after 1 s, then 2, 4, ... (at most 30 s)",
    "measured by `make bench` as `bytes tokenised ÷ bytes stored` (1.0: every stored byte tokenised once)",
    "| `flatness, median turn cost late ÷ early` | ≤ 1.2 |",
    "held within 0.9-2x of tracemalloc's count",
    "`OM_SSE_SETTLE_S` (10 s)",
    "a turn is two short transactions and one Redis round trip",
    "(`OM_API_THREADS`, 40)",
    "the `why` line splits an exchange's CPU between those four",
)


def history_phrases(text: str) -> list[str]:
    """`line N: 'matched text' (pattern)` for every history-style phrase in the text."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for name, pattern in HISTORY_PHRASES.items():
            for match in pattern.finditer(line):
                found.append(f"line {number}: {match.group(0)!r} ({name})")
    return found


@pytest.mark.parametrize("doc", DOCS)
def test_the_doc_holds_no_performance_history(doc: str) -> None:
    found = history_phrases((REPO / doc).read_text())
    assert not found, (
        f"{doc} records performance history; state the design and name the bench figure that measures it "
        "(`make bench`: `<figure>`), and put the values in tests/bench/history.json:\n" + "\n".join(found)
    )


@pytest.mark.parametrize("name", list(HISTORY_PHRASES))
def test_each_pattern_catches_the_phrase_it_was_written_for(name: str) -> None:
    assert HISTORY_PHRASES[name].search(CAUGHT[name]), CAUGHT[name]


def test_design_statements_pass() -> None:
    assert [s for s in ALLOWED if history_phrases(s)] == []
