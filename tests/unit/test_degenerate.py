"""Degenerate-output detection and line capping (§5.8, §5.6, §13.9 items 5, 7, 8)."""

from __future__ import annotations

import re

import pytest

from om_core.observations.degenerate import (
    degenerate_diagnosis,
    is_degenerate,
    safe_cut_index,
    sanitize_lines,
)


def _normal_content(lines: int = 40) -> str:
    return "\n".join(
        f"* 🟡 (10:{i % 60:02d}) Agent inspected module number {i} and found {i * 7} distinct call sites"
        for i in range(lines)
    )


def _fired(text: str) -> set[str]:
    """The strategy letters named by the diagnosis ({"A", "C"}, ...); empty when not degenerate."""
    diagnosis = degenerate_diagnosis(text)
    assert (diagnosis is None) == (not is_degenerate(text))
    return set(re.findall(r"strategy ([ABC]) \(", diagnosis or ""))


# --- gate and pre-step --------------------------------------------------------------------------------


def test_text_under_2000_chars_is_never_degenerate() -> None:
    text = "\n".join(["same line repeated over and over"] * 55)
    assert len(text) < 2000
    assert not is_degenerate(text)
    assert degenerate_diagnosis(text) is None


def test_100_copies_of_a_120_char_line_are_degenerate() -> None:
    # §13.9.7: one run of 100 x 121 = 12 100 chars (> 10 000), so the run is not collapsed.
    line = "x" * 60 + " the same observation repeated " + "y" * 29
    assert len(line) == 120
    text = "\n".join([line] * 100)
    assert "B" in _fired(text)


def test_short_repetitive_run_with_normal_content_is_not_degenerate() -> None:
    # §13.9.8: 30 identical short lines in one contiguous run are a faithful summary of a loop.
    text = _normal_content() + "\n" + "\n".join(["build → ok"] * 30) + "\n" + _normal_content(10)
    assert not is_degenerate(text)


def test_a_single_affordable_run_of_long_lines_is_collapsed() -> None:
    line = "* 🟡 (10:00) Agent re-ran the integration suite and it still reports the flaky test"
    assert 40 * (len(line) + 1) <= 10_000
    assert not is_degenerate("\n".join([line] * 40))


def test_the_same_run_recurring_is_not_collapsed() -> None:
    line = "* 🟡 (10:00) Agent re-ran the integration suite and it still reports the flaky test"
    text = "\n".join([line] * 20 + ["* 🔴 (10:05) User asked to stop"] + [line] * 20)
    assert "B" in _fired(text)


def test_a_run_costing_more_than_10000_chars_is_not_collapsed() -> None:
    line = "* 🟡 (10:00) Agent re-ran the integration suite and it still reports the flaky test"
    count = 10_000 // (len(line) + 1) + 1
    assert not is_degenerate("\n".join([line] * (count - 1)))
    assert is_degenerate("\n".join([line] * count))


# --- strategy A ---------------------------------------------------------------------------------------


def test_strategy_a_fires_on_periodic_long_lines() -> None:
    unit = "the agent keeps printing this very same sentence again; "  # 56 chars
    lines = [f"{i} " + unit * 50 for i in range(4)]  # few lines: strategy B cannot fire
    assert _fired("\n".join(lines)) == {"A"}


def test_strategy_a_does_not_fire_on_varied_long_lines() -> None:
    lines = [" ".join(f"word{i * 1000 + j}" for j in range(400)) for i in range(4)]
    assert _fired("\n".join(lines)) == set()


def test_strategy_a_ignores_lines_over_10000_chars() -> None:
    # One runaway line of repeats is capped by sanitize_lines, not treated as a window loop.
    text = "ab" * 6000 + "\n" + _normal_content(5)
    assert not is_degenerate(text)


# --- strategy B ---------------------------------------------------------------------------------------


def _long(i: int) -> str:
    return f"* 🟡 (10:{i % 60:02d}) distinct observation about component number {i} of the build system"


def test_strategy_b_fires_when_most_long_lines_repeat() -> None:
    looped = "* 🟡 (11:00) the agent looped on this exact same line, again and again"
    # Never two identical lines in a row, so nothing is collapsed: 15 distinct, 15 + 14 = 29 repeats of 44.
    lines = [line for i in range(15) for line in (_long(i), looped)] + [_long(i) for i in range(14)]
    assert "B" in _fired("\n".join(lines))


def test_strategy_b_does_not_fire_at_half_or_below() -> None:
    looped = "* 🟡 (11:00) the agent looped on this exact same line, again and again"
    # 30 distinct lines plus 10 alternating pairs: 18 repeats among 50 long lines.
    lines = [_long(i) for i in range(30)] + [looped, _long(99)] * 10
    assert "B" not in _fired("\n".join(lines))


def test_strategy_b_needs_at_least_20_long_lines() -> None:
    line = "* 🟡 (10:00) " + "z" * 700
    text = "\n".join([line, "<br>"] * 19)  # 19 long lines, 18 of them repeats
    assert "B" not in _fired(text)
    assert "B" in _fired("\n".join([line, "<br>"] * 20))


# --- strategy C ---------------------------------------------------------------------------------------


def test_strategy_c_fires_on_a_long_short_line_loop() -> None:
    text = "\n".join(["ok", "retry"] * 1500)  # alternating: no run of identical lines to collapse
    assert _fired(text) == {"C"}


def test_strategy_c_counts_a_single_uncollapsed_run() -> None:
    text = "\n".join(["ok"] * 4000)  # 4000 x 3 = 12 000 > 10 000: not collapsed
    assert _fired(text) == {"C"}


def test_strategy_c_runs_are_broken_by_substantive_lines() -> None:
    chunk = ["ok", "retry"] * 800  # 800 x 3 + 800 x 6 = 7200 chars of repeats per run
    first, second = "* 🟡 (10:00) a substantive observation line", "* 🟡 (10:01) another one here"
    text = "\n".join([*chunk, first, *chunk, second, *chunk])
    assert _fired(text) == set()


def test_strategy_c_ignores_lone_tags_and_date_headers() -> None:
    tags = "\n".join(["<observations>", "</observations>"] * 2000)
    dates = "\n".join(["Date: Dec 4, 2025", "Date: Dec 5, 2025"] * 1000)
    assert not is_degenerate(tags)
    assert not is_degenerate(dates)
    # The same volume of ordinary short lines does fire.
    assert is_degenerate("\n".join(["<observation", "/observation"] * 2000))


def test_diagnosis_reports_lengths_and_snippets() -> None:
    text = "\n".join(["ok", "retry"] * 1500)
    diagnosis = degenerate_diagnosis(text)
    assert diagnosis is not None
    assert f"total {len(text)} chars" in diagnosis
    assert "head='ok retry" in diagnosis
    assert "tail=" in diagnosis


# --- sanitize_lines -----------------------------------------------------------------------------------


def test_a_12000_char_line_is_cut_to_10000_plus_marker() -> None:
    text = "short\n" + "a" * 12_000 + "\nafter"
    lines = sanitize_lines(text).split("\n")
    assert lines[0] == "short"
    assert lines[1] == "a" * 10_000 + " … [truncated]"
    assert lines[2] == "after"


def test_lines_of_exactly_10000_chars_are_kept() -> None:
    text = "b" * 10_000
    assert sanitize_lines(text) == text


@pytest.mark.parametrize(
    ("line", "kept"),
    [
        ("a" * 9_999 + "e\u0301" + "b" * 50, 9_999),  # combining accent stays with its letter
        ("a" * 9_999 + "🇩🇪" + "b" * 50, 9_999),  # a flag is a pair of regional indicators
        ("a" * 9_998 + "👩\u200d💻" + "b" * 50, 9_998),  # zero-width-joiner sequence
        ("a" * 9_999 + "👍🏽" + "b" * 50, 9_999),  # skin-tone modifier
        ("a" * 9_998 + "🇩🇪🇫🇷" + "b" * 50, 10_000),  # cut between two complete flags
    ],
)
def test_the_cut_never_splits_a_grapheme(line: str, kept: int) -> None:
    assert sanitize_lines(line) == line[:kept] + " … [truncated]"


def test_safe_cut_index_keeps_surrogate_pairs_together() -> None:
    text = "a" * 5 + "\ud83d\ude00" + "b"  # a lone-surrogate pair as badly decoded input produces
    assert safe_cut_index(text, 6) == 5
    assert safe_cut_index(text, 100) == len(text)
