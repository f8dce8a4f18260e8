"""Temporal markers (§4.9): a synthetic user-role reminder placed before a user message that arrives
after a long pause, so the actor and the Observer can anchor what follows in time ("2 days later").

Pure: the caller passes the new message, the history and the record's timezone; the marker's ID can be
passed in for deterministic tests.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from om_core.messages import Message, Part, ensure_utc

MARKER_ID_PREFIX = "__temporal_"
GAP_MARKER_ID_PREFIX = "__temporal_gap_"
REMINDER_TYPE = "temporal-gap"
MIN_GAP_MS = 10 * 60_000

_MINUTE_MS = 60_000
_HOUR_MS = 60 * _MINUTE_MS
_DAY_MS = 24 * _HOUR_MS
_WEEK_MS = 7 * _DAY_MS
_ONE_MS = timedelta(milliseconds=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

#: Zone abbreviations an en-US reader knows, with the UTC offset (minutes) each one stands for. Any other
#: zone is written as `GMT+h[:mm]`, which is what en-US date formatting does too (and which keeps e.g.
#: China's "CST" from being read as US Central).
_KNOWN_ABBREVIATIONS = {
    "UTC": 0,
    "GMT": 0,
    "EST": -300,
    "EDT": -240,
    "CST": -360,
    "CDT": -300,
    "MST": -420,
    "MDT": -360,
    "PST": -480,
    "PDT": -420,
    "AKST": -540,
    "AKDT": -480,
    "HST": -600,
    "HDT": -540,
    "AST": -240,
    "ADT": -180,
}


def gap_text(gap_ms: int) -> str | None:
    """The coarse phrase for a pause; None below ten minutes (no marker). Buckets round down so the
    phrase never overstates the pause."""
    if gap_ms < MIN_GAP_MS:
        return None
    weeks, days = gap_ms // _WEEK_MS, gap_ms // _DAY_MS
    hours, minutes = gap_ms // _HOUR_MS, gap_ms // _MINUTE_MS
    if weeks >= 2:
        return f"{weeks} weeks later"
    if weeks >= 1:
        return "1 week later"
    if days >= 3:
        return f"{days} days later"
    if days >= 1:
        return "1 day later" if days == 1 else "2 days later"
    for bucket in (12, 6, 3, 2):
        if hours >= bucket:
            return f"{bucket} hours later"
    if hours >= 1:
        return "1 hour later"
    if minutes >= 30:
        return "30 minutes later"
    if minutes >= 15:
        return "15 minutes later"
    return "10 minutes later"


def _zone(tz: str) -> tzinfo:
    """An unknown zone name falls back to UTC: a bad record timezone must not break a turn."""
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        return UTC


def _zone_label(local: datetime) -> str:
    offset = local.utcoffset() or timedelta(0)
    offset_minutes = int(offset.total_seconds() // 60)
    abbreviation = local.tzname() or ""
    if _KNOWN_ABBREVIATIONS.get(abbreviation) == offset_minutes:
        return abbreviation
    sign = "+" if offset_minutes >= 0 else "-"
    hours, minutes = divmod(abs(offset_minutes), 60)
    return f"GMT{sign}{hours}:{minutes:02d}" if minutes else f"GMT{sign}{hours}"


def format_stamp(t: datetime, tz: str) -> str:
    """`04/20/2026, 3:35 PM PDT`: en-US month/day/year, 12-hour clock, short zone name."""
    local = ensure_utc(t).astimezone(_zone(tz))
    hour12 = local.hour % 12 or 12
    meridiem = "AM" if local.hour < 12 else "PM"
    return f"{local:%m/%d/%Y}, {hour12}:{local.minute:02d} {meridiem} {_zone_label(local)}"


def is_temporal_marker(m: Message) -> bool:
    return m.id.startswith(MARKER_ID_PREFIX)


def _first_time(message: Message) -> datetime:
    stamped = [p.created_at for p in message.parts if p.created_at is not None]
    return stamped[0] if stamped else message.created_at


def _last_time(message: Message) -> datetime:
    stamped = [p.created_at for p in message.parts if p.created_at is not None]
    return stamped[-1] if stamped else message.created_at


def _precedes(marker: Message, message_id: str) -> bool:
    if marker.metadata.get("precedesMessageId") == message_id:
        return True
    return any(f'precedesMessageId="{message_id}"' in (p.text or "") for p in marker.parts)


def _unix_ms(moment: datetime) -> int:
    return (ensure_utc(moment) - _EPOCH) // _ONE_MS


def _marker_id(new_id: str | None) -> str:
    if new_id is None:
        return f"{GAP_MARKER_ID_PREFIX}{uuid.uuid4()}"
    return new_id if new_id.startswith(MARKER_ID_PREFIX) else f"{GAP_MARKER_ID_PREFIX}{new_id}"


def temporal_marker_for(
    new_message: Message, history: Sequence[Message], tz: str, new_id: str | None = None
) -> Message | None:
    """The marker to insert right before `new_message`, or None (gap under ten minutes, nothing before
    it, it is itself a marker, or it already has one).

    `history` holds the messages already in the thread; an entry with the new message's ID is ignored.
    `new_id` is the marker's ID (prefixed with `__temporal_gap_` when it lacks the marker prefix).
    """
    if is_temporal_marker(new_message):
        return None
    earlier = [m for m in history if m.id != new_message.id]
    if any(is_temporal_marker(m) and _precedes(m, new_message.id) for m in earlier):
        return None
    previous = next((m for m in reversed(earlier) if not is_temporal_marker(m)), None)
    if previous is None:
        return None
    t_new = ensure_utc(_first_time(new_message))
    gap_ms = (t_new - ensure_utc(_last_time(previous))) // _ONE_MS
    phrase = gap_text(gap_ms)
    if phrase is None:
        return None
    stamp = format_stamp(t_new, tz)
    message = f"{phrase} — {stamp}"
    details: dict[str, Any] = {
        "gapText": phrase,
        "gapMs": gap_ms,
        "timestamp": stamp,
        "timestampMs": _unix_ms(t_new),
        "precedesMessageId": new_message.id,
    }
    metadata = {
        "reminderType": REMINDER_TYPE,
        **details,
        "systemReminder": {"type": REMINDER_TYPE, "message": message, **details},
    }
    text = (
        f'<system-reminder type="{REMINDER_TYPE}" precedesMessageId="{new_message.id}">'
        f"{message}</system-reminder>"
    )
    return Message(
        id=_marker_id(new_id),
        role="user",
        parts=[Part(type="text", text=text)],
        created_at=t_new - _ONE_MS,
        thread_id=new_message.thread_id,
        resource_id=new_message.resource_id,
        metadata=metadata,
    )


def reminder_event(marker: Message) -> dict[str, Any]:
    """The `data` of the transient `data-system-reminder` event streamed when a marker is inserted."""
    reminder = marker.metadata.get("systemReminder") or {}
    return {"message": reminder.get("message"), **marker.metadata}
