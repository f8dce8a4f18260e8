"""Command line for the interleaving fuzz: `python -m tests.fuzz.run --seeds N --first K [--processes [P]]`.

Needs a Postgres URL: `--database-url`, or `OM_TEST_DATABASE_URL` as set by `scripts/testenv.py run --`.
Prints seeds run, violations found and the time taken; exits 1 when any seed failed, listing each failing
seed with its violations so it can be re-run alone (`--seeds 1 --first <seed>`).
"""

from __future__ import annotations

import argparse
import os
import sys

from tests.fuzz.mutants import MUTANTS
from tests.fuzz.runner import Summary, run_seeds
from tests.fuzz.scenario import ScenarioSettings, SeedResult
from tests.support.progress import Progress

#: Seconds between two progress lines.
PROGRESS_EVERY_S = 5.0


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz.run", description=__doc__)
    parser.add_argument("--seeds", type=int, default=500, help="how many seeds to run (default 500)")
    parser.add_argument("--first", type=int, default=0, help="the first seed (default 0)")
    parser.add_argument(
        "--processes",
        type=int,
        nargs="?",
        const=(os.cpu_count() or 1) + 1,
        default=1,
        help=(
            "run seeds in this many worker processes (flag alone: CPUs + 1, as seeds also wait on the "
            "database; default: this process)"
        ),
    )
    parser.add_argument(
        "--operations", type=int, default=ScenarioSettings.operations, help="operations per seed"
    )
    parser.add_argument(
        "--workers", type=int, default=ScenarioSettings.workers, help="Python threads per seed"
    )
    parser.add_argument(
        "--mutant",
        choices=sorted(MUTANTS),
        help="plant a known loss path of the original (§12.2) to measure how often the fuzz catches it",
    )
    parser.add_argument("--database-url", default=os.environ.get("OM_TEST_DATABASE_URL"))
    parser.add_argument("--verbose", "-v", action="store_true", help="print one line per seed")
    return parser.parse_args(argv)


def render(summary: Summary) -> str:
    lines = [
        f"seeds run: {summary.seeds}",
        f"failing seeds: {len(summary.failed)}",
        f"violations found: {summary.violations}",
        f"time: {summary.seconds:.1f} s wall, {summary.cpu_seconds:.1f} s CPU in the test processes "
        f"(slowest seed {summary.slowest:.2f} s)",
        "exercised: " + ", ".join(f"{k}={v}" for k, v in sorted(summary.stats.items())),
        "accepted duplicates (never shown twice): "
        + ", ".join(f"{k}={v}" for k, v in sorted(summary.duplicates.items())),
    ]
    for result in summary.failed:
        lines.append(f"seed {result.seed} (thread {result.thread_id}):")
        lines.extend(f"    {violation}" for violation in result.report.violations)
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if not args.database_url:
        print(
            "no database: pass --database-url or run under `python scripts/testenv.py run -- ...`",
            file=sys.stderr,
        )
        return 2
    settings = ScenarioSettings(
        operations=args.operations,
        workers=args.workers,
    )

    # done/total, elapsed and ETA on stderr every few seconds; the summary below goes to stdout.
    meter = Progress("fuzz", args.seeds, unit="seeds", every_s=PROGRESS_EVERY_S)
    failing = 0

    def progress(result: SeedResult) -> None:
        nonlocal failing
        failing += not result.ok
        if args.verbose or not result.ok:
            state = "ok" if result.ok else f"FAILED ({len(result.report.violations)} violations)"
            print(f"seed {result.seed}: {state} in {result.seconds:.2f} s", flush=True)
        meter.advance(note=f"{failing} failing")

    summary = run_seeds(
        args.database_url,
        range(args.first, args.first + args.seeds),
        processes=args.processes,
        settings=settings,
        on_result=progress,
        mutant=args.mutant,
    )
    meter.finish()
    print(render(summary))
    return 1 if summary.failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
