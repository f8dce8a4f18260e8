"""The text rules of observation groups (§9.1, §4.11): wrapping, the actor's rendering, merged ranges
of a reflection, and reflected prefixes that never end inside a group."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from om_core.messages import Message, Part, text_message
from om_core.observations.groups import (
    GroupSpan,
    align_slice,
    groups_in,
    merged_ranges,
    message_range,
    new_group_id,
    render_for_actor,
    strip_wrappers,
    wrap,
)

T = datetime(2026, 3, 3, 9, 0, tzinfo=UTC)


def test_a_group_id_is_sixteen_lowercase_hex_characters_and_random() -> None:
    ids = {new_group_id() for _ in range(50)}
    assert len(ids) == 50
    assert all(len(i) == 16 and i == i.lower() and int(i, 16) >= 0 for i in ids)


def test_the_range_names_the_first_and_last_messages_with_visible_content() -> None:
    marker = Message(id="d1", role="assistant", parts=[Part(type="data-om-status", data={})], created_at=T)
    messages = [marker, text_message("m1", "user", "hi", T), text_message("m2", "assistant", "yo", T), marker]
    assert message_range(messages) == "m1:m2"
    assert message_range([marker]) == "d1:d1"
    with pytest.raises(ValueError):
        message_range([])


def test_wrapping_replaces_wrappers_a_model_wrote_itself() -> None:
    text = '<observation-group id="x">\nDate: Mar 3\n* 🔴 fact\n</observation-group>'
    wrapped = wrap(text, "abcd", "m1:m2")
    assert (
        wrapped == '<observation-group id="abcd" range="m1:m2">\nDate: Mar 3\n* 🔴 fact\n</observation-group>'
    )
    assert strip_wrappers(wrapped) == "Date: Mar 3\n* 🔴 fact\n"


def test_the_actor_sees_a_heading_with_the_range_only_when_it_can_recall() -> None:
    log = wrap("Date: Mar 3\n* 🔴 fact", "abcd", "m1:m2")
    shown = render_for_actor(log, with_ranges=True)
    assert shown.split("\n")[:3] == ["## Group `abcd`", "_range: `m1:m2`_", ""]
    assert "observation-group" not in shown and "* 🔴 fact" in shown
    plain = render_for_actor(log, with_ranges=False)
    assert "Group" not in plain and "observation-group" not in plain and "* 🔴 fact" in plain


def test_a_reflection_range_merges_runs_of_one_thread_and_keeps_threads_apart() -> None:
    spans = [
        GroupSpan("a", "m1:m4", "t1"),
        GroupSpan("b", "m5:m9", "t1"),
        GroupSpan("c", "x1:x3", "t2"),
        GroupSpan("d", "m10:m12", "t1"),
    ]
    assert merged_ranges(spans) == "m1:m9,x1:x3,m10:m12"
    assert merged_ranges([]) is None
    # A group that is already a merged list keeps its pieces.
    assert merged_ranges([GroupSpan("e", "m1:m9,x1:x3", None)]) == "m1:m9,x1:x3"


def test_groups_are_found_with_the_thread_section_they_sit_in() -> None:
    log = "\n".join(
        [
            '<thread id="t1">',
            wrap("* one", "g1", "m1:m2"),
            "</thread>",
            "",
            "--- message boundary (2026-03-03T09:00:00+00:00) ---",
            "",
            '<thread id="t2">',
            wrap("* two", "g2", "x1:x2"),
            "</thread>",
        ]
    )
    assert groups_in(log) == [GroupSpan("g1", "m1:m2", "t1"), GroupSpan("g2", "x1:x2", "t2")]


def test_a_reflected_prefix_ends_after_a_whole_group() -> None:
    lines = [
        *wrap("Date: Mar 3\n* a\n* b", "g1", "m1:m2").split("\n"),
        "",
        *wrap("* c\n* d", "g2", "m3:m4").split("\n"),
    ]
    # lines: 0 open g1, 1 date, 2 a, 3 b, 4 close, 5 blank, 6 open g2, 7 c, 8 d, 9 close
    assert align_slice(lines, 10) == 10
    assert align_slice(lines, 8) == 6  # inside g2: back to the blank line after g1
    assert align_slice(lines, 3) == 5  # inside the first group: its end
    plain = ["Date: Mar 3", "* a", "* b"]
    assert align_slice(plain, 2) == 2
