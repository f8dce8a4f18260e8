"""Request and response bodies of the HTTP API, shared by the server and `om_api.client`.

Conventions: the envelope fields are snake_case; the OM payloads (`data-om-status` and the event parts)
keep the camelCase names of spec §10.1, which chat clients already read; messages and parts use the chat
SDK shape of `om_core.messages` (camelCase, `toolCallId`, `createdAt`). Unknown fields in a request are
refused (422 naming the field), so a typo never silently does nothing; responses ignore fields a newer
server adds.
"""

from __future__ import annotations

import json
import re
import uuid
from datetime import datetime
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    StringConstraints,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic.alias_generators import to_camel

from om_core import Message, Part, Role
from om_core.store.usage import UsageTotals

#: Thread, resource and message ids: what chat backends use (uuids, slugs, `user:42`, emails), nothing that
#: needs escaping in a URL path or cannot be stored.
ID_PATTERN = r"^[A-Za-z0-9._:@+=~-]{1,255}$"
Identifier = Annotated[str, StringConstraints(pattern=ID_PATTERN, min_length=1, max_length=255)]
ModelName = Annotated[str, StringConstraints(pattern=r"^[^\s\x00-\x1f\x7f]{1,255}$", max_length=255)]

#: The actor's provider options are a few settings; anything larger is not what the field is for.
MAX_PROVIDER_OPTIONS_BYTES = 16_384

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


# ------------------------------------------------------------------------------------------- messages


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


class TurnMessage(_Request):
    """A new message of a turn: `text` for the common case, or `parts` (chat SDK parts) for anything else.

    `id` makes a retried request safe (a message already stored is not stored again); without it the server
    assigns a random id.
    """

    id: Identifier | None = None
    role: Role
    text: str | None = None
    parts: list[Part] | None = Field(default=None, min_length=1)
    created_at: datetime | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _text_or_parts(self) -> TurnMessage:
        if (self.text is None) == (self.parts is None):
            raise ValueError("give exactly one of 'text' (a string) or 'parts' (a list of message parts)")
        where = find_unstorable(self.model_dump(mode="python", exclude_none=True))
        if where is not None:
            raise ValueError(f"{where} contains a NUL character or an unpaired surrogate; remove it")
        return self

    def to_message(self) -> Message:
        parts = self.parts if self.parts is not None else [Part(type="text", text=self.text)]
        values: dict[str, Any] = {
            "id": self.id or f"msg-{uuid.uuid4().hex}",
            "role": self.role,
            "parts": [p.model_copy(update={"seq": None}) for p in parts],
            "metadata": self.metadata,
        }
        if self.created_at is not None:
            values["created_at"] = self.created_at
        return Message(**values)


# ------------------------------------------------------------------------------------------- requests


#: What a `/turns` call answers with (`TurnRequest.context`).
ContextForm = Literal["full", "messages", "openai", "none"]


class TurnRequest(_Request):
    resource_id: Identifier | None = Field(
        default=None, description="The user or entity the thread belongs to; defaults to the thread id"
    )
    messages: list[TurnMessage] = Field(default_factory=list, description="New messages of this turn")
    actor_model: ModelName | None = Field(
        default=None, description="The chat model answering this turn (`provider/model`)"
    )
    step_number: int = Field(default=0, ge=0, le=1_000_000)
    turn_end: bool | None = Field(
        default=None, description="Whether the turn is finished; defaults to 'the last message is the reply'"
    )
    context: ContextForm = Field(
        default="full",
        description=(
            "What to answer with: `full` (the context as stored messages and as chat-completions messages), "
            "`messages` or `openai` (only that form; the other list is empty), or `none` (no context: "
            "`context` is null, for a call whose answer the caller will not send to its model, such as "
            "posting the assistant's reply). Status, events and blocking are the same in every form"
        ),
    )
    actor_provider_options: dict[str, dict[str, Any]] | None = Field(
        default=None,
        description=(
            "The provider options of the actor's call, by provider, as sent to it "
            '(`{"anthropic": {"cacheControl": {"type": "ephemeral", "ttl": "1h"}}}`, '
            '`{"openai": {"promptCacheRetention": "24h"}}`): `activateAfterIdle: "auto"` reads them to '
            "know how long the actor's prompt cache stays warm"
        ),
    )

    @field_validator("actor_provider_options")
    @classmethod
    def _small_plain_options(
        cls, value: dict[str, dict[str, Any]] | None
    ) -> dict[str, dict[str, Any]] | None:
        if value is None:
            return None
        if len(json.dumps(value, default=str)) > MAX_PROVIDER_OPTIONS_BYTES:
            raise ValueError(
                f"is larger than {MAX_PROVIDER_OPTIONS_BYTES} bytes as JSON; "
                "send only the provider options of the actor's call"
            )
        if any(not name or len(name) > 64 for name in value):
            raise ValueError("provider names must be 1 to 64 characters (e.g. 'anthropic', 'openai')")
        where = find_unstorable(value)
        if where is not None:
            raise ValueError(f"{where} contains a NUL character or an unpaired surrogate; remove it")
        return value


class ObserveRequest(_Request):
    wait: bool = Field(default=True, description="Wait (up to the blocking deadline) for the observation")


class ReflectRequest(_Request):
    prompt: str | None = Field(
        default=None, max_length=20_000, description="Extra guidance for the Reflector"
    )
    wait: bool = Field(default=True, description="Wait (up to the blocking deadline) for the reflection")

    @field_validator("prompt")
    @classmethod
    def _storable(cls, value: str | None) -> str | None:
        if value is not None and find_unstorable(value) is not None:
            raise ValueError("contains a NUL character or an unpaired surrogate; remove it")
        return value


class ConfigRequest(_Request):
    overrides: dict[str, Any] | None = Field(
        default=None, description="OM options for this thread (camelCase, as in the config); null clears"
    )
    resource_id: Identifier | None = Field(
        default=None, description="Create the thread under this resource if it does not exist yet"
    )


# ------------------------------------------------------------------------------------------ status


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
    """The `data` of a `data-om-status` part (spec §10.1)."""

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


# ---------------------------------------------------------------------------------------- responses


class TurnContext(_Response):
    form: ContextForm = Field(default="full", description="The form asked for (`TurnRequest.context`)")
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


class RecallResponse(_CamelResponse):
    """One recall answer (spec §9.4); which fields are present depends on the mode. Messages mode:
    `messages`, `count`, `cursor`, `page`, `limit`, `detail`, `hasNextPage`, `hasPrevPage` (plus
    `truncated` and `tokenOffset` when the token budget cut it). With `partIndex`: `text`, `messageId`,
    `partIndex`, `role`, `type`, `truncated` (plus `nextCharOffset`, and `note` when the part was not
    there and the next message's first part is shown). Threads: `threads`, `count`, `page`, `hasMore`.
    Search: `results`, `count`."""

    messages: str | None = None
    threads: str | None = None
    results: str | None = None
    text: str | None = None
    count: int | None = None
    cursor: str | None = None
    page: int | None = None
    limit: int | None = None
    detail: Literal["low", "high"] | None = None
    has_next_page: bool | None = None
    has_prev_page: bool | None = None
    has_more: bool | None = None
    truncated: bool | None = None
    token_offset: int | None = None
    message_id: str | None = None
    part_index: int | None = None
    role: str | None = None
    type: str | None = None
    next_char_offset: int | None = None
    note: str | None = None


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
    def of(cls, totals: UsageTotals) -> OMUsage:
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


#: A thread's caller metadata is a small JSON object; anything larger belongs in the caller's own store.
MAX_THREAD_METADATA_BYTES = 16_384
MAX_TITLE_CHARS = 1_000


class ThreadPatch(_Request):
    """Fields to change; a field left out is kept, `null` clears it. `metadata` replaces the caller's
    metadata as a whole (OM's own values of the thread are never part of it)."""

    title: str | None = Field(default=None, max_length=MAX_TITLE_CHARS)
    metadata: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _something_to_change(self) -> ThreadPatch:
        if not self.model_fields_set:
            raise ValueError("nothing to change: send title and/or metadata")
        return self

    @field_validator("title")
    @classmethod
    def _title(cls, value: str | None) -> str | None:
        if value is not None and (not value.strip() or _UNSTORABLE.search(value) or "\n" in value):
            raise ValueError("a title is one non-blank line (null clears it)")
        return value

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is None:
            return None
        size = len(json.dumps(value, ensure_ascii=False).encode())
        if size > MAX_THREAD_METADATA_BYTES:
            raise ValueError(f"metadata is {size} bytes as JSON; at most {MAX_THREAD_METADATA_BYTES}")
        bad = find_unstorable(value)
        if bad is not None:
            raise ValueError(f"metadata.{bad} holds a NUL or an unpaired surrogate, which cannot be stored")
        return value


class ObservationLineEdit(_Request):
    text: str = Field(description="The line's new text: one line of prose, not blank, not a tag")
    expected_sha256: str = Field(
        pattern=r"^[0-9a-f]{64}$",
        description="SHA-256 (hex) of the line's UTF-8 text as you read it: the edit is refused with 409 "
        "when the line is no longer that text",
    )


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


class ResourceConfigRequest(_Request):
    overrides: dict[str, Any] | None = Field(
        default=None,
        description="OM options for every thread of this resource (camelCase, as in the config); a thread's "
        "own overrides are merged over them; null clears",
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


class KeyUsageResponse(_Response):
    """What the calling API key spent on actor models through `/v1/chat/completions`."""

    key_id: str = Field(description="The key's public id (`omk_...`)")
    tenant_id: str
    calls: int = Field(description="Actor-model calls that returned an answer (streamed ones once complete)")
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float = Field(description="litellm's cost of those calls; 0 for models it has no price for")


# ------------------------------------------------------------------------------------------- dashboard


class WhoAmI(_Response):
    """Who the caller is to this server: what the dashboard asks before it shows a sign-in form."""

    auth: Literal["key", "none"] = Field(
        description="`key`: requests carry an API key; `none`: authentication is off (om up), no sign-in"
    )
    tenant_id: str | None = Field(description="The key's tenant; null when authentication is off")
    flower_url: str | None = Field(description="Where the operator's Flower is (OM_FLOWER_URL); null: none")


class ResourceSummary(_Response):
    """A resource with the totals of its threads."""

    id: str = Field(description="The resource's id")
    threads: int
    messages: int = Field(description="Messages stored in all its threads")
    last_activity_at: datetime | None = Field(description="The newest turn of any of its threads")
    cost_usd: float = Field(description="litellm's cost of OM's own model calls for its threads")


class QueueDepth(_Response):
    name: str = Field(description="A Celery queue of the task table (ARCHITECTURE.md, the operations table)")
    depth: int = Field(description="Messages waiting in the broker (not those a worker already took)")


class WorkerSeen(_Response):
    name: str = Field(description="The worker's Celery hostname")
    queues: list[str] = Field(description="The queues it consumes")


class RecentFailure(_Response):
    thread_id: str | None = Field(description="The thread; null for a resource's shared log")
    type: str = Field(description="The failure event's type (`data-om-buffering-failed`, ...)")
    error: str
    at: datetime


class FleetResponse(_Response):
    """The background machinery as the caller may see it. Queue depths and workers are the operator's
    facts, the same for every tenant; failures and usage are the caller's own."""

    executor: Literal["celery", "inline"] = Field(
        description="celery: workers run background work; inline: the API process does"
    )
    queues: list[QueueDepth] = Field(description="Every queue's depth (empty inline: there is no broker)")
    workers: list[WorkerSeen] = Field(
        description="Workers that answered within about a second (empty inline)"
    )
    recent_failures: list[RecentFailure] = Field(
        description="The caller's last 20 failed cycles, newest first"
    )
    usage: KeyUsageResponse | None = Field(
        description="The calling key's actor-model usage (as GET /v1/usage); null without keys"
    )
    om_usage: OMUsage = Field(
        description="OM's own model usage and cost (Observer, Reflector) of the caller's tenant"
    )
    flower_url: str | None = Field(description="Where the operator's Flower is (OM_FLOWER_URL); null: none")


class DiffLineOut(_Response):
    op: Literal["kept", "added", "removed"]
    text: str


class GenerationDiffResponse(_Response):
    """What the reflection (or line edit) that made a generation changed: its log against the previous
    generation's, line by line. Lines appended to the generation after its reflection show as added too."""

    generation: int
    previous_generation: int | None = Field(description="The generation compared against; null: the first")
    lines: list[DiffLineOut]


class FieldError(_Response):
    field: str
    message: str


class ErrorDetail(_Response):
    code: str
    message: str
    field: str | None = None
    limit: int | None = None
    errors: list[FieldError] | None = None


class ErrorResponse(_Response):
    error: ErrorDetail


# ---------------------------------------------------------------------------------------------- proxy


class ChatMessage(BaseModel):
    """A chat-completions message; fields beyond these are passed through to the model unchanged."""

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None


class ChatCompletionRequest(BaseModel):
    """A standard chat-completions request; OM reads `metadata.thread_id` / `metadata.resource_id` (or the
    `X-OM-Thread-Id` / `X-OM-Resource-Id` headers). Extra fields are accepted here only to be checked
    against the proxy's allow-list (`om_api.proxy_params.FORWARDED_FIELDS`): one not on it is a 422."""

    model_config = ConfigDict(extra="allow")

    model: ModelName
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False
    metadata: dict[str, Any] | None = None
    user: str | None = None


class ChatCompletionResponse(BaseModel):
    """A standard chat-completions response (OpenAI shape)."""

    model_config = ConfigDict(extra="allow")

    id: str
    object: str = "chat.completion"
    created: int
    model: str
    choices: list[dict[str, Any]]
    usage: dict[str, Any] | None = None


# --------------------------------------------------------------------------------------------- search


class SearchBody(_Request):
    """A search of a resource's (or one thread's) raw messages and observation groups."""

    query: str = Field(min_length=1, max_length=2_000, description="Words, codes or a question")
    limit: int = Field(default=10, ge=1, le=50, description="Most results (1-50)")
    thread_ids: list[Identifier] | None = Field(
        default=None,
        max_length=100,
        description="Only these threads of the resource (resource search only; ignored threads of other "
        "resources simply match nothing)",
    )
    after: datetime | None = Field(default=None, description="Only hits written or observed after this time")
    before: datetime | None = Field(
        default=None, description="Only hits written or observed before this time"
    )
    kinds: list[Literal["group", "message"]] | None = Field(
        default=None, description="Only observation groups, only raw messages, or both (default)"
    )


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


# ------------------------------------------------------------------------------------- working memory


class WorkingMemoryPut(_Request):
    """A new working memory, whole (it replaces what is stored)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    content: str | dict[str, Any] = Field(
        description="Markdown text; in schema mode the JSON object (or its JSON text), valid against "
        "workingMemory.schema"
    )
    expected_version: int | None = Field(
        default=None,
        ge=0,
        alias="expectedVersion",
        description="The version you read (0: never written); the write is refused with 409 when the "
        "memory is at another version. Leave out to write whatever is stored",
    )


class WorkingMemoryResponse(_Response):
    scope: Literal["thread", "resource"]
    format: Literal["markdown", "json"]
    content: str | dict[str, Any] = Field(
        description="The memory: Markdown text, or the JSON object in schema mode; the template (or {}) "
        "before the first write"
    )
    version: int = Field(description="Counts writes; 0 before the first")
    updated_at: datetime | None
    updated_by: Literal["api", "observer", "actor"] | None
    thread_id: str | None = Field(description="The thread whose memory this is (thread scope), else null")
    resource_id: str


# ------------------------------------------------------------------------------------------- webhooks

#: An event type a webhook can subscribe to: `*` (every event) or a `data-...` type of the events table.
WEBHOOK_EVENT_PATTERN = r"^(\*|data-[a-z0-9-]{1,58})$"


class WebhookCreate(_Request):
    """A webhook endpoint: where to POST the caller's events, and which ones."""

    url: str = Field(min_length=1, max_length=2048, description="http(s) URL the events are POSTed to")
    events: list[Annotated[str, Field(pattern=WEBHOOK_EVENT_PATTERN)]] = Field(
        min_length=1, max_length=64, description='Event types to receive, or ["*"] for every event'
    )
    description: str | None = Field(default=None, max_length=500)


class WebhookPatch(_Request):
    """Fields to change; a field left out is kept. `enabled: true` also revives a dead endpoint."""

    url: str | None = Field(default=None, min_length=1, max_length=2048)
    events: list[Annotated[str, Field(pattern=WEBHOOK_EVENT_PATTERN)]] | None = Field(
        default=None, min_length=1, max_length=64
    )
    description: str | None = Field(default=None, max_length=500)
    enabled: bool | None = None

    @model_validator(mode="after")
    def _something_to_change(self) -> WebhookPatch:
        if not self.model_fields_set:
            raise ValueError("nothing to change: send url, events, description and/or enabled")
        if "url" in self.model_fields_set and self.url is None:
            raise ValueError("url cannot be null: give a new URL or leave it out")
        if "events" in self.model_fields_set and self.events is None:
            raise ValueError('events cannot be null: give a list, ["*"] for every event')
        if "enabled" in self.model_fields_set and self.enabled is None:
            raise ValueError("enabled is true or false")
        return self


class WebhookInfo(_Response):
    """An endpoint and its delivery state: `state` is `active`, `failing` (retrying with backoff: see
    `failures`, `next_attempt_at`, `last_error`) or `dead` (stopped after too many failures; PATCH
    `enabled: true` to retry)."""

    id: str
    url: str
    events: list[str]
    description: str | None
    enabled: bool
    state: Literal["active", "failing", "dead"]
    failures: int = Field(description="Consecutive failed attempts of the event waiting to be delivered")
    next_attempt_at: datetime | None
    last_error: str | None
    last_delivered_at: datetime | None
    delivered_total: int
    failed_total: int = Field(description="Failed attempts since the endpoint was registered")
    created_at: datetime
    updated_at: datetime


class WebhookCreated(WebhookInfo):
    secret: str = Field(
        description="The signing secret (HMAC-SHA256 key of the OM-Signature header); shown only here"
    )


class WebhookAttempt(_Response):
    """One attempt to deliver one event."""

    id: int
    event_id: int
    event_type: str
    thread_id: str | None
    attempt: int = Field(description="1 for the first attempt of this event, 2 for its first retry, ...")
    outcome: Literal["delivered", "failed"]
    status_code: int | None
    error: str | None
    duration_ms: int
    created_at: datetime


class WebhookDeliveries(Page[WebhookAttempt]):
    """The endpoint's state and its last attempts, newest first (the last 200 are kept). `pending` counts
    the events past the cursor (up to 10 000), whether subscribed or not."""

    endpoint_id: str
    state: Literal["active", "failing", "dead"]
    pending: int
    failures: int
    next_attempt_at: datetime | None
    last_error: str | None
