"""Observation groups (retrieval mode, behaviour §9.1): observations wrapped with the range of raw messages
they came from, so the actor can page back to the exact wording with the recall tool.

Pure text functions. The log keeps the wrapper; the actor sees it as a heading with the range; the Observer
and the Reflector see plain observations (a model shown wrappers starts writing its own). A reflection
becomes one group whose range covers the groups it condensed, so the pointer to the raw messages
survives the rewrite; the groups themselves are also kept in `om_observation_groups`.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass

from om_core.messages import Message

__all__ = [
    "GroupSpan",
    "align_slice",
    "groups_in",
    "has_groups",
    "merged_ranges",
    "message_range",
    "new_group_id",
    "render_for_actor",
    "strip_wrappers",
    "wrap",
]

_OPEN_RE = re.compile(r'^[ \t]*<observation-group id="(?P<id>[^"\n]*)" range="(?P<range>[^"\n]*)">[ \t]*$')
_CLOSE_RE = re.compile(r"^[ \t]*</observation-group>[ \t]*$")
#: Any wrapper line, also a malformed one a model wrote itself.
_WRAPPER_LINE_RE = re.compile(r"^[ \t]*</?observation-group\b[^>\n]*>[ \t]*\n?", re.MULTILINE | re.IGNORECASE)
_THREAD_OPEN_RE = re.compile(r'^<thread id="(?P<id>[^"\n]+)">$')


@dataclass(frozen=True)
class GroupSpan:
    """One group of a log: its id, its range (`start:end`, comma-separated when merged) and the
    `<thread>` section it sits in (resource scope), else None."""

    id: str
    ranges: str
    thread_label: str | None


def new_group_id() -> str:
    """Eight random bytes as 16 lowercase hex characters (§9.1)."""
    return secrets.token_hex(8)


def message_range(messages: Sequence[Message]) -> str:
    """`first:last` of the messages with visible content; of all of them when none has any (§9.1)."""
    visible = [m for m in messages if m.has_visible_content] or list(messages)
    if not visible:
        raise ValueError("an observation group needs at least one message")
    return f"{visible[0].id}:{visible[-1].id}"


def wrap(observations: str, group_id: str, ranges: str) -> str:
    body = strip_wrappers(observations).strip("\n")
    return f'<observation-group id="{group_id}" range="{ranges}">\n{body}\n</observation-group>'


def strip_wrappers(text: str) -> str:
    """`text` without any group wrapper line: what the Observer and the Reflector are shown."""
    return _WRAPPER_LINE_RE.sub("", text)


def has_groups(text: str) -> bool:
    return "<observation-group " in text


def render_for_actor(text: str, *, with_ranges: bool) -> str:
    """Each group as the heading the actor reads (``## Group `<id>` `` and ``_range: `<range>`_``), or,
    when the actor has no recall tool to follow a range with, without its wrapper."""
    if not has_groups(text):
        return text
    if not with_ranges:
        return strip_wrappers(text)
    out: list[str] = []
    for line in text.split("\n"):
        opened = _OPEN_RE.match(line)
        if opened is not None:
            out += [f"## Group `{opened.group('id')}`", f"_range: `{opened.group('range')}`_", ""]
        elif not _CLOSE_RE.match(line):
            out.append(line)
    return "\n".join(out)


def groups_in(text: str) -> list[GroupSpan]:
    """The groups opened in `text`, in order, each with the `<thread>` section it sits in."""
    spans: list[GroupSpan] = []
    thread: str | None = None
    for line in text.split("\n"):
        section = _THREAD_OPEN_RE.match(line)
        if section is not None:
            thread = section.group("id")
        elif line.strip() == "</thread>":
            thread = None
        opened = _OPEN_RE.match(line)
        if opened is not None:
            spans.append(GroupSpan(opened.group("id"), opened.group("range"), thread))
    return spans


def merged_ranges(spans: Sequence[GroupSpan]) -> str | None:
    """One range per run of consecutive groups of the same thread (`first start:last end`), the runs
    comma-separated (§9.1 merged ranges); None when there is no group. A group's range is itself a
    `start:end` or an already merged list."""
    runs: list[tuple[str | None, str, str]] = []
    for span in spans:
        pieces = [p.strip() for p in span.ranges.split(",") if ":" in p]
        for piece in pieces:
            start, _sep, end = piece.partition(":")
            if runs and runs[-1][0] == span.thread_label and len(pieces) == 1:
                runs[-1] = (span.thread_label, runs[-1][1], end)
            else:
                runs.append((span.thread_label, start, end))
    if not runs:
        return None
    return ",".join(dict.fromkeys(f"{start}:{end}" for _thread, start, end in runs))


def align_slice(lines: Sequence[str], n_lines: int) -> int:
    """The largest line count at most `n_lines` whose prefix closes every group it opens, so a reflected
    prefix never leaves half a wrapper behind; the end of the first group when no smaller prefix does
    (0 when the log has no complete group). Logs without groups keep `n_lines`."""
    if not any(_OPEN_RE.match(line) for line in lines[: max(n_lines, 0)]):
        return n_lines
    depth = 0
    aligned = 0
    first_end = 0
    for index, line in enumerate(lines):
        if _OPEN_RE.match(line):
            depth += 1
        elif _CLOSE_RE.match(line) and depth > 0:
            depth -= 1
            if depth == 0:
                first_end = first_end or index + 1
                if index + 1 <= n_lines:
                    aligned = index + 1
        elif depth == 0 and index + 1 <= n_lines:
            aligned = index + 1
    return aligned or first_end
