"""The recorded values (`history.json`) name only figures the bench produces, and are shown beside them.

No services: the figure list comes from the sections' own declarations (`run.figure_defs`, built from each
section's plan), the same ones their `run` functions report under.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.bench import history, run
from tests.bench.results import FigureDef, Results, markdown_table, print_table


def _defs_by_mode() -> dict[str, list[FigureDef]]:
    return {mode: run.figure_defs(mode == "quick") for mode in history.MODES}


def test_every_section_declares_its_figures_once() -> None:
    assert list(run.FIGURES) == list(run.SECTIONS)
    for mode, defs in _defs_by_mode().items():
        names = [d.name for d in defs]
        assert len(names) == len(set(names)), f"{mode}: a figure name is declared twice: {names}"
        assert all(d.name.strip() for d in defs)


def test_the_history_file_is_well_formed_and_names_only_figures_the_bench_produces() -> None:
    entries = history.load()
    assert entries, "history.json holds no entries"
    assert history.problems(entries, _defs_by_mode()) == []
    assert set(json.loads(history.HISTORY_FILE.read_text())) == {"about", "entries"}


def _entry(**changes: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "figure": "turn p50, 10 thread(s)",
        "unit": "ms",
        "mode": "quick",
        "recorded": "2026-11-30",
        "value": 644,
        "change": "first bench run",
    }
    return {**entry, **changes}


def test_a_wrong_entry_is_reported() -> None:
    """The check can fail: each kind of mistake is named."""
    defs = _defs_by_mode()
    assert history.problems([_entry(), _entry(value=[292, 359])], defs) == []
    wrong = {
        "unknown figure": _entry(figure="turn p50 at 10 threads"),
        "figure of the other mode": _entry(figure="largest actor context over 1M tokens", unit="tokens"),
        "wrong unit": _entry(unit="s"),
        "bad mode": _entry(mode="nightly"),
        "bad date": _entry(recorded="30 Nov 2026"),
        "bad value": _entry(value="644 ms"),
        "reversed range": _entry(value=[359, 292]),
        "empty change": _entry(change=" "),
        "missing field": {k: v for k, v in _entry().items() if k != "change"},
        "unknown field": _entry(note="x"),
    }
    for what, entry in wrong.items():
        assert history.problems([entry], defs), f"{what} was not reported"
    out_of_order = [_entry(recorded="2026-12-01"), _entry()]
    assert history.problems(out_of_order, defs)


def test_recorded_values_are_printed_under_the_same_figure_of_the_same_mode(tmp_path: Path) -> None:
    results = Results(mode="quick", command="python -m tests.bench.run --quick")
    results.add("turn_path", FigureDef("turn p50, 10 thread(s)", "ms"), 301.5)
    results.add("memory", FigureDef("API process resident memory (peak)", "MB"), 158.0)
    entries = [
        _entry(session="865db3a", machine="2 cores"),
        _entry(mode="full", value=410, change="full run"),
        _entry(figure="API process resident memory (peak)", unit="MB", mode=None, value=166, change="c"),
    ]
    history.attach(results, entries, "tests/bench/history.json")

    lines: list[str] = []
    print_table(results, lines.append)
    text = "\n".join(lines)
    turn = lines.index(next(line for line in lines if line.startswith("turn_path")))
    assert lines[turn + 1] == "    before: 644 ms on 2026-11-30 (865db3a; 2 cores): first bench run"
    assert "410 ms" not in text, "a full run's value is not shown beside a quick run's"
    assert "before: 166 MB on 2026-11-30 (run mode not recorded): c" in text
    assert "| 644 ms (2026-11-30) |" in markdown_table(results)

    out = tmp_path / "bench-results.json"
    results.write(out)
    written = json.loads(out.read_text())
    assert [e["value"] for e in written["figures"][0]["history"]] == [644]
    assert written["history"] == {"file": "tests/bench/history.json", "entries": 3, "shown": 2}


def test_a_broken_history_file_is_reported_and_the_run_goes_on(tmp_path: Path) -> None:
    broken = tmp_path / "history.json"
    broken.write_text('{"entries": [')
    results = Results(mode="quick", command="")
    run.attach_history(results, broken)
    assert "error" in results.history
    malformed = tmp_path / "malformed.json"
    malformed.write_text(json.dumps({"entries": [{"figure": "turn p50, 10 thread(s)"}, _entry()]}))
    results = Results(mode="quick", command="")
    results.add("turn_path", FigureDef("turn p50, 10 thread(s)", "ms"), 301.5)
    run.attach_history(results, malformed)
    assert len(results.history["problems"]) == 1 and len(results.figures[0].history) == 1
    unknown = tmp_path / "unknown.json"
    unknown.write_text(json.dumps({"entries": [_entry(figure="no such figure")]}))
    run.attach_history(results, unknown)
    assert results.history["problems"] == ["entry 1 (no such figure) names no figure a quick run produces"]
