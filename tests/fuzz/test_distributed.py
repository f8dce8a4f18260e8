"""The interleaving fuzz across processes (issue 6 item 3): two API processes in celery mode, three Celery
worker processes, Postgres, Redis and concurrent HTTP clients; the checker on every thread of every seed.

CI size: `OM_DFUZZ_SEEDS` seeds (default 20) from `OM_DFUZZ_FIRST` (default 0), `OM_DFUZZ_PARALLEL` side
by side (default 5), against processes started once for the whole run. `python -m tests.fuzz.distributed
--seeds N --first K` runs the large sizes.

Every third seed runs several threads of one resource in resource scope (see `distributed.py`).

`OM_DFUZZ_MUTANTS=1` adds the proof that this fuzz can fail: a known loss path of the original planted in
every API and worker process must be caught (it starts the processes again per mutant, so it is not part
of the CI run; `--mutant P1|P2` on the command line measures detection rates).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from sqlalchemy import Engine

from tests.fuzz.distributed import (
    DistributedSettings,
    StackSettings,
    plan,
    render,
    run_seeds,
    running_stack,
)

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

SEEDS = int(os.environ.get("OM_DFUZZ_SEEDS", "20"))
FIRST = int(os.environ.get("OM_DFUZZ_FIRST", "0"))
PARALLEL = int(os.environ.get("OM_DFUZZ_PARALLEL", "5"))
MIN_SEEDS = min(SEEDS, 20)


def test_the_plan_is_a_function_of_the_seed() -> None:
    settings = DistributedSettings()
    assert plan(7, settings) == plan(7, settings)
    assert plan(7, settings) != plan(8, settings)
    clients = plan(7, settings)
    operations = [op for client in clients for op in client]
    assert len(clients) == settings.clients
    assert len(operations) == settings.operations
    # Every conversation starts with a save, and message numbers never repeat within a seed.
    assert {op.thread for op in operations[: settings.threads]} <= set(range(settings.threads))
    numbers = [m.number for op in operations for m in op.messages]
    assert len(numbers) == len(set(numbers))


def test_every_third_seed_posts_to_several_threads_of_one_resource() -> None:
    settings = DistributedSettings()
    assert [settings.shared(seed) for seed in range(6)] == [False, False, True] * 2
    for seed in (2, 5, 8):
        operations = [op for client in plan(seed, settings) for op in client]
        threads = settings.threads_of(seed)
        assert 2 <= threads <= 4 and len(operations) == settings.resource_operations
        assert {op.thread for op in operations if op.kind == "save"} == set(range(threads))
        numbers = [m.number for op in operations for m in op.messages]
        assert len(numbers) == len(set(numbers)), "markers are unique across the resource's threads"


def test_seeded_interleavings_across_processes_keep_every_invariant(
    postgres_url: str,
    redis_url: str,
    pg_engine: Engine,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with running_stack(postgres_url, redis_url, tmp_path) as stack:
        summary = run_seeds(stack, range(FIRST, FIRST + SEEDS), parallel=PARALLEL)
        assert len(stack.apis) == 2 and len(stack.workers_ready.result()) >= 3
        with capsys.disabled():
            print(
                f"\ndistributed fuzz: {summary.seeds} seeds, {len(summary.failed)} failing, "
                f"{summary.violations} violations, {summary.seconds:.1f} s for the seeds "
                f"({len(stack.apis)} API processes, {len(stack.cluster.processes)} worker processes)"
            )
        assert not summary.failed, f"{render(summary, 0.0)}\n{stack.logs()}"
    assert summary.seeds >= MIN_SEEDS
    stats = summary.stats
    # The run must have reached what it claims to check (a fuzz that never gets there proves nothing).
    for exercised in (
        "chunks:activated",
        "activated-by:observation:threshold",
        "reflections",
        "op:grow",
        "op:retry",
        "task:BufferObservation",
        "task:BufferReflection",
        "task:Observe",
        "task:Reflect",
        "sent-twice",
        # resource scope
        "resource:seeds",
        "task:ObserveBatch",
        "resource:multi-thread-commits",
    ):
        assert stats[exercised] > 0, f"never exercised: {exercised}"
    injected = sum(v for k, v in stats.items() if k.startswith("model:") and not k.endswith(":ok"))
    assert injected > 0, "no model fault was injected"


@pytest.mark.skipif(os.environ.get("OM_DFUZZ_MUTANTS") != "1", reason="opt-in: OM_DFUZZ_MUTANTS=1")
@pytest.mark.parametrize("mutant", ["P1", "P2"])
def test_the_distributed_fuzz_catches_a_loss_path_planted_in_every_process(
    postgres_url: str, redis_url: str, pg_engine: Engine, tmp_path: Path, mutant: str
) -> None:
    with running_stack(postgres_url, redis_url, tmp_path, StackSettings(mutant=mutant)) as stack:
        summary = run_seeds(stack, range(40), parallel=PARALLEL, stop_on_failure=True)
    assert summary.failed, f"{summary.seeds} seeds never noticed the planted {mutant}"
