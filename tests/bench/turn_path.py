"""The turn path over HTTP at 1, 10 and 50 concurrent threads.

A turn is what a chat backend does per exchange: post the user message and get the context back, then
post the assistant's reply, as the documented client does (the context as chat-completions messages, then
none). Both calls together are one sample. Every simulated thread first gets a
history of its own (a seeded number of earlier exchanges, loaded untimed), so the unobserved windows the
timed turns carry are spread over the whole buffering cycle instead of all starting empty; the timed
exchanges then run back to back on every thread at once.
"""

from __future__ import annotations

import asyncio
import math
import os
import random
import time
from dataclasses import dataclass
from typing import Any

from tests.bench.conversations import BenchConversation, message_body, with_exchanges
from tests.bench.harness import Bench
from tests.bench.http_driver import REPLY_CONTEXT, USER_CONTEXT, TurnPoster, turn_payload
from tests.bench.results import FigureDef, Target, median, percentile

SECTION = "turn_path"
#: Timed exchanges per thread at each concurrency level (full run, quick run).
FULL_PLAN = {1: 100, 10: 20, 50: 6}
QUICK_PLAN = {1: 25, 10: 5, 50: 2}
#: Untimed history per thread: 0..this many exchanges, posted in batches of `PRELOAD_BATCH`.
PRELOAD_MAX = 40
#: The quick run preloads less: every preloaded token is Observer work the workers finish before timing.
QUICK_PRELOAD_MAX = 8
PRELOAD_BATCH = 10
#: How long the idle API's CPU is measured (half in the quick run).
IDLE_SPAN_S = 3.0
P99_TARGET_MS = 30.0
#: Issue 18's targets at 10 threads on Postgres. The former "turn p50 ≤ 6 ms at 10 threads" is gone: a
#: closed loop of 10 clients on two shared cores queues ~10 exchanges' service time whatever the code does
#: (docs/performance.md); CPU per exchange, throughput and the tail ratio are its honest form.
API_CPU_TARGET_MS = 5.0
#: Exchanges/s at 10 threads measured before issue 18 on the 2-core bench machine; the target is 3× that.
EXCHANGES_PER_S_BEFORE = 49.0
EXCHANGES_PER_S_TARGET = 3 * EXCHANGES_PER_S_BEFORE
TAIL_RATIO_TARGET = 5.0
TARGET_LEVEL = 10
API_CPU = FigureDef("API CPU per exchange, Postgres", "ms")
EXCHANGES_PER_S = FigureDef(f"exchanges/s at {TARGET_LEVEL} threads (Postgres)", "exchanges/s")
TAIL_RATIO = FigureDef(f"p99/p50 at {TARGET_LEVEL} threads", "×")


def p50(level: int) -> FigureDef:
    return FigureDef(f"turn p50, {level} thread(s)", "ms")


def p99(level: int) -> FigureDef:
    return FigureDef(f"turn p99, {level} thread(s)", "ms")


def figures(quick: bool) -> list[FigureDef]:
    """The figures `run` reports, in order: p50 and p99 at each level of the plan, then the API's CPU per
    exchange, exchanges/s and p99/p50 at 10 threads."""
    levels = [f(level) for level in (QUICK_PLAN if quick else FULL_PLAN) for f in (p50, p99)]
    return [*levels, API_CPU, EXCHANGES_PER_S, TAIL_RATIO]


@dataclass
class Sample:
    total_ms: float
    user_ms: float
    reply_ms: float
    blocked: bool


@dataclass
class SimThread:
    thread_id: str
    resource_id: str
    conversation: BenchConversation
    preload: int


def _blocked(body: bytes) -> bool:
    return b'"blocked":true' in body


async def _preload(poster: TurnPoster, sim: SimThread) -> None:
    pairs = sim.conversation.exchanges()[: sim.preload]
    for start in range(0, len(pairs), PRELOAD_BATCH):
        batch = [message_body(m) for pair in pairs[start : start + PRELOAD_BATCH] for m in pair]
        await poster.post(sim.thread_id, turn_payload(batch, sim.resource_id))


async def _play(poster: TurnPoster, sim: SimThread, exchanges: int, out: list[Sample]) -> None:
    pairs = sim.conversation.exchanges()[sim.preload : sim.preload + exchanges]
    payloads = [
        (
            turn_payload([message_body(u)], sim.resource_id, USER_CONTEXT),
            turn_payload([message_body(r)], sim.resource_id, REPLY_CONTEXT),
        )
        for u, r in pairs
    ]
    for user_payload, reply_payload in payloads:
        first = await poster.post(sim.thread_id, user_payload)
        second = await poster.post(sim.thread_id, reply_payload)
        out.append(
            Sample(
                first.elapsed_ms + second.elapsed_ms,
                first.elapsed_ms,
                second.elapsed_ms,
                _blocked(first.body) or _blocked(second.body),
            )
        )


def _threads(level: int, exchanges: int, run_id: str, preload_max: int) -> list[SimThread]:
    rng = random.Random(level)
    sims = []
    for index in range(level):
        preload = rng.randint(0, preload_max)
        conversation = with_exchanges(10_000 + level * 100 + index, preload + exchanges)
        sims.append(
            SimThread(f"tp-{run_id}-{level}-{index}", f"tp-user-{run_id}-{index}", conversation, preload)
        )
    return sims


async def _level(bench: Bench, level: int, exchanges: int, run_id: str) -> dict[str, Any]:
    sims = _threads(level, exchanges, run_id, QUICK_PRELOAD_MAX if bench.quick else PRELOAD_MAX)
    async with TurnPoster(bench.api.base_url, bench.api_key, connections=max(64, level * 2)) as poster:
        await asyncio.gather(*(_preload(poster, sim) for sim in sims))
        await asyncio.to_thread(bench.wait_idle)
        samples: list[Sample] = []
        cpu = bench.cpu_span().start()
        started = time.perf_counter()
        await asyncio.gather(*(_play(poster, sim, exchanges, samples) for sim in sims))
        wall = time.perf_counter() - started
        cpu.stop()
    totals = [s.total_ms for s in samples]
    return {
        **cpu.summary(len(samples)),
        "level": level,
        "exchanges": len(samples),
        "p50_ms": median(totals),
        "p90_ms": percentile(totals, 90),
        "p99_ms": percentile(totals, 99),
        "max_ms": max(totals),
        "user_call_p50_ms": median([s.user_ms for s in samples]),
        "reply_call_p50_ms": median([s.reply_ms for s in samples]),
        "blocked": sum(s.blocked for s in samples),
        "exchanges_per_s": len(samples) / wall,
        "samples_ms": [round(t, 2) for t in totals],
    }


async def _warm_up(bench: Bench, run_id: str) -> None:
    """First requests load tokenizers and fill pools; they belong to no figure."""
    sim = SimThread(f"tp-{run_id}-warm", f"tp-warm-{run_id}", with_exchanges(9_999, 5), 0)
    async with TurnPoster(bench.api.base_url, bench.api_key) as poster:
        await _play(poster, sim, 5, [])


def run(bench: Bench) -> None:
    plan = QUICK_PLAN if bench.quick else FULL_PLAN
    run_id = bench.run_id
    asyncio.run(_warm_up(bench, run_id))
    idle_ms_per_s = _idle_api_cpu(bench, IDLE_SPAN_S / (2 if bench.quick else 1))
    levels = []
    for level, exchanges in plan.items():
        bench.say(f"turn path: {level} concurrent thread(s), {exchanges} timed exchanges each")
        levels.append(asyncio.run(_level(bench, level, exchanges, run_id)))
    for data in levels:
        wall_s = data["exchanges"] / data["exchanges_per_s"]
        busy = data["api_cpu_ms_per_exchange"] * data["exchanges"] - idle_ms_per_s * wall_s
        data["api_idle_cpu_ms_per_s"] = idle_ms_per_s
        data["api_cpu_ms_per_exchange_less_idle"] = max(0.0, busy) / data["exchanges"]
    bench.results.series["turn_path"] = levels
    bench.section_meta(
        SECTION,
        plan={str(k): v for k, v in plan.items()},
        preload_max=QUICK_PRELOAD_MAX if bench.quick else PRELOAD_MAX,
    )
    for data in levels:
        level = data["level"]
        at_ten = level == TARGET_LEVEL
        why = _why(bench, data, levels[0]) if at_ten else None
        bench.results.add(
            SECTION,
            p50(level),
            data["p50_ms"],
            note=f"n={data['exchanges']} exchanges (user call + reply call), "
            f"{data['exchanges_per_s']:.1f} exchanges/s"
            if level == 1
            else None,
        )
        bench.results.add(
            SECTION,
            p99(level),
            data["p99_ms"],
            target=Target.at_most(P99_TARGET_MS, " ms") if at_ten else None,
            why=why,
        )
    _targets_at_ten(bench, levels)


def _idle_api_cpu(bench: Bench, seconds: float) -> float:
    """CPU ms per second the API process spends with no request in flight (its background threads and
    event loop), once the workers are idle: what a span's CPU charges to its exchanges besides serving."""
    bench.wait_idle()
    span = bench.cpu_span().start()
    time.sleep(seconds)  # the measurement itself: nothing is awaited
    span.stop()
    return span.used["api"] * 1000 / seconds


def _targets_at_ten(bench: Bench, levels: list[dict[str, Any]]) -> None:
    """Issue 18's figures at 10 threads: API CPU per exchange, exchanges/s, p99/p50."""
    data = next(d for d in levels if d["level"] == TARGET_LEVEL)
    single = levels[0]
    why = _why(bench, data, single)
    bench.results.add(
        SECTION,
        API_CPU,
        data["api_cpu_ms_per_exchange"],
        target=Target.at_most(API_CPU_TARGET_MS, " ms"),
        why=why,
        note=f"API process CPU ÷ exchanges over the {TARGET_LEVEL}-thread span: the busy API whose "
        "throughput the exchanges/s target measures, which is also where issue 18's 17 ms before-value "
        "came from and what the capacity model multiplies. At 1 thread "
        f"{single['api_cpu_ms_per_exchange']:.1f} ms per exchange "
        f"({single['api_cpu_ms_per_exchange_less_idle']:.1f} ms without what an idle API spends in the "
        f"same time: {single['api_idle_cpu_ms_per_s']:.1f} ms/s, measured alone before the levels)",
    )
    bench.results.add(
        SECTION,
        EXCHANGES_PER_S,
        data["exchanges_per_s"],
        target=Target.at_least(EXCHANGES_PER_S_TARGET),
        why=why,
        note=f"target 3 × {EXCHANGES_PER_S_BEFORE:g} (before issue 18, this machine); "
        f"{data['exchanges']} exchanges, closed loop",
    )
    bench.results.add(
        SECTION,
        TAIL_RATIO,
        data["p99_ms"] / data["p50_ms"] if data["p50_ms"] else math.nan,
        target=Target.at_most(TAIL_RATIO_TARGET, " ×"),
        why=lambda: (
            f"p99 {data['p99_ms']:.1f} ms, p50 {data['p50_ms']:.1f} ms, max {data['max_ms']:.0f} ms; "
            f"{data['blocked']} exchanges blocked; " + why
        ),
    )


def _why(bench: Bench, data: dict[str, Any], single: dict[str, Any]) -> str:
    """The miss explained with what the profile section measured (when it ran)."""
    parts = [
        f"one call alone takes ~{single['user_call_p50_ms']:.0f} ms at p50 (1 thread); at 10 threads "
        f"{data['exchanges_per_s']:.1f} exchanges/s kept the {os.cpu_count()} CPUs "
        f"{data['machine_busy_pct']:.0f} % busy ({data['others_busy_pct']:.0f} % not this stack's), spending "
        f"per exchange {data['api_cpu_ms_per_exchange']:.0f} ms CPU in the API, "
        f"{data['postgres_cpu_ms_per_exchange']:.0f} ms in Postgres, "
        f"{data['workers_cpu_ms_per_exchange']:.0f} ms in workers, "
        f"{data['client_cpu_ms_per_exchange']:.0f} ms in the load generator"
    ]
    profile = bench.results.sections.get("turn_profile", {})
    if "sql_statements_per_turn" in profile:
        parts.append(
            f"each ingest_turn makes {profile['sql_statements_per_turn']:.0f} SQL statements, "
            f"{profile['pool_checkouts_per_turn']:.0f} pool checkouts and "
            f"{profile['redis_commands_per_turn']:.0f} Redis commands"
        )
    api = profile.get("api_profile")
    if isinstance(api, dict) and api.get("all_inclusive_pct"):
        shares = {name.split(" (")[0]: pct for name, pct in api["all_inclusive_pct"]}
        named = [f"{label} {shares[frame]:.0f} %" for label, frame in _PHASES if frame in shares]
        parts.append("API time holding the GIL: " + ", ".join(named))
    return "; ".join(parts)


#: Phases of a call in the API process, named after the frame that spans each (py-spy `--gil` profile).
_PHASES = (
    ("ingest_turn", "MemoryEngine.ingest_turn"),
    ("of which store+read", "store_and_read"),
    ("of which context read", "turn_result"),
    ("response body", "turn_body"),
    ("claim/auth", "_claim"),
    ("request parsing and validation", "solve_dependencies"),
    ("event loop (HTTP, encoding)", "BaseEventLoop._run_once"),
)
