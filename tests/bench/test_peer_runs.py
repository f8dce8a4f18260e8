"""The peer section's spread: figures are medians of alternating runs with their range, ratios pair the
runs of one repetition, targets read the medians (messages lost: every run), and Redis commands are
attributed to the process that sent them. No services: the section's reporting is fed made-up runs.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from tests.bench import peer
from tests.bench.harness import Bench
from tests.bench.redis_monitor import LUA, UNATTRIBUTED, count
from tests.bench.results import FigureDef, Results, print_table


def test_runs_default_to_three_full_and_one_quick_and_follow_the_setting() -> None:
    assert peer.repetitions(quick=False, environ={}) == 3
    assert peer.repetitions(quick=True, environ={}) == 1
    assert peer.repetitions(quick=True, environ={peer.RUNS_ENV: "4"}) == 4
    for wrong in ("0", "-1", "three"):
        with pytest.raises(ValueError, match=peer.RUNS_ENV):
            peer.repetitions(quick=False, environ={peer.RUNS_ENV: wrong})


def test_ratios_pair_the_runs_of_one_repetition() -> None:
    om = [{"p95_ms": 100.0}, {"p95_ms": 300.0}, {"p95_ms": 200.0}]
    original = [{"p95_ms": 400.0}, {"p95_ms": 300.0}]  # the original stopped after two runs
    assert peer.paired_ratios(om, original, "p95_ms") == [0.25, 1.0]


def test_typical_is_the_median_of_each_numeric_field() -> None:
    runs = [
        {"p50_ms": 10.0, "lost_messages": 0, "settled": True, "samples_ms": [1.0]},
        {"p50_ms": 30.0, "lost_messages": 2, "settled": True, "samples_ms": [2.0]},
        {"p50_ms": 20.0, "lost_messages": 1, "settled": False, "samples_ms": [3.0]},
    ]
    assert peer.typical(runs) == {"p50_ms": 20.0, "lost_messages": 1.0, "runs": 3}


def test_a_figure_of_several_runs_shows_its_median_and_range(tmp_path: Path) -> None:
    results = Results(mode="quick", command="")
    several = results.add("peer", FigureDef("x p95", "ms"), 13.2, runs=[12.8, 13.2, 13.6])
    one = results.add("peer", FigureDef("y p95", "ms"), 13.2, runs=[13.2])
    assert several.shown_value() == "13.2 ms (12.8-13.6, 3 runs)"
    assert one.shown_value() == "13.2 ms"
    out = tmp_path / "r.json"
    results.write(out)
    assert json.loads(out.read_text())["figures"][0]["runs"] == [12.8, 13.2, 13.6]


def _om_run(p95: float, lost: int = 0, busy: float = 50.0) -> dict[str, Any]:
    return {
        "p50_ms": p95 / 2,
        "p95_ms": p95,
        "max_ms": p95 * 1.2,
        "turns_per_s": 50.0,
        "exchanges": 600,
        "expected_messages": 1200,
        "lost_messages": lost,
        "api_cpu_ms_per_exchange": 9.0,
        "workers_cpu_ms_per_exchange": 4.0,
        "redis_cpu_ms_per_exchange": 0.5,
        "monitor_cpu_ms_per_exchange": 0.2,
        "client_cpu_ms_per_exchange": 3.0,
        "machine_busy_pct": busy,
        "others_busy_pct": busy / 5,
        "writer_wait_ms_per_turn": p95 / 10,
        "writer_transactions_per_turn": 4.0,
        "writer_waited_pct": 50.0,
        "writer_mean_wait_ms": 5.0,
        "redis_commands_per_call": 3.0,
        "redis_by_command_per_call": {"MGET": 1.0, "PING": 1.0, "PUBLISH": 1.0},
        "redis_by_process_per_exchange": {"api": 6.0, "worker": 2.0},
        "redis_unattributed": 0,
    }


def _original_run(p95: float) -> dict[str, Any]:
    return {
        "p50_ms": p95 / 2,
        "p95_ms": p95,
        "max_ms": p95,
        "turns_per_s": 40.0,
        "expected_messages": 1200,
        "lost_messages": 100,
        "sqlite_busy_logged": 3,
        "versions": {"@mastra/memory": "1"},
        "node": "v20",
    }


def _report(om_concurrent: list[dict[str, Any]]) -> dict[str, Any]:
    results = Results(mode="full", command="")
    bench = cast(Bench, SimpleNamespace(results=results))
    runs = len(om_concurrent)
    om = {"single": [_om_run(20.0) for _ in range(runs)], "concurrent": om_concurrent}
    original = {"single": [_original_run(30.0)] * runs, "concurrent": [_original_run(400.0)] * runs}
    peer._report(bench, peer.FULL, runs, om, original, "", None, [], [])
    lines: list[str] = []
    print_table(results, lines.append)
    return {"figures": {f.name: f for f in results.figures}, "table": "\n".join(lines)}


def test_the_report_gives_every_figure_its_median_range_and_the_p95_spread() -> None:
    report = _report([_om_run(400.0), _om_run(900.0, busy=100.0), _om_run(500.0)])
    figures = report["figures"]
    assert [f.name for f in figures.values()] == [d.name for d in peer.figures(quick=False)]
    p95 = figures["om turn p95, 20 threads (embedded, SQLite, HTTP)"]
    assert (p95.value, p95.runs) == (500.0, [400.0, 900.0, 500.0])
    ratio = figures["om p95 ÷ original p95, 20 threads"]
    assert ratio.value == 1.25 and ratio.runs == [1.0, 2.25, 1.25] and ratio.met is False
    spread = figures["om p95 spread, 20 threads"]
    assert spread.value == 2.25 and spread.met is False
    assert spread.why is not None and spread.why.startswith("the slowest run (run 2, p95 900 ms)")
    assert "the machine was 100 % busy" in spread.why
    assert "500 ms (400-900, 3 runs)" in report["table"]


def test_messages_lost_in_any_run_miss_the_target_even_when_the_median_is_zero() -> None:
    figures = _report([_om_run(400.0), _om_run(400.0, lost=3), _om_run(400.0)])["figures"]
    lost = figures["om messages lost, 20 threads"]
    assert lost.value == 0 and lost.met is False and lost.why == "lost by run: 0, 3, 0"


def test_one_run_has_no_spread() -> None:
    figures = _report([_om_run(400.0)])["figures"]
    spread = figures["om p95 spread, 20 threads"]
    assert math.isnan(spread.value) and spread.met is None
    assert figures["om messages lost, 20 threads"].met is True


def test_monitor_lines_between_the_marks_are_counted_by_the_process_that_sent_them() -> None:
    lines = [
        '1.0 [0 127.0.0.1:1001] "PING"',  # before the start mark
        '2.0 [0 127.0.0.1:9000] "ECHO" "mark:start"',
        '2.1 [0 127.0.0.1:1001] "MGET" "a" "b"',
        '2.2 [0 127.0.0.1:1001] "publish" "ch" "{\\"x\\": 1}"',
        '2.3 [0 127.0.0.1:2002] "BRPOP" "om.buffer" "1"',
        '2.4 [0 lua] "GET" "lock"',
        '2.5 [0 127.0.0.1:3003] "SET" "k" "v"',
        "not a monitor line",
        '3.0 [0 127.0.0.1:9000] "ECHO" "mark:end"',
        '3.1 [0 127.0.0.1:1001] "PING"',  # after the end mark
    ]
    owners = {"127.0.0.1:1001": "api", "127.0.0.1:2002": "worker"}
    counted = count(iter(lines), "mark:start", "mark:end", owners)
    assert counted.by_process == {"api": 2, "worker": 1, LUA: 1, UNATTRIBUTED: 1}
    assert counted.by_command["api"] == {"MGET": 1, "PUBLISH": 1}
