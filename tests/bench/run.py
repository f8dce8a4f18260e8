"""`python -m tests.bench.run [--quick] [--out bench-results.json] [--only SECTION,...]`: the benchmark suite.

Starts a throwaway Postgres and Redis (or uses the ones `scripts/testenv.py run -- ...` exported), the
API process (celery executor, API keys) and two worker processes (threads pool: `om.observe,om.reflect`
and `om.buffer`), runs the sections, then writes the JSON results, the PNG plots beside them and a
Markdown table, and prints every figure beside its target with the command that reproduces it, followed by
the values recorded for that figure in earlier runs (`tests/bench/history.json`, see `history.py`).

Sections, in order: turn_profile, turn_path, peer (om on its embedded stack beside the original, same
conversation, same run), long_thread (context bound, flatness, local-model compression and retention),
blocking, memory, throughput (its own workers), tokens, search (latency over a large resource on Postgres
and SQLite, indexing throughput, index lag after a burst), memory_eval (answers of a generated multi-session
conversation in the context, beside truncation to the same tokens, and in the search's top 10:
`tests/bench/memory_eval/`), tracing (the turn path's CPU with tracing off
and on, in-process). `--quick` runs each on a
smaller workload (each figure says what it shrank) for CI; it still produces every figure.

Timings are printed, never asserted; the exit status is non-zero only when a section failed to run.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from tests.bench import (
    blocking,
    history,
    long_thread,
    memory,
    peer,
    plots,
    search,
    throughput,
    token_counting,
    tracing_cost,
    turn_path,
    turn_profile,
)
from tests.bench.harness import MAIN_WORKERS, Bench
from tests.bench.memory_eval import section as memory_eval
from tests.bench.results import (
    FigureDef,
    Results,
    invoked_command,
    machine_meta,
    markdown_table,
    print_table,
)
from tests.bench.stack import FAKE_MODEL_MODULE, REPO, api_server, new_key, services, worker_cluster
from tests.support.progress import Progress, Ticker, clock_text

SECTIONS: dict[str, Callable[[Bench], None]] = {
    "turn_profile": turn_profile.run,
    "turn_path": turn_path.run,
    "peer": peer.run,
    "long_thread": long_thread.run,
    "blocking": blocking.run,
    "memory": memory.run,
    "throughput": throughput.run,
    "tokens": token_counting.run,
    "search": search.run,
    "memory_eval": memory_eval.run,
    # Last: it installs the tracing SDK in this process, which cannot be taken back.
    "tracing": tracing_cost.run,
}
#: The figures each section reports, by its plan for a quick (True) or full run: the bench's one list of
#: figure names and units (the history file and the smoke test are held to it).
FIGURES: dict[str, Callable[[bool], list[FigureDef]]] = {
    "turn_profile": turn_profile.figures,
    "turn_path": turn_path.figures,
    "peer": peer.figures,
    "long_thread": long_thread.figures,
    "blocking": blocking.figures,
    "memory": memory.figures,
    "throughput": throughput.figures,
    "tokens": token_counting.figures,
    "search": search.figures,
    "memory_eval": memory_eval.figures,
    "tracing": tracing_cost.figures,
}
MAIN_REDIS_DB = 8
#: The main stack's memory model: the offline local model (sections that want latency override per thread).
MAIN_ENV = {"OM_MODEL": "om-local/extractive"}


def figure_defs(quick: bool, sections: Sequence[str] = tuple(SECTIONS)) -> list[FigureDef]:
    """Every figure a run of these sections reports, in the order it reports them."""
    return [d for name in SECTIONS if name in sections for d in FIGURES[name](quick)]


def attach_history(results: Results, path: Path = history.HISTORY_FILE) -> None:
    """The recorded values beside this run's figures; a broken history file is reported, never fatal."""
    source = str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)
    try:
        entries = history.load(path)
    except (OSError, ValueError) as exc:
        print(f"warning: no recorded values shown: {source}: {exc}", flush=True)
        results.history["error"] = str(exc)
        return
    defs = {mode: figure_defs(mode == "quick") for mode in history.MODES}
    found = history.problems(entries, defs)
    for text in found:
        print(f"warning: {source}: {text}", flush=True)
    history.attach(results, history.well_formed(entries), source)
    if found:
        results.history["problems"] = found


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="reduced workloads (CI smoke run, < 2 min)")
    parser.add_argument("--out", type=Path, default=Path("bench-results.json"), help="results JSON path")
    parser.add_argument("--only", default="", help=f"comma-separated sections: {', '.join(SECTIONS)}")
    parser.add_argument("--workdir", type=Path, default=None, help="logs and scratch files (default: temp)")
    args = parser.parse_args(argv)
    chosen = [s.strip() for s in args.only.split(",") if s.strip()] or list(SECTIONS)
    unknown = sorted(set(chosen) - set(SECTIONS))
    if unknown:
        parser.error(f"unknown section(s) {unknown}; choose from {', '.join(SECTIONS)}")
    args.sections = [s for s in SECTIONS if s in chosen]
    return args


def _preload_litellm(sections: Sequence[str]) -> threading.Thread | None:
    """Import the latency model (and so litellm, ~8 s of CPU) here while the stack starts, when a section
    will call it in this process; the stack's start-up leaves a core idle for much of that time."""
    if "throughput" not in sections:
        return None
    thread = threading.Thread(
        target=importlib.import_module, args=(FAKE_MODEL_MODULE,), name="preload-litellm", daemon=True
    )
    thread.start()
    return thread


#: Quick run only: a later section's start-up that runs during an earlier section which mostly waits.
#: The throughput section's workers spend ~8 s of CPU each importing litellm; the blocking section mostly
#: waits on its slow model, so the imports fit there. The full run keeps every section to itself.
EARLY_STARTS: dict[str, tuple[str, Callable[[Bench], Any]]] = {
    "blocking": (throughput.SECTION, throughput.spawn_fleet),
}


#: Seconds between two progress lines (stderr) of the whole run.
PROGRESS_EVERY_S = 30.0


def section_weights(previous: Path, mode: str, sections: Sequence[str]) -> tuple[dict[str, float], bool]:
    """How long each section takes, for the ETA: the seconds of the last run of the same mode when its
    results file (`--out`) has them all (True), else one unit per section (False)."""
    try:
        data = json.loads(previous.read_text())
        if data.get("mode") == mode:
            timed = {name: float(data["sections"][name]["seconds"]) for name in sections}
            if all(seconds > 0 for seconds in timed.values()):
                return timed, True
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return {name: 1.0 for name in sections}, False


class SectionProgress:
    """Sections done, elapsed and ETA every PROGRESS_EVERY_S seconds, also in the middle of a long
    section: with the last run's section times, a running section counts as done up to its time then."""

    def __init__(self, sections: Sequence[str], weights: dict[str, float], timed: bool) -> None:
        self.sections = list(sections)
        self.weights = weights
        self.timed = timed
        self.meter = Progress("bench", sum(weights.values()), show_counts=False, every_s=PROGRESS_EVERY_S)
        self.finished: list[str] = []
        self.running: tuple[str, float] | None = None

    def sample(self) -> tuple[float, str]:
        done = sum(self.weights[name] for name in self.finished)
        note = f"{len(self.finished)}/{len(self.sections)} sections"
        if self.running is not None:
            name, since = self.running
            if self.timed:
                done += min(time.monotonic() - since, 0.95 * self.weights[name])
            note += f", running {name} ({clock_text(time.monotonic() - since)})"
        if not self.timed:
            note += "; ETA by section count (no earlier run's times)"
        return done, note

    def start(self, name: str) -> None:
        self.running = (name, time.monotonic())
        self.meter.set(*self.sample())

    def end(self, name: str) -> None:
        self.running = None
        self.finished.append(name)
        self.meter.set(*self.sample())


def run_sections(
    bench: Bench, sections: Sequence[str], weights: tuple[dict[str, float], bool] | None = None
) -> list[str]:
    """Run each section; a failing one is recorded and the rest still run. Returns the failed ones."""
    failed = []
    progress = SectionProgress(sections, *(weights or ({name: 1.0 for name in sections}, False)))
    with Ticker(progress.meter, sample=progress.sample):
        for name in sections:
            started = time.monotonic()
            progress.start(name)
            later, start = EARLY_STARTS.get(name, ("", None))
            if bench.quick and start is not None and later in sections:
                bench.early[later] = start(bench)
            try:
                SECTIONS[name](bench)
            except Exception as exc:
                failed.append(name)
                bench.say(f"section {name} FAILED: {type(exc).__name__}: {exc}")
                bench.results.sections.setdefault(name, {})["error"] = traceback.format_exc()
            finally:
                bench.results.sections.setdefault(name, {})["seconds"] = round(time.monotonic() - started, 1)
                progress.end(name)
    progress.meter.finish(note=f"{len(sections) - len(failed)}/{len(sections)} sections ran")
    return failed


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = _parse(argv)
    mode = "quick" if args.quick else "full"
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix=f"om-bench-{mode}-"))
    workdir.mkdir(parents=True, exist_ok=True)
    results = Results(mode=mode, command=invoked_command(argv), meta=machine_meta())
    results.meta["workdir"] = str(workdir)
    started = time.monotonic()
    print(f"om bench ({mode}): sections {', '.join(args.sections)}; logs in {workdir}", flush=True)
    if os.getloadavg()[0] > (os.cpu_count() or 1):
        print(
            f"warning: load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs before starting: "
            "other work on this machine will inflate every timing",
            flush=True,
        )
    failed: list[str] = []
    # Read before this run overwrites the file: the last run's section times make the ETA.
    weights = section_weights(args.out, mode, args.sections)
    preload = _preload_litellm(args.sections)
    with (
        services() as svc,
        worker_cluster(svc, workdir / "workers", redis_db=MAIN_REDIS_DB, env=MAIN_ENV) as cluster,
    ):
        # The API starts while the workers import: start-up is CPU-bound imports, one core each.
        spawned = cluster.spawn_workers(MAIN_WORKERS)
        with api_server(svc, cluster.redis_url, workdir / "api", env=MAIN_ENV) as api:
            cluster.wait_started(spawned)
            if preload is not None:
                preload.join()  # no section may share the CPU with a background import
            results.sections["memory"] = {"api_at_start": vars(memory.resident(api.process.pid))}
            tenant = f"bench-{int(time.time())}"
            bench = Bench(
                quick=args.quick,
                services=svc,
                cluster=cluster,
                api=api,
                api_key=new_key(svc, tenant),
                tenant=tenant,
                workdir=workdir,
                results=results,
            )
            with bench.resources:
                failed = run_sections(bench, args.sections, weights)
    results.meta["seconds"] = round(time.monotonic() - started, 1)
    results.meta["loadavg_at_end"] = list(os.getloadavg())
    results.meta["failed_sections"] = failed
    attach_history(results)
    results.write(args.out)
    drawn = plots.draw(results.series, args.out.parent)
    args.out.with_suffix(".md").write_text(markdown_table(results) + "\n")
    print()
    print_table(results)
    print()
    print(
        f"wrote {args.out}, {args.out.with_suffix('.md')}, {', '.join(str(p) for p in drawn) or 'no plots'}"
    )
    print(f"total {results.meta['seconds']:.0f} s; load average now {os.getloadavg()[0]:.1f}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
