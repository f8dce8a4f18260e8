"""Values recorded for the bench's figures in earlier runs (`history.json`), shown beside this run's.

A figure's history belongs to the benchmark, not to the README or docs/ (which state the
design and name the figure that measures it). Each entry is one figure's value, or the range over several
runs, on a date, in a run mode (`quick`, `full`; null when the run did not record it), on a machine, with
what the code had changed before it. The bench prints the entries of each figure it produced (same name,
same mode, or mode not recorded) under that figure's row and writes them into the figure in
`bench-results.json`. `tests/bench/test_history.py` holds every entry to a figure `run.figure_defs`
declares, in its unit.
"""

from __future__ import annotations

import datetime
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.bench.results import FigureDef, Results

HISTORY_FILE = Path(__file__).with_name("history.json")
MODES = ("quick", "full")
REQUIRED = ("figure", "unit", "mode", "recorded", "value", "change")
OPTIONAL = ("session", "machine")


def load(path: Path = HISTORY_FILE) -> list[dict[str, Any]]:
    """The entries, in file order (oldest first within a figure and mode)."""
    document = json.loads(path.read_text())
    if not isinstance(document, dict) or not isinstance(document.get("entries"), list):
        raise ValueError(f"{path}: expected an object with an `entries` list")
    entries: list[dict[str, Any]] = document["entries"]
    return entries


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _entry_problems(entry: Any) -> list[str]:
    if not isinstance(entry, dict):
        return ["is not an object"]
    found = []
    missing = [key for key in REQUIRED if key not in entry]
    if missing:
        found.append(f"lacks {', '.join(missing)}")
    unknown = sorted(set(entry) - set(REQUIRED) - set(OPTIONAL))
    if unknown:
        found.append(f"has unknown fields {', '.join(unknown)}")
    for key in ("figure", "unit", "change", *OPTIONAL):
        if key in entry and not isinstance(entry[key], str):
            found.append(f"`{key}` is not a string")
    for key in ("figure", "change"):
        if isinstance(entry.get(key), str) and not entry[key].strip():
            found.append(f"`{key}` is empty")
    return found + _value_problems(entry)


def _value_problems(entry: dict[str, Any]) -> list[str]:
    """What is wrong with the fields that hold more than text: the mode, the date and the figure."""
    found = []
    if "mode" in entry and entry["mode"] not in (*MODES, None):
        found.append(f"`mode` {entry['mode']!r} is none of {', '.join(MODES)} or null")
    recorded = entry.get("recorded")
    if "recorded" in entry:
        try:
            datetime.date.fromisoformat(str(recorded))
        except ValueError:
            found.append(f"`recorded` {recorded!r} is not a date (YYYY-MM-DD)")
    value = entry.get("value")
    if "value" in entry:
        pair = isinstance(value, list) and len(value) == 2 and all(map(_is_number, value))
        ranged = pair and isinstance(value, list) and value[0] <= value[1]
        if not (_is_number(value) or ranged):
            found.append(f"`value` {value!r} is neither a finite number nor a [low, high] range")
    return found


def well_formed(entries: Sequence[Any]) -> list[dict[str, Any]]:
    """The entries whose fields are all present and of the right kind (what `attach` can show)."""
    return [e for e in entries if not _entry_problems(e)]


def problems(entries: Sequence[Any], defs_by_mode: Mapping[str, Sequence[FigureDef]]) -> list[str]:
    """What is wrong with the entries, one line each: malformed fields, a figure no run of that mode
    produces, a unit other than the figure's, dates out of order within a figure and mode."""
    units: dict[str, dict[str, str]] = {
        mode: {d.name: d.unit for d in defs} for mode, defs in defs_by_mode.items()
    }
    found: list[str] = []
    last_date: dict[tuple[str, Any], str] = {}
    for number, entry in enumerate(entries, 1):
        where = f"entry {number} ({entry.get('figure', '?') if isinstance(entry, dict) else '?'})"
        shape = _entry_problems(entry)
        found += [f"{where} {text}" for text in shape]
        if shape:
            continue
        modes = [entry["mode"]] if entry["mode"] is not None else list(units)
        known = [units[m][entry["figure"]] for m in modes if entry["figure"] in units.get(m, {})]
        if not known:
            in_mode = f"a {entry['mode']} run" if entry["mode"] else "any run"
            found.append(f"{where} names no figure {in_mode} produces")
        elif entry["unit"] not in known:
            found.append(f"{where} is in {entry['unit']!r}, the figure in {known[0]!r}")
        key = (entry["figure"], entry["mode"])
        if entry["recorded"] < last_date.get(key, ""):
            found.append(f"{where} is dated before the entry above it for the same figure and mode")
        last_date[key] = entry["recorded"]
    return found


def attach(results: Results, entries: Sequence[dict[str, Any]], source: str) -> None:
    """Give each figure of this run the entries recorded for it: same name, and this run's mode or none
    recorded. `results.history` says where they came from and how many were shown."""
    shown = 0
    for figure in results.figures:
        figure.history = [
            dict(e) for e in entries if e["figure"] == figure.name and e["mode"] in (results.mode, None)
        ]
        shown += len(figure.history)
    results.history.update({"file": source, "entries": len(entries), "shown": shown})
