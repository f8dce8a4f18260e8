"""The capacity model's arithmetic, on a small results file whose costs are round numbers.

No services: `fixtures/capacity-results.json` holds only what `capacity.costs_from_results` reads.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.bench import capacity

FIXTURE = Path(__file__).with_name("fixtures") / "capacity-results.json"


def _costs() -> capacity.Costs:
    return capacity.costs_from_results(json.loads(FIXTURE.read_text()))


def test_costs_are_read_per_exchange_with_their_sources() -> None:
    costs = _costs()
    assert costs.api_cpu_ms_per_exchange == 6.0  # the figure, not the series' level-1 value
    assert costs.postgres_cpu_ms_per_exchange == 2.0  # 10 threads
    assert costs.sql_statements_per_exchange == 8.0  # 2 calls × 4
    assert costs.sql_writes_per_exchange == 4.0  # 2 × (1.5 INSERT + 0.5 UPDATE)
    assert costs.redis_commands_per_exchange == 6.0
    assert costs.cycles_per_exchange == 0.1
    assert costs.worker_cpu_ms_per_cycle == 20.0
    assert costs.postgres_cpu_ms_per_cycle == 5.0
    assert (costs.sql_statements_per_cycle, costs.sql_writes_per_cycle) == (10.0, 4.0)
    assert costs.index_ms_per_exchange == 5.0  # 2 messages at 400/s
    assert costs.sources["api_cpu_ms_per_exchange"].startswith("figure `API CPU per exchange, Postgres`")


def test_needs_follow_from_rate_costs_and_assumptions() -> None:
    a = capacity.Assumptions(
        seconds_per_exchange=30,
        utilisation=0.5,
        model_latency_s=3,
        worker_threads=8,
        sync_share=0.1,
        redis_commands_per_cycle=12,
        postgres_primary_cores=16,
        redis_ops_per_s=100_000,
    )
    need = capacity.need(_costs(), 30_000, a)
    assert need.exchanges_per_s == 1_000  # 30,000 chats / 30 s
    assert need.cycles_per_s == pytest.approx(100)  # × 0.1
    assert need.api_cores == pytest.approx(6.0)  # 1,000/s × 6 ms
    assert need.api_replicas == math.ceil(6.0 / 0.5) == 12
    assert need.worker_cores == pytest.approx(2.0)  # 100/s × 20 ms
    assert need.model_calls_in_flight == pytest.approx(300)  # 100/s × 3 s
    # om.buffer: 90 % of the cycles; the larger of CPU (1.8 cores / 0.5) and I/O (270 calls / 8 threads).
    assert need.buffer_workers == max(math.ceil(1.8 / 0.5), math.ceil(270 / 8)) == 34
    assert need.sync_workers == max(math.ceil(0.2 / 0.5), math.ceil(30 / 8)) == 4
    assert need.index_cores == pytest.approx(5.0)  # 1,000/s × 5 ms
    assert need.index_workers == math.ceil(5.0 / 0.5) == 10
    assert need.sql_statements_per_s == pytest.approx(1_000 * 8 + 100 * 10)
    assert need.sql_writes_per_s == pytest.approx(1_000 * 4 + 100 * 4)
    assert need.postgres_cores == pytest.approx(1_000 * 0.002 + 100 * 0.005)  # 2.5
    assert need.postgres_share == pytest.approx(2.5 / (16 * 0.5))
    assert need.redis_ops_per_s == pytest.approx(1_000 * 6 + 100 * 12)
    assert need.redis_share == pytest.approx(7_200 / (100_000 * 0.5))
    assert need.saturates_first == "Postgres primary CPU"  # 31 % against 14 %


def test_small_loads_still_need_one_of_each() -> None:
    need = capacity.need(_costs(), 1, capacity.Assumptions())
    assert (need.api_replicas, need.buffer_workers, need.sync_workers, need.index_workers) == (1, 1, 1, 1)


def test_chats_at_limit_is_where_a_single_node_reaches_its_planned_share() -> None:
    a = capacity.Assumptions(utilisation=0.5)
    limits = capacity.chats_at_limit(_costs(), a)
    at_limit = capacity.need(_costs(), round(limits["Postgres primary CPU"]), a)
    assert at_limit.postgres_share == pytest.approx(1.0, rel=1e-3)


def test_a_results_file_without_a_cost_is_refused_with_what_to_run() -> None:
    with pytest.raises(ValueError, match="make bench"):
        capacity.costs_from_results({"figures": [], "series": {}, "sections": {}})


def test_the_script_prints_every_chat_count(capsys: pytest.CaptureFixture[str]) -> None:
    assert capacity.main([str(FIXTURE)]) == 0
    out = capsys.readouterr().out
    for chats in ("1,000", "10,000", "100,000"):
        assert chats in out
    assert "nearest its limit" in out and "API replicas" in out
