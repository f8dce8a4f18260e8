"""The generation diff (`om_core.observations.diff`): every line of both logs accounted for once, in order,
with what a reflection typically does (condense several lines into one, drop, keep) reported as such."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from om_core.observations.diff import DiffLine, diff_lines


def test_a_reflection_that_condenses_and_drops_lines() -> None:
    before = "\n".join(
        [
            "Date: 2026-11-30",
            "* 🔴 (09:00) User's name is Ada",
            "* 🟡 (09:05) User likes tea",
            "* 🟡 (09:06) User likes green tea in the morning",
            "* 🟢 (09:10) Small talk about weather",
        ]
    )
    after = "\n".join(
        [
            "Date: 2026-11-30",
            "* 🔴 (09:00) User's name is Ada",
            "* 🟡 (09:05) User likes green tea in the morning",
        ]
    )
    assert diff_lines(before, after) == [
        DiffLine("kept", "Date: 2026-11-30"),
        DiffLine("kept", "* 🔴 (09:00) User's name is Ada"),
        DiffLine("removed", "* 🟡 (09:05) User likes tea"),
        DiffLine("removed", "* 🟡 (09:06) User likes green tea in the morning"),
        DiffLine("removed", "* 🟢 (09:10) Small talk about weather"),
        DiffLine("added", "* 🟡 (09:05) User likes green tea in the morning"),
    ]


def test_the_first_generation_is_all_added_and_an_emptied_log_all_removed() -> None:
    assert diff_lines("", "a\nb") == [DiffLine("added", "a"), DiffLine("added", "b")]
    assert diff_lines("a\nb\n", "") == [DiffLine("removed", "a"), DiffLine("removed", "b")]
    assert diff_lines("", "") == []


def test_identical_logs_are_all_kept() -> None:
    text = "Date: x\n* one\n\n* two"
    assert diff_lines(text, text) == [DiffLine("kept", line) for line in text.splitlines()]


def test_often_repeated_lines_do_not_turn_everything_into_a_replacement() -> None:
    """difflib's autojunk would count the blank line (over 1% of 200+ lines) as junk; with it off, an
    inserted line in a long log is one addition, not a rewritten block."""
    lines = [f"* line {i}" if i % 2 else "" for i in range(400)]
    after = [*lines[:200], "* inserted", *lines[200:]]
    diff = diff_lines("\n".join(lines), "\n".join(after))
    assert [d for d in diff if d.op != "kept"] == [DiffLine("added", "* inserted")]


lines_strategy = st.lists(st.sampled_from(["a", "b", "c", "", "Date: 1", "* x"]), max_size=30)


@given(lines_strategy, lines_strategy)
def test_every_line_of_both_logs_is_accounted_for_in_order(old: list[str], new: list[str]) -> None:
    diff = diff_lines("\n".join(old), "\n".join(new))
    # "\n".join of [""] is "", whose splitlines() is []: compare against what the texts hold.
    old_lines, new_lines = "\n".join(old).splitlines(), "\n".join(new).splitlines()
    assert [d.text for d in diff if d.op != "added"] == old_lines
    assert [d.text for d in diff if d.op != "removed"] == new_lines
