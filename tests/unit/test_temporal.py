"""Temporal markers (§4.9, §13.8)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from om_core.context.temporal import (
    format_stamp,
    gap_text,
    is_temporal_marker,
    reminder_event,
    temporal_marker_for,
)
from om_core.messages import Message, Part, text_message

MINUTE = 60_000
HOUR = 60 * MINUTE
DAY = 24 * HOUR
NINE = datetime(2026, 4, 20, 9, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("gap_ms", "text"),
    [
        (9 * MINUTE + 59_000, None),  # case 2
        (10 * MINUTE, "10 minutes later"),  # case 1 (the reference says "5 minutes later" here)
        (14 * MINUTE + 59_000, "10 minutes later"),
        (15 * MINUTE, "15 minutes later"),
        (45 * MINUTE, "30 minutes later"),  # case 3
        (HOUR, "1 hour later"),
        (2 * HOUR + 10 * MINUTE, "2 hours later"),
        (5 * HOUR, "3 hours later"),
        (6 * HOUR, "6 hours later"),
        (23 * HOUR, "12 hours later"),
        (26 * HOUR, "1 day later"),
        (2 * DAY + 5 * HOUR, "2 days later"),
        (6 * DAY, "6 days later"),
        (9 * DAY, "1 week later"),
        (20 * DAY, "2 weeks later"),
        (60 * DAY, "8 weeks later"),
    ],
)
def test_gap_text_ladder(gap_ms: int, text: str | None) -> None:
    assert gap_text(gap_ms) == text


@pytest.mark.parametrize(
    ("moment", "tz", "stamp"),
    [
        (datetime(2026, 4, 20, 22, 35, tzinfo=UTC), "America/Los_Angeles", "04/20/2026, 3:35 PM PDT"),
        (datetime(2026, 1, 5, 5, 5, tzinfo=UTC), "America/New_York", "01/05/2026, 12:05 AM EST"),
        (datetime(2026, 4, 20, 12, 0, tzinfo=UTC), "UTC", "04/20/2026, 12:00 PM UTC"),
        (datetime(2026, 4, 20, 7, 9, tzinfo=UTC), "Europe/Berlin", "04/20/2026, 9:09 AM GMT+2"),
        (datetime(2026, 1, 20, 7, 9, tzinfo=UTC), "Europe/London", "01/20/2026, 7:09 AM GMT"),
        (datetime(2026, 4, 20, 7, 0, tzinfo=UTC), "Asia/Kolkata", "04/20/2026, 12:30 PM GMT+5:30"),
        (datetime(2026, 4, 20, 7, 0, tzinfo=UTC), "Asia/Shanghai", "04/20/2026, 3:00 PM GMT+8"),
        (datetime(2026, 4, 20, 7, 0, tzinfo=UTC), "America/Sao_Paulo", "04/20/2026, 4:00 AM GMT-3"),
        (datetime(2026, 4, 20, 7, 0, tzinfo=UTC), "Not/AZone", "04/20/2026, 7:00 AM UTC"),
    ],
)
def test_format_stamp(moment: datetime, tz: str, stamp: str) -> None:
    assert format_stamp(moment, tz) == stamp


def with_last_part_at(moment: datetime) -> Message:
    return Message(
        id="a1",
        role="assistant",
        parts=[
            Part(type="text", text="first", created_at=moment - timedelta(minutes=3)),
            Part(type="text", text="last", created_at=moment),
        ],
        created_at=moment - timedelta(minutes=5),
    )


def test_marker_after_ten_minutes() -> None:  # case 1
    previous = with_last_part_at(NINE)
    new = text_message("u2", "user", "back again", created_at=NINE + timedelta(minutes=10), thread_id="t1")
    marker = temporal_marker_for(new, [previous], "UTC", new_id="fixed")
    assert marker is not None
    assert marker.id == "__temporal_gap_fixed"
    assert is_temporal_marker(marker)
    assert marker.role == "user"
    assert marker.thread_id == "t1"
    assert marker.created_at == datetime(2026, 4, 20, 9, 9, 59, 999_000, tzinfo=UTC)
    stamp = "04/20/2026, 9:10 AM UTC"
    assert marker.parts[0].text == (
        '<system-reminder type="temporal-gap" precedesMessageId="u2">'
        f"10 minutes later — {stamp}</system-reminder>"
    )
    details = {
        "gapText": "10 minutes later",
        "gapMs": 600_000,
        "timestamp": stamp,
        "timestampMs": 1_776_676_200_000,
        "precedesMessageId": "u2",
    }
    assert marker.metadata == {
        "reminderType": "temporal-gap",
        **details,
        "systemReminder": {"type": "temporal-gap", "message": f"10 minutes later — {stamp}", **details},
    }


def test_random_marker_id_has_the_prefix() -> None:
    new = text_message("u2", "user", "hi", created_at=NINE + timedelta(hours=1))
    marker = temporal_marker_for(new, [with_last_part_at(NINE)], "UTC")
    assert marker is not None
    assert marker.id.startswith("__temporal_gap_")
    assert len(marker.id) > len("__temporal_gap_")


def test_no_marker_under_ten_minutes() -> None:  # case 2
    new = text_message("u2", "user", "hi", created_at=NINE + timedelta(minutes=9, seconds=59))
    assert temporal_marker_for(new, [with_last_part_at(NINE)], "UTC") is None


def test_gap_uses_the_new_messages_first_stamped_part() -> None:
    new = Message(
        id="u2",
        role="user",
        parts=[Part(type="text", text="hi", created_at=NINE + timedelta(minutes=5))],
        created_at=NINE + timedelta(hours=2),
    )
    assert temporal_marker_for(new, [with_last_part_at(NINE)], "UTC") is None


@pytest.mark.parametrize(
    ("gap", "text"),
    [
        (timedelta(minutes=45), "30 minutes later"),
        (timedelta(hours=2, minutes=10), "2 hours later"),
        (timedelta(hours=26), "1 day later"),
        (timedelta(days=9), "1 week later"),
        (timedelta(days=20), "2 weeks later"),
    ],
)
def test_marker_gap_texts(gap: timedelta, text: str) -> None:  # case 3
    new = text_message("u2", "user", "hi", created_at=NINE + gap)
    marker = temporal_marker_for(new, [with_last_part_at(NINE)], "UTC")
    assert marker is not None
    assert marker.metadata["gapText"] == text


def test_reprocessing_the_same_input_adds_no_second_marker() -> None:  # case 4
    new = text_message("u2", "user", "hi", created_at=NINE + timedelta(hours=3))
    previous = with_last_part_at(NINE)
    marker = temporal_marker_for(new, [previous], "UTC")
    assert marker is not None
    assert temporal_marker_for(new, [previous, marker, new], "UTC") is None


def test_marker_detected_from_its_text_when_metadata_is_missing() -> None:
    new = text_message("u2", "user", "hi", created_at=NINE + timedelta(hours=3))
    stored = text_message(
        "__temporal_gap_x",
        "user",
        '<system-reminder type="temporal-gap" precedesMessageId="u2">…</system-reminder>',
    )
    assert temporal_marker_for(new, [with_last_part_at(NINE), stored], "UTC") is None


def test_previous_message_skips_markers_and_the_new_message_itself() -> None:
    old_marker = text_message("__temporal_gap_old", "user", "x", created_at=NINE + timedelta(hours=2))
    new = text_message("u2", "user", "hi", created_at=NINE + timedelta(hours=3))
    marker = temporal_marker_for(new, [with_last_part_at(NINE), old_marker, new], "UTC")
    assert marker is not None
    assert marker.metadata["gapText"] == "3 hours later"


def test_no_marker_without_history_or_for_a_marker() -> None:
    new = text_message("u1", "user", "first", created_at=NINE)
    assert temporal_marker_for(new, [], "UTC") is None
    assert temporal_marker_for(new, [new], "UTC") is None
    marker_like = text_message("__temporal_gap_1", "user", "x", created_at=NINE + timedelta(days=1))
    assert temporal_marker_for(marker_like, [with_last_part_at(NINE)], "UTC") is None


def test_reminder_event_payload() -> None:
    new = text_message("u2", "user", "hi", created_at=datetime(2026, 4, 20, 22, 35, tzinfo=UTC))
    marker = temporal_marker_for(
        new, [with_last_part_at(datetime(2026, 4, 20, 20, 0, tzinfo=UTC))], "America/Los_Angeles"
    )
    assert marker is not None
    event = reminder_event(marker)
    assert event["message"] == "2 hours later — 04/20/2026, 3:35 PM PDT"
    assert set(event) == {
        "message",
        "reminderType",
        "gapText",
        "gapMs",
        "timestamp",
        "timestampMs",
        "precedesMessageId",
        "systemReminder",
    }
    assert event["precedesMessageId"] == "u2"
    assert event["systemReminder"]["message"] == event["message"]
