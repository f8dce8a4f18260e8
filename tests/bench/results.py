"""Figures, their targets, and how they are reported: the JSON file and the printed table.

A figure is one number beside its target, the command that produced it and, when the target is missed,
a short reason; beside it are the values recorded for it before (`tests/bench/history.py`). Each figure is
named by a `FigureDef` its section declares (`run.figure_defs` lists them all), so the history file and
the smoke test name exactly what the sections measure. Targets are predicates, not thresholds buried in
prose, so the table and the JSON agree on whether a figure passed. Timings are never asserted anywhere: a
slow shared machine is a reason to print, not a failure.
"""

from __future__ import annotations

import json
import math
import os
import platform
import shlex
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


def percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100.0
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def median(values: Sequence[float]) -> float:
    return percentile(values, 50)


@dataclass(frozen=True)
class Target:
    """`text` is what the table shows ("≤ 6 ms"); `check` decides whether a value meets it."""

    text: str
    check: Callable[[float], bool]

    @staticmethod
    def at_most(limit: float, unit: str = "") -> Target:
        return Target(f"≤ {limit:g}{unit}", lambda value: value <= limit)

    @staticmethod
    def at_least(limit: float, unit: str = "") -> Target:
        return Target(f"≥ {limit:g}{unit}", lambda value: value >= limit)


@dataclass(frozen=True)
class FigureDef:
    """What a figure is called and in which unit: declared once by the section that measures it."""

    name: str
    unit: str


def shown_number(value: float) -> str:
    if isinstance(value, float) and math.isnan(value):
        return "n/a"
    magnitude = abs(value)
    if magnitude >= 100 or float(value).is_integer():
        return f"{value:,.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


@dataclass
class Figure:
    section: str
    name: str
    value: float
    unit: str
    target: str | None = None
    met: bool | None = None
    why: str | None = None
    note: str | None = None
    command: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    #: Values recorded for this figure before, oldest first (`history.attach`): `history.json` entries.
    history: list[dict[str, Any]] = field(default_factory=list)
    #: The value of each run when the figure is the median of several (`value`); shown as their range.
    runs: list[float] = field(default_factory=list)

    def spread(self) -> tuple[float, float, int] | None:
        """(lowest, highest, how many) of the runs that measured something, when more than one did."""
        measured = [v for v in self.runs if math.isfinite(v)]
        return (min(measured), max(measured), len(measured)) if len(measured) > 1 else None

    def shown_value(self) -> str:
        """The value with its unit, and the range of the runs when it is the median of several."""
        text = shown_number(self.value)
        if text == "n/a":
            return text
        text = f"{text} {self.unit}".strip()
        spread = self.spread()
        if spread is None:
            return text
        low, high, count = spread
        return f"{text} ({shown_number(low)}-{shown_number(high)}, {count} runs)"


@dataclass
class Results:
    mode: str
    command: str
    figures: list[Figure] = field(default_factory=list)
    series: dict[str, Any] = field(default_factory=dict)
    sections: dict[str, dict[str, Any]] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    #: Where the recorded values beside the figures come from, and entries that named no figure.
    history: dict[str, Any] = field(default_factory=dict)

    def add(
        self,
        section: str,
        definition: FigureDef,
        value: float,
        *,
        target: Target | None = None,
        why: Callable[[], str] | str | None = None,
        note: str | None = None,
        produced_by: str | None = None,
        runs: Sequence[float] = (),
        **details: Any,
    ) -> Figure:
        """Record a figure. `why` is asked for only when the target is missed; `produced_by` names the
        runnable section when it differs from the figure's group (flatness comes from `long_thread`);
        `runs` are the values of the runs `value` summarises (their median), shown as a range."""
        met = None
        if target is not None and not (isinstance(value, float) and math.isnan(value)):
            met = bool(target.check(value))
        reason = None
        if met is False and why is not None:
            reason = why() if callable(why) else why
        figure = Figure(
            section=section,
            name=definition.name,
            value=float(value),
            unit=definition.unit,
            target=target.text if target else None,
            met=met,
            why=reason,
            note=note,
            command=section_command(produced_by or section, self.mode),
            details=details,
            runs=[float(v) for v in runs],
        )
        self.figures.append(figure)
        return figure

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "command": self.command,
            "meta": self.meta,
            "figures": [asdict(f) for f in self.figures],
            "history": self.history,
            "sections": self.sections,
            "series": self.series,
        }

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(_strict(self.to_json()), indent=2, default=str, allow_nan=False)
        path.write_text(text + "\n")


def _strict(value: Any) -> Any:
    """Strict JSON: NaN and infinities (a figure that could not be measured) become null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _strict(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_strict(v) for v in value]
    return value


def section_command(section: str, mode: str) -> str:
    quick = " --quick" if mode == "quick" else ""
    return f".venv/bin/python -m tests.bench.run{quick} --only {section}"


def invoked_command(argv: Sequence[str]) -> str:
    """The command line of this run, as a user would retype it."""
    return shlex.join([".venv/bin/python", "-m", "tests.bench.run", *argv])


def machine_meta() -> dict[str, Any]:
    revision = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    dirty = bool(
        subprocess.run(["git", "status", "--porcelain"], capture_output=True, text=True, check=False).stdout
    )
    return {
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "git": revision + ("+dirty" if dirty else ""),
        "loadavg_at_start": list(os.getloadavg()),
    }


def print_table(results: Results, out: Callable[[str], None] = print) -> None:
    """Every figure beside its target; misses carry their reason, every figure its command, and the
    values recorded for it before follow it, one line each ("before:")."""
    rows = []
    for f in results.figures:
        status = "" if f.met is None else ("ok" if f.met else "MISS")
        rows.append((f.section, f.name, f.shown_value(), f.target or "-", status))
    widths = [
        max(len(str(row[i])) for row in [("section", "figure", "value", "target", ""), *rows])
        for i in range(5)
    ]
    header = ("section", "figure", "value", "target", "")
    line = "  ".join(str(h).ljust(w) for h, w in zip(header, widths, strict=True))
    out(line)
    out("-" * len(line))
    for f, row in zip(results.figures, rows, strict=True):
        out("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        if f.note:
            out(f"    note: {f.note}")
        if f.why:
            out(f"    why:  {f.why}")
        for entry in f.history:
            out(f"    before: {shown_recorded(entry)}")
    source = results.history.get("file")
    if source:
        out("")
        out(f"before: values recorded in {source} for the same figure in a {results.mode} run (or a run")
        out("        whose mode was not recorded), oldest first")
    out("")
    out(f"produced by: {results.command}")
    out("each figure alone:")
    for command, sections in _commands(results).items():
        out(f"  {', '.join(sections):<34} {command}")


def _commands(results: Results) -> dict[str, list[str]]:
    by_command: dict[str, list[str]] = {}
    for figure in results.figures:
        names = by_command.setdefault(figure.command, [])
        if figure.section not in names:
            names.append(figure.section)
    return by_command


def recorded_value(entry: dict[str, Any]) -> str:
    """A history entry's value with its unit; a range (`[low, high]`) as `low-high`."""
    value = entry["value"]
    number = "-".join(shown_number(v) for v in value) if isinstance(value, list) else shown_number(value)
    return f"{number} {entry['unit']}".strip()


def shown_recorded(entry: dict[str, Any]) -> str:
    """One recorded value: `17-23 ms on 2026-11-30 (session; machine): what changed`."""
    where = [str(entry[k]) for k in ("session", "machine") if entry.get(k)]
    if entry.get("mode") is None:
        where.append("run mode not recorded")
    context = f" ({'; '.join(where)})" if where else ""
    return f"{recorded_value(entry)} on {entry['recorded']}{context}: {entry['change']}"


def markdown_table(results: Results) -> str:
    """The figures as a Markdown table (`bench-results.md`), with the values recorded before."""
    lines = ["| Figure | Value | Target | | Recorded before |", "|---|---|---|---|---|"]
    for f in results.figures:
        status = "" if f.met is None else ("✅" if f.met else "❌")
        before = "; ".join(f"{recorded_value(e)} ({e['recorded']})" for e in f.history)
        lines.append(f"| {f.name} | {f.shown_value()} | {f.target or ''} | {status} | {before} |")
    return "\n".join(lines)
