"""What a reflection changed: a line diff of one generation's observation log against the one before it.

The dashboard shows it beside the generation history, so a person can see which observations a reflection
merged, condensed or dropped without reading two logs side by side. Lines are the unit because the log is
line-oriented (one dated, prioritised observation per line); within a replaced run the old lines are
listed as removed before the new ones are listed as added, as a unified diff does.

`autojunk` is off: the log repeats some lines often (date headers, blank lines), and difflib's heuristic
would treat those as junk and report whole blocks as replaced around them.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Literal

__all__ = ["DiffLine", "DiffOp", "diff_lines"]

DiffOp = Literal["kept", "added", "removed"]


@dataclass(frozen=True)
class DiffLine:
    """One line of the diff: kept in both logs, only in the newer (added) or only in the older (removed)."""

    op: DiffOp
    text: str


def diff_lines(before: str, after: str) -> list[DiffLine]:
    """The lines of `after` against `before`, in order: every line of `before` appears once as kept or
    removed, every line of `after` once as kept or added."""
    old, new = before.splitlines(), after.splitlines()
    out: list[DiffLine] = []
    matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            out.extend(DiffLine("kept", line) for line in old[i1:i2])
            continue
        out.extend(DiffLine("removed", line) for line in old[i1:i2])  # 'delete' and 'replace'
        out.extend(DiffLine("added", line) for line in new[j1:j2])  # 'insert' and 'replace'
    return out
