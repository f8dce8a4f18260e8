"""The response bodies of the om API (and the one request model a client builds, `TurnMessage`), defined
once: the server's `om_api.schemas` imports them from here, so what a client parses is what the server's
OpenAPI document describes. This module imports only pydantic and `om_client.messages`.

Conventions: the envelope fields are snake_case; the OM payloads (`data-om-status` and the event parts)
keep the camelCase names of behaviour §10.1, which chat clients already read; messages and parts use the chat
SDK shape of `om_client.messages` (camelCase, `toolCallId`, `createdAt`). Unknown fields in a request are
refused (422 naming the field), so a typo never silently does nothing; responses ignore fields a newer
server adds.
"""

from __future__ import annotations

import re
import uuid
from datetime import datetime
from typing import Annotated, Any, Generic, Literal, Protocol, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    StringConstraints,
    model_serializer,
    model_validator,
)
from pydantic.alias_generators import to_camel

from om_client.messages import (
    SPEAKER_KEY,
    SPEAKER_NAME_MAX,
    SPEAKER_NAME_PATTERN,
    JsonDateTime,
    Message,
    Part,
    Role,
    speaker_name_problem,
)


class UsageCounts(Protocol):
    """What `OMUsage.of` reads (the server's `om_core.store.usage.UsageTotals`)."""

    @property
    def input_tokens(self) -> int: ...
    @property
    def output_tokens(self) -> int: ...
    @property
    def total_tokens(self) -> int: ...
    @property
    def cost_usd(self) -> float: ...
    @property
    def cycles(self) -> int: ...


#: Thread, resource and message ids: what chat backends use (uuids, slugs, `user:42`, emails), nothing that
#: needs escaping in a URL path or cannot be stored.
ID_PATTERN = r"^[A-Za-z0-9._:@+=~-]{1,255}$"


Identifier = Annotated[str, StringConstraints(pattern=ID_PATTERN, min_length=1, max_length=255)]


_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def find_unstorable(value: object, path: str = "") -> str | None:
    """The path of the first string Postgres cannot store (NUL, unpaired surrogate), or None."""
    if isinstance(value, str):
        return path if _UNSTORABLE.search(value) else None
    if isinstance(value, dict):
        for key, item in value.items():
            found = find_unstorable(key, path) or find_unstorable(item, f"{path}.{key}" if path else str(key))
            if found is not None:
                return found
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = find_unstorable(item, f"{path}[{index}]")
            if found is not None:
                return found
    return None


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Response(BaseModel):
    model_config = ConfigDict(extra="ignore")


class _CamelResponse(BaseModel):
    model_config = ConfigDict(extra="ignore", alias_generator=to_camel, populate_by_name=True)


class StoredPart(Part):
    """A stored part as the API returns it: fields that do not apply to its kind are left out."""

    @model_serializer(mode="wrap")
    def _compact(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        return {k: v for k, v in data.items() if v is not None} if isinstance(data, dict) else data


class StoredMessage(Message):
    """A stored message; each part carries its storage sequence number `seq`."""

    parts: list[StoredPart] = Field(default_factory=list)  # type: ignore[assignment]

    @classmethod
    def of(cls, message: Message) -> StoredMessage:
        """The API copy of a stored message, without OM's own per-part bookkeeping (token estimates)."""
        data = message.model_dump(mode="json", by_alias=True, exclude_none=True)
        for part in data.get("parts", []):
            provider = part.get("providerMetadata")
            if isinstance(provider, dict) and "om" in provider:
                rest = {k: v for k, v in provider.items() if k != "om"}
                if rest:
                    part["providerMetadata"] = rest
                else:
                    del part["providerMetadata"]
        return cls.model_validate(data)


#: The text-xor-parts rule of `TurnMessage._text_or_parts`, as JSON Schema: exactly one of the two is given
#: (not null), so a client generated from the OpenAPI document knows it too.
_TEXT_XOR_PARTS: dict[str, Any] = {
    "oneOf": [
        {"required": ["text"], "properties": {"text": {"type": "string"}, "parts": {"type": "null"}}},
        {"required": ["parts"], "properties": {"parts": {"type": "array"}, "text": {"type": "null"}}},
    ]
}


class TurnMessage(_Request):
    """A new message of a turn: `text` for the common case, or `parts` (chat SDK parts) for anything else.

    `id` makes a retried request safe (a message already stored is not stored again); without it the server
    assigns a random id.
    """

    model_config = ConfigDict(extra="forbid", json_schema_extra=_TEXT_XOR_PARTS)

    id: Identifier | None = None
    role: Role
    text: str | None = None
    parts: list[Part] | None = Field(default=None, min_length=1)
    created_at: JsonDateTime | None = None
    #: Who wrote the message, when several people share a thread (OpenAI's message `name`). Stored as
    #: `metadata.name`; the Observer's transcript shows it, so each fact is attributed to its speaker.
    name: str | None = Field(
        default=None,
        max_length=SPEAKER_NAME_MAX,
        description=(
            "Who wrote the message, when several people share the thread (like OpenAI's message `name`): "
            f"1-{SPEAKER_NAME_MAX} letters, digits, _ . ' - or inner spaces. Stored as the message's "
            "`metadata.name`; the Observer attributes what this person said to them by name."
        ),
        json_schema_extra={"pattern": SPEAKER_NAME_PATTERN},
    )
    metadata: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _text_or_parts(self) -> TurnMessage:
        if (self.text is None) == (self.parts is None):
            raise ValueError("give exactly one of 'text' (a string) or 'parts' (a list of message parts)")
        where = find_unstorable(self.model_dump(mode="python", exclude_none=True))
        if where is not None:
            raise ValueError(f"{where} contains a NUL character or an unpaired surrogate; remove it")
        self._check_speaker()
        return self

    def _check_speaker(self) -> None:
        """`name` and `metadata.name` are one value (the speaker): each valid, equal when both are given."""
        stored = self.metadata.get(SPEAKER_KEY)
        for where, value in (("name", self.name), (f"metadata.{SPEAKER_KEY}", stored)):
            problem = speaker_name_problem(value) if value is not None else None
            if problem is not None:
                raise ValueError(f"{where} (the speaker's name) {problem}")
        if self.name is not None and stored is not None and stored != self.name:
            raise ValueError(
                f"name {self.name!r} and metadata.{SPEAKER_KEY} {stored!r} disagree: they are the same "
                "value (the speaker's name); give one of them"
            )

    def to_message(self) -> Message:
        parts = self.parts if self.parts is not None else [Part(type="text", text=self.text)]
        values: dict[str, Any] = {
            "id": self.id or f"msg-{uuid.uuid4().hex}",
            "role": self.role,
            "parts": [p.model_copy(update={"seq": None}) for p in parts],
            "metadata": self.metadata if self.name is None else {**self.metadata, SPEAKER_KEY: self.name},
        }
        if self.created_at is not None:
            values["created_at"] = self.created_at
        return Message(**values)


#: What a `/turns` call answers with (`TurnRequest.context`).
ContextForm = Literal["full", "messages", "openai", "none"]


class TokenWindow(_Response):
    tokens: int
    threshold: int


class ActiveWindows(_Response):
    messages: TokenWindow
    observations: TokenWindow


RunStatus = Literal["idle", "running", "complete"]


class BufferedObservationsStatus(_CamelResponse):
    chunks: int
    message_tokens: int
    projected_message_removal: int
    observation_tokens: int
    status: RunStatus


class BufferedReflectionStatus(_CamelResponse):
    input_observation_tokens: int
    observation_tokens: int
    status: RunStatus


class BufferedWindows(_Response):
    observations: BufferedObservationsStatus
    reflection: BufferedReflectionStatus


class StatusWindows(_Response):
    active: ActiveWindows
    buffered: BufferedWindows


class StatusPayload(_CamelResponse):
    """The `data` of a `data-om-status` part (behaviour §10.1)."""

    windows: StatusWindows
    record_id: str
    thread_id: str | None
    step_number: int
    generation_count: int


class OMEvent(_Response):
    """One `data-om-*` part from the thread's outbox; `id` is its outbox id (events are ordered by it).

    `cursor` is set on events read from the live stream: pass the last one back as `last_event_id` to
    resume after a disconnect without missing or repeating an event.
    """

    id: int
    type: str
    data: dict[str, Any]
    cursor: str | None = None


class TurnContext(_Response):
    form: ContextForm = Field(
        default="full",
        description="The form answered with: `TurnRequest.context`, or the form it defaults to",
    )
    system_messages: list[str] = Field(
        description="Memory messages to put before the conversation: stable log first, then hints"
    )
    continuation_reminder: str = Field(description="Goes right before the unobserved messages; may be empty")
    messages: list[StoredMessage] = Field(description="The stored messages not yet covered by observations")
    openai_messages: list[dict[str, Any]] = Field(
        description="All of the above as chat-completions messages, ready to send to the actor model"
    )
    tools: list[dict[str, Any]] = Field(
        default_factory=list,
        description=(
            "Tools to offer the actor model, in the chat-completions `tools` format: the `recall` tool when "
            "the thread has `retrieval` on (answer its calls with POST /v1/threads/{id}/recall), and "
            "`updateWorkingMemory` when the actor manages its working memory (send its arguments to "
            "PUT /v1/threads/{id}/working-memory), else empty"
        ),
    )


class TurnResponse(_Response):
    thread_id: str
    resource_id: str
    record_id: str
    context: TurnContext | None = Field(description="The actor's context; null when asked for `none`")
    status: StatusPayload
    events: list[OMEvent]
    blocked: bool = Field(description="The turn waited for a synchronous observation or reflection")
    degraded: bool = Field(description="The wait failed or passed its deadline: the context is uncompressed")
    degraded_reason: str | None = None


class ActiveLog(_Response):
    record_id: str
    generation_count: int
    observations: str
    observation_tokens: int
    last_observed_at: datetime | None
    observed_through_seq: int
    total_tokens_observed: int


class BufferedChunk(_Response):
    cycle_id: str
    observations: str
    observation_tokens: int
    message_tokens: int
    message_ids: list[str]
    from_seq: int
    to_seq: int
    created_at: datetime
    last_observed_at: datetime | None


class BufferedReflection(_Response):
    observations: str
    observation_tokens: int
    input_observation_tokens: int
    reflected_line_count: int
    cycle_id: str | None


class Generation(_Response):
    record_id: str
    generation_count: int
    created_at: datetime
    retired_at: datetime
    observations: str
    observation_tokens: int


class ObservationsResponse(_Response):
    thread_id: str
    resource_id: str
    active: ActiveLog | None
    buffered_chunks: list[BufferedChunk]
    buffered_reflection: BufferedReflection | None
    generations: list[Generation] = Field(description="Retired generations, newest first")
    current_task: str | None
    suggested_response: str | None
    title: str | None


ItemT = TypeVar("ItemT")


class Page(_Response, Generic[ItemT]):
    """Every list the API returns: one page of `items`, and the cursor of the next page
    (`om_core.pagination`). Ask for a page with `limit` (1-500, default 50) and `cursor` (the previous
    page's `next_cursor`); `next_cursor` is null on the last page. Cursors are opaque: pass them back
    unchanged."""

    items: list[ItemT]
    next_cursor: str | None = Field(
        default=None, description="Pass as `cursor` for the next page; null on the last page"
    )


class MessagesResponse(Page[StoredMessage]):
    """`items` newest page first, each page in conversation order. `messages` and `next_before_seq` are
    the same page in the names this response had before pagination was unified (kept for older callers)."""

    thread_id: str
    messages: list[StoredMessage] = Field(description="The same as items (kept for older callers)")
    next_before_seq: int | None = Field(description="Pass as before_seq for the previous (older) page")


class ThreadInfo(_Response):
    thread_id: str
    resource_id: str
    title: str | None
    metadata: dict[str, Any] = Field(default_factory=dict, description="The caller's own thread metadata")
    created_at: datetime
    updated_at: datetime
    last_activity_at: datetime | None
    last_actor_model: str | None
    config_overrides: dict[str, Any] | None
    messages: int = Field(default=0, description="Messages stored in the thread")
    cost_usd: float = Field(
        default=0.0, description="litellm's cost of OM's own model calls for this thread (not the actor's)"
    )


class ThreadsResponse(Page[ThreadInfo]):
    """A resource's threads, oldest first. `threads` is the same as `items` (kept for older callers)."""

    resource_id: str
    threads: list[ThreadInfo] = Field(description="The same as items (kept for older callers)")


class ThreadCounts(_Response):
    messages: int
    observed_messages: int = Field(description="Messages every part of which is covered by observations")
    unobserved_messages: int = Field(description="Messages with parts after the cursor (reach the actor raw)")
    observation_tokens: int = Field(description="Tokens of the active log the thread reads")
    generations: int = Field(description="Generations of that log: the live one and the retired ones")
    buffered_chunks: int


class OMUsage(_Response):
    """OM's own model calls (Observer, Reflector) for this thread: tokens, litellm's cost, cycles."""

    input_tokens: int
    output_tokens: int
    total_tokens: int
    cost_usd: float = Field(description="litellm's cost of those calls; 0 for models it has no price for")
    cycles: int = Field(description="Cycles that reported usage (each end or failed event once)")

    @classmethod
    def of(cls, totals: UsageCounts) -> OMUsage:
        return cls(
            input_tokens=totals.input_tokens,
            output_tokens=totals.output_tokens,
            total_tokens=totals.total_tokens,
            cost_usd=totals.cost_usd,
            cycles=totals.cycles,
        )


class ThreadDetail(ThreadInfo):
    scope: Literal["thread", "resource"] = Field(
        description="Whose log the thread reads: its own, or its resource's shared log"
    )
    counts: ThreadCounts
    extracted: dict[str, Any] = Field(
        default_factory=dict,
        description="Each configured extractor's persisted value by slug (read from its metadataKeyPath; "
        "extractors with metadataKeyPath false are not stored and not shown)",
    )
    usage: OMUsage = Field(description="OM's own model usage and cost for this thread (not the actor's)")


class ObservationEditResponse(_Response):
    thread_id: str
    action: Literal["update", "delete"]
    line: int
    cycle_id: str = Field(description="The cycleId of the data-om-observation-edit event")
    record_id: str = Field(description="The new generation")
    previous_record_id: str
    generation_count: int
    observation_tokens: int
    observations: str = Field(description="The new active log (its lines are what the next edit addresses)")


class OperationResponse(_Response):
    thread_id: str
    operation: Literal["observation", "reflection"]
    cycle_id: str
    completed: bool = Field(
        description="The work finished before the deadline (always false when wait=false)"
    )
    applied: bool = Field(description="The memory changed (an end event of this operation was written)")
    error: str | None = None
    events: list[OMEvent]
    status: StatusPayload | None


class ConfigResponse(_Response):
    thread_id: str
    overrides: dict[str, Any] | None
    resource_overrides: dict[str, Any] | None = Field(
        default=None,
        description="The overrides of the thread's resource, which the thread's own are merged over",
    )
    effective: dict[str, Any] = Field(
        description="The service config with the resource's overrides, then the thread's, applied"
    )
    warnings: list[str] = Field(
        default_factory=list,
        description="Options of the effective config that are accepted but have no effect, each with why "
        "(e.g. observation.bufferOnIdle while async buffering is off)",
    )
    models: dict[str, Any] = Field(
        default_factory=dict,
        description="The models the effective config resolves to, `observer` and `reflector` (a model, a "
        'fallback list, or `{"upTo": {...}}` tiers; the default model when none is set)',
    )


class ResourceConfigResponse(_Response):
    resource_id: str
    overrides: dict[str, Any] | None
    effective: dict[str, Any] = Field(
        description="The service config with the resource's overrides applied (before any thread's own)"
    )


class HealthResponse(_Response):
    status: Literal["ok"]


class CheckResult(_Response):
    ok: bool
    detail: str | None = None


class ReadinessResponse(_Response):
    status: Literal["ready", "unavailable"]
    checks: dict[str, CheckResult]


class MemoryBudget(_Response):
    """The tenant's spend on memory models (Observer, Reflector, ...) today, against its daily budget."""

    daily_budget_usd: float | None = Field(
        description="The tenant's memory-model budget per UTC day; null: no budget"
    )
    spent_today_usd: float = Field(
        description="OM's model cost for the tenant's threads since the last UTC midnight"
    )
    paused: bool = Field(
        description="Observation is paused (turns go on uncompressed) because the budget is spent"
    )
    day: str = Field(description="The UTC day counted, YYYY-MM-DD")
    resets_at: JsonDateTime = Field(description="The next UTC midnight, when the day's spend starts from 0")


class KeyUsageResponse(_Response):
    """What the calling API key spent on actor models through `/v1/chat/completions`, and its tenant's
    memory-model budget."""

    key_id: str = Field(description="The key's public id (`omk_...`)")
    tenant_id: str
    calls: int = Field(description="Actor-model calls that returned an answer (streamed ones once complete)")
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float = Field(description="litellm's cost of those calls; 0 for models it has no price for")
    memory_budget: MemoryBudget | None = Field(
        default=None,
        description="The tenant's memory-model spend today against its budget (null from older servers)",
    )


class FieldError(_Response):
    field: str
    message: str


class ErrorDetail(_Response):
    code: str
    message: str
    field: str | None = None
    limit: int | None = None
    errors: list[FieldError] | None = None
    request_id: str | None = Field(
        default=None, description="The request's id, as in its X-Request-ID header: quote it to the operator"
    )


class ErrorResponse(_Response):
    error: ErrorDetail


class SearchResult(_Response):
    kind: Literal["group", "message"] = Field(description="An observation group or one raw message")
    id: str = Field(description="The group id, or the message id")
    thread_id: str
    text: str
    at: datetime = Field(description="When the message was written or the group observed")
    score: float = Field(description="Reciprocal-rank fusion score; higher is better")
    ranges: str | None = Field(
        default=None, description="A group's raw-message range (`start:end`, comma-separated when merged)"
    )
    sources: list[Literal["lexical", "vector"]] = Field(description="Which rankers found it")


class SearchResponse(_Response):
    resource_id: str
    results: list[SearchResult]
    count: int


# ---------------------------------------------------------------------------------------------- proxy


class ModelCard(_Response):
    """One actor model the proxy may call (`GET /v1/models`), in OpenAI's shape."""

    id: str = Field(description="The model name to send as `model` (`provider/model`)")
    object: Literal["model"] = "model"
    created: int = Field(description="Unix time; om does not know when a provider made the model: 0")
    owned_by: str = Field(description="The provider part of the name (`openai`, `anthropic`, ...)")


class ModelList(_Response):
    """`GET /v1/models`: the actor models the operator allows (`OM_ACTOR_MODELS`), in OpenAI's list shape."""

    object: Literal["list"] = "list"
    data: list[ModelCard]
