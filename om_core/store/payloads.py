"""The payload of every event OM writes to the outbox, as a type: what clients, hooks and webhooks read.

An event's payload is stored as JSON and read back by key in several places (hooks, metering, usage, the
dashboard, the SSE and webhook shells). Written as `dict[str, Any]`, a renamed or missing key went
unnoticed until a reader saw `None`. Here each event type has a `TypedDict`: the builders
(`om_core.engine.events`, the working-memory writer, the reminder marker) construct these, mypy checks
every key they write, and `tests/unit/test_event_payloads.py` validates the payload of every event a real
engine run publishes against the type of its event type (`PAYLOAD_TYPES`), extra keys refused.

Keys are camelCase because clients read them as they are (behaviour §10.1). Ids in a payload are public
ids (`om_core.tenancy.scoped_ids.PublicId`), never stored ones: a payload is what a tenant reads.

Readers of a stored payload (`lifecycle_fields`) get a view of the keys they may find: a payload read
from storage may have been written by an older version, so readers still check what they find.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, NotRequired, TypedDict, cast

from om_core.policy.decisions import StatusPayload
from om_core.tenancy.scoped_ids import PublicId

__all__ = [
    "PAYLOAD_TYPES",
    "ActivationPayload",
    "BufferingEndPayload",
    "ExtractionEndPayload",
    "ExtractionFields",
    "FailedPayload",
    "LifecycleFields",
    "ObservationEditPayload",
    "ObservationEndPayload",
    "StartPayload",
    "StatusPayload",
    "SystemReminderPayload",
    "ThreadUpdatePayload",
    "TokenUsage",
    "TriggerDetails",
    "UsageFields",
    "WorkingMemoryPayload",
    "lifecycle_fields",
]

OperationType = Literal["observation", "reflection"]


class TokenUsage(TypedDict):
    inputTokens: int
    outputTokens: int
    totalTokens: int


class UsageFields(TypedDict):
    """Model usage and cost on end and failed events, so operators see what memory costs."""

    usage: TokenUsage
    cost: float | None
    model: str | None


class ExtractionFields(TypedDict, total=False):
    """What inline or structured extractors produced (behaviour §8.6.4); each key only when non-empty."""

    extractedValues: dict[str, Any]
    extractionFailures: list[dict[str, str]]


class TriggerDetails(TypedDict, total=False):
    """Why an early activation ran (behaviour §4.7): a provider change, or an idle TTL that expired."""

    previousModel: str | None
    currentModel: str | None
    lastActivityAt: int
    ttlExpiredMs: int | None


class StartPayload(TypedDict):
    """`data-om-observation-start`, `data-om-buffering-start`, `data-om-extraction-start`."""

    cycleId: str
    operationType: OperationType
    startedAt: str
    #: A buffering start counts `tokensToBuffer`, any other start `tokensToObserve`.
    tokensToBuffer: NotRequired[int]
    tokensToObserve: NotRequired[int]
    recordId: str
    threadId: PublicId | None
    #: The threads of the cycle: its own, or every thread of a resource's multi-thread batch.
    threadIds: list[PublicId]
    config: dict[str, Any]


class ObservationEndPayload(TypedDict):
    """`data-om-observation-end`: a blocking cycle's result is in the log."""

    cycleId: str
    operationType: OperationType
    completedAt: str
    durationMs: int
    tokensObserved: int
    observationTokens: int
    observations: str
    recordId: str
    threadId: PublicId | None
    usage: TokenUsage
    cost: float | None
    model: str | None
    seqRange: NotRequired[list[int]]
    currentTask: NotRequired[str]
    suggestedResponse: NotRequired[str]
    extractedValues: NotRequired[dict[str, Any]]
    extractionFailures: NotRequired[list[dict[str, str]]]


class BufferingEndPayload(TypedDict):
    """`data-om-buffering-end`: a background cycle's result waits for activation."""

    cycleId: str
    operationType: OperationType
    completedAt: str
    durationMs: int
    tokensBuffered: int
    bufferedTokens: int
    observations: str
    recordId: str
    threadId: PublicId | None
    usage: TokenUsage
    cost: float | None
    model: str | None
    extractedValues: NotRequired[dict[str, Any]]
    extractionFailures: NotRequired[list[dict[str, str]]]


class ExtractionEndPayload(TypedDict):
    """`data-om-extraction-end`: a structured extraction of the output of cycle `sourceCycleId`."""

    cycleId: str
    operationType: OperationType
    completedAt: str
    durationMs: int
    source: str
    sourceCycleId: str
    recordId: str
    threadId: PublicId | None
    usage: TokenUsage
    cost: float | None
    model: str | None
    extractedValues: NotRequired[dict[str, Any]]
    extractionFailures: NotRequired[list[dict[str, str]]]


class FailedPayload(TypedDict):
    """`data-om-observation-failed`, `data-om-buffering-failed`, `data-om-extraction-failed`. `error` is
    text the tenant may read; `errorCode` the stable code of an error OM raised on purpose."""

    cycleId: str
    operationType: OperationType
    failedAt: str
    durationMs: int
    tokensAttempted: int
    error: str
    recordId: str
    threadId: PublicId | None
    usage: NotRequired[TokenUsage]
    cost: NotRequired[float | None]
    model: NotRequired[str | None]
    errorCode: NotRequired[str]
    retrying: NotRequired[bool]
    #: What the failed cycle observed before it failed (an Observer reply cut at its output limit), for
    #: display; nothing committed it.
    observations: NotRequired[str]


class ActivationPayload(TypedDict):
    """`data-om-activation`: a buffered chunk or reflection moved into the active log."""

    cycleId: str
    operationType: OperationType
    activatedAt: str
    chunksActivated: int
    tokensActivated: int
    observationTokens: int
    messagesActivated: int
    generationCount: int
    observations: str
    triggeredBy: str
    recordId: str
    threadId: PublicId | None
    config: dict[str, Any]
    #: The stored parts a chunk covers (an observation's activation only).
    seqRange: NotRequired[list[int]]
    #: What the activation this marker belongs to left behind (an observation's activation only): the
    #: chunks still buffered, the unobserved message tokens still in the window, and `partial` when those
    #: are at or above the message threshold, i.e. activating did not cover the pending tail and the rest
    #: is observed (past `blockAfter`) or buffered next. A partial activation never reads as complete.
    remainingChunks: NotRequired[int]
    remainingTokens: NotRequired[int]
    partial: NotRequired[bool]
    previousModel: NotRequired[str | None]
    currentModel: NotRequired[str | None]
    lastActivityAt: NotRequired[int]
    ttlExpiredMs: NotRequired[int | None]


class ThreadUpdatePayload(TypedDict):
    """`data-om-thread-update`: the Observer proposed a new title."""

    cycleId: str
    threadId: PublicId | None
    newTitle: str
    timestamp: str
    oldTitle: NotRequired[str]


class SignalPayload(TypedDict):
    """`data-om-signal`: an `onExtracted` callback's `send_signal` (the original's `sendSignal`), written
    with the values of cycle `cycleId`; `slug` names the extractor."""

    cycleId: str
    operationType: OperationType
    slug: str
    type: str
    contents: str
    sentAt: str
    recordId: str
    threadId: PublicId | None


class ObservationEditPayload(TypedDict):
    """`data-om-observation-edit`: a caller edited or deleted one log line. A delete carries no `text`."""

    cycleId: str
    operationType: Literal["edit"]
    action: Literal["update", "delete"]
    line: int
    editedAt: str
    recordId: str
    previousRecordId: str
    generationCount: int
    observationTokens: int
    threadId: PublicId | None
    scope: str
    text: NotRequired[str]


class SystemReminder(TypedDict):
    type: str
    message: str
    gapText: str
    gapMs: int
    timestamp: str
    timestampMs: int
    precedesMessageId: str


class SystemReminderPayload(TypedDict):
    """`data-system-reminder`: a temporal-gap marker was inserted before a message (its metadata)."""

    message: str | None
    reminderType: str
    gapText: str
    gapMs: int
    timestamp: str
    timestampMs: int
    precedesMessageId: str
    systemReminder: SystemReminder


class WorkingMemoryPayload(TypedDict):
    """`data-om-working-memory`: a new version of a working memory (thread or resource scope)."""

    scope: str
    threadId: PublicId | None
    resourceId: PublicId
    version: int
    format: str
    updatedBy: str
    content: Any


#: The payload type of every event type OM writes. A test checks that every `EventType` is here.
PAYLOAD_TYPES: Mapping[str, type[Any]] = {
    "data-om-status": StatusPayload,
    "data-om-observation-start": StartPayload,
    "data-om-buffering-start": StartPayload,
    "data-om-extraction-start": StartPayload,
    "data-om-observation-end": ObservationEndPayload,
    "data-om-buffering-end": BufferingEndPayload,
    "data-om-extraction-end": ExtractionEndPayload,
    "data-om-observation-failed": FailedPayload,
    "data-om-buffering-failed": FailedPayload,
    "data-om-extraction-failed": FailedPayload,
    "data-om-activation": ActivationPayload,
    "data-om-thread-update": ThreadUpdatePayload,
    "data-om-signal": SignalPayload,
    "data-om-observation-edit": ObservationEditPayload,
    "data-system-reminder": SystemReminderPayload,
    "data-om-working-memory": WorkingMemoryPayload,
}


class LifecycleFields(TypedDict, total=False):
    """The keys a reader of a cycle's start, end, failed or activation event may find (hooks, metering,
    usage): the union of those payloads, every key optional."""

    cycleId: str
    operationType: str
    threadId: PublicId | None
    tokensToObserve: int
    tokensToBuffer: int
    tokensObserved: int
    tokensBuffered: int
    observationTokens: int
    bufferedTokens: int
    durationMs: int
    observations: str
    usage: TokenUsage
    cost: float | None
    model: str | None
    error: str


def lifecycle_fields(payload: Mapping[str, Any]) -> LifecycleFields:
    """A stored payload seen through the keys its readers use. No copy and no check: a payload read back
    may predate a key, so readers keep checking the values they find."""
    return cast(LifecycleFields, payload)
