"""The shared log's text rules: thread sections, message boundaries, continuation, labels (§4.12)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from om_core.context.actor import split_log_chunks
from om_core.observations.resource_log import compose_section, strip_thread_tags, thread_label

AT = datetime(2026, 3, 3, 9, 30, tzinfo=UTC)
LATER = datetime(2026, 3, 3, 11, 0, tzinfo=UTC)


def test_the_first_section_has_no_boundary() -> None:
    log = compose_section("", "a", "Date: Mar 3, 2026\n* 🔴 (09:00) User likes tea", AT)
    assert log == '<thread id="a">\nDate: Mar 3, 2026\n* 🔴 (09:00) User likes tea\n</thread>'


def test_another_thread_starts_a_new_section_after_a_message_boundary() -> None:
    log = compose_section("", "a", "Date: Mar 3, 2026\n* 🔴 (09:00) tea", AT)
    log = compose_section(log, "b", "Date: Mar 3, 2026\n* 🔴 (10:00) coffee", LATER)
    assert f"--- message boundary ({LATER.isoformat()}) ---" in log
    assert log.endswith('<thread id="b">\nDate: Mar 3, 2026\n* 🔴 (10:00) coffee\n</thread>')
    assert len(split_log_chunks(log)) == 2, "the actor sees one message per side of the boundary"


def test_the_same_thread_on_the_same_date_continues_by_appending_only() -> None:
    first = compose_section("", "a", "Date: Mar 3, 2026\n* 🔴 (09:00) tea", AT)
    second = compose_section(first, "a", "Date: Mar 3, 2026\n* 🔴 (10:00) scones", LATER)
    assert second.startswith(first), "the log only grows at its end"
    assert second.count("Date: Mar 3, 2026") == 1
    assert "message boundary" not in second
    assert "* 🔴 (10:00) scones" in second


def test_a_new_date_or_an_interleaved_thread_starts_a_new_section() -> None:
    first = compose_section("", "a", "Date: Mar 3, 2026\n* 🔴 (09:00) tea", AT)
    next_day = compose_section(first, "a", "Date: Mar 4, 2026\n* 🔴 (09:00) more tea", LATER)
    assert "message boundary" in next_day and next_day.count("Date:") == 2
    other = compose_section(first, "b", "Date: Mar 3, 2026\n* 🔴 (09:30) coffee", LATER)
    back = compose_section(other, "a", "Date: Mar 3, 2026\n* 🔴 (10:00) scones", LATER)
    assert back.startswith(other) and back.count("message boundary") == 2
    assert back.count("Date: Mar 3, 2026") == 3


def test_tags_the_model_wrote_are_replaced_by_ours_and_empty_output_changes_nothing() -> None:
    assert strip_thread_tags('<thread id="x">\n* a\n</thread>') == "* a"
    log = compose_section("", "a", '<thread id="zzz">\nDate: Mar 3, 2026\n* a\n</thread>', AT)
    assert re.findall(r'<thread id="([^"]+)">', log) == ["a"]
    assert compose_section(log, "a", "  \n", LATER) == log


def test_obscured_labels_are_stable_hashes_of_the_public_id() -> None:
    assert thread_label("acme/t-1", obscure=False) == "t-1"
    hashed = thread_label("acme/t-1", obscure=True)
    assert re.fullmatch(r"[0-9a-f]{8}", hashed)
    assert hashed == thread_label("other/t-1", obscure=True) == thread_label("t-1", obscure=True)
    assert hashed != thread_label("t-2", obscure=True)
