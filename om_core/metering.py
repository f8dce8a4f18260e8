"""What a process measured of the memory work it ran, read from the events it published.

A cycle reports its outcome, duration, compression and model usage (tokens, cost, model) on its end or
failed event (`engine.events`), and every event a process commits passes through its engine's publisher
(`EngineCore.publish`, after the commit). So the shells count memory work by adding a publisher that
reads each batch with `cycle_reports`: a Celery worker counts the cycles it ran, an API the ones it ran
itself (inline work, activations on the turn path), and Prometheus sums the processes. Pure data: the
shells own the metric objects (`om_api.metrics`, `om_workers.metrics`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from om_core.engine import events as ev
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
    operation = str(payload.get("operationType") or ev.Operation.OBSERVATION.value)
    role: Role = (
        "extractor"
        if kind == "extraction"
        else "reflector"
        if operation == ev.Operation.REFLECTION.value
        else "observer"
    )
    if kind == "activation":
        return CycleReport(kind, operation, outcome, role)
    duration_ms = _number(payload.get("durationMs"))
    duration = duration_ms / 1000 if duration_ms is not None and duration_ms >= 0 else None
    compression = None
    if outcome == "end":
        source = _number(payload.get("tokensObserved") or payload.get("tokensBuffered"))
        result = _number(payload.get("observationTokens", payload.get("bufferedTokens")))
        if source is not None and source > 0 and result is not None:
            compression = result / source
    usage = payload.get("usage")
    tokens = {"inputTokens": 0, "outputTokens": 0}
    if isinstance(usage, Mapping):
        for key in tokens:
            value = usage.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                tokens[key] = value
    cost = _number(payload.get("cost"))
    model = payload.get("model")
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
