"""What one turn costs and where: round trips and a profile of `MemoryEngine.ingest_turn`.

The HTTP figures say how long a turn takes; this says why. It drives the same engine the API builds in
celery mode (Redis coordination, the Celery executor, Postgres), in this process so the counters can see
inside: SQL statements by kind, pool checkouts (each a rollback on return, and a pre-ping on an engine
that pre-pings), Redis commands, and the functions that dominate under cProfile. The workers of the main
stack run the background work the turns start, as they would behind the API.
"""

from __future__ import annotations

import asyncio
import cProfile
import io
import pstats
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.bench.conversations import message_body, with_exchanges
from tests.bench.harness import Bench
from tests.bench.http_driver import REPLY_CONTEXT, USER_CONTEXT, TurnPoster, turn_payload
from tests.bench.results import FigureDef, median
from tests.bench.sqlcount import counting
from tests.bench.stack import REPO

SECTION = "turn_profile"
FULL_TURNS = 200
QUICK_TURNS = 50
#: Exchanges played over HTTP while py-spy samples the API process.
FULL_HTTP_EXCHANGES = 60
QUICK_HTTP_EXCHANGES = 15
INGEST_P50 = FigureDef("ingest_turn p50 (in-process, Postgres+Redis)", "ms")
SQL_PER_TURN = FigureDef("SQL statements per turn", "")
REDIS_PER_TURN = FigureDef("Redis commands per turn", "")


def figures(quick: bool) -> list[FigureDef]:
    """The figures `run` reports, in order."""
    return [INGEST_P50, SQL_PER_TURN, REDIS_PER_TURN]


def _count_redis(client: Any, counter: Counter[str]) -> Callable[[], None]:
    original = client.execute_command

    def counted(*args: Any, **kwargs: Any) -> Any:
        counter[str(args[0]) if args else "?"] += 1
        return original(*args, **kwargs)

    client.execute_command = counted

    def restore() -> None:
        client.execute_command = original

    return restore


def run(bench: Bench) -> None:
    profile_engine(bench)
    profile_api(bench)


def profile_engine(bench: Bench) -> None:
    turns = QUICK_TURNS if bench.quick else FULL_TURNS
    bench.say(f"turn profile: {turns} in-process turns of one thread with Redis coordination and Celery")
    producer = bench.cluster.producer(blocking_deadline_s=30.0)
    engine = producer.engine
    redis_calls: Counter[str] = Counter()
    restore = _count_redis(producer.coordination.client, redis_calls)

    messages = with_exchanges(4242, turns // 2 + 1).messages[:turns]
    thread_id = f"profile-{bench.run_id}"
    # Warm up: tokenizer, pools, prepared statement caches.
    for message in with_exchanges(4243, 2).messages[:4]:
        engine.ingest_turn(f"{thread_id}-warm", f"profile-user-{bench.run_id}", [message])
    redis_calls.clear()

    profiler = cProfile.Profile()
    latencies = []
    with counting(engine.db) as sql:
        for message in messages:
            started = time.perf_counter()
            profiler.enable()
            engine.ingest_turn(thread_id, f"profile-user-{bench.run_id}", [message])
            profiler.disable()
            latencies.append((time.perf_counter() - started) * 1000)
    restore()
    engine.db.dispose()

    n = len(messages)
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("cumulative").print_stats(r"om_core|om_workers", 35)
    stats.sort_stats("tottime").print_stats(20)
    profile_path = bench.workdir / "turn-profile.txt"
    profile_path.write_text(text.getvalue())
    per_turn = sql.per(n)
    data: dict[str, Any] = {
        "turns": n,
        "ingest_p50_ms": median(latencies),
        "sql_statements_per_turn": per_turn["sql_statements"],
        "sql_ms_per_turn": per_turn["sql_ms"],
        "pool_checkouts_per_turn": per_turn["pool_checkouts"],
        "sql_by_kind_per_turn": per_turn["sql_by_kind"],
        "sql_ms_by_kind_per_turn": per_turn["sql_ms_by_kind"],
        "redis_commands_per_turn": sum(redis_calls.values()) / n,
        "redis_by_command_per_turn": {k: round(v / n, 2) for k, v in redis_calls.most_common()},
        "top_functions": _top_functions(stats),
        "profile_file": str(profile_path),
    }
    bench.results.sections.setdefault(SECTION, {}).update(data)
    bench.section_meta(SECTION)
    bench.results.add(
        SECTION,
        INGEST_P50,
        data["ingest_p50_ms"],
        note=f"{data['sql_statements_per_turn']:.1f} SQL statements, "
        f"{data['pool_checkouts_per_turn']:.1f} pool checkouts, "
        f"{data['redis_commands_per_turn']:.1f} Redis commands per turn; profile in {profile_path.name}",
    )
    bench.results.add(SECTION, SQL_PER_TURN, data["sql_statements_per_turn"])
    bench.results.add(SECTION, REDIS_PER_TURN, data["redis_commands_per_turn"])


def _top_functions(stats: pstats.Stats) -> list[dict[str, Any]]:
    """The om functions with the largest cumulative time per call of ingest_turn."""
    entries = []
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    for (filename, line, name), (_cc, calls, tottime, cumtime, _callers) in raw.items():
        if "/om_core/" in filename or "/om_workers/" in filename:
            short = filename.removeprefix(str(REPO) + "/")
            entries.append(
                {"function": f"{short}:{line}({name})", "calls": calls, "cum_s": cumtime, "self_s": tottime}
            )
    entries.sort(key=lambda e: -e["cum_s"])
    return entries[:25]


# ------------------------------------------------------------------------------ the API process, sampled


def py_spy() -> str | None:
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


def _frame_name(frame: str) -> str:
    """`post_turn (om_api/routes/threads.py:170)` -> `post_turn (om_api/routes/threads.py)`."""
    name = re.sub(r":\d+\)$", ")", frame.strip())
    return name.replace(str(REPO) + "/", "")


def summarise_folded(path: Path, root: str | None = "post_turn", top: int = 60) -> dict[str, Any]:
    """Inclusive and self shares of the frames under `root` (every sample when None) in py-spy's folded
    (raw) output."""
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not count_text.isdigit():
            continue
        frames = [_frame_name(f) for f in stack.split(";")]
        start = 0
        if root is not None:
            roots = [i for i, f in enumerate(frames) if f.startswith(root + " ")]
            if not roots:
                continue
            start = roots[0]
        count = int(count_text)
        total += count
        below = frames[start:]
        for name in set(below):
            inclusive[name] += count
        own[below[-1]] += count

    def share(counter: Counter[str]) -> list[tuple[str, float]]:
        return [(name, round(100 * n / total, 1)) for name, n in counter.most_common(top)] if total else []

    return {"samples": total, "inclusive_pct": share(inclusive), "self_pct": share(own)}


async def _play_http(bench: Bench, exchanges: int, seed: int, thread_id: str) -> list[float]:
    conversation = with_exchanges(seed, exchanges)
    resource = f"spy-user-{bench.run_id}"
    out = []
    async with TurnPoster(bench.api.base_url, bench.api_key) as poster:
        for user, reply in conversation.exchanges()[:exchanges]:
            asked = turn_payload([message_body(user)], resource, USER_CONTEXT)
            answered = turn_payload([message_body(reply)], resource, REPLY_CONTEXT)
            first = await poster.post(thread_id, asked)
            second = await poster.post(thread_id, answered)
            out.append(first.elapsed_ms + second.elapsed_ms)
    return out


def profile_api(bench: Bench) -> None:
    """Sample the API process's GIL holder (`py-spy --gil`: Python work only, socket waits left out) while
    one thread plays turns over HTTP: where the API's own CPU goes, which is what limits one API process
    under concurrency."""
    spy = py_spy()
    if spy is None:
        bench.results.sections.setdefault(SECTION, {})["api_profile"] = "py-spy not installed; skipped"
        return
    exchanges = QUICK_HTTP_EXCHANGES if bench.quick else FULL_HTTP_EXCHANGES
    bench.say(f"turn profile: sampling the API process with py-spy over {exchanges} HTTP exchanges")
    # The first turns of a fresh process load the tokenizer and fill pools: not the turn path.
    asyncio.run(_play_http(bench, 12, 4245, f"spy-warm-{bench.run_id}"))
    bench.wait_idle()
    folded = bench.workdir / "api-profile.folded"
    sampler = subprocess.Popen(
        [
            spy,
            "record",
            "--pid",
            str(bench.api.process.pid),
            "--format",
            "raw",
            "--output",
            str(folded),
            "--rate",
            "500",
            "--gil",
            "--nonblocking",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(1.0)  # py-spy attaches before the first request
        latencies = asyncio.run(_play_http(bench, exchanges, 4244, f"spy-{bench.run_id}"))
    finally:
        sampler.send_signal(signal.SIGINT)
        try:
            sampler.wait(timeout=30)
        except subprocess.TimeoutExpired:
            sampler.kill()
            sampler.wait()
    summary: dict[str, Any] = summarise_folded(folded) if folded.exists() else {"samples": 0}
    if folded.exists():
        # Everything that held the GIL, route or not: request parsing, response validation and encoding
        # run outside `post_turn`.
        every = summarise_folded(folded, root=None)
        summary["all_samples"] = every["samples"]
        summary["all_inclusive_pct"] = every["inclusive_pct"]
        summary["post_turn_share_pct"] = (
            round(100 * summary["samples"] / every["samples"], 1) if every["samples"] else 0
        )
    summary["exchanges"] = exchanges
    summary["turn_p50_ms"] = median(latencies)
    summary["folded_file"] = str(folded)
    bench.results.sections.setdefault(SECTION, {})["api_profile"] = summary
