"""OpenTelemetry's SDK and instrumentations, set up by the shells (API, workers, beat); off by default.

The core makes its spans through the API only (`om_core.tracing`). A process sends them somewhere once
the operator asks for it with the standard variables:

- on when `OTEL_TRACES_EXPORTER` names an exporter (`otlp`, `console`), or, with that variable unset,
  when `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set; off when neither is
  set, when the exporter is `none`, or when `OTEL_SDK_DISABLED=true`;
- everything else is the SDK's own reading of `OTEL_*`: the endpoint, headers and timeout of the OTLP/HTTP
  exporter (protobuf), `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES`, the sampler
  (`OTEL_TRACES_SAMPLER`), the batch processor's `OTEL_BSP_*`.

When on, the libraries om talks through are instrumented too: FastAPI (the API's request span), Celery
(the publish and run spans, and the trace context carried in each task's headers, so a worker on another
machine continues the request's trace), SQLAlchemy, Redis and httpx (webhook deliveries, model calls
litellm makes over httpx). When off, nothing here is imported beyond this module and nothing is patched.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from om_core import tracing

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter
    from sqlalchemy import Engine

log = logging.getLogger("om.telemetry")

_guard = threading.Lock()
_installed = False


def tracing_requested(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the standard variables ask for traces (see the module's docstring)."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = env.get("OTEL_TRACES_EXPORTER")
    if exporter is not None:
        return exporter.strip().lower() not in ("", "none")
    return bool(env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def _exporters(environ: Mapping[str, str]) -> list[SpanExporter]:
    names = [n.strip().lower() for n in environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",") if n.strip()]
    exporters: list[SpanExporter] = []
    for name in names:
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporters.append(OTLPSpanExporter())
        elif name == "console":
            from opentelemetry.sdk.trace.export import ConsoleSpanExporter

            exporters.append(ConsoleSpanExporter())
        elif name != "none":
            # Refused at start, like any bad setting: a silent fallback would lose every trace.
            raise ValueError(
                f"OTEL_TRACES_EXPORTER={name!r} is not one om ships; use otlp (OTLP/HTTP protobuf), "
                "console or none"
            )
    return exporters


def setup_tracing(
    service_name: str,
    *,
    environ: Mapping[str, str] | None = None,
    exporter: SpanExporter | None = None,
) -> bool:
    """Install the SDK's tracer provider and the instrumentations once per process when the variables ask
    for it (or an `exporter` is given: tests). True when tracing is on afterwards."""
    global _installed
    env = os.environ if environ is None else environ
    if exporter is None and not tracing_requested(env):
        return _installed
    with _guard:
        if _installed:
            return True
        from opentelemetry import trace
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        # `Resource.create` merges OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME over this default.
        attributes: dict[str, Any] = {SERVICE_NAME: env.get("OTEL_SERVICE_NAME") or service_name}
        provider = TracerProvider(resource=Resource.create(attributes))
        for each in [exporter] if exporter is not None else _exporters(env):
            provider.add_span_processor(BatchSpanProcessor(each))
        trace.set_tracer_provider(provider)
        _instrument_libraries()
        tracing.enable()
        _installed = True
        log.info("tracing on: service %s", attributes[SERVICE_NAME])
        return True


def _instrument_libraries() -> None:
    from opentelemetry.instrumentation.celery import CeleryInstrumentor
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
    from opentelemetry.instrumentation.redis import RedisInstrumentor

    CeleryInstrumentor().instrument()  # type: ignore[no-untyped-call]
    RedisInstrumentor().instrument()
    HTTPXClientInstrumentor().instrument()


def tracing_on() -> bool:
    """Whether this process installed the SDK (`setup_tracing`)."""
    return _installed


def trace_database(engine: Engine) -> None:
    """Spans for `engine`'s statements, when tracing is on. The engine is passed rather than patching
    `create_engine`, which the store imported by name before any shell could patch it."""
    if not _installed:
        return
    from opentelemetry.instrumentation.sqlalchemy import SQLAlchemyInstrumentor

    instrumentor = SQLAlchemyInstrumentor()
    if instrumentor.is_instrumented_by_opentelemetry:
        return  # one engine per process is traced (a second app in one process is a test's)
    # The instrumentation declares SQLAlchemy < 2.1; its event listeners work on 2.1 (the unit test
    # tests/integration/test_tracing_distributed.py finds them in the API and the worker), so the
    # declared range is not checked.
    instrumentor.instrument(engine=engine, enable_commenter=False, skip_dep_check=True)


def shutdown() -> None:
    """Flush the spans still batched (a process that exits, a test that reads them)."""
    if not _installed:
        return
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    flush = getattr(provider, "force_flush", None)
    if callable(flush):
        flush()
