"""Relative-time annotations for the observation log as the actor sees it (behaviour §5.7).

The stored log carries absolute dates only ("Date: Mar 3, 2026", "(meaning June 17-18, 2026)"), because
relative words go stale. At render time we add how far each date is from today, so the actor does not have
to do calendar arithmetic and can tell that a plan dated in the past has probably happened. Nothing here is
persisted.

Every label depends on the *calendar day* of `now` only (never the time of day), so the rendered log stays
byte-identical for a whole day and the actor's prompt prefix can be cached.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

__all__ = [
    "annotate_relative_times",
    "gap_label",
    "local_date",
    "parse_inline_date",
    "parse_month_day_year",
    "relative_label",
]

_MONTHS: dict[str, int] = {
    "january": 1, "february": 2, "march": 3, "april": 4, "may": 5, "june": 6, "july": 7,
    "august": 8, "september": 9, "october": 10, "november": 11, "december": 12,
    "jan": 1, "feb": 2, "mar": 3, "apr": 4, "jun": 6, "jul": 7, "aug": 8,
    "sep": 9, "sept": 9, "oct": 10, "nov": 11, "dec": 12,
}  # fmt: skip

# Longest names first so "June" is not read as "Jun" + "e".
_MONTH = "(?:" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_ORDINAL = r"(?:st|nd|rd|th)?"

_HEADER_RE = re.compile(
    rf"^(?P<lead>[ \t]*Date:[ \t]*)"
    rf"(?P<date>(?P<month>{_MONTH})[ \t]+(?P<day>\d{{1,2}}),?[ \t]+(?P<year>\d{{4}}))",
    re.IGNORECASE,
)
_INLINE_RE = re.compile(r"\((?P<kind>meaning|estimated)\s+(?P<body>[^()\n]*?\b\d{4})\)", re.IGNORECASE)

_PART_OF_MONTH_RE = re.compile(
    rf"\b(?P<part>early|mid|late)[\s-]+(?P<month>{_MONTH}),?\s+(?P<year>\d{{4}})\b", re.IGNORECASE
)
_MONTH_TO_MONTH_RE = re.compile(
    rf"\b(?P<first>{_MONTH})\s+to\s+(?P<month>{_MONTH}),?\s+(?P<year>\d{{4}})\b", re.IGNORECASE
)
_MONTH_DAY_RE = re.compile(
    rf"\b(?P<month>{_MONTH})\s+(?P<day>\d{{1,2}}){_ORDINAL}"
    rf"(?:\s*[-–]\s*\d{{1,2}}{_ORDINAL})?,?\s+(?P<year>\d{{4}})\b",
    re.IGNORECASE,
)
_PART_DAY = {"early": 7, "mid": 15, "late": 23}

_FUTURE_INTENT_RE = re.compile(
    r"\b(?:will|plans?|planning\s+to|looking\s+forward\s+to|going\s+to|intends?\s+to|wants?\s+to"
    r"|needs?\s+to|about\s+to)\b",
    re.IGNORECASE,
)


def local_date(now: datetime, tz: str) -> date:
    """Calendar day of `now` in the user's zone; naive times count as UTC, an unknown zone as UTC."""
    aware = now if now.tzinfo is not None else now.replace(tzinfo=UTC)
    try:
        zone: ZoneInfo | None = ZoneInfo(tz) if tz else None
    except (ZoneInfoNotFoundError, ValueError):
        zone = None
    return aware.astimezone(zone or UTC).date()


def _as_date(value: date | datetime) -> date:
    return value.date() if isinstance(value, datetime) else value


def _plural(n: int, unit: str) -> str:
    return f"{n} {unit}" if n == 1 else f"{n} {unit}s"


def _distance(days: int) -> str:
    """Coarse distance for a positive day count (the buckets are shared by past and future)."""
    if days < 7:
        return _plural(days, "day")
    if days < 14:
        return "1 week"
    if days < 30:
        return _plural(days // 7, "week")
    if days < 60:
        return "1 month"
    if days < 365:
        return _plural(days // 30, "month")
    return _plural(days // 365, "year")


def relative_label(when: date | datetime, now: date | datetime) -> str:
    """'today', 'yesterday', '3 days ago', 'in 2 weeks', ... by whole calendar days between the two."""
    days = (_as_date(now) - _as_date(when)).days
    if days == 0:
        return "today"
    if days == 1:
        return "yesterday"
    if days == -1:
        return "tomorrow"
    if days > 0:
        return f"{_distance(days)} ago"
    return f"in {_distance(-days)}"


def gap_label(days: int) -> str | None:
    """Marker placed between two date headers this many days apart; None below two days."""
    if days < 2:
        return None
    if days < 7:
        return f"[{days} days later]"
    if days < 14:
        return "[1 week later]"
    if days < 30:
        return f"[{days // 7} weeks later]"
    if days < 60:
        return "[1 month later]"
    return f"[{days // 30} months later]"


def _safe_date(year: str, month: str, day: int) -> date | None:
    try:
        return date(int(year), _MONTHS[month.lower().rstrip(".")], day)
    except (KeyError, ValueError):
        return None


def parse_month_day_year(text: str) -> date | None:
    """`Month D, YYYY` / `Month D YYYY` (full or abbreviated month, optional ordinal).

    A range `Month D-E, YYYY` gives its first day."""
    match = _MONTH_DAY_RE.search(text)
    return _safe_date(match["year"], match["month"], int(match["day"])) if match else None


def parse_inline_date(text: str) -> date | None:
    """The date an inline `(meaning …)` / `(estimated …)` body refers to, or None when it is not parsable."""
    part = _PART_OF_MONTH_RE.search(text)
    if part:
        return _safe_date(part["year"], part["month"], _PART_DAY[part["part"].lower()])
    span = _MONTH_TO_MONTH_RE.search(text)
    if span:
        return _safe_date(span["year"], span["month"], 1)
    return parse_month_day_year(text)


def _annotate_inline(line: str, today: date) -> str:
    def replace(match: re.Match[str]) -> str:
        when = parse_inline_date(match["body"])
        if when is None:
            return match.group(0)
        note = relative_label(when, today)
        if when < today and _FUTURE_INTENT_RE.search(line[: match.start()]):
            note += ", likely already happened"
        return f"({match['kind']} {match['body']} - {note})"

    return _INLINE_RE.sub(replace, line)


def annotate_relative_times(observations: str, now: datetime, tz: str) -> str:
    """Render-time annotation of a log: header labels, gap markers between headers, inline date notes."""
    if not observations:
        return observations
    today = local_date(now, tz)
    out: list[str] = []
    previous_header: date | None = None
    for line in observations.split("\n"):
        header = _HEADER_RE.match(line)
        header_date = _safe_date(header["year"], header["month"], int(header["day"])) if header else None
        if header is None or header_date is None:
            out.append(_annotate_inline(line, today))
            continue
        gap = gap_label((header_date - previous_header).days) if previous_header else None
        if gap is not None:
            if out and out[-1].strip():
                out.append("")
            out.extend([gap, ""])
        previous_header = header_date
        end = header.end("date")
        labelled = f"{line[:end]} ({relative_label(header_date, today)}){line[end:]}"
        out.append(_annotate_inline(labelled, today))
    return "\n".join(out)
