"""Prometheus metrics of the API process.

- HTTP: requests and latency per route template (time to the first response byte, so a long SSE stream
  does not count as a slow request).
- Memory work (observations, buffering, activations, reflections): counted from the event outbox at scrape
  time, from the id this process started at. The outbox holds every cycle whoever ran it (this process or
  a Celery worker), so every replica reports the same cluster-wide numbers: aggregate replicas with `max`,
  not `sum`.
- Model usage and cost of the Observer/Reflector (from the end/failed events' litellm usage) and of the
  proxy's actor calls per tenant (from litellm's response; the same numbers are kept per API key in the
  database, `GET /v1/usage`). A server without auth reports its calls under `tenant="(auth off)"`.
- OM's own model usage and cost per tenant (`om_memory_tenant_*`, database totals: every replica reports
  the same values).
- Webhook delivery attempts by outcome and endpoints by state (`om_webhook_*`, from the endpoints' rows).
- Queue depth per Celery queue (celery mode).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import Engine, func, select

from om_core import queries
from om_core.engine import events as ev
from om_core.store import schema
from om_core.store.usage import tenant_usage
from om_core.webhooks import store as webhook_store

log = logging.getLogger("om.api.metrics")

#: The `tenant` label of actor usage when the server runs without keys (OM_AUTH=none): no tenant exists.
NO_TENANT = "(auth off)"

_COUNTED = (ev.OBSERVATION_END, ev.OBSERVATION_FAILED, ev.BUFFERING_END, ev.BUFFERING_FAILED, ev.ACTIVATION)
_KIND = {
    ev.OBSERVATION_END: ("cycle", "end"),
    ev.OBSERVATION_FAILED: ("cycle", "failed"),
    ev.BUFFERING_END: ("buffering", "end"),
    ev.BUFFERING_FAILED: ("buffering", "failed"),
    ev.ACTIVATION: ("activation", "activated"),
}


class _QueueDepth(Collector):
    def __init__(self, depths: Callable[[], Mapping[str, int]]) -> None:
        self.depths = depths

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily("om_queue_depth", "Tasks waiting in each Celery queue", labels=["queue"])
        try:
            for queue, depth in self.depths().items():
                family.add_metric([queue], depth)
        except Exception as exc:
            log.warning("queue depth unavailable: %s", exc)
        yield family


class _IndexLag(Collector):
    """`om_search_index_lag_seconds`, read from the database at each scrape (`queries.index_lag`)."""

    def __init__(self, db: Engine) -> None:
        self.db = db

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily(
            "om_search_index_lag_seconds",
            "Age of the oldest message, observation group or vector waiting for the search index",
        )
        try:
            family.add_metric([], queries.index_lag(self.db))
        except Exception as exc:
            log.warning("index lag unavailable: %s", exc)
        yield family


class _TenantUsage(Collector):
    """OM's own model usage per tenant (`om_usage_tenants`, bumped with each end/failed event): one label
    value per tenant, never per thread (a thread's totals are in `GET /v1/threads/{id}`)."""

    def __init__(self, db: Engine) -> None:
        self.db = db

    def collect(self) -> Iterable[Metric]:
        tokens = CounterMetricFamily(
            "om_memory_tenant_model_tokens",
            "Observer/Reflector model tokens per tenant (database totals, cluster-wide)",
            labels=["tenant", "direction"],
        )
        cost = CounterMetricFamily(
            "om_memory_tenant_model_cost_usd",
            "Observer/Reflector model cost per tenant (litellm; database totals, cluster-wide)",
            labels=["tenant"],
        )
        cycles = CounterMetricFamily(
            "om_memory_tenant_cycles", "Cycles that reported model usage, per tenant", labels=["tenant"]
        )
        try:
            for tenant, totals in tenant_usage(self.db).items():
                label = tenant or NO_TENANT
                tokens.add_metric([label, "input"], totals.input_tokens)
                tokens.add_metric([label, "output"], totals.output_tokens)
                cost.add_metric([label], totals.cost_usd)
                cycles.add_metric([label], totals.cycles)
        except Exception as exc:
            log.warning("tenant usage unavailable: %s", exc)
        yield from (tokens, cost, cycles)


class _Webhooks(Collector):
    """Webhook delivery, read from the endpoints' rows at each scrape (workers deliver; this process
    only reports): attempts by outcome, endpoints by state, events waiting past the cursors."""

    def __init__(self, db: Engine) -> None:
        self.db = db

    def collect(self) -> Iterable[Metric]:
        attempts = CounterMetricFamily(
            "om_webhook_deliveries", "Webhook delivery attempts by outcome", labels=["outcome"]
        )
        endpoints = GaugeMetricFamily("om_webhook_endpoints", "Webhook endpoints by state", labels=["state"])
        try:
            totals = webhook_store.totals(self.db)
            attempts.add_metric(["delivered"], totals["delivered"])
            attempts.add_metric(["failed"], totals["failed"])
            for state in webhook_store.States:
                endpoints.add_metric([state], totals["states"].get(state, 0))
        except Exception as exc:
            log.warning("webhook totals unavailable: %s", exc)
        yield from (attempts, endpoints)


class Metrics:
    """One registry per app, so several apps in one process (tests) do not collide."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "om_http_requests_total", "HTTP requests", ["method", "route", "status"], registry=r
        )
        self.latency = Histogram(
            "om_http_request_duration_seconds",
            "Time to the first response byte",
            ["method", "route"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
            registry=r,
        )
        self.turns = Counter("om_turns_total", "Turns by outcome", ["outcome"], registry=r)
        self.cycles = Counter(
            "om_memory_cycles_total",
            "Observer/Reflector cycles, buffering runs and activations by outcome",
            ["kind", "operation", "outcome"],
            registry=r,
        )
        self.cycle_seconds = Histogram(
            "om_memory_cycle_duration_seconds",
            "Duration of Observer/Reflector cycles and buffering runs",
            ["kind", "operation"],
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
            registry=r,
        )
        self.compression = Histogram(
            "om_memory_compression_ratio",
            "Output tokens / input tokens of a successful cycle (observation or reflection)",
            ["kind", "operation"],
            buckets=(0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5),
            registry=r,
        )
        self.model_tokens = Counter(
            "om_memory_model_tokens_total",
            "Observer/Reflector model tokens",
            ["model", "direction"],
            registry=r,
        )
        self.model_cost = Counter(
            "om_memory_model_cost_usd_total", "Observer/Reflector model cost (litellm)", ["model"], registry=r
        )
        self.actor_calls = Counter(
            "om_actor_model_calls_total",
            "Actor model calls through the proxy that returned an answer, per tenant",
            ["tenant", "model"],
            registry=r,
        )
        self.actor_tokens = Counter(
            "om_actor_model_tokens_total",
            "Actor model tokens through the proxy, per tenant",
            ["tenant", "model", "direction"],
            registry=r,
        )
        self.actor_cost = Counter(
            "om_actor_model_cost_usd_total",
            "Actor model cost through the proxy (litellm), per tenant",
            ["tenant", "model"],
            registry=r,
        )
        self._db: Engine | None = None
        self._cursor: int | None = None
        self._guard = threading.Lock()

    def bind(self, db: Engine, queue_depths: Callable[[], Mapping[str, int]]) -> None:
        self._db = db
        self.registry.register(_QueueDepth(queue_depths))
        self.registry.register(_IndexLag(db))
        self.registry.register(_TenantUsage(db))
        self.registry.register(_Webhooks(db))

    # ------------------------------------------------------------------------------------------ HTTP

    def observe_request(self, method: str, route: str, status: int, seconds: float) -> None:
        self.requests.labels(method, route, str(status)).inc()
        self.latency.labels(method, route).observe(seconds)

    def observe_turn(self, *, blocked: bool, degraded: bool) -> None:
        self.turns.labels("degraded" if degraded else "blocked" if blocked else "ok").inc()

    def observe_actor_usage(
        self, tenant: str | None, model: str, prompt_tokens: int, completion_tokens: int, cost: float
    ) -> None:
        label = NO_TENANT if tenant is None else tenant
        self.actor_calls.labels(label, model).inc()
        for direction, value in (("input", prompt_tokens), ("output", completion_tokens)):
            if value > 0:
                self.actor_tokens.labels(label, model, direction).inc(value)
        if cost > 0:
            self.actor_cost.labels(label, model).inc(cost)

    # -------------------------------------------------------------------------------- memory cycles

    def start_counting(self) -> None:
        """Count events from the outbox's current end (called at start; retried at the first scrape)."""
        if self._db is None:
            return
        try:
            with self._db.connect() as conn:
                self._cursor = int(conn.execute(select(func.max(schema.events.c.id))).scalar() or 0)
        except Exception as exc:
            log.warning("metrics cannot read the outbox yet: %s", exc)

    def refresh(self) -> None:
        """Fold the outbox events written since the last scrape into the counters."""
        with self._guard:
            if self._cursor is None:
                self.start_counting()
                return
            if self._db is None:
                return
            E = schema.events
            for _page in range(20):
                with self._db.connect() as conn:
                    rows = conn.execute(
                        select(E.c.id, E.c.type, E.c.payload)
                        .where(E.c.id > self._cursor, E.c.type.in_(_COUNTED))
                        .order_by(E.c.id)
                        .limit(5_000)
                    ).all()
                for row in rows:
                    self._count(row.type, dict(row.payload or {}))
                    self._cursor = int(row.id)
                if len(rows) < 5_000:
                    return

    def _count(self, kind_type: str, payload: Mapping[str, Any]) -> None:
        kind, outcome = _KIND[ev.EventType(kind_type)]
        operation = str(payload.get("operationType") or "observation")
        self.cycles.labels(kind, operation, outcome).inc()
        if kind == "activation":
            return
        duration = payload.get("durationMs")
        if isinstance(duration, int | float) and duration >= 0:
            self.cycle_seconds.labels(kind, operation).observe(duration / 1000)
        if outcome == "end":
            source = payload.get("tokensObserved") or payload.get("tokensBuffered")
            result = payload.get("observationTokens", payload.get("bufferedTokens"))
            if isinstance(source, int | float) and source > 0 and isinstance(result, int | float):
                self.compression.labels(kind, operation).observe(result / source)
        model = str(payload.get("model") or "unknown")
        usage = payload.get("usage")
        if isinstance(usage, Mapping):
            for direction, key in (("input", "inputTokens"), ("output", "outputTokens")):
                value = usage.get(key)
                if isinstance(value, int) and value > 0:
                    self.model_tokens.labels(model, direction).inc(value)
        cost = payload.get("cost")
        if isinstance(cost, int | float) and cost > 0:
            self.model_cost.labels(model).inc(float(cost))
