"""The core's spans: what om does (a turn, an observation, a model call), through the OpenTelemetry API only.

The core never imports the SDK, an exporter or an instrumentation: a shell that wants traces installs a
tracer provider (`om_adapters.telemetry`) and then calls `enable()`. Until then every helper here is a
shared no-op context manager: the turn path pays one boolean test per span, not the API's context attach
and detach (the bench's tracing section measures both). This is the one module of the core that imports
`opentelemetry` (import contract `core-traces-through-one-module`).

Names follow what om does: `om.turn`, `om.activation`, `om.observation`, `om.reflection`, `om.extraction`,
`om.indexing`, `om.webhook_delivery`; a model call is `chat <model>` (or `embeddings <model>`) with the GenAI
semantic-convention attributes (`gen_ai.operation.name`, `gen_ai.request.model`, `gen_ai.usage.*`) and two
of om's own, which the conventions do not define: `om.memory.operation` (the om span it was made for) and
`om.cost_usd` (litellm's price of the reply).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode

#: The span a task runs in, by its type's name: what om does, not how it is queued.
SPAN_OF_TASK: Mapping[str, str] = {
    "Observe": "om.observation",
    "BufferObservation": "om.observation",
    "ObserveBatch": "om.observation",
    "Reflect": "om.reflection",
    "BufferReflection": "om.reflection",
    "ExtractValues": "om.extraction",
    "IndexThread": "om.indexing",
    "DeliverWebhooks": "om.webhook_delivery",
}

_tracer = trace.get_tracer("om")
_enabled = False

#: The om operation a model call is made for (set by `operation`, read by `model_call`).
_OPERATION: ContextVar[str | None] = ContextVar("om_trace_operation", default=None)

Attributes = Mapping[str, str | int | float | bool]


def enable(on: bool = True) -> None:
    """Start (or stop) making spans; called by the shell that installed a tracer provider."""
    global _enabled
    _enabled = on


def enabled() -> bool:
    return _enabled


def current_trace_id() -> str | None:
    """The current span's trace id as 32 hex digits, None outside a sampled or recorded trace."""
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return format(context.trace_id, "032x")


@contextlib.contextmanager
def operation(name: str, attributes: Attributes | None = None) -> Iterator[None]:
    """A span named `name` (`om.turn`, `om.observation`, ...) around the block; model calls made inside
    carry `name` as their memory operation."""
    if not _enabled:
        yield
        return
    token = _OPERATION.set(name)
    try:
        with _tracer.start_as_current_span(name, attributes=dict(attributes or {})):
            yield
    finally:
        _OPERATION.reset(token)


class ModelCall:
    """What a model-call span records once the reply is in (a no-op when tracing is off)."""

    def __init__(self, span: Span | None) -> None:
        self.span = span

    def answered(
        self,
        *,
        model: str,
        input_tokens: int,
        output_tokens: int,
        cost: float | None,
        finish_reason: str | None,
    ) -> None:
        if self.span is None:
            return
        self.span.set_attribute("gen_ai.response.model", model)
        self.span.set_attribute("gen_ai.usage.input_tokens", input_tokens)
        self.span.set_attribute("gen_ai.usage.output_tokens", output_tokens)
        if cost is not None:
            self.span.set_attribute("om.cost_usd", cost)
        if finish_reason:
            self.span.set_attribute("gen_ai.response.finish_reasons", [finish_reason])

    def failed(self, error: BaseException) -> None:
        """A failure the caller handles (a fallback follows): the span still says the call failed."""
        if self.span is None:
            return
        self.span.record_exception(error)
        self.span.set_attribute("error.type", type(error).__name__)
        self.span.set_status(Status(StatusCode.ERROR, str(error)[:200]))


_NO_CALL = ModelCall(None)


@contextlib.contextmanager
def model_call(model: str, *, kind: str = "chat", provider: str | None = None) -> Iterator[ModelCall]:
    """A client span `<kind> <model>` around one model request (its retries included)."""
    if not _enabled:
        yield _NO_CALL
        return
    attributes: dict[str, Any] = {"gen_ai.operation.name": kind, "gen_ai.request.model": model}
    if provider:
        attributes["gen_ai.provider.name"] = provider
    memory_operation = _OPERATION.get()
    if memory_operation:
        attributes["om.memory.operation"] = memory_operation
    with _tracer.start_as_current_span(
        f"{kind} {model}", kind=trace.SpanKind.CLIENT, attributes=attributes
    ) as span:
        yield ModelCall(span)
