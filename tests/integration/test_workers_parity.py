"""The distributed path stores what the in-process path stores (issue 3, "Done when").

Several threads of generated conversation (100k tokens each by default; `OM_TEST_WORKERS_THREADS` and
`OM_TEST_WORKERS_TOKENS` scale it up to the issue's 20 threads) run at once through worker processes on
separate queues (`om.observe` alone; `om.buffer` + `om.reflect`), with the local model through litellm,
`CeleryExecutor` and `RedisCoordination`. The same conversations run in a separate process with the
`InlineExecutor` as the reference.

Two ways of driving the threads, both at the same time against the same workers:

- **lock-step**: each background task a turn starts runs to completion on the workers before the turn
  goes on (`InOrderCeleryExecutor`), so every task sees the state it would have seen inline. The final
  records must then be identical to the reference: same cursor, same chunk and observation ranges, same
  generation count, same log text.
- **free-running**: turns do not wait for background work (as in production). Buffering then runs at
  other moments than inline, and two tasks one turn starts (a buffered reflection and a buffering run)
  race, so chunk boundaries, the cursor and the Observer's view of the log legitimately differ; what must
  hold is the invariant: every stored part is covered exactly once or still raw, and none is lost or
  doubled.
"""

from __future__ import annotations

import difflib
import json
import multiprocessing
import os
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, func, select

from om_core.engine import lookup_key
from om_core.store import records, schema
from tests.support.conversation import generate
from tests.support.invariants import check_thread
from tests.support.workers import WorkerCluster, run_inline, wait_results, wait_until, worker_cluster

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

THREADS = int(os.environ.get("OM_TEST_WORKERS_THREADS", "4"))
TOKENS = int(os.environ.get("OM_TEST_WORKERS_TOKENS", "100000"))
#: Small thresholds so 100k tokens go through many buffering, activation and reflection cycles.
CONFIG = {
    "model": "om-local/extractive",
    "observation": {"messageTokens": 8000},
    "reflection": {"observationTokens": 3000},
}


@pytest.fixture(scope="module")
def cluster(
    postgres_url: str, redis_url: str, pg_engine: Engine, tmp_path_factory: Any
) -> Iterator[WorkerCluster]:
    workdir: Path = tmp_path_factory.mktemp("workers-parity")
    env = {"OM_CONFIG": json.dumps(CONFIG), "LITELLM_LOG": "ERROR"}
    with worker_cluster(postgres_url=postgres_url, redis_url=redis_url, workdir=workdir, db=4, env=env) as c:
        c.start_workers([(["om.observe"], 1), (["om.buffer", "om.reflect"], 2)])
        yield c


def drive(cluster: WorkerCluster, thread_id: str, seed: int, *, lock_step: bool) -> int:
    """Play one conversation through the workers; returns the number of turns."""
    producer = cluster.producer(in_order=lock_step)
    turns = 0
    for message in generate(seed, TOKENS).turns():
        result = producer.engine.ingest_turn(thread_id, thread_id, [message])
        assert not result.degraded, result.degraded_reason
        turns += 1
        if lock_step:
            failed = [
                r
                for r in wait_results(producer.sent.take(thread_id), deadline_s=180)
                if isinstance(r, Exception)
            ]
            assert not failed, f"{thread_id} turn {turns}: background work raised {failed!r}"
    wait_results(producer.sent.take(thread_id), deadline_s=300)
    return turns


def summary(db: Engine, thread_id: str) -> dict[str, Any]:
    report = check_thread(db, thread_id)
    head = records.get_head(db, lookup_key(thread_id))
    assert head is not None
    return {
        "violations": report.violations,
        "cursor": head.last_observed_seq,
        "maxSeq": report.max_seq,
        "generations": head.generation_count,
        "observationTokens": head.observation_token_count,
        "coveredRanges": report.covered_ranges,
        "chunks": [(c.from_seq, c.to_seq) for c in head.chunks],
        "observations": head.active_observations,
    }


def log_diff(reference: str, distributed: str) -> str:
    """The lines where the two observation logs part, so a failure shows where they differ."""
    lines = difflib.unified_diff(
        reference.splitlines(), distributed.splitlines(), "in-process", "distributed", lineterm="", n=2
    )
    return "\n".join(lines)


def stored_parts(db: Engine, thread_id: str) -> tuple[int, int]:
    with db.connect() as conn:
        parts = conn.execute(
            select(func.count()).select_from(schema.parts).where(schema.parts.c.thread_id == thread_id)
        ).scalar()
        distinct = conn.execute(
            select(func.count(func.distinct(schema.parts.c.message_id))).where(
                schema.parts.c.thread_id == thread_id
            )
        ).scalar()
    return int(parts or 0), int(distinct or 0)


@pytest.mark.timeout(1200)
def test_workers_on_separate_queues_store_what_the_in_process_executor_stores(
    cluster: WorkerCluster, pg_engine: Engine
) -> None:
    run = uuid.uuid4().hex[:6]
    seeds = list(range(100, 100 + THREADS))
    lock_step = seeds[: (THREADS + 1) // 2]
    reference = {seed: f"ref-{run}-{seed}" for seed in lock_step}
    distributed = {seed: f"dist-{run}-{seed}" for seed in seeds}
    conversations = {seed: generate(seed, TOKENS) for seed in seeds}
    started = time.monotonic()

    spawn = multiprocessing.get_context("spawn")
    with (
        ProcessPoolExecutor(max_workers=1, mp_context=spawn) as inline,
        ThreadPoolExecutor(THREADS) as drivers,
    ):
        reference_run = inline.submit(
            run_inline,
            cluster.postgres_url,
            json.dumps(CONFIG),
            list((t, s) for s, t in reference.items()),
            TOKENS,
        )
        turns = {
            seed: drivers.submit(drive, cluster, distributed[seed], seed, lock_step=seed in lock_step)
            for seed in seeds
        }
        turn_counts = {seed: future.result() for seed, future in turns.items()}
        reference_run.result()
    wait_until(cluster.drained, deadline_s=60, what="queues, deliveries and locks to drain")
    elapsed = time.monotonic() - started

    for seed in seeds:
        conversation = conversations[seed]
        got = summary(pg_engine, distributed[seed])
        assert got["violations"] == [], (seed, got["violations"])
        parts, messages = stored_parts(pg_engine, distributed[seed])
        assert messages == len(conversation.messages) == turn_counts[seed]
        assert got["maxSeq"] == parts, "every stored part has one sequence number, none skipped or doubled"
        if seed in lock_step:
            expected = summary(pg_engine, reference[seed])
            assert got == expected, (
                f"seed {seed}: distributed records differ from the in-process run\n"
                + log_diff(expected["observations"], got["observations"])
            )
        print(
            f"\nseed {seed} ({'lock-step' if seed in lock_step else 'free'}): {len(conversation.messages)} "
            f"messages, cursor {got['cursor']}/{got['maxSeq']}, generations {got['generations']}, "
            f"observation ranges {len(got['coveredRanges'])}, chunks waiting {len(got['chunks'])}"
        )
    print(f"{THREADS} threads x {TOKENS} tokens in {elapsed:.0f}s")
