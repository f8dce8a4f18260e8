"""Builders for the `data-om-*` event payloads (behaviour §10.1), camelCase as clients expect.

Events are written to the outbox in the transaction of the change they report; these functions only
shape the payloads so every use-case reports the same fields.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from om_core.store.payloads import (
    ActivationPayload,
    BufferingEndPayload,
    ExtractionEndPayload,
    ExtractionFields,
    FailedPayload,
    ObservationEditPayload,
    ObservationEndPayload,
    OperationType,
    SignalPayload,
    StartPayload,
    ThreadUpdatePayload,
    TriggerDetails,
    UsageFields,
)
from om_core.store.types import ActivatedChunk, NewEvent
from om_core.tenancy.scoped_ids import PublicId, StoredId, public_id


class EventType(StrEnum):
    """The `type` of every event OM writes (behaviour §10.1)."""

    STATUS = "data-om-status"
    OBSERVATION_START = "data-om-observation-start"
    OBSERVATION_END = "data-om-observation-end"
    OBSERVATION_FAILED = "data-om-observation-failed"
    BUFFERING_START = "data-om-buffering-start"
    BUFFERING_END = "data-om-buffering-end"
    BUFFERING_FAILED = "data-om-buffering-failed"
    ACTIVATION = "data-om-activation"
    THREAD_UPDATE = "data-om-thread-update"
    #: A caller edited or deleted one line of the active log (a new generation, `origin_type` 'edit').
    OBSERVATION_EDIT = "data-om-observation-edit"
    SYSTEM_REMINDER = "data-system-reminder"
    #: Structured extraction (behaviour §8.5), its own task after the cycle whose output it reads.
    EXTRACTION_START = "data-om-extraction-start"
    EXTRACTION_END = "data-om-extraction-end"
    EXTRACTION_FAILED = "data-om-extraction-failed"
    #: A signal an `onExtracted` callback sent (`om_core.extractors.signals`), written with the values.
    SIGNAL = "data-om-signal"


class Operation(StrEnum):
    """What a cycle does to the log: its `operationType`."""

    OBSERVATION = "observation"
    REFLECTION = "reflection"


@dataclass(frozen=True)
class Phase:
    """How a cycle reports itself: in the background (buffering) or while a turn may wait (blocking)."""

    start: EventType
    end: EventType
    failed: EventType


BUFFERED = Phase(EventType.BUFFERING_START, EventType.BUFFERING_END, EventType.BUFFERING_FAILED)
BLOCKING = Phase(EventType.OBSERVATION_START, EventType.OBSERVATION_END, EventType.OBSERVATION_FAILED)
EXTRACTION = Phase(EventType.EXTRACTION_START, EventType.EXTRACTION_END, EventType.EXTRACTION_FAILED)

STATUS = EventType.STATUS
OBSERVATION_START = EventType.OBSERVATION_START
OBSERVATION_END = EventType.OBSERVATION_END
OBSERVATION_FAILED = EventType.OBSERVATION_FAILED
BUFFERING_START = EventType.BUFFERING_START
BUFFERING_END = EventType.BUFFERING_END
BUFFERING_FAILED = EventType.BUFFERING_FAILED
ACTIVATION = EventType.ACTIVATION
THREAD_UPDATE = EventType.THREAD_UPDATE
OBSERVATION_EDIT = EventType.OBSERVATION_EDIT
SYSTEM_REMINDER = EventType.SYSTEM_REMINDER
EXTRACTION_START = EventType.EXTRACTION_START
EXTRACTION_END = EventType.EXTRACTION_END
EXTRACTION_FAILED = EventType.EXTRACTION_FAILED
SIGNAL = EventType.SIGNAL


def _public(thread_id: StoredId | None) -> PublicId | None:
    """Payloads are what clients read: they name the thread by the id its tenant chose."""
    return public_id(thread_id) if thread_id is not None else None


def iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def usage_fields(input_tokens: int, output_tokens: int, cost: float | None, model: str | None) -> UsageFields:
    """Model usage and cost, attached to end and failed events so operators see what memory costs."""
    return {
        "usage": {
            "inputTokens": input_tokens,
            "outputTokens": output_tokens,
            "totalTokens": input_tokens + output_tokens,
        },
        "cost": cost,
        "model": model,
    }


def _duration_ms(started_at: datetime, at: datetime) -> int:
    """How long a cycle ran, as every end and failed event reports it."""
    return int((at - started_at).total_seconds() * 1000)


def _operation(operation: Operation) -> OperationType:
    return "reflection" if operation is Operation.REFLECTION else "observation"


def _add_extraction(
    payload: ObservationEndPayload | BufferingEndPayload | ExtractionEndPayload,
    extraction: ExtractionFields | None,
) -> None:
    """Extractors' values and failures on an end event, each key only when the extractors produced it."""
    if extraction is None:
        return
    if "extractedValues" in extraction:
        payload["extractedValues"] = extraction["extractedValues"]
    if "extractionFailures" in extraction:
        payload["extractionFailures"] = extraction["extractionFailures"]


def _add_trigger(payload: ActivationPayload, details: TriggerDetails) -> None:
    """Why an early activation ran, on its activation event (absent for a threshold activation)."""
    if "previousModel" in details:
        payload["previousModel"] = details["previousModel"]
    if "currentModel" in details:
        payload["currentModel"] = details["currentModel"]
    if "lastActivityAt" in details:
        payload["lastActivityAt"] = details["lastActivityAt"]
    if "ttlExpiredMs" in details:
        payload["ttlExpiredMs"] = details["ttlExpiredMs"]


def start(
    kind: EventType,
    *,
    cycle_id: str,
    operation: Operation,
    started_at: datetime,
    tokens: int,
    record_id: str,
    thread_id: StoredId | None,
    config: dict[str, Any],
) -> NewEvent:
    payload: StartPayload = {
        "cycleId": cycle_id,
        "operationType": _operation(operation),
        "startedAt": iso(started_at),
        "recordId": record_id,
        "threadId": _public(thread_id),
        "threadIds": [public_id(thread_id)] if thread_id else [],
        "config": config,
    }
    if kind == BUFFERING_START:
        payload["tokensToBuffer"] = tokens
    else:
        payload["tokensToObserve"] = tokens
    return NewEvent(kind.value, payload, cycle_id)


def observation_end(
    *,
    cycle_id: str,
    operation: Operation,
    started_at: datetime,
    completed_at: datetime,
    tokens_observed: int,
    observation_tokens: int,
    observations: str,
    current_task: str | None,
    suggested_response: str | None,
    record_id: str,
    thread_id: StoredId | None,
    usage: UsageFields,
    seq_range: tuple[int, int] | None = None,
    extraction: ExtractionFields | None = None,
) -> NewEvent:
    """`extraction` holds `extractedValues` / `extractionFailures` of inline extractors (behaviour §8.6.4),
    each present only when it has something."""
    payload: ObservationEndPayload = {
        "cycleId": cycle_id,
        "operationType": _operation(operation),
        "completedAt": iso(completed_at),
        "durationMs": _duration_ms(started_at, completed_at),
        "tokensObserved": tokens_observed,
        "observationTokens": observation_tokens,
        "observations": observations,
        "recordId": record_id,
        "threadId": _public(thread_id),
        "usage": usage["usage"],
        "cost": usage["cost"],
        "model": usage["model"],
    }
    if seq_range is not None:
        payload["seqRange"] = list(seq_range)
    if current_task:
        payload["currentTask"] = current_task
    if suggested_response:
        payload["suggestedResponse"] = suggested_response
    _add_extraction(payload, extraction)
    return NewEvent(OBSERVATION_END.value, payload, cycle_id)


def buffering_end(
    *,
    cycle_id: str,
    operation: Operation,
    started_at: datetime,
    completed_at: datetime,
    tokens_buffered: int,
    buffered_tokens: int,
    observations: str,
    record_id: str,
    thread_id: StoredId | None,
    usage: UsageFields,
    extraction: ExtractionFields | None = None,
) -> NewEvent:
    """`extraction` as in `observation_end`: the chunk waits for activation, its values are already
    persisted (behaviour §8.6.4)."""
    payload: BufferingEndPayload = {
        "cycleId": cycle_id,
        "operationType": _operation(operation),
        "completedAt": iso(completed_at),
        "durationMs": _duration_ms(started_at, completed_at),
        "tokensBuffered": tokens_buffered,
        "bufferedTokens": buffered_tokens,
        "observations": observations,
        "recordId": record_id,
        "threadId": _public(thread_id),
        "usage": usage["usage"],
        "cost": usage["cost"],
        "model": usage["model"],
    }
    _add_extraction(payload, extraction)
    return NewEvent(BUFFERING_END.value, payload, cycle_id)


def extraction_end(
    *,
    cycle_id: str,
    source: str,
    source_cycle_id: str,
    started_at: datetime,
    completed_at: datetime,
    record_id: str,
    thread_id: StoredId | None,
    usage: UsageFields,
    extraction: ExtractionFields,
) -> NewEvent:
    """The end of a structured extraction: `extractedValues` / `extractionFailures` of its extractors,
    and which cycle's output it read (`sourceCycleId`)."""
    payload: ExtractionEndPayload = {
        "cycleId": cycle_id,
        "operationType": "reflection" if source == "reflector" else "observation",
        "completedAt": iso(completed_at),
        "durationMs": _duration_ms(started_at, completed_at),
        "source": source,
        "sourceCycleId": source_cycle_id,
        "recordId": record_id,
        "threadId": _public(thread_id),
        "usage": usage["usage"],
        "cost": usage["cost"],
        "model": usage["model"],
    }
    _add_extraction(payload, extraction)
    return NewEvent(EXTRACTION_END.value, payload, cycle_id)


def failed(
    kind: EventType,
    *,
    cycle_id: str,
    operation: Operation,
    started_at: datetime,
    failed_at: datetime,
    tokens_attempted: int,
    error: str,
    record_id: str,
    thread_id: StoredId | None,
    usage: UsageFields | None = None,
    retrying: bool = False,
    error_code: str | None = None,
    observations: str = "",
) -> NewEvent:
    """`error_code` is the stable code of an error OM raised on purpose (`MODEL_TIER_EXCEEDED`, ...): a
    client branches on it rather than on the message text. `observations`, when any, are the partial
    observations of the failed cycle (for display; nothing committed them)."""
    payload: FailedPayload = {
        "cycleId": cycle_id,
        "operationType": _operation(operation),
        "failedAt": iso(failed_at),
        "durationMs": _duration_ms(started_at, failed_at),
        "tokensAttempted": tokens_attempted,
        "error": error,
        "recordId": record_id,
        "threadId": _public(thread_id),
    }
    if usage is not None:
        payload["usage"], payload["cost"], payload["model"] = usage["usage"], usage["cost"], usage["model"]
    if error_code is not None:
        payload["errorCode"] = error_code
    if retrying:
        payload["retrying"] = True
    if observations:
        payload["observations"] = observations
    return NewEvent(kind.value, payload, cycle_id)


@dataclass(frozen=True)
class ActivationOutcome:
    """What one activation left behind, reported on each of its markers: the chunks still buffered, the
    unobserved message tokens still in the window and the message threshold they are compared with."""

    remaining_chunks: int
    remaining_tokens: int
    threshold: int

    @property
    def partial(self) -> bool:
        """The activation did not bring the window under the threshold: the pending tail is not covered."""
        return self.remaining_tokens >= self.threshold


def chunk_activation(
    chunk: ActivatedChunk,
    *,
    activated_at: datetime,
    generation_count: int,
    triggered_by: str,
    record_id: str,
    thread_id: StoredId | None,
    config: dict[str, Any],
    trigger_details: TriggerDetails,
    outcome: ActivationOutcome | None = None,
) -> NewEvent:
    payload: ActivationPayload = {
        "cycleId": chunk.cycle_id,
        "operationType": "observation",
        "activatedAt": iso(activated_at),
        "chunksActivated": 1,
        "tokensActivated": chunk.message_tokens,
        "observationTokens": chunk.observation_tokens,
        "messagesActivated": chunk.message_count,
        "generationCount": generation_count,
        "observations": chunk.observations,
        "triggeredBy": triggered_by,
        "recordId": record_id,
        "threadId": _public(thread_id),
        "config": config,
        # The stored parts this observation covers (sequence range), for audits and replay.
        "seqRange": [chunk.from_seq, chunk.to_seq],
    }
    if outcome is not None:
        payload["remainingChunks"] = outcome.remaining_chunks
        payload["remainingTokens"] = outcome.remaining_tokens
        payload["partial"] = outcome.partial
    _add_trigger(payload, trigger_details)
    return NewEvent(ACTIVATION.value, payload, chunk.cycle_id)


def reflection_activation(
    *,
    cycle_id: str,
    activated_at: datetime,
    tokens_before: int,
    tokens_after: int,
    generation_count: int,
    observations: str,
    triggered_by: str,
    record_id: str,
    thread_id: StoredId | None,
    config: dict[str, Any],
    trigger_details: TriggerDetails,
) -> NewEvent:
    payload: ActivationPayload = {
        "cycleId": cycle_id,
        "operationType": "reflection",
        "activatedAt": iso(activated_at),
        "chunksActivated": 1,
        "tokensActivated": tokens_before,
        "observationTokens": tokens_after,
        "messagesActivated": 0,
        "generationCount": generation_count,
        "observations": observations,
        "triggeredBy": triggered_by,
        "recordId": record_id,
        "threadId": _public(thread_id),
        "config": config,
    }
    _add_trigger(payload, trigger_details)
    return NewEvent(ACTIVATION.value, payload, f"activate-{cycle_id}")


def signal(
    *,
    cycle_id: str,
    operation: Operation,
    index: int,
    slug: str,
    kind: str,
    contents: str,
    sent_at: datetime,
    record_id: str,
    thread_id: StoredId | None,
) -> NewEvent:
    """One signal of cycle `cycle_id` (the `index`-th it sent): its own event id, so a cycle writes each
    of its signals once whatever delivers it again."""
    payload: SignalPayload = {
        "cycleId": cycle_id,
        "operationType": operation.value,
        "slug": slug,
        "type": kind,
        "contents": contents,
        "sentAt": iso(sent_at),
        "recordId": record_id,
        "threadId": _public(thread_id),
    }
    return NewEvent(SIGNAL.value, payload, f"signal-{index}-{cycle_id}")


def thread_update(
    *, cycle_id: str, thread_id: StoredId, old_title: str | None, new_title: str, timestamp: datetime
) -> NewEvent:
    payload: ThreadUpdatePayload = {
        "cycleId": cycle_id,
        "threadId": _public(thread_id),
        "newTitle": new_title,
        "timestamp": iso(timestamp),
    }
    if old_title:
        payload["oldTitle"] = old_title
    return NewEvent(THREAD_UPDATE.value, payload, f"title-{cycle_id}")


def observation_edit(
    *,
    cycle_id: str,
    action: Literal["update", "delete"],
    line: int,
    text: str | None,
    edited_at: datetime,
    record_id: str,
    previous_record_id: str,
    generation_count: int,
    observation_tokens: int,
    thread_id: StoredId | None,
    scope: str,
) -> NewEvent:
    """An edit of one log line. A delete carries no text at all: the line was forgotten, and the outbox
    must not keep what the log no longer holds."""
    payload: ObservationEditPayload = {
        "cycleId": cycle_id,
        "operationType": "edit",
        "action": action,
        "line": line,
        "editedAt": iso(edited_at),
        "recordId": record_id,
        "previousRecordId": previous_record_id,
        "generationCount": generation_count,
        "observationTokens": observation_tokens,
        "threadId": _public(thread_id),
        "scope": scope,
    }
    if text is not None:
        payload["text"] = text
    return NewEvent(OBSERVATION_EDIT.value, payload, cycle_id)
