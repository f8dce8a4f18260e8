"""Plain values the storage layer returns: records, chunks and operation results."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from om_core.tenancy.scoped_ids import StoredId


@dataclass(frozen=True)
class Chunk:
    """A buffered observation chunk: one background Observer run's output and what it covers."""

    id: str
    cycle_id: str
    position: int
    observations: str
    token_count: int
    message_ids: list[str]
    message_tokens: int
    from_seq: int
    to_seq: int
    last_observed_at: datetime | None
    created_at: datetime
    current_task: str | None = None
    suggested_continuation: str | None = None
    thread_title: str | None = None
    state: str = "buffered"


@dataclass(frozen=True)
class ChunkInput:
    """What a buffering cycle hands to `append_chunk`. `to_seq` is the last part sequence it covers."""

    cycle_id: str
    observations: str
    token_count: int
    message_ids: list[str]
    message_tokens: int
    from_seq: int
    to_seq: int
    last_observed_at: datetime | None
    thread_id: StoredId | None = None
    current_task: str | None = None
    suggested_continuation: str | None = None
    thread_title: str | None = None


@dataclass(frozen=True)
class Record:
    """One generation of a lookup key's memory. `superseded_by is None` means it is the live head."""

    id: str
    lookup_key: str
    scope: str
    thread_id: StoredId | None
    resource_id: StoredId
    created_at: datetime
    updated_at: datetime
    origin_type: str
    generation_count: int
    superseded_by: str | None
    active_observations: str
    observation_token_count: int
    last_observed_seq: int
    last_observed_at: datetime | None
    last_buffered_seq: int
    last_buffered_at_time: datetime | None
    last_buffered_at_tokens: int
    buffered_reflection: str | None
    buffered_reflection_tokens: int | None
    buffered_reflection_input_tokens: int | None
    reflected_observation_line_count: int | None
    buffered_reflection_cycle_id: str | None
    pending_message_tokens: int
    total_tokens_observed: int
    is_observing: bool
    is_reflecting: bool
    is_buffering_observation: bool
    is_buffering_reflection: bool
    config: dict[str, Any]
    observed_timezone: str
    metadata: dict[str, Any]
    chunks: tuple[Chunk, ...] = ()

    @property
    def is_live(self) -> bool:
        return self.superseded_by is None

    @property
    def buffer_cursor(self) -> int:
        """How far observation work (activated or buffered) already reaches."""
        return max(self.last_buffered_seq, self.last_observed_seq)


@dataclass(frozen=True)
class AppendResult:
    persisted: bool
    record_id: str
    reason: str | None = None  # "duplicate" | "covered" | "retired-lineage" | None


@dataclass(frozen=True)
class ActivatedChunk:
    cycle_id: str
    message_tokens: int
    observation_tokens: int
    message_count: int
    observations: str
    message_ids: list[str]
    from_seq: int
    to_seq: int


@dataclass(frozen=True)
class ActivationResult:
    retired: bool = False
    chunks_activated: int = 0
    message_tokens_activated: int = 0
    observation_tokens_activated: int = 0
    messages_activated: int = 0
    activated_cycle_ids: list[str] = field(default_factory=list)
    activated_message_ids: list[str] = field(default_factory=list)
    per_chunk: list[ActivatedChunk] = field(default_factory=list)
    observations: str = ""
    current_task: str | None = None
    suggested_continuation: str | None = None
    thread_title: str | None = None
    record: Record | None = None

    @property
    def activated(self) -> bool:
        return self.chunks_activated > 0


@dataclass(frozen=True)
class WriteResult:
    applied: bool
    reason: str | None = None  # "retired" | "conflict" | "not-found" | "behind-cursor"
    record: Record | None = None


@dataclass(frozen=True)
class ThreadObservation:
    """One thread's share of a multi-thread observation (resource scope): its parts (from_seq, to_seq]
    observed into `observations`, shown in the shared log under `label`."""

    cursor_record_id: str
    thread_id: StoredId
    label: str
    from_seq: int
    to_seq: int
    observations: str
    token_count: int
    observed_message_tokens: int
    last_observed_at: datetime
    thread_metadata: dict[str, Any]


@dataclass(frozen=True)
class StoredEvent:
    id: int
    type: str
    thread_id: StoredId | None
    lookup_key: str
    record_id: str | None
    cycle_id: str | None
    payload: dict[str, Any]
    created_at: datetime


@dataclass(frozen=True)
class NewEvent:
    """An event to write in the same transaction as the change it reports."""

    type: str
    #: Built as the event type's `TypedDict` (`om_core.store.payloads`), stored as JSON.
    payload: Mapping[str, Any]
    cycle_id: str | None = None
    #: The thread whose stream reports it, when not the record's own (a resource's shared log has none).
    thread_id: StoredId | None = None


@dataclass(frozen=True)
class ObservationGroup:
    """One observation group (retrieval mode, behaviour §9.1) as stored: `ranges` points at the raw messages
    (public message ids of `thread_id`, or of several threads of the resource for a reflection's group);
    `text` is the observations without the wrapper; `key` the log it joined."""

    id: str
    thread_id: StoredId
    resource_id: StoredId
    key: str
    cycle_id: str
    kind: str  # observation | reflection
    ranges: str
    text: str
    observed_at: datetime
