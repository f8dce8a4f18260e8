"""PNG plots of a results file: the context over the long conversation, latencies, throughput, blocking.

Each plot is drawn only when its series is in the results (a run with `--only` has some of them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt

from tests.bench.results import percentile


def _context(series: list[dict[str, Any]], path: Path) -> None:
    turns = [p["turn"] for p in series]
    raw = [p["message_tokens"] for p in series]
    memory = [p["observation_tokens"] for p in series]
    message_threshold = max(p["message_threshold"] for p in series)
    observation_threshold = max(p["observation_threshold"] for p in series)
    bound = 1.2 * message_threshold + 1.2 * observation_threshold
    figure, (top, bottom) = plt.subplots(2, 1, figsize=(11, 7), sharex=True, height_ratios=[3, 2])
    top.stackplot(turns, memory, raw, labels=["observations (memory)", "raw messages"], alpha=0.8)
    top.axhline(
        bound, color="black", linestyle="--", linewidth=1, label=f"bound 1.2×msg + 1.2×obs = {bound:,.0f}"
    )
    top.axhline(
        message_threshold, color="tab:orange", linestyle=":", label=f"messageTokens {message_threshold:,}"
    )
    top.axhline(
        1.2 * message_threshold,
        color="tab:red",
        linestyle=":",
        label=f"blockAfter {1.2 * message_threshold:,.0f}",
    )
    top.set_ylabel("tokens the actor receives")
    top.set_title("Actor context over the long conversation (stacked: memory + raw messages)")
    top.legend(loc="upper left", fontsize=8)
    bottom.plot(turns, [p["status_observations"] for p in series], color="tab:blue", label="observation log")
    bottom.axhline(
        observation_threshold,
        color="tab:green",
        linestyle=":",
        label=f"observationTokens {observation_threshold:,}",
    )
    bottom.axhline(
        1.2 * observation_threshold,
        color="tab:red",
        linestyle=":",
        label=f"reflection blockAfter {1.2 * observation_threshold:,.0f}",
    )
    bottom.set_ylabel("tokens")
    bottom.set_xlabel("turn (exchange)")
    bottom.legend(loc="upper left", fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _latency(levels: list[dict[str, Any]], flatness: dict[str, Any] | None, path: Path) -> None:
    panels = [name for name, present in (("levels", bool(levels)), ("flatness", bool(flatness))) if present]
    figure, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.5), squeeze=False)
    for axis, panel in zip(axes[0], panels, strict=True):
        if panel == "levels":
            _levels_panel(axis, levels)
        elif flatness is not None:
            _flatness_panel(axis, flatness)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _levels_panel(axis: Any, levels: list[dict[str, Any]]) -> None:
    names = [f"{d['level']} thread(s)" for d in levels]
    for offset, (q, colour) in enumerate(((50, "tab:blue"), (90, "tab:orange"), (99, "tab:red"))):
        values = [percentile(d["samples_ms"], q) for d in levels]
        positions = [i + (offset - 1) * 0.27 for i in range(len(levels))]
        axis.bar(positions, values, width=0.27, color=colour, label=f"p{q}")
    axis.axhline(6, color="tab:blue", linestyle=":", linewidth=1, label="p50 target at 10 threads")
    axis.axhline(30, color="tab:red", linestyle=":", linewidth=1, label="p99 target at 10 threads")
    axis.set_xticks(range(len(levels)), names)
    axis.set_yscale("log")
    axis.set_ylabel("ms per turn (user call + reply call)")
    axis.set_title("Turn path over HTTP")
    axis.legend(fontsize=8)


def _flatness_panel(axis: Any, flatness: dict[str, Any]) -> None:
    near, far = flatness["near_turns"], flatness["far_turns"]
    axis.boxplot(
        [flatness["near_ms"], flatness["far_ms"]],
        tick_labels=[f"turns {near[0]}–{near[1] - 1}", f"turns {far[0]}–{far[1] - 1}"],
    )
    axis.set_ylabel("ms per turn (user call + reply call)")
    axis.set_title("Flatness: one thread, early vs late")


def _throughput(levels: list[dict[str, Any]], path: Path) -> None:
    figure, axis = plt.subplots(figsize=(6, 4.5))
    one = [d for d in levels if d.get("processes", 1) == 1]
    spread = [d for d in levels if d.get("processes", 1) > 1]
    xs = [d["concurrency"] for d in one]
    ys = [d["per_s"] for d in one]
    axis.plot(xs, ys, marker="o", label="measured, one worker process")
    if spread:
        axis.plot(
            [d["concurrency"] for d in spread],
            [d["per_s"] for d in spread],
            marker="s",
            linestyle="none",
            label=f"measured, {spread[0]['processes']} worker processes",
        )
    axis.plot(xs, [x * ys[0] for x in xs], linestyle="--", color="grey", label="linear")
    axis.plot(xs, [0.8 * x * ys[0] for x in xs], linestyle=":", color="tab:red", label="target 0.8 × linear")
    axis.set_xscale("log", base=2)
    axis.set_yscale("log", base=2)
    axis.set_xlabel("worker concurrency (threads pool)")
    axis.set_ylabel("observations / s")
    axis.set_title("Observer throughput, fake model latency")
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _blocking(points: list[dict[str, Any]], path: Path) -> None:
    figure, axis = plt.subplots(figsize=(6, 4.5))
    ordered = sorted(points, key=lambda p: p["message_tokens"])
    axis.plot([p["message_tokens"] for p in ordered], [p["share"] * 100 for p in ordered], marker="o")
    axis.set_xscale("log")
    axis.set_xlabel("observation.messageTokens")
    axis.set_ylabel("% of turns that waited on a model call")
    axis.set_title("Blocked turns, slow model, steady typing")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def draw(series: dict[str, Any], folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    drawn: list[Path] = []
    if series.get("context"):
        drawn.append(folder / "bench-context.png")
        _context(series["context"], drawn[-1])
    if series.get("turn_path") or series.get("flatness"):
        drawn.append(folder / "bench-latency.png")
        _latency(series.get("turn_path") or [], series.get("flatness"), drawn[-1])
    if series.get("throughput"):
        drawn.append(folder / "bench-throughput.png")
        _throughput(series["throughput"], drawn[-1])
    if series.get("blocking"):
        drawn.append(folder / "bench-blocking.png")
        _blocking(series["blocking"], drawn[-1])
    return drawn
