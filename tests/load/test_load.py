"""The load test at CI size (issue 6 item 6): `OM_LOAD_THREADS` chats (default 12) for `OM_LOAD_DURATION_S`
seconds (default 30) against the API in celery mode with real workers and a fake model of 1-2 s latency.

Asserts what must hold at any load: no acknowledged message lost, no 5xx, the invariants on every thread.
Timings are printed (and written to `load-results.json` in the test's folder), never asserted: they
depend on the machine. `python -m tests.load.run --threads 50 --duration 300` runs the full size.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from sqlalchemy import Engine

from tests.bench.stack import Services
from tests.load.driver import LoadSettings
from tests.load.run import StackOptions, load_stack, render, run_load

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

THREADS = int(os.environ.get("OM_LOAD_THREADS", "12"))
DURATION_S = float(os.environ.get("OM_LOAD_DURATION_S", "30"))
#: Small thresholds, so a 30-second run goes through buffering, activation and reflection.
OPTIONS = StackOptions(
    message_tokens=4_000, observation_tokens=1_500, observe_concurrency=4, buffer_concurrency=8
)


def test_a_bounded_load_loses_nothing_and_keeps_every_invariant(
    postgres_url: str,
    redis_url: str,
    pg_engine: Engine,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    services = Services(postgres_url, redis_url, pg_engine, started_here=False)
    settings = LoadSettings(threads=THREADS, duration_s=DURATION_S, conversation_tokens=30_000)
    with load_stack(services, tmp_path, OPTIONS) as stack:
        result = run_load(stack, settings, OPTIONS)
    (tmp_path / "load-results.json").write_text(json.dumps(result.to_json(), indent=2) + "\n")
    with capsys.disabled():
        print("\n" + render(result))
    figures = result.figures()
    assert figures["turns"] > 0, "no turn completed"
    assert figures["requests_lost"] == 0, result.verdict.lost[:10]
    assert figures["errors_5xx"] == 0, result.log.errors[:10]
    assert not result.drain_problems, result.drain_problems
    assert figures["invariant_violations"] == 0, "\n".join(result.verdict.violations)
    assert figures["threads_checked"] >= THREADS
    # The run must have gone through the memory cycle it claims to check under load.
    assert result.verdict.stats["chunks:activated"] > 0, dict(result.verdict.stats)
