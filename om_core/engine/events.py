"""Builders for the `data-om-*` event payloads (behaviour §10.1), camelCase as clients expect.

Events are written to the outbox in the transaction of the change they report; these functions only
shape the payloads so every use-case reports the same fields.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from om_core.store.types import ActivatedChunk, NewEvent
from om_core.tenancy.scoped_ids import StoredId, public_id


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


def _public(thread_id: StoredId | None) -> str | None:
    """Payloads are what clients read: they name the thread by the id its tenant chose."""
    return public_id(thread_id) if thread_id is not None else None


def iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def usage_fields(
    input_tokens: int, output_tokens: int, cost: float | None, model: str | None
) -> dict[str, Any]:
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


def _finished(
    cycle_id: str, operation: Operation, started_at: datetime, key: str, at: datetime
) -> dict[str, Any]:
    """The fields every end and failed event leads with: which cycle, what it did, when and how long."""
    return {
        "cycleId": cycle_id,
        "operationType": operation.value,
        key: iso(at),
        "durationMs": int((at - started_at).total_seconds() * 1000),
    }


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
    token_key = "tokensToBuffer" if kind == BUFFERING_START else "tokensToObserve"
    return NewEvent(
        kind.value,
        {
            "cycleId": cycle_id,
            "operationType": operation.value,
            "startedAt": iso(started_at),
            token_key: tokens,
            "recordId": record_id,
            "threadId": _public(thread_id),
            "threadIds": [public_id(thread_id)] if thread_id else [],
            "config": config,
        },
        cycle_id,
    )


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
    usage: dict[str, Any],
    seq_range: tuple[int, int] | None = None,
    extraction: dict[str, Any] | None = None,
) -> NewEvent:
    """`extraction` holds `extractedValues` / `extractionFailures` of inline extractors (behaviour §8.6.4),
    each present only when it has something."""
    payload: dict[str, Any] = {
        **_finished(cycle_id, operation, started_at, "completedAt", completed_at),
        "tokensObserved": tokens_observed,
        "observationTokens": observation_tokens,
        "observations": observations,
        "recordId": record_id,
        "threadId": _public(thread_id),
        **usage,
    }
    if seq_range is not None:
        payload["seqRange"] = list(seq_range)
    if current_task:
        payload["currentTask"] = current_task
    if suggested_response:
        payload["suggestedResponse"] = suggested_response
    payload.update(extraction or {})
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
    usage: dict[str, Any],
    extraction: dict[str, Any] | None = None,
) -> NewEvent:
    """`extraction` as in `observation_end`: the chunk waits for activation, its values are already
    persisted (behaviour §8.6.4)."""
    return NewEvent(
        BUFFERING_END.value,
        {
            **_finished(cycle_id, operation, started_at, "completedAt", completed_at),
            "tokensBuffered": tokens_buffered,
            "bufferedTokens": buffered_tokens,
            "observations": observations,
            "recordId": record_id,
            "threadId": _public(thread_id),
            **usage,
            **(extraction or {}),
        },
        cycle_id,
    )


def extraction_end(
    *,
    cycle_id: str,
    source: str,
    source_cycle_id: str,
    started_at: datetime,
    completed_at: datetime,
    record_id: str,
    thread_id: StoredId | None,
    usage: dict[str, Any],
    extraction: dict[str, Any],
) -> NewEvent:
    """The end of a structured extraction: `extractedValues` / `extractionFailures` of its extractors,
    and which cycle's output it read (`sourceCycleId`)."""
    return NewEvent(
        EXTRACTION_END.value,
        {
            **_finished(
                cycle_id,
                Operation.REFLECTION if source == "reflector" else Operation.OBSERVATION,
                started_at,
                "completedAt",
                completed_at,
            ),
            "source": source,
            "sourceCycleId": source_cycle_id,
            "recordId": record_id,
            "threadId": _public(thread_id),
            **usage,
            **extraction,
        },
        cycle_id,
    )


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
    usage: dict[str, Any] | None = None,
    retrying: bool = False,
    error_code: str | None = None,
) -> NewEvent:
    """`error_code` is the stable code of an error OM raised on purpose (`MODEL_TIER_EXCEEDED`, ...): a
    client branches on it rather than on the message text."""
    payload: dict[str, Any] = {
        **_finished(cycle_id, operation, started_at, "failedAt", failed_at),
        "tokensAttempted": tokens_attempted,
        "error": error,
        "recordId": record_id,
        "threadId": _public(thread_id),
        **(usage or {}),
    }
    if error_code is not None:
        payload["errorCode"] = error_code
    if retrying:
        payload["retrying"] = True
    return NewEvent(kind.value, payload, cycle_id)


def chunk_activation(
    chunk: ActivatedChunk,
    *,
    activated_at: datetime,
    generation_count: int,
    triggered_by: str,
    record_id: str,
    thread_id: StoredId | None,
    config: dict[str, Any],
    trigger_details: dict[str, Any],
) -> NewEvent:
    return NewEvent(
        ACTIVATION.value,
        {
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
            **trigger_details,
        },
        chunk.cycle_id,
    )


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
    trigger_details: dict[str, Any],
) -> NewEvent:
    return NewEvent(
        ACTIVATION.value,
        {
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
            **trigger_details,
        },
        f"activate-{cycle_id}",
    )


def thread_update(
    *, cycle_id: str, thread_id: StoredId, old_title: str | None, new_title: str, timestamp: datetime
) -> NewEvent:
    payload: dict[str, Any] = {
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
    action: str,
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
    payload: dict[str, Any] = {
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
