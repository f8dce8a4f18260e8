"""The API's share of tracing: the request span (FastAPI's instrumentation) and the database's spans.

The SDK itself is installed by `om_adapters.telemetry.setup_tracing`, before the runtime is built; this
only instruments what the API built, when tracing is on.
"""

from __future__ import annotations

from fastapi import FastAPI
from sqlalchemy import Engine

from om_adapters import telemetry


def instrument_api(app: FastAPI, db: Engine) -> None:
    """The request span of every HTTP request (its trace continues a caller's `traceparent`), and a span
    per SQL statement. `OTEL_PYTHON_FASTAPI_EXCLUDED_URLS` leaves routes out (probes, for instance)."""
    if not telemetry.tracing_on():
        return
    from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

    # No span per ASGI message ("http send", "http receive"): three more spans a turn that say nothing
    # the request span does not.
    FastAPIInstrumentor.instrument_app(app, exclude_spans=["receive", "send"])
    telemetry.trace_database(db)
