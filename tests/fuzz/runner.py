"""Runs many seeds, in this process or in a pool of worker processes, and sums up the outcome.

Each worker process opens its own two SQLAlchemy engines (one per simulated service instance, each with
its own connection pool) once and reuses them for every seed it runs; each seed works on a fresh thread
id, so seeds never see each other's data.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import resource
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field

from sqlalchemy import Engine, create_engine

from om_core.store.db import make_engine
from om_core.store.migrate import upgrade
from tests.fuzz import mutants
from tests.fuzz.scenario import ScenarioSettings, SeedResult, run_seed

# Never let litellm try to download its price table (no network here).
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

_DBS: list[Engine] = []
_SETTINGS = ScenarioSettings()


@dataclass
class Summary:
    seeds: int = 0
    failed: list[SeedResult] = field(default_factory=list)
    stats: Counter[str] = field(default_factory=Counter)
    duplicates: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0
    #: CPU time of this process and its worker processes (the database server's is not included).
    cpu_seconds: float = 0.0
    slowest: float = 0.0

    def add(self, result: SeedResult) -> None:
        self.seeds += 1
        self.stats.update(result.report.stats)
        self.duplicates.update(result.report.duplicates)
        self.slowest = max(self.slowest, result.seconds)
        if not result.ok:
            self.failed.append(result)

    @property
    def violations(self) -> int:
        return sum(len(r.report.violations) for r in self.failed)


def fuzz_engine(url: str) -> Engine:
    """`make_engine`'s Postgres settings without the pre-ping: a liveness probe before every checkout is a
    third of all round trips here, and it guards against dropped connections, which this fuzz does not
    simulate (the fault-injection suite does). Transaction semantics are unchanged. SQLite (the embedded
    mode) needs `make_engine`'s connection setup and has no pre-ping to save."""
    if url.startswith("sqlite"):
        return make_engine(url)
    return create_engine(url, pool_size=8, max_overflow=8, isolation_level="READ COMMITTED")


def _init_worker(url: str, settings: ScenarioSettings, mutant: str | None = None) -> None:
    global _SETTINGS
    # Injected model failures are logged by the engine as warnings; thousands of them hide the result.
    logging.getLogger("om").setLevel(logging.ERROR)
    _DBS[:] = [fuzz_engine(url), fuzz_engine(url)]
    _SETTINGS = settings
    if mutant is not None:
        mutants.apply(mutant)  # for the life of this worker process


def _run_in_worker(seed: int) -> SeedResult:
    return run_seed(seed, _DBS, _SETTINGS)


def run_seeds(
    url: str,
    seeds: Iterable[int],
    *,
    processes: int = 1,
    settings: ScenarioSettings | None = None,
    on_result: Callable[[SeedResult], None] | None = None,
    mutant: str | None = None,
    stop_on_failure: bool = False,
    budget_s: float | None = None,
) -> Summary:
    """Run `seeds` against the database at `url` (migrated here first) and sum up the results.

    `mutant` names a planted bug from `tests.fuzz.mutants` to run the seeds against (to measure how well
    the fuzz detects it); in-process runs remove it again at the end. `stop_on_failure` ends the run at
    the first failing seed (seeds already running still finish). With `budget_s`, no seed starts after
    that many seconds: the run covers as many of `seeds` as fit, and `Summary.seeds` says how many.
    """
    chosen = settings or ScenarioSettings()
    migrator = make_engine(url, pool_size=1)
    upgrade(migrator)
    migrator.dispose()
    summary = Summary()
    started = time.perf_counter()
    cpu_started = _cpu_seconds()

    def should_stop(result: SeedResult) -> bool:
        if stop_on_failure and not result.ok:
            return True
        return budget_s is not None and time.perf_counter() - started > budget_s

    seed_list = list(seeds)
    if processes <= 1:
        _init_worker(url, chosen)
        undo = mutants.apply(mutant) if mutant is not None else None
        try:
            for seed in seed_list:
                result = _run_in_worker(seed)
                summary.add(result)
                if on_result is not None:
                    on_result(result)
                if should_stop(result):
                    break
        finally:
            if undo is not None:
                undo()
    else:
        _run_in_processes(url, seed_list, processes, chosen, mutant, summary, on_result, should_stop)
    summary.seconds = time.perf_counter() - started
    summary.cpu_seconds = _cpu_seconds() - cpu_started
    summary.failed.sort(key=lambda r: r.seed)
    return summary


def _run_in_processes(
    url: str,
    seeds: list[int],
    processes: int,
    settings: ScenarioSettings,
    mutant: str | None,
    summary: Summary,
    on_result: Callable[[SeedResult], None] | None,
    should_stop: Callable[[SeedResult], bool],
) -> None:
    """`run_seeds` across `processes` worker processes: once `should_stop` says so, seeds not yet handed
    to a worker are cancelled; those already running still finish and count."""
    # spawn, not fork: the parent may hold open connections and threads that must not be copied.
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(
        processes, mp_context=context, initializer=_init_worker, initargs=(url, settings, mutant)
    ) as pool:
        futures = [pool.submit(_run_in_worker, seed) for seed in seeds]
        stopping = False
        for future in as_completed(futures):
            if future.cancelled():
                continue
            result = future.result()  # seeds already handed to a worker still count when stopping
            summary.add(result)
            if on_result is not None:
                on_result(result)
            if not stopping and should_stop(result):
                stopping = True
                for waiting in futures:
                    waiting.cancel()


def _cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)  # worker processes, once they have exited
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
