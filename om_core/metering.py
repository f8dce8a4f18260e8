"""What a process measured of the memory work it ran, read from the events it published.

A cycle reports its outcome, duration, compression and model usage (tokens, cost, model) on its end or
failed event (`engine.events`), and every event a process commits passes through its engine's publisher
(`EngineCore.publish`, after the commit). So the shells count memory work by adding a publisher that
reads each batch with `cycle_reports`: a Celery worker counts the cycles it ran, an API the ones it ran
itself (inline work, activations on the turn path), and Prometheus sums the processes. The series are
defined here once (`MemoryWorkMetrics`); each shell owns its registry and its other series
(`om_api.metrics`, `om_workers.metrics`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from prometheus_client import CollectorRegistry, Counter, Histogram

from om_core.engine import events as ev
from om_core.store.payloads import lifecycle_fields
from om_core.store.types import StoredEvent

Kind = Literal["cycle", "buffering", "activation", "extraction"]
Role = Literal["observer", "reflector", "extractor"]

_KIND: dict[str, tuple[Kind, str]] = {
    ev.OBSERVATION_END: ("cycle", "end"),
    ev.OBSERVATION_FAILED: ("cycle", "failed"),
    ev.BUFFERING_END: ("buffering", "end"),
    ev.BUFFERING_FAILED: ("buffering", "failed"),
    ev.ACTIVATION: ("activation", "activated"),
    ev.EXTRACTION_END: ("extraction", "end"),
    ev.EXTRACTION_FAILED: ("extraction", "failed"),
}

#: Event types `cycle_reports` reads; every other type is skipped.
COUNTED = frozenset(_KIND)


@dataclass(frozen=True)
class CycleReport:
    """One finished piece of memory work as its event reported it.

    `operation` is the event's `operationType` (observation / reflection); `role` the model role that did
    the work (observer, reflector, or extractor for structured extraction). Durations, compression and
    usage are None where the event carries none (activations call no model)."""

    kind: Kind
    operation: str
    outcome: str
    role: Role
    duration_s: float | None = None
    compression: float | None = None
    model: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0

    @property
    def called_model(self) -> bool:
        """The work reached a model (an activation, or a failure before any call, did not)."""
        return self.kind != "activation" and (self.model is not None or self.input_tokens > 0)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def cycle_report(event_type: str, payload: Mapping[str, Any]) -> CycleReport | None:
    """The report of one end/failed/activation event; None for any other event type."""
    found = _KIND.get(event_type)
    if found is None:
        return None
    kind, outcome = found
    fields = lifecycle_fields(payload)
    operation = str(fields.get("operationType") or ev.Operation.OBSERVATION.value)
    role: Role = (
        "extractor"
        if kind == "extraction"
        else "reflector"
        if operation == ev.Operation.REFLECTION.value
        else "observer"
    )
    if kind == "activation":
        return CycleReport(kind, operation, outcome, role)
    duration_ms = _number(fields.get("durationMs"))
    duration = duration_ms / 1000 if duration_ms is not None and duration_ms >= 0 else None
    compression = None
    if outcome == "end":
        source = _number(fields.get("tokensObserved") or fields.get("tokensBuffered"))
        result = _number(fields.get("observationTokens", fields.get("bufferedTokens")))
        if source is not None and source > 0 and result is not None:
            compression = result / source
    usage = fields.get("usage")
    tokens = {"inputTokens": 0, "outputTokens": 0}
    if isinstance(usage, Mapping):
        for key in tokens:
            value = usage.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                tokens[key] = value
    cost = _number(fields.get("cost"))
    model = fields.get("model")
    return CycleReport(
        kind,
        operation,
        outcome,
        role,
        duration_s=duration,
        compression=compression,
        model=str(model) if model else None,
        input_tokens=tokens["inputTokens"],
        output_tokens=tokens["outputTokens"],
        cost_usd=cost if cost is not None and cost > 0 else 0.0,
    )


def cycle_reports(events: Iterable[StoredEvent]) -> Iterator[CycleReport]:
    """The reports of the counted events among `events`, in order."""
    for event in events:
        if event.type in COUNTED:
            report = cycle_report(event.type, event.payload or {})
            if report is not None:
                yield report


CYCLE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
COMPRESSION_BUCKETS = (0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5)


class MemoryWorkMetrics:
    """The `om_memory_*` series, counted from the events this process's engine published: one definition
    for both shells (each adds it next to its event publisher: `om_api.runtime`, `om_workers.tasks`), so an
    API and a worker report the same names, labels and buckets and Prometheus sums them."""

    def __init__(self, registry: CollectorRegistry | None) -> None:
        r = registry
        self.cycles = Counter(
            "om_memory_cycles_total",
            "Observer/Reflector cycles, buffering runs, extractions and activations this process ran",
            ["kind", "operation", "outcome"],
            registry=r,
        )
        self.cycle_seconds = Histogram(
            "om_memory_cycle_duration_seconds",
            "Duration of the cycles, buffering runs and extractions this process ran",
            ["kind", "operation"],
            buckets=CYCLE_BUCKETS,
            registry=r,
        )
        self.compression = Histogram(
            "om_memory_compression_ratio",
            "Output tokens / input tokens of a successful cycle (observation or reflection)",
            ["kind", "operation"],
            buckets=COMPRESSION_BUCKETS,
            registry=r,
        )
        self.model_tokens = Counter(
            "om_memory_model_tokens_total",
            "Model tokens of the memory work this process ran",
            ["model", "role", "direction"],
            registry=r,
        )
        self.model_cost = Counter(
            "om_memory_model_cost_usd_total",
            "Model cost (litellm) of the memory work this process ran",
            ["model", "role"],
            registry=r,
        )
        self.model_cycles = Counter(
            "om_memory_model_cycles_total",
            "Cycles that called the model, by outcome (a cycle may make several calls)",
            ["model", "role", "outcome"],
            registry=r,
        )

    def publish(self, events: Sequence[StoredEvent]) -> None:
        for report in cycle_reports(events):
            self.cycles.labels(report.kind, report.operation, report.outcome).inc()
            if report.duration_s is not None:
                self.cycle_seconds.labels(report.kind, report.operation).observe(report.duration_s)
            if report.compression is not None:
                self.compression.labels(report.kind, report.operation).observe(report.compression)
            if not report.called_model:
                continue
            model = report.model or "unknown"
            self.model_cycles.labels(model, report.role, report.outcome).inc()
            self.model_tokens.labels(model, report.role, "input").inc(report.input_tokens)
            self.model_tokens.labels(model, report.role, "output").inc(report.output_tokens)
            self.model_cost.labels(model, report.role).inc(report.cost_usd)
