"""`python -m tests.bench.capacity [bench-results.json]`: the capacity model, from a bench run's costs.

The bench measures what one exchange (user call + reply call) and one buffered observation cost on this
machine: API CPU, Postgres CPU and statements, Redis commands, worker CPU, and how many Observer/Reflector
cycles an exchange causes. This prints what 1k, 10k and 100k active chats need at a stated turn rate: API
replicas (one process per core: the API runs under one GIL per process), worker processes for the
buffering queue and for observe/reflect, Postgres statements/s, write statements/s and CPU, Redis
operations/s, and which shared component saturates first (API and workers scale out; one Postgres
primary and one Redis do not). Every input says where it came from: a figure of the results file, a
section's measured detail, or an assumption (`Assumptions`, printed with the numbers).

`docs/architecture/capacity.md` holds the model, its assumptions and the plan past one node; the figures
are this script's output, never copied there. `tests/bench/test_capacity.py` checks the arithmetic on a
small fixture.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

CHATS = (1_000, 10_000, 100_000)


@dataclass(frozen=True)
class Assumptions:
    """What the model assumes rather than measures; printed beside every result."""

    #: One exchange per active chat every this many seconds (a person reading and typing).
    seconds_per_exchange: float = 30.0
    #: Plan every core to this share busy, leaving room for bursts and failover.
    utilisation: float = 0.6
    #: A real Observer/Reflector call's latency (the bench's mock model answers at once).
    model_latency_s: float = 3.0
    #: Concurrent model calls per worker process (threads pool; the bench's main workers run 8).
    worker_threads: int = 8
    #: Share of model cycles that are reflections or synchronous observations (om.observe, om.reflect);
    #: the rest are buffered observations (om.buffer). Not split by the bench: its cycle count has both.
    sync_share: float = 0.1
    #: Redis commands per model cycle (Celery publish, fetch, ack, result; om's lock and counters): not
    #: measured by the bench.
    redis_commands_per_cycle: float = 12.0
    #: Cores of the one Postgres primary every write goes to.
    postgres_primary_cores: int = 16
    #: Commands/s one Redis instance serves (one thread; small commands on a modern core).
    redis_ops_per_s: float = 100_000.0


@dataclass(frozen=True)
class Costs:
    """Measured per-operation costs; `sources` says where each came from."""

    api_cpu_ms_per_exchange: float
    postgres_cpu_ms_per_exchange: float
    sql_statements_per_exchange: float
    sql_writes_per_exchange: float
    redis_commands_per_exchange: float
    cycles_per_exchange: float
    worker_cpu_ms_per_cycle: float
    postgres_cpu_ms_per_cycle: float
    sql_statements_per_cycle: float
    sql_writes_per_cycle: float
    #: Search indexing of the exchange's two messages: one `om.index` process's wall time per message
    #: (offline embedder, Postgres with pgvector), an upper bound of its CPU.
    index_ms_per_exchange: float
    sources: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Need:
    chats: int
    exchanges_per_s: float
    cycles_per_s: float
    api_cores: float
    api_replicas: int
    worker_cores: float
    model_calls_in_flight: float
    buffer_workers: int
    sync_workers: int
    index_cores: float
    index_workers: int
    sql_statements_per_s: float
    sql_writes_per_s: float
    postgres_cores: float
    postgres_share: float
    redis_ops_per_s: float
    redis_share: float
    saturates_first: str


def _replicas(load: float, per_unit: float) -> int:
    """Units of `per_unit` capacity each that carry `load` (at least one)."""
    return max(1, math.ceil(load / per_unit - 1e-9))


def need(costs: Costs, chats: int, a: Assumptions) -> Need:
    rate = chats / a.seconds_per_exchange
    cycles = rate * costs.cycles_per_exchange
    api_cores = rate * costs.api_cpu_ms_per_exchange / 1000
    worker_cores = cycles * costs.worker_cpu_ms_per_cycle / 1000
    in_flight = cycles * a.model_latency_s

    def workers(share: float) -> int:
        return max(
            _replicas(worker_cores * share, a.utilisation), _replicas(in_flight * share, a.worker_threads)
        )

    postgres_cores = (
        rate * costs.postgres_cpu_ms_per_exchange / 1000 + cycles * costs.postgres_cpu_ms_per_cycle / 1000
    )
    redis_ops = rate * costs.redis_commands_per_exchange + cycles * a.redis_commands_per_cycle
    postgres_share = postgres_cores / (a.postgres_primary_cores * a.utilisation)
    redis_share = redis_ops / (a.redis_ops_per_s * a.utilisation)
    return Need(
        chats=chats,
        exchanges_per_s=rate,
        cycles_per_s=cycles,
        api_cores=api_cores,
        api_replicas=_replicas(api_cores, a.utilisation),
        worker_cores=worker_cores,
        model_calls_in_flight=in_flight,
        buffer_workers=workers(1 - a.sync_share),
        sync_workers=workers(a.sync_share),
        index_cores=rate * costs.index_ms_per_exchange / 1000,
        index_workers=_replicas(rate * costs.index_ms_per_exchange / 1000, a.utilisation),
        sql_statements_per_s=rate * costs.sql_statements_per_exchange
        + cycles * costs.sql_statements_per_cycle,
        sql_writes_per_s=rate * costs.sql_writes_per_exchange + cycles * costs.sql_writes_per_cycle,
        postgres_cores=postgres_cores,
        postgres_share=postgres_share,
        redis_ops_per_s=redis_ops,
        redis_share=redis_share,
        saturates_first="Postgres primary CPU" if postgres_share >= redis_share else "Redis",
    )


def chats_at_limit(costs: Costs, a: Assumptions) -> dict[str, float]:
    """Active chats at which each shared component reaches its planned utilisation."""
    one = need(costs, 1, a)
    return {
        "Postgres primary CPU": 1 / one.postgres_share if one.postgres_share else math.inf,
        "Redis": 1 / one.redis_share if one.redis_share else math.inf,
    }


# ------------------------------------------------------------------------------- reading a results file


def _figure(results: Mapping[str, Any], prefix: str) -> float | None:
    for figure in results.get("figures", []):
        value = figure.get("value")
        if figure.get("name", "").startswith(prefix) and isinstance(value, int | float):
            return float(value)
    return None


def _writes(by_kind: Mapping[str, float]) -> float:
    """Statements that are not plain reads (every kind whose verb is not SELECT): an upper bound."""
    return sum(v for k, v in by_kind.items() if not k.upper().startswith("SELECT"))


def _level(series: Sequence[Mapping[str, Any]], key: str, value: int) -> Mapping[str, Any] | None:
    return next((row for row in series if row.get(key) == value), None)


def costs_from_results(results: Mapping[str, Any]) -> Costs:
    """The per-operation costs in a bench results file (`python -m tests.bench.run`'s JSON)."""
    sources: dict[str, str] = {}
    series = results.get("series", {})
    sections = results.get("sections", {})

    def pick(name: str, *candidates: tuple[str, float | None]) -> float:
        for source, value in candidates:
            if value is not None and math.isfinite(value):
                sources[name] = source
                return value
        raise ValueError(
            f"the results file has no measure of {name}: run `make bench` (turn_path, "
            "turn_profile, throughput and peer sections)"
        )

    ten = _level(series.get("turn_path", []), "level", 10) or {}
    profile = sections.get("turn_profile", {})
    per_call = profile.get("sql_statements_per_turn")
    by_kind = profile.get("sql_by_kind_per_turn") or {}
    redis_per_call = profile.get("redis_commands_per_turn")
    observation = (sections.get("throughput", {}) or {}).get("one_observation") or {}
    throughput = series.get("throughput", [])
    first = throughput[0] if throughput else {}
    peer_single = ((series.get("peer") or {}).get("om") or {}).get("single") or {}

    api = pick(
        "api_cpu_ms_per_exchange",
        (
            "figure `API CPU per exchange, Postgres` (turn_path, 10 threads)",
            _figure(results, "API CPU per exchange, Postgres"),
        ),
        ("turn_path series, 10 threads", ten.get("api_cpu_ms_per_exchange")),
    )
    postgres = pick(
        "postgres_cpu_ms_per_exchange",
        ("turn_path series, 10 threads", ten.get("postgres_cpu_ms_per_exchange")),
    )
    statements = pick(
        "sql_statements_per_exchange",
        (
            "2 × figure `SQL statements per turn` (turn_profile)",
            None if per_call is None else 2 * float(per_call),
        ),
    )
    writes = pick(
        "sql_writes_per_exchange",
        (
            "2 × turn_profile statements per turn whose verb is not SELECT",
            2 * _writes(by_kind) if by_kind else None,
        ),
    )
    redis = pick(
        "redis_commands_per_exchange",
        (
            "2 × figure `Redis commands per turn` (turn_profile)",
            None if redis_per_call is None else 2 * float(redis_per_call),
        ),
    )
    cycles = pick(
        "cycles_per_exchange",
        (
            "peer section: om's model cycles ÷ exchanges, one thread over the original's conversation",
            peer_single.get("model_cycles_per_exchange"),
        ),
    )
    worker = pick(
        "worker_cpu_ms_per_cycle",
        (
            "throughput series, concurrency 1 (a Celery worker process, model client included)",
            first.get("worker_cpu_ms_per_observation"),
        ),
        (
            "figure `worker CPU per buffered observation` (in process, model excluded)",
            _figure(results, "worker CPU per buffered observation"),
        ),
    )
    postgres_cycle = pick(
        "postgres_cpu_ms_per_cycle",
        ("throughput series, concurrency 1", first.get("postgres_cpu_ms_per_observation")),
    )
    cycle_statements = pick(
        "sql_statements_per_cycle",
        ("throughput section: one buffered observation in process", observation.get("sql_statements")),
    )
    cycle_writes = pick(
        "sql_writes_per_cycle",
        (
            "throughput section: its statements whose verb is not SELECT",
            _writes(observation["sql_by_kind"]) if "sql_by_kind" in observation else None,
        ),
    )
    indexed = _figure(results, "messages indexed and embedded per second")
    index = pick(
        "index_ms_per_exchange",
        (
            "2 messages ÷ figure `messages indexed and embedded per second, one process` (search)",
            2000 / indexed if indexed else None,
        ),
    )
    return Costs(
        api_cpu_ms_per_exchange=api,
        postgres_cpu_ms_per_exchange=postgres,
        sql_statements_per_exchange=statements,
        sql_writes_per_exchange=writes,
        redis_commands_per_exchange=redis,
        cycles_per_exchange=cycles,
        worker_cpu_ms_per_cycle=worker,
        postgres_cpu_ms_per_cycle=postgres_cycle,
        sql_statements_per_cycle=cycle_statements,
        sql_writes_per_cycle=cycle_writes,
        index_ms_per_exchange=index,
        sources=sources,
    )


# ------------------------------------------------------------------------------- printing


def _n(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def report(costs: Costs, a: Assumptions, chats: Sequence[int] = CHATS) -> list[str]:
    lines = [
        "Measured costs (per exchange = user call + reply call; per cycle = one Observer/Reflector call):"
    ]
    for key, value in asdict(costs).items():
        if key != "sources":
            lines.append(f"  {key:<30} {_n(value):>8}   {costs.sources.get(key, '')}")
    lines.append("Assumptions:")
    lines += [f"  {key:<30} {value:>8}" for key, value in asdict(a).items()]
    needs = [need(costs, n, a) for n in chats]
    rows: list[tuple[str, Callable[[Need], str]]] = [
        ("active chats", lambda x: f"{x.chats:,}"),
        ("exchanges/s", lambda x: _n(x.exchanges_per_s)),
        ("model cycles/s", lambda x: _n(x.cycles_per_s)),
        ("API cores (busy)", lambda x: _n(x.api_cores)),
        ("API replicas", lambda x: str(x.api_replicas)),
        ("worker cores (busy)", lambda x: _n(x.worker_cores)),
        ("model calls in flight", lambda x: _n(x.model_calls_in_flight)),
        ("om.buffer processes", lambda x: str(x.buffer_workers)),
        ("om.observe+reflect procs", lambda x: str(x.sync_workers)),
        ("om.index processes", lambda x: str(x.index_workers)),
        ("SQL statements/s", lambda x: _n(x.sql_statements_per_s)),
        ("SQL writes/s", lambda x: _n(x.sql_writes_per_s)),
        ("Postgres cores (busy)", lambda x: _n(x.postgres_cores)),
        ("Postgres primary share", lambda x: f"{100 * x.postgres_share:.0f} %"),
        ("Redis ops/s", lambda x: _n(x.redis_ops_per_s)),
        ("Redis share", lambda x: f"{100 * x.redis_share:.0f} %"),
        ("nearest its limit", lambda x: x.saturates_first),
    ]
    lines.append("")
    for label, fmt in rows:
        lines.append(f"{label:<26}" + "".join(f"{fmt(x):>22}" for x in needs))
    lines.append("")
    limits = chats_at_limit(costs, a)
    lines.append(
        "shares are of the planned utilisation of one node; a component past 100 % needs the plan in "
        "docs/architecture/capacity.md. Active chats at which each single node reaches it: "
        + ", ".join(f"{name} ~{value:,.0f}" for name, value in sorted(limits.items(), key=lambda kv: kv[1]))
    )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.bench.capacity", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("results", nargs="?", type=Path, default=Path("bench-results.json"))
    parser.add_argument("--seconds-per-exchange", type=float, default=Assumptions.seconds_per_exchange)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        costs = costs_from_results(json.loads(args.results.read_text()))
    except (OSError, ValueError) as exc:
        print(f"{args.results}: {exc}", file=sys.stderr)
        return 2
    print(f"capacity model from {args.results} (mode {json.loads(args.results.read_text()).get('mode')})")
    for line in report(costs, Assumptions(seconds_per_exchange=args.seconds_per_exchange)):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
