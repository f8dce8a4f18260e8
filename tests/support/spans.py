"""Spans made in this test process, kept in memory: the SDK's tracer provider with an in-memory exporter.

A process has one global tracer provider and it is set once, so every test that reads spans shares this
one; `recording()` turns om's spans on for the block (`om_core.tracing.enable`) and returns the exporter,
cleared, so a test reads only its own spans.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from om_core import tracing

_guard = threading.Lock()
_exporter: InMemorySpanExporter | None = None


def _memory_exporter() -> InMemorySpanExporter:
    global _exporter
    with _guard:
        if _exporter is None:
            provider = trace.get_tracer_provider()
            if not isinstance(provider, TracerProvider):
                provider = TracerProvider()
                trace.set_tracer_provider(provider)
            _exporter = InMemorySpanExporter()
            provider.add_span_processor(SimpleSpanProcessor(_exporter))
        return _exporter


@contextmanager
def recording() -> Iterator[InMemorySpanExporter]:
    exporter = _memory_exporter()
    exporter.clear()
    was = tracing.enabled()
    tracing.enable()
    try:
        yield exporter
    finally:
        tracing.enable(was)


def named(spans: tuple[ReadableSpan, ...] | list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name == name]
