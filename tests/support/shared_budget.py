"""A race of model-calling processes on one rate-limit budget, and the check that they shared it.

Each caller process runs a script that makes its model calls after a start signal and reports when each
call got its token; the processes are started together, so their calls overlap. `assert_one_budget` then
holds the grants of all of them to one token bucket's arithmetic: whatever each process did alone, together
they never ran faster than the budget allows.

The script gets `redis_url run index calls *extra` as its arguments, signals `{run}:ready` once it has
warmed up (imports, first call), waits for `{run}:go:{index}`, and pushes a JSON report with at least
`{"process": index, "grants": [times]}` to `{run}:grants`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import redis

from om_adapters.token_bucket import RateLimit
from tests.support.workers import REPO, wait_until


def race(
    client: redis.Redis,
    script: str,
    extra_args: Sequence[Sequence[str]],
    *,
    calls: int,
    logs: Path,
    env: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Run one caller per entry of `extra_args` at once; their reports, once every caller finished."""
    url = client.connection_pool.connection_kwargs
    redis_url = f"redis://{url['host']}:{url['port']}/{url['db']}"
    run = f"rl-{uuid.uuid4().hex[:8]}"
    environment = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_LOG": "ERROR",
        **(env or {}),
    }
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", script, redis_url, run, str(index), str(calls), *extra],
            cwd=REPO,
            env=environment,
            stdout=open(logs / f"caller{index}.log", "wb"),  # noqa: SIM115
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        for index, extra in enumerate(extra_args)
    ]
    count = len(processes)
    try:
        wait_until(
            lambda: client.llen(f"{run}:ready") == count, deadline_s=180, what="every caller to be ready"
        )
        for index in range(count):
            client.rpush(f"{run}:go:{index}", 1)
        wait_until(
            lambda: client.llen(f"{run}:grants") == count, deadline_s=90, what="every caller to finish"
        )
    finally:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, 9)
            process.wait(timeout=10)
    return [json.loads(raw) for raw in client.lrange(f"{run}:grants", 0, -1)]


def assert_one_budget(reports: Sequence[Mapping[str, Any]], rate: RateLimit, calls: int) -> None:
    """The callers' grants, taken together, obey one bucket of `rate`, and the callers overlapped."""
    grants = sorted(t for report in reports for t in report["grants"])
    assert len(grants) == len(reports) * calls
    # In any time window, no more tokens than the burst plus what refilled during it (plus one for the
    # sampling of grant times, taken just after each token).
    for i in range(len(grants)):
        for j in range(i, len(grants)):
            assert j - i + 1 <= rate.burst + rate.per_second * (grants[j] - grants[i]) + 1, (i, j)
    minimum = (len(grants) - rate.burst) / rate.per_second
    assert grants[-1] - grants[0] >= minimum * 0.9, "the callers together run at the shared rate"
    alone = [report["grants"] for report in reports]
    assert all(len(g) == calls for g in alone)
    # Interleaved, not one after the other: each process got tokens while the others were running.
    assert min(g[-1] for g in alone) > max(g[0] for g in alone)
