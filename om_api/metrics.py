"""Prometheus metrics of the API process: what this process measured, plus cluster state from the database.

What this process measured (per replica; Prometheus aggregates replicas with `sum`, like the workers'
series, `om_workers.metrics`):

- HTTP: requests and latency per route template (time to the first response byte, so a long SSE stream
  does not count as a slow request), and turns by outcome.
- Memory work this process ran itself (`om_memory_*`): the cycles, buffering runs, extractions and
  activations whose end/failed events its own engine published (`om_core.metering`). An inline API runs
  all of its threads' work; a celery-mode API runs the activations of the turn path, and the workers
  export the rest under the same names and labels. Model usage by model and role (observer / reflector /
  extractor): tokens in and out, cost (litellm), and the cycles that called the model by outcome.
- Actor model usage and cost through the proxy, per tenant, from litellm's responses to the calls this
  process made (the same numbers are kept per API key in the database, `GET /v1/usage`). A server without
  auth reports its calls under `tenant="(auth off)"`.
- On SQLite, the write transactions of this process and how long they queued for the write lock in it
  (`om_sqlite_write_transactions_total`, `om_sqlite_writer_waits_total`,
  `om_sqlite_writer_wait_seconds_total`, `om_sqlite_writer_held_seconds_total`;
  `om_core.store.db.writer_queue_stats`): the share of a turn spent waiting for other writers, and how
  busy the one writer is, which latency alone does not separate from work.
- `process_*`, `python_gc_*`, `python_info`: prometheus_client's default collectors for this process.

Who may read it: the series name every tenant with its tokens and cost, so they are never on the API's
public port for anyone. They are served on the API port only to a scraper sending the operator's token
(`OM_METRICS_TOKEN`, `Authorization: Bearer`; `require_scrape_token`), and/or on a listener of their own
(`OM_METRICS_PORT` on `OM_METRICS_HOST`, loopback by default; `MetricsListener`) that only the operator's
network reaches. With neither, `/metrics` on the API port answers 404 and says how to enable it.

Cluster state (read from the database or the broker at each scrape: ONE value for the whole deployment,
which every replica reports identically; aggregate replicas with `max`, never `sum`):

- `om_queue_depth`: tasks waiting in each Celery queue (celery mode).
- `om_search_index_lag_seconds`: age of the oldest row waiting for the search index.
- `om_memory_tenant_*`: OM's own model usage per tenant (database totals, every process's work).
- `om_webhook_deliveries`, `om_webhook_endpoints`: webhook delivery attempts by outcome and endpoints by
  state (from the endpoints' rows; workers deliver).
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector
from sqlalchemy import Engine

from om_api.errors import ApiError
from om_api.settings import ApiSettings
from om_core import queries
from om_core.metering import MemoryWorkMetrics
from om_core.store.db import writer_queue_stats
from om_core.store.usage import tenant_usage
from om_core.webhooks import store as webhook_store

log = logging.getLogger("om.api.metrics")

#: The `tenant` label of actor usage when the server runs without keys (OM_AUTH=none): no tenant exists.
NO_TENANT = "(auth off)"


class _QueueDepth(Collector):
    def __init__(self, depths: Callable[[], Mapping[str, int]]) -> None:
        self.depths = depths

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily(
            "om_queue_depth", "Tasks waiting in each Celery queue (cluster state)", labels=["queue"]
        )
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
            "Age of the oldest message, observation group or vector waiting for the search index "
            "(cluster state)",
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
            "om_memory_tenant_cycles",
            "Cycles that reported model usage, per tenant (database totals, cluster-wide)",
            labels=["tenant"],
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
            "om_webhook_deliveries",
            "Webhook delivery attempts by outcome (cluster state)",
            labels=["outcome"],
        )
        endpoints = GaugeMetricFamily(
            "om_webhook_endpoints", "Webhook endpoints by state (cluster state)", labels=["state"]
        )
        try:
            totals = webhook_store.totals(self.db)
            attempts.add_metric(["delivered"], totals["delivered"])
            attempts.add_metric(["failed"], totals["failed"])
            for state in webhook_store.States:
                endpoints.add_metric([state], totals["states"].get(state, 0))
        except Exception as exc:
            log.warning("webhook totals unavailable: %s", exc)
        yield from (attempts, endpoints)


class _SqliteWriters(Collector):
    """The writer queue's counters of this process's SQLite engine, read at each scrape (the queue keeps
    them; nothing is copied per transaction). Nothing on Postgres, which has no such queue."""

    def __init__(self, db: Engine) -> None:
        self.db = db

    def collect(self) -> Iterable[Metric]:
        stats = writer_queue_stats(self.db)
        if stats is None:
            return
        yield CounterMetricFamily(
            "om_sqlite_write_transactions",
            "SQLite write transactions this process began (each queues for the write lock in the process)",
            value=stats.transactions,
        )
        yield CounterMetricFamily(
            "om_sqlite_writer_waits",
            "SQLite write transactions of this process that found another writer of it holding the lock",
            value=stats.waits,
        )
        yield CounterMetricFamily(
            "om_sqlite_writer_wait_seconds",
            "Time SQLite write transactions of this process waited for another writer of it",
            value=stats.wait_s,
        )
        yield CounterMetricFamily(
            "om_sqlite_writer_held_seconds",
            "Time this process held SQLite's write lock (its growth over a span is the writer's busy time)",
            value=stats.held_s,
        )


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
        self.memory = MemoryWorkMetrics(r)
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
        ProcessCollector(registry=r)
        GCCollector(registry=r)
        PlatformCollector(registry=r)

    def bind(self, db: Engine, queue_depths: Callable[[], Mapping[str, int]]) -> None:
        self.registry.register(_QueueDepth(queue_depths))
        self.registry.register(_IndexLag(db))
        self.registry.register(_TenantUsage(db))
        self.registry.register(_Webhooks(db))
        self.registry.register(_SqliteWriters(db))

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


# ------------------------------------------------------------------------------------------ who reads it


def require_scrape_token(settings: ApiSettings, authorization: str | None) -> None:
    """Let a request read `/metrics` on the API port only with the operator's scrape token: 404 when none
    is configured (saying how to enable it), 401 when the request does not carry it. Compared in constant
    time; a tenant's API key is never enough."""
    token = settings.metrics_token
    if token is None:
        elsewhere = (
            "it is served on its own listener (OM_METRICS_PORT)"
            if settings.metrics_port
            else "set OM_METRICS_PORT to serve it on a listener of its own (OM_METRICS_HOST, loopback by "
            "default)"
        )
        raise ApiError(
            404,
            "metrics_not_served_here",
            f"/metrics is not served on the API port without a scrape token: {elsewhere}, or set "
            "OM_METRICS_TOKEN and scrape with `Authorization: Bearer <token>`",
        )
    scheme, _, given = (authorization or "").strip().partition(" ")
    expected = token.get_secret_value().encode()
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), expected):
        raise ApiError(
            401,
            "metrics_token_required",
            "/metrics needs the scrape token: send `Authorization: Bearer <OM_METRICS_TOKEN>` (an API key "
            "does not read metrics)",
            headers={"WWW-Authenticate": 'Bearer realm="om-metrics"'},
        )


class MetricsListener:
    """The API's `/metrics` on a port of its own (`OM_METRICS_PORT` on `OM_METRICS_HOST`), served by
    prometheus_client from the app's registry on a daemon thread, for the app's lifetime."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int) -> None:
        self.registry = registry
        self.host = host
        self.port = port
        self._server: Any = None

    def start(self) -> bool:
        """Serve; False (logged, the API goes on without it) when the address cannot be bound, as a
        worker does with its own port."""
        try:
            self._server, _thread = start_http_server(self.port, addr=self.host, registry=self.registry)
        except OSError as exc:
            log.error(
                "API metrics not served on %s:%d: %s (set OM_METRICS_PORT / OM_METRICS_HOST)",
                self.host,
                self.port,
                exc,
            )
            return False
        log.info("API metrics on http://%s:%d/metrics", self.host, self.port)
        return True

    def bound_address(self) -> tuple[str, int] | None:
        """(host, port) the listener is bound to; None when it is not serving."""
        if self._server is None:
            return None
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
