"""Relative-time labels and render-time annotation of the observation log (behaviour §5.7)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

from om_core.context.relative_time import (
    annotate_relative_times,
    gap_label,
    local_date,
    parse_inline_date,
    relative_label,
)

TODAY = date(2026, 3, 10)
NOW = datetime(2026, 3, 10, 15, 45, tzinfo=UTC)


@pytest.mark.parametrize(
    ("days_ago", "label"),
    [
        (0, "today"),
        (1, "yesterday"),
        (2, "2 days ago"),
        (6, "6 days ago"),
        (7, "1 week ago"),
        (13, "1 week ago"),
        (14, "2 weeks ago"),
        (29, "4 weeks ago"),
        (30, "1 month ago"),
        (59, "1 month ago"),
        (60, "2 months ago"),
        (364, "12 months ago"),
        (365, "1 year ago"),
        (730, "2 years ago"),
        (-1, "tomorrow"),
        (-2, "in 2 days"),
        (-6, "in 6 days"),
        (-7, "in 1 week"),
        (-13, "in 1 week"),
        (-14, "in 2 weeks"),
        (-30, "in 1 month"),
        (-60, "in 2 months"),
        (-365, "in 1 year"),
        (-800, "in 2 years"),
    ],
)
def test_relative_label_buckets(days_ago: int, label: str) -> None:
    assert relative_label(TODAY - timedelta(days=days_ago), TODAY) == label


def test_relative_label_uses_calendar_days_not_elapsed_hours() -> None:
    late_yesterday = datetime(2026, 3, 9, 23, 59, tzinfo=UTC)
    early_today = datetime(2026, 3, 10, 0, 1, tzinfo=UTC)
    assert relative_label(late_yesterday, early_today) == "yesterday"
    assert relative_label(date(2026, 3, 10), datetime(2026, 3, 10, 23, 59, tzinfo=UTC)) == "today"


@pytest.mark.parametrize(
    ("days", "label"),
    [
        (0, None),
        (1, None),
        (2, "[2 days later]"),
        (6, "[6 days later]"),
        (7, "[1 week later]"),
        (13, "[1 week later]"),
        (14, "[2 weeks later]"),
        (29, "[4 weeks later]"),
        (30, "[1 month later]"),
        (59, "[1 month later]"),
        (60, "[2 months later]"),
        (95, "[3 months later]"),
    ],
)
def test_gap_label_buckets(days: int, label: str | None) -> None:
    assert gap_label(days) == label


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("June 17, 2026", date(2026, 6, 17)),
        ("June 17 2026", date(2026, 6, 17)),
        ("June 17-18, 2026", date(2026, 6, 17)),
        ("Jun 17–18, 2026", date(2026, 6, 17)),
        ("January 22nd 2026", date(2026, 1, 22)),
        ("Sept 3, 2026", date(2026, 9, 3)),
        ("early May 2026", date(2026, 5, 7)),
        ("mid-May 2026", date(2026, 5, 15)),
        ("mid May 2026", date(2026, 5, 15)),
        ("late May 2026", date(2026, 5, 23)),
        ("May to June 2026", date(2026, 6, 1)),
        ("the weekend of March 14, 2026", date(2026, 3, 14)),
        ("May 2026", None),
        ("Feb 30, 2026", None),
        ("2026", None),
    ],
)
def test_parse_inline_date_forms(body: str, expected: date | None) -> None:
    assert parse_inline_date(body) == expected


def test_headers_get_relative_labels_and_gaps() -> None:
    log = "\n".join(
        [
            "Date: Feb 20, 2026",
            "* 🔴 (09:00) User started a new job",
            "Date: February 21, 2026",
            "* 🟡 (10:00) Agent read the handbook",
            "Date: Mar 3, 2026",
            "* 🔴 (11:00) User asked about payroll",
            "",
            "Date: Mar 10, 2026",
            "* 🔴 (12:00) User is back",
        ]
    )
    assert annotate_relative_times(log, NOW, "UTC") == "\n".join(
        [
            "Date: Feb 20, 2026 (2 weeks ago)",
            "* 🔴 (09:00) User started a new job",
            "Date: February 21, 2026 (2 weeks ago)",
            "* 🟡 (10:00) Agent read the handbook",
            "",
            "[1 week later]",
            "",
            "Date: Mar 3, 2026 (1 week ago)",
            "* 🔴 (11:00) User asked about payroll",
            "",
            "[1 week later]",
            "",
            "Date: Mar 10, 2026 (today)",
            "* 🔴 (12:00) User is back",
        ]
    )


def test_gap_is_not_inserted_for_one_day_or_backwards() -> None:
    log = "Date: Mar 8, 2026\n* a\nDate: Mar 9, 2026\n* b\nDate: Mar 1, 2026\n* c"
    annotated = annotate_relative_times(log, NOW, "UTC")
    assert "later]" not in annotated


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "* 🔴 (09:00) User will fly to Lisbon (meaning March 5, 2026)",
            "* 🔴 (09:00) User will fly to Lisbon (meaning March 5, 2026 - 5 days ago, "
            "likely already happened)",
        ),
        (
            "* 🔴 (09:00) User is planning to move (estimated late February 2026)",
            "* 🔴 (09:00) User is planning to move (estimated late February 2026 - 2 weeks ago, "
            "likely already happened)",
        ),
        (
            "* 🔴 (09:00) User went hiking (meaning March 7-8, 2026)",
            "* 🔴 (09:00) User went hiking (meaning March 7-8, 2026 - 3 days ago)",
        ),
        (
            "* 🔴 (09:00) User wants to visit family (meaning June 17-18, 2026)",
            "* 🔴 (09:00) User wants to visit family (meaning June 17-18, 2026 - in 3 months)",
        ),
        (
            "* 🔴 (09:00) User needs to renew a passport (estimated April to May 2026)",
            "* 🔴 (09:00) User needs to renew a passport (estimated April to May 2026 - in 1 month)",
        ),
        (
            "* 🔴 (09:00) User has a trip (meaning sometime in 2026)",
            "* 🔴 (09:00) User has a trip (meaning sometime in 2026)",
        ),
        (
            "* 🔴 (09:00) User mentioned the deadline (see notes)",
            "* 🔴 (09:00) User mentioned the deadline (see notes)",
        ),
    ],
)
def test_inline_dates_are_annotated(line: str, expected: str) -> None:
    assert annotate_relative_times(line, NOW, "UTC") == expected


def test_future_intent_only_counts_before_the_date() -> None:
    line = "* 🔴 (09:00) User moved house (meaning March 1, 2026), will unpack later"
    assert annotate_relative_times(line, NOW, "UTC") == (
        "* 🔴 (09:00) User moved house (meaning March 1, 2026 - 1 week ago), will unpack later"
    )


def test_timezone_decides_which_day_is_today() -> None:
    just_after_midnight_utc = datetime(2026, 3, 10, 2, 0, tzinfo=UTC)
    assert local_date(just_after_midnight_utc, "America/Los_Angeles") == date(2026, 3, 9)
    assert local_date(just_after_midnight_utc, "UTC") == date(2026, 3, 10)
    assert local_date(datetime(2026, 3, 10, 2, 0), "Not/AZone") == date(2026, 3, 10)
    log = "Date: Mar 9, 2026\n* x"
    assert annotate_relative_times(log, just_after_midnight_utc, "America/Los_Angeles").startswith(
        "Date: Mar 9, 2026 (today)"
    )
    assert annotate_relative_times(log, just_after_midnight_utc, "UTC").startswith(
        "Date: Mar 9, 2026 (yesterday)"
    )


def test_annotation_depends_only_on_the_day() -> None:
    log = "Date: Mar 3, 2026\n* 🔴 (09:00) User will call the bank (meaning March 4, 2026)"
    morning = annotate_relative_times(log, datetime(2026, 3, 10, 0, 5, tzinfo=UTC), "UTC")
    evening = annotate_relative_times(log, datetime(2026, 3, 10, 23, 55, tzinfo=UTC), "UTC")
    next_day = annotate_relative_times(log, datetime(2026, 3, 11, 0, 5, tzinfo=UTC), "UTC")
    assert morning == evening
    assert next_day != morning


def test_text_without_dates_is_unchanged() -> None:
    text = "* 🔴 (09:00) Plain line\n\n  * -> nested"
    assert annotate_relative_times(text, NOW, "UTC") == text
    assert annotate_relative_times("", NOW, "UTC") == ""
