"""The quick benchmark suite runs end to end against the real stack and produces every figure.

A smoke test for CI: it checks that each figure was measured (a number, with its command) under the name
and unit its section declares (`run.figure_defs`), that the values recorded before (`history.json`) are
beside them, and that the JSON, the Markdown table and the plots were written. It never checks a timing:
CI machines differ, and a slow figure is reported by the suite itself, beside its target.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.bench import run

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(1200)]

#: Every figure of issues 7, 18, 29, 32 and 33, by the start of its name; the quick suite must produce each
#: one. The original's figures (peer section) are produced too but may be n/a: it needs Node and npm, and
#: skips with its reason where they are missing.
EXPECTED = (
    "turn p50, 1 thread",
    "turn p99, 1 thread",
    "turn p50, 10 thread",
    "turn p99, 10 thread",
    "turn p50, 50 thread",
    "turn p99, 50 thread",
    "API CPU per exchange, Postgres",
    "exchanges/s at 10 threads (Postgres)",
    "p99/p50 at 10 threads",
    "om turn p50, 1 thread (embedded",
    "om turn p95, 1 thread (embedded",
    "om turn p50, 5 threads (embedded",
    "om turn p95, 5 threads (embedded",
    "om messages lost, 5 threads",
    "API CPU per exchange, SQLite",
    "Redis commands per /turns call, embedded API",
    "SQLite writer queue wait per turn, API",
    "flatness, median turn",
    "largest actor context over",
    "blocked turns at default settings",
    "blocking starts at messageTokens",
    "observations/s at concurrency 1",
    "observations/s at concurrency 16",
    "worker CPU per buffered observation",
    "o200k counting speed",
    "part-cache hit rate",
    "API process resident memory",
    "worker process resident memory",
    "local model: compression",
    "local model: planted facts",
    "search p50, Postgres",
    "search p99, Postgres",
    "search p50, SQLite",
    "search p99, SQLite",
    "messages indexed and embedded per second",
    "index lag after a burst",
    "API CPU per turn, tracing off",
    "API CPU per turn, tracing on",
    "turn CPU, tracing on ÷ off",
    "memory eval, thread scope: answers in",
    "memory eval, resource scope: answers in",
)
#: Figures that may legitimately have no value (no blocking at all in the sweep).
MAY_BE_EMPTY = ("blocking starts at messageTokens",)


def test_the_quick_suite_produces_every_figure(postgres_url: str, redis_url: str, tmp_path: Path) -> None:
    out = tmp_path / "bench-results.json"
    status = run.main(["--quick", "--out", str(out), "--workdir", str(tmp_path / "work")])

    results = json.loads(out.read_text())
    failed = {name: s.get("error", "")[-800:] for name, s in results["sections"].items() if "error" in s}
    assert status == 0 and not failed, failed
    produced = [(f["name"], f["unit"]) for f in results["figures"]]
    assert produced == [(d.name, d.unit) for d in run.figure_defs(quick=True)]
    assert "problems" not in results["history"], results["history"]
    assert results["history"]["file"] == "tests/bench/history.json" and results["history"]["shown"] > 0
    figures = {f["name"]: f for f in results["figures"]}
    for prefix in EXPECTED:
        matching = [f for name, f in figures.items() if name.startswith(prefix)]
        assert matching, f"no figure named {prefix!r}; got {sorted(figures)}"
        for figure in matching:
            assert figure["command"].startswith(".venv/bin/python -m tests.bench.run --quick --only ")
            if not prefix.startswith(MAY_BE_EMPTY):
                value = figure["value"]
                assert value is not None and math.isfinite(value), figure
    assert {"context", "turn_path", "throughput", "blocking"} <= set(results["series"])
    for plot in ("bench-context.png", "bench-latency.png", "bench-throughput.png", "bench-blocking.png"):
        assert (tmp_path / plot).stat().st_size > 10_000, plot
    assert "| Figure | Value | Target |" in out.with_suffix(".md").read_text()
