"""Pure text utilities for the observation log format shared by the Observer and the Reflector.

The log is plain text the models write and read back:

    Date: Dec 4, 2025
    * 🔴 (14:30) User stated the deadline is Friday
      * -> a nested step or finding
      * ✅ what is done

Model output wraps the log in `<observations>` and may add `<current-task>`, `<suggested-response>` and
`<thread-title>` sections. Tags count only at the start of a line so that prose which merely mentions a
tag ("User discussed <observations> tags") is never mistaken for a section.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, overload

#: A date group header line, e.g. `Date: Dec 4, 2025` (the value is whatever follows `Date:`).
DATE_HEADER_RE = re.compile(r"^Date:[ \t]*(?P<date>\S.*?)[ \t]*$", re.MULTILINE)
#: One observation line (top-level or nested): bullet, optional priority marker, optional `(HH:MM)`, text.
OBSERVATION_LINE_RE = re.compile(
    r"^(?P<indent>[ \t]*)(?P<bullet>[*-])[ \t]+"
    r"(?:(?P<marker>🔴|🟡|🟢|✅|->)[ \t]*)?"
    r"(?:\((?P<time>\d{1,2}:\d{2}(?:[ \t]*[AaPp]\.?[ \t]*[Mm]\.?)?)\)[ \t]*)?"
    r"(?P<text>.*)$"
)
#: Bullet (`-`/`*`) or numbered (`1.`) lines: what counts as an observation when the tags are missing.
_LIST_LINE_RE = re.compile(r"^\s*(?:[-*]|\d+\.)\s")
#: A clock time near the start of a top-level item, with or without parentheses, 24-hour or AM/PM.
_ITEM_TIME_RE = re.compile(
    r"\(?(?P<hour>\d{1,2}):(?P<minute>[0-5]\d)(?:[ \t]*(?P<ampm>[AaPp])\.?[ \t]*[Mm]\.?)?(?![\d:])\)?"
)
_ALNUM_RE = re.compile(r"[^\W_]")

CONTINUATION_TAGS = ("current-task", "suggested-response", "thread-title")


@dataclass(frozen=True)
class ObservationSections:
    """The parts of one Observer/Reflector output (all stripped; None when the section is missing)."""

    observations: str
    current_task: str | None = None
    suggested_response: str | None = None
    thread_title: str | None = None


def _tag_pattern(tag: str, line_anchored: bool) -> re.Pattern[str]:
    name = re.escape(tag)
    if not line_anchored:
        return re.compile(rf"<{name}>(.*?)</{name}>", re.DOTALL | re.IGNORECASE)
    # Opening tag at a line start; the closing tag either starts a line or ends the opening line's text
    # (`<thread-title>Deploy pipeline</thread-title>`), but never sits in the middle of prose.
    return re.compile(
        rf"^[ \t]*<{name}>(.*?)(?:^[ \t]*</{name}>|</{name}>[ \t]*$)",
        re.MULTILINE | re.DOTALL | re.IGNORECASE,
    )


@overload
def extract_tag_block(
    text: str, tag: str, *, line_anchored: bool = ..., all_blocks: Literal[False] = ...
) -> str | None: ...


@overload
def extract_tag_block(
    text: str, tag: str, *, line_anchored: bool = ..., all_blocks: Literal[True]
) -> list[str]: ...


def extract_tag_block(
    text: str, tag: str, *, line_anchored: bool = True, all_blocks: bool = False
) -> str | list[str] | None:
    """Content of `<tag>…</tag>`, stripped: the first block (None if absent) or every block in order.

    With `line_anchored` (the default) the opening tag must start a line (leading spaces/tabs allowed) and
    the closing tag must start a line or end one. Matching is case-insensitive.
    """
    pattern = _tag_pattern(tag, line_anchored)
    if all_blocks:
        return [match.group(1).strip() for match in pattern.finditer(text)]
    match = pattern.search(text)
    return match.group(1).strip() if match else None


def strip_tag_blocks(text: str, tags: Sequence[str], *, line_anchored: bool = True) -> str:
    """`text` without the given sections (tags included), so their content cannot leak into observations."""
    for tag in tags:
        text = _tag_pattern(tag, line_anchored).sub("", text)
    return text


def parse_observation_sections(text: str, *, extra_sections: Sequence[str] = ()) -> ObservationSections:
    """Split model output into the observation log and the continuation sections (§5.6).

    Observations are every non-empty line-anchored `<observations>` block joined by newlines. Without any
    such block the output is taken to be untagged and only its bullet or numbered lines are kept, after
    removing the continuation sections and `extra_sections` (inline extractor slugs) so their lists are not
    mistaken for observations.
    """
    blocks = extract_tag_block(text, "observations", all_blocks=True)
    if blocks:
        observations = "\n".join(block for block in blocks if block)
    else:
        untagged = strip_tag_blocks(text, (*CONTINUATION_TAGS, *extra_sections))
        observations = "\n".join(line for line in untagged.split("\n") if _LIST_LINE_RE.match(line)).strip()
    return ObservationSections(
        observations=observations,
        current_task=extract_tag_block(text, "current-task"),
        suggested_response=extract_tag_block(text, "suggested-response"),
        thread_title=extract_tag_block(text, "thread-title"),
    )


# --- sorting ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _ItemTime:
    hour: int
    minute: int
    ampm: str | None  # "a" / "p" / None
    hour_digits: int

    @property
    def minutes(self) -> int:
        hour = self.hour
        if self.ampm is not None:
            hour = hour % 12 + (12 if self.ampm == "p" else 0)
        return hour * 60 + self.minute


def sort_by_time(text: str) -> str:
    """Reorder the top-level items of each `Date:` group by their clock time, when that is unambiguous.

    Models sometimes write observations out of order; the log must read chronologically. A group is left
    exactly as written whenever its order cannot be determined safely (§5.6): an item without a time, a mix
    of AM/PM and 24-hour times, ambiguous one-digit hours, or a line that belongs to no item. Text before
    the first header is never touched. The sort is stable, and blank-line gaps stay where they were.
    """
    lines = text.split("\n")
    header_indexes = [i for i, line in enumerate(lines) if line.startswith("Date:")]
    if not header_indexes:
        return text
    out = lines[: header_indexes[0]]
    for position, start in enumerate(header_indexes):
        end = header_indexes[position + 1] if position + 1 < len(header_indexes) else len(lines)
        out.append(lines[start])
        out.extend(_sort_group(lines[start + 1 : end]))
    return "\n".join(out)


def _sort_group(body: list[str]) -> list[str]:
    lead = 0
    while lead < len(body) and not body[lead].strip():
        lead += 1
    trail = len(body)
    while trail > lead and not body[trail - 1].strip():
        trail -= 1
    items = _split_items(body[lead:trail])
    if items is None or len(items) < 2:
        return body
    contents = [content for content, _ in items]
    gaps = [gap for _, gap in items]
    found = [_item_time(content[0]) for content in contents]
    times = [time for time in found if time is not None]
    if len(times) != len(found) or not _sortable(times):
        return body
    order = sorted(range(len(items)), key=lambda i: times[i].minutes)
    sorted_lines: list[str] = []
    for slot, index in enumerate(order):
        sorted_lines.extend(contents[index])
        sorted_lines.extend(gaps[slot])
    return body[:lead] + sorted_lines + body[trail:]


def _split_items(lines: list[str]) -> list[tuple[list[str], list[str]]] | None:
    """Top-level items as (item lines, blank lines after it); None if a line belongs to no item."""
    items: list[tuple[list[str], list[str]]] = []
    for line in lines:
        if line.startswith(("* ", "- ")):
            items.append(([line], []))
        elif not items:
            return None
        elif not line.strip():
            items[-1][1].append(line)
        elif line[0] in " \t":
            content, gap = items[-1]
            # Blank lines between an item and its own sub-lines stay inside the item.
            content.extend(gap)
            gap.clear()
            content.append(line)
        else:
            return None
    return items


def _item_time(line: str) -> _ItemTime | None:
    match = _ITEM_TIME_RE.search(line)
    if match is None or _ALNUM_RE.search(line[: match.start()]):
        return None
    ampm = match.group("ampm")
    hour_text = match.group("hour")
    hour, minute = int(hour_text), int(match.group("minute"))
    if (ampm is None and hour > 23) or (ampm is not None and not 1 <= hour <= 12):
        return None
    return _ItemTime(hour, minute, ampm.lower() if ampm else None, len(hour_text))


def _sortable(known: list[_ItemTime]) -> bool:
    with_ampm = [t for t in known if t.ampm is not None]
    if with_ampm:
        return len(with_ampm) == len(known)
    one_digit = [t for t in known if t.hour_digits == 1]
    if not one_digit:
        return True
    # "1:35" may be 01:35 or 13:35: safe only when every item shares that hour and none is written as a
    # zero-padded or afternoon 24-hour time.
    if any(t.hour_digits == 2 and (t.hour < 10 or t.hour >= 13) for t in known):
        return False
    return len({t.hour for t in known}) == 1
