"""The metric series of the API and the workers, and the fleet dashboard that reads them (issue 19).

- The dashboard (`deploy/grafana/om-fleet.json`) only queries series the code defines: every metric name in
  every panel's PromQL is one the API's or a worker's registry exports.
- The memory-work series (`om_memory_*`) are one definition in two shells: same names, labels, buckets.
- A cycle's end/failed event becomes the report both shells count (`om_core.metering`).
- Both registries keep the default process and GC collectors.
"""

from __future__ import annotations

import json
import os
import re
import socket
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from sqlalchemy import create_engine, text

from om_api.metrics import Metrics
from om_core.engine import events as ev
from om_core.metering import MemoryWorkMetrics, cycle_report, cycle_reports
from om_core.store.db import make_engine, writer_queue_stats
from om_core.store.migrate import upgrade
from om_core.store.types import StoredEvent
from om_workers.metrics import MULTIPROC_ENV, MetricsServer, ProcessTreeCollector, WorkerMetrics, lock_kind

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "om-fleet.json"

#: PromQL words that look like metric names but are not.
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless"}
_KEYWORDS |= {"offset", "le", "inf", "nan"}
_SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "gauge": ("",),
    "info": ("_info",),
}


def series_names(registry: CollectorRegistry) -> set[str]:
    """Every sample name `registry` can export (also of families that have no sample yet)."""
    names: set[str] = set()
    for family in registry.collect():
        names.update(family.name + suffix for suffix in _SUFFIXES.get(family.type, ("",)))
        names.update(sample.name for sample in family.samples)
    return names


def api_registry() -> CollectorRegistry:
    metrics = Metrics()
    # A database without OM's tables: the cluster-state collectors log and still yield their families.
    metrics.bind(create_engine("sqlite://"), lambda: {"om.buffer": 0})
    return metrics.registry


def worker_registry() -> CollectorRegistry:
    """What a worker's server exports, built in-process (the server reads the same values from the
    multiprocess files: `om_workers.metrics.export_registry`)."""
    registry = CollectorRegistry()
    WorkerMetrics(registry)
    registry.register(ProcessTreeCollector())
    GCCollector(registry=registry)
    PlatformCollector(registry=registry)
    return registry


def promql_metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: identifiers that are not functions, keywords, label
    names or values, range durations or Grafana variables."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings (label values)
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)  # ranges
    text = re.sub(r"\$\{?\w+\}?", "", text)  # Grafana variables
    names = set()
    for match in re.finditer(r"(?<![\w.])[A-Za-z_:][A-Za-z0-9_:]*", text):
        following = text[match.end() :].lstrip()
        word = match.group(0)
        if following.startswith("(") or word.lower() in _KEYWORDS:
            continue
        names.add(word)
    return names


def dashboard_exprs() -> list[tuple[str, str]]:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    found = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            found.append((panel["title"], target["expr"]))
    return found


def test_the_promql_reader_finds_metric_names_and_nothing_else() -> None:
    expr = (
        'histogram_quantile(0.95, sum by (le, queue) (rate(om_task_duration_seconds_bucket{queue!="x"}'
        "[$__rate_interval]))) / on (queue) max(om_queue_depth) and increase(foo_total[1h] offset 5m)"
    )
    assert promql_metric_names(expr) == {"om_task_duration_seconds_bucket", "om_queue_depth", "foo_total"}


def test_every_dashboard_query_reads_series_the_code_defines() -> None:
    known = series_names(api_registry()) | series_names(worker_registry())
    exprs = dashboard_exprs()
    assert len(exprs) >= 20
    used: set[str] = set()
    for title, expr in exprs:
        names = promql_metric_names(expr)
        assert names, f"{title}: no metric in {expr!r}"
        assert names <= known, f"{title}: {sorted(names - known)} is defined by neither registry"
        used |= names
    # The fleet view the issue asks for: requests, tasks, queues, model usage, locks, processes.
    for wanted in (
        "om_http_request_duration_seconds_bucket",
        "om_tasks_total",
        "om_task_duration_seconds_bucket",
        "om_task_queue_wait_seconds_bucket",
        "om_queue_depth",
        "om_memory_model_tokens_total",
        "om_memory_model_cost_usd_total",
        "om_lock_wait_seconds_bucket",
        "om_lock_contended_total",
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
    ):
        assert wanted in used, wanted


def test_api_and_workers_export_the_memory_series() -> None:
    memory = {"om_memory_cycles_total", "om_memory_model_tokens_total", "om_memory_model_cost_usd_total"}
    assert memory <= series_names(api_registry())
    assert memory <= series_names(worker_registry())


def test_both_registries_keep_process_and_gc_metrics() -> None:
    for registry in (api_registry(), worker_registry()):
        text = generate_latest(registry).decode()
        assert "\nprocess_cpu_seconds_total " in text
        assert "\nprocess_resident_memory_bytes " in text
        assert "python_gc_objects_collected_total{" in text


def test_the_api_exports_its_sqlite_writer_counters_and_nothing_of_them_on_postgres(tmp_path: Path) -> None:
    """The series are the writer queue's own counters, read at the scrape: a write moves them."""
    engine = make_engine(f"sqlite:///{tmp_path / 'om.db'}")
    try:
        metrics = Metrics()
        metrics.bind(engine, lambda: {})
        names = ("transactions", "waits", "wait_s")
        series = ("write_transactions", "writer_waits", "writer_wait_seconds")

        def exported() -> tuple[float, ...]:
            """One scrape's values."""
            samples = {s.name: s.value for family in metrics.registry.collect() for s in family.samples}
            return tuple(float(samples[f"om_sqlite_{name}_total"]) for name in series)

        def counted() -> tuple[float, ...]:
            stats = writer_queue_stats(engine)
            assert stats is not None
            return tuple(float(getattr(stats, name)) for name in names)

        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE t (x INTEGER)"))
        first = exported()
        assert first == counted() and first[0] >= 1
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO t VALUES (1)"))
        assert exported() == counted() and counted()[0] > first[0]
    finally:
        engine.dispose()
    names_on_postgres = series_names(api_registry())  # an engine without the queue, as on Postgres
    assert not {n for n in names_on_postgres if n.startswith("om_sqlite_")}


def test_a_scrape_on_sqlite_takes_no_write_transaction(tmp_path: Path) -> None:
    """The scrape's reads of the stored state (index lag, tenant usage, webhook totals) run as reads: on
    SQLite any other transaction takes the database's one write lock, which every turn then waits for."""
    engine = make_engine(f"sqlite:///{tmp_path / 'om.db'}")
    try:
        upgrade(engine)
        metrics = Metrics()
        metrics.bind(engine, lambda: {})
        stats = writer_queue_stats(engine)
        assert stats is not None
        before = stats.transactions
        for _ in range(3):
            names = {family.name for family in metrics.registry.collect()}
        assert {"om_search_index_lag_seconds", "om_sqlite_write_transactions"} <= names
        assert stats.transactions == before
    finally:
        engine.dispose()


def _event(event_type: str, payload: dict[str, Any]) -> StoredEvent:
    return StoredEvent(1, event_type, "t", "thread:t", "r", "c", payload, datetime.now(UTC))


def test_an_end_event_becomes_a_report_with_its_usage() -> None:
    payload = {
        "operationType": "reflection",
        "durationMs": 1500,
        "tokensObserved": 1000,
        "observationTokens": 250,
        **ev.usage_fields(900, 250, 0.01, "gpt-x"),
    }
    report = cycle_report(ev.OBSERVATION_END, payload)
    assert report is not None
    assert (report.kind, report.operation, report.outcome, report.role) == (
        "cycle",
        "reflection",
        "end",
        "reflector",
    )
    assert report.duration_s == 1.5 and report.compression == 0.25
    assert (report.model, report.input_tokens, report.output_tokens, report.cost_usd) == (
        "gpt-x",
        900,
        250,
        0.01,
    )
    assert report.called_model

    failed = cycle_report(ev.BUFFERING_FAILED, {"durationMs": 10, **ev.usage_fields(0, 0, None, None)})
    assert failed is not None and failed.outcome == "failed" and failed.role == "observer"
    assert not failed.called_model, "a failure before any model call reports no model usage"

    activation = cycle_report(ev.ACTIVATION, {"operationType": "observation"})
    assert activation is not None and activation.kind == "activation" and not activation.called_model
    assert cycle_report(ev.STATUS, {}) is None


def test_memory_counters_count_only_the_events_published_to_them() -> None:
    registry = CollectorRegistry()
    memory = MemoryWorkMetrics(registry)
    end = _event(ev.BUFFERING_END, {"durationMs": 20, **ev.usage_fields(100, 10, None, "m")})
    memory.publish([end, _event(ev.STATUS, {}), end])
    assert len(list(cycle_reports([end, _event(ev.STATUS, {})]))) == 1
    value = registry.get_sample_value
    labels = {"kind": "buffering", "operation": "observation", "outcome": "end"}
    assert value("om_memory_cycles_total", labels) == 2
    assert (
        value("om_memory_model_tokens_total", {"model": "m", "role": "observer", "direction": "input"}) == 200
    )
    assert value("om_memory_model_cycles_total", {"model": "m", "role": "observer", "outcome": "end"}) == 2


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("om:lock:observe:thread:abc", "observe"),
        ("om:lock:reflect:thread:abc:buffer", "reflect-buffer"),
        ("om:lock:reflect:thread:abc", "reflect"),
        ("om:lock:maintenance", "maintenance"),
        ("om:lock:webhook:ep-1", "webhook"),
        ("om:lock:thread:xyz", "other"),
        ("something-else", "other"),
    ],
)
def test_lock_labels_are_kinds_never_keys(name: str, kind: str) -> None:
    assert lock_kind(name) == kind


def test_a_taken_port_leaves_the_worker_running_without_metrics(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = MetricsServer(port)
        assert server.start() is False
    assert server.folder is None and MULTIPROC_ENV not in os.environ, "no multiprocess mode without a server"
    assert f"127.0.0.1:{port}" in caplog.text, "the log names the address it could not bind"
