"""Request and response bodies of the HTTP API. The response bodies (and `TurnMessage`) are defined once,
in the standalone client's `om_client.models`, and imported here, so a client parses exactly what this
server's OpenAPI document describes; the request bodies only the server validates, and the server-only
responses (dashboard, webhooks, working memory), are defined here.

Conventions: the envelope fields are snake_case; the OM payloads (`data-om-status` and the event parts)
keep the camelCase names of behaviour §10.1, which chat clients already read; messages and parts use the chat
SDK shape of `om_core.messages` (camelCase, `toolCallId`, `createdAt`). Unknown fields in a request are
refused (422 naming the field), so a typo never silently does nothing; responses ignore fields a newer
server adds.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StringConstraints,
    field_validator,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema, WithJsonSchema

from om_client.messages import JsonDateTime, JsonInt, _json_int
from om_client.models import _UNSTORABLE as _UNSTORABLE
from om_client.models import ID_PATTERN as ID_PATTERN
from om_client.models import ActiveLog as ActiveLog
from om_client.models import ActiveWindows as ActiveWindows
from om_client.models import BufferedChunk as BufferedChunk
from om_client.models import BufferedObservationsStatus as BufferedObservationsStatus
from om_client.models import BufferedReflection as BufferedReflection
from om_client.models import BufferedReflectionStatus as BufferedReflectionStatus
from om_client.models import BufferedWindows as BufferedWindows
from om_client.models import CheckResult as CheckResult
from om_client.models import ConfigResponse as ConfigResponse
from om_client.models import ContextForm as ContextForm
from om_client.models import ErrorDetail as ErrorDetail
from om_client.models import ErrorResponse as ErrorResponse
from om_client.models import FieldError as FieldError
from om_client.models import Generation as Generation
from om_client.models import HealthResponse as HealthResponse
from om_client.models import Identifier as Identifier
from om_client.models import KeyUsageResponse as KeyUsageResponse
from om_client.models import MemoryBudget as MemoryBudget
from om_client.models import MessagesResponse as MessagesResponse
from om_client.models import ModelCard as ModelCard
from om_client.models import ModelList as ModelList
from om_client.models import ObservationEditResponse as ObservationEditResponse
from om_client.models import ObservationsResponse as ObservationsResponse
from om_client.models import OMEvent as OMEvent
from om_client.models import OMUsage as OMUsage
from om_client.models import OperationResponse as OperationResponse
from om_client.models import Page as Page
from om_client.models import ReadinessResponse as ReadinessResponse
from om_client.models import ResourceConfigResponse as ResourceConfigResponse
from om_client.models import RunStatus as RunStatus
from om_client.models import SearchResponse as SearchResponse
from om_client.models import SearchResult as SearchResult
from om_client.models import StatusPayload as StatusPayload
from om_client.models import StatusWindows as StatusWindows
from om_client.models import StoredMessage as StoredMessage
from om_client.models import StoredPart as StoredPart
from om_client.models import ThreadCounts as ThreadCounts
from om_client.models import ThreadDetail as ThreadDetail
from om_client.models import ThreadInfo as ThreadInfo
from om_client.models import ThreadsResponse as ThreadsResponse
from om_client.models import TokenWindow as TokenWindow
from om_client.models import TurnContext as TurnContext
from om_client.models import TurnMessage as TurnMessage
from om_client.models import TurnResponse as TurnResponse
from om_client.models import _CamelResponse as _CamelResponse
from om_client.models import _Request as _Request
from om_client.models import _Response as _Response
from om_client.models import find_unstorable as find_unstorable
from om_client.server_models import ChatCompletionResponse as ChatCompletionResponse
from om_client.server_models import DaySpend as DaySpend
from om_client.server_models import DiffLineOut as DiffLineOut
from om_client.server_models import FleetResponse as FleetResponse
from om_client.server_models import GenerationDiffResponse as GenerationDiffResponse
from om_client.server_models import QueueDepth as QueueDepth
from om_client.server_models import RecallResponse as RecallResponse
from om_client.server_models import RecentFailure as RecentFailure
from om_client.server_models import ResourceSummary as ResourceSummary
from om_client.server_models import SpendResponse as SpendResponse
from om_client.server_models import ThreadDaySpend as ThreadDaySpend
from om_client.server_models import WebhookAttempt as WebhookAttempt
from om_client.server_models import WebhookCreated as WebhookCreated
from om_client.server_models import WebhookDeliveries as WebhookDeliveries
from om_client.server_models import WebhookInfo as WebhookInfo
from om_client.server_models import WhoAmI as WhoAmI
from om_client.server_models import WorkerSeen as WorkerSeen
from om_client.server_models import WorkingMemoryResponse as WorkingMemoryResponse
from om_core.config.options import ObservationalMemoryConfig
from om_core.engine import MAX_LINE_CHARS

#: A provider's name in `actor_provider_options` (`anthropic`, `openai`).
#: Checked by `TurnRequest._small_plain_options` (with a message that gives examples); the schema says so.
ProviderName = Annotated[str, Field(json_schema_extra={"minLength": 1, "maxLength": 64})]

#: The characters `str.strip()` removes (Python's whitespace), spelled out so that the patterns below mean
#: the same in Python, in JSON Schema (ECMA 262) and in the validators that use them.
_SPACE = r"\t\n\x0b\x0c\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
#: One line (no line feed) with at least one character that is not whitespace: a thread's title.
TITLE_PATTERN = rf"^[^\n]*[^{_SPACE}][^\n]*(?![\s\S])"
_TITLE = re.compile(TITLE_PATTERN)
#: An observation line as `om_core.engine.log_edit.check_replacement` takes it: one line (no line break),
#: not blank, not starting with a tag of the log's structure.
OBSERVATION_LINE_PATTERN = rf"^(?!\s*</?[A-Za-z][\w-]*(\s[^>]*)?>)[^\n\r]*[^{_SPACE}][^\n\r]*(?![\s\S])"

#: A model name (`provider/model`): 1-255 characters, none of them whitespace or a control character.
MODEL_NAME_PATTERN = rf"^[^{_SPACE}\x00-\x1f\x7f]{{1,255}}(?![\s\S])"
_MODEL_NAME = re.compile(MODEL_NAME_PATTERN)


def _model_name(value: str) -> str:
    if not _MODEL_NAME.search(value):
        raise ValueError("a model name is 1-255 characters with no whitespace or control character")
    return value


ModelName = Annotated[
    str,
    StringConstraints(max_length=255),
    AfterValidator(_model_name),
    Field(json_schema_extra={"pattern": MODEL_NAME_PATTERN}),
]

#: The actor's provider options are a few settings; anything larger is not what the field is for.
MAX_PROVIDER_OPTIONS_BYTES = 16_384


# ------------------------------------------------------------------------------------------- messages


# ------------------------------------------------------------------------------------------- requests


def _memory_options_schema() -> dict[str, Any]:
    """The keys a turn may choose, stated; what a model or an extractor may be is the operator's policy
    (`om_core.config.request_choice`), which no schema can state."""
    phase = {
        "type": "object",
        "additionalProperties": False,
        "properties": {"model": {}, "extract": {"type": "array", "items": {"type": "object"}}},
    }
    choice = {
        "type": "object",
        "additionalProperties": False,
        "properties": {"model": {}, "observation": phase, "reflection": phase},
    }
    return {"anyOf": [choice, {"type": "null"}]}


#: A turn's memory-model choice: validated by `om_core.config.request_choice` (unknown keys refused there
#: with the field named), described here so the OpenAPI document says which keys exist.
MemoryOptions = Annotated[dict[str, Any] | None, WithJsonSchema(_memory_options_schema())]


class TurnRequest(_Request):
    resource_id: Identifier | None = Field(
        default=None, description="The user or entity the thread belongs to; defaults to the thread id"
    )
    messages: list[TurnMessage] = Field(default_factory=list, description="New messages of this turn")
    actor_model: ModelName | None = Field(
        default=None, description="The chat model answering this turn (`provider/model`)"
    )
    step_number: JsonInt = Field(default=0, ge=0, le=1_000_000)
    turn_end: StrictBool | None = Field(
        default=None, description="Whether the turn is finished; defaults to 'the last message is the reply'"
    )
    context: ContextForm | None = Field(
        default=None,
        description=(
            "What to answer with: `openai` (the context as chat-completions messages), `messages` (as "
            "stored messages), `full` (both), or `none` (no context: `context` is null, for a call whose "
            "answer the caller will not send to its model, such as posting the assistant's reply); with "
            "one form the other list is empty. Omitted: `none` for a call that ends the turn (`turn_end`, "
            "by default when the last message is the assistant's), else `openai`. Status, events and "
            "blocking are the same in every form"
        ),
    )
    actor_provider_options: dict[ProviderName, dict[str, Any]] | None = Field(
        default=None,
        description=(
            "The provider options of the actor's call, by provider, as sent to it "
            '(`{"anthropic": {"cacheControl": {"type": "ephemeral", "ttl": "1h"}}}`, '
            '`{"openai": {"promptCacheRetention": "24h"}}`): `activateAfterIdle: "auto"` reads them to '
            "know how long the actor's prompt cache stays warm"
        ),
    )

    memory_options: MemoryOptions = Field(
        default=None,
        description=(
            "The Observer's and Reflector's models (and extractors) for the background work this turn "
            'starts, over the thread\'s config: `{"model": ...}` for both, or `{"observation": {"model": '
            '..., "extract": [...]}, "reflection": {"model": ...}}`. Only models matching the server\'s '
            "OM_REQUEST_MODELS (and OM_MEMORY_MODELS), and extractors only with OM_REQUEST_EXTRACTORS; "
            "anything else is refused with 422 naming the field"
        ),
    )

    def context_form(self) -> ContextForm:
        """The form asked for, else the cheap one the call needs: a call that ends the turn (the reply)
        goes to no model, any other's answer goes to a chat-completions call. `full` built both forms on
        every turn of a backend that never asked, most of them unread."""
        if self.context is not None:
            return self.context
        ends_turn = (
            self.turn_end
            if self.turn_end is not None
            else bool(self.messages and self.messages[-1].role == "assistant")
        )
        return "none" if ends_turn else "openai"

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
    wait: StrictBool = Field(
        default=True, description="Wait (up to the blocking deadline) for the observation"
    )


class ReflectRequest(_Request):
    prompt: str | None = Field(
        default=None, max_length=20_000, description="Extra guidance for the Reflector"
    )
    wait: StrictBool = Field(
        default=True, description="Wait (up to the blocking deadline) for the reflection"
    )

    @field_validator("prompt")
    @classmethod
    def _storable(cls, value: str | None) -> str | None:
        if value is not None and find_unstorable(value) is not None:
            raise ValueError("contains a NUL character or an unpaired surrogate; remove it")
        return value


_BOUND_KEYWORDS = {"ge": "minimum", "gt": "exclusiveMinimum", "le": "maximum", "lt": "exclusiveMaximum"}


def _partial_options(schema: Any, defs: dict[str, Any]) -> Any:
    """`schema` with its `$ref`s inlined, and every option of every block optional and nullable: the
    shape `ObservationalMemoryConfig.with_overrides` takes (blocks merge key by key; null drops an option
    back to its default). Pydantic writes a bound on a union as `ge`/`gt`: those become JSON Schema's."""
    if isinstance(schema, list):
        return [_partial_options(item, defs) for item in schema]
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        return _partial_options(defs[schema["$ref"].rsplit("/", 1)[-1]], defs)
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in {"title", "default", "required"}:
            continue
        if key == "properties":
            out[key] = {
                name: {"anyOf": [_partial_options(prop, defs), {"type": "null"}]}
                for name, prop in value.items()
            }
        else:
            out[_BOUND_KEYWORDS.get(key) or key] = _partial_options(value, defs)
    return out


def _overrides_schema() -> dict[str, Any]:
    full = ObservationalMemoryConfig.model_json_schema(by_alias=True, mode="validation")
    defs = full.pop("$defs", {})
    return {"anyOf": [_partial_options(full, defs), {"type": "null"}]}


#: Config overrides as a request takes them: validated by `ObservationalMemoryConfig` (camelCase keys,
#: strict types, unknown options refused), and described by the JSON Schema generated from that same
#: model, so the OpenAPI document lists every option instead of "any object".
ConfigOverrides = Annotated[dict[str, Any] | None, WithJsonSchema(_overrides_schema())]


class ConfigRequest(_Request):
    overrides: ConfigOverrides = Field(
        default=None, description="OM options for this thread (camelCase, as in the config); null clears"
    )
    resource_id: Identifier | None = Field(
        default=None, description="Create the thread under this resource if it does not exist yet"
    )


# ------------------------------------------------------------------------------------------ status


# ---------------------------------------------------------------------------------------- responses


#: A thread's caller metadata is a small JSON object; anything larger belongs in the caller's own store.
MAX_THREAD_METADATA_BYTES = 16_384
MAX_TITLE_CHARS = 1_000


class ThreadPatch(_Request):
    """Fields to change; a field left out is kept, `null` clears it. `metadata` replaces the caller's
    metadata as a whole (OM's own values of the thread are never part of it)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"minProperties": 1})

    title: str | None = Field(
        default=None, max_length=MAX_TITLE_CHARS, json_schema_extra={"pattern": TITLE_PATTERN}
    )
    metadata: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _something_to_change(self) -> ThreadPatch:
        if not self.model_fields_set:
            raise ValueError("nothing to change: send title and/or metadata")
        return self

    @field_validator("title")
    @classmethod
    def _title(cls, value: str | None) -> str | None:
        if value is not None and (not _TITLE.search(value) or _UNSTORABLE.search(value)):
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
    text: str = Field(
        # Checked by the core (`check_replacement`, with its own messages); the schema says the same.
        json_schema_extra={"pattern": OBSERVATION_LINE_PATTERN, "maxLength": MAX_LINE_CHARS},
        description="The line's new text: one line of prose, not blank, not a tag",
    )
    expected_sha256: str = Field(
        pattern=r"^[0-9a-f]{64}$",
        description="SHA-256 (hex) of the line's UTF-8 text as you read it: the edit is refused with 409 "
        "when the line is no longer that text",
    )


class ResourceConfigRequest(_Request):
    overrides: ConfigOverrides = Field(
        default=None,
        description="OM options for every thread of this resource (camelCase, as in the config); a thread's "
        "own overrides are merged over them; null clears",
    )


# ------------------------------------------------------------------------------------------- dashboard


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
    against the proxy's allow-list (`om_api.proxy.params.FORWARDED_FIELDS`): one not on it is a 422."""

    model_config = ConfigDict(extra="allow")

    model: ModelName
    messages: list[ChatMessage] = Field(min_length=1)
    stream: StrictBool = False
    metadata: dict[str, Any] | None = None
    user: str | None = None


# --------------------------------------------------------------------------------------------- search


class ThreadSearchBody(_Request):
    """A search of one thread's raw messages and observation groups."""

    query: str = Field(min_length=1, max_length=2_000, description="Words, codes or a question")
    limit: JsonInt = Field(default=10, ge=1, le=50, description="Most results (1-50)")
    after: JsonDateTime | None = Field(
        default=None, description="Only hits written or observed after this time"
    )
    before: JsonDateTime | None = Field(
        default=None, description="Only hits written or observed before this time"
    )
    kinds: list[Literal["group", "message"]] | None = Field(
        default=None, description="Only observation groups, only raw messages, or both (default)"
    )


class SearchBody(ThreadSearchBody):
    """A search of a resource's raw messages and observation groups, optionally of some of its threads."""

    thread_ids: list[Identifier] | None = Field(
        default=None,
        max_length=100,
        description="Only these threads of the resource (ignored threads of other resources simply match "
        "nothing)",
    )


# ------------------------------------------------------------------------------------- working memory


class WorkingMemoryPut(_Request):
    """A new working memory, whole (it replaces what is stored)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    content: str | dict[str, Any] = Field(
        description="Markdown text; in schema mode the JSON object (or its JSON text), valid against "
        "workingMemory.schema"
    )
    expected_version: Annotated[int, Field(ge=0), BeforeValidator(_json_int)] | None = Field(
        default=None,
        alias="expectedVersion",
        description="The version you read (0: never written); the write is refused with 409 when the "
        "memory is at another version. Leave out to write whatever is stored",
    )


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

    model_config = ConfigDict(extra="forbid", json_schema_extra={"minProperties": 1})

    url: Annotated[str, Field(min_length=1, max_length=2048)] | SkipJsonSchema[None] = None
    events: (
        Annotated[
            list[Annotated[str, Field(pattern=WEBHOOK_EVENT_PATTERN)]], Field(min_length=1, max_length=64)
        ]
        | SkipJsonSchema[None]
    ) = None
    description: str | None = Field(default=None, max_length=500)
    enabled: StrictBool | SkipJsonSchema[None] = None
    legacy_signature: StrictBool | SkipJsonSchema[None] = Field(
        default=None,
        description="Also send the deprecated OM-Signature header (false once the receiver verifies "
        "the Standard Webhooks headers)",
    )

    @model_validator(mode="after")
    def _something_to_change(self) -> WebhookPatch:
        if not self.model_fields_set:
            raise ValueError(
                "nothing to change: send url, events, description, enabled and/or legacy_signature"
            )
        if "legacy_signature" in self.model_fields_set and self.legacy_signature is None:
            raise ValueError("legacy_signature is true or false")
        if "url" in self.model_fields_set and self.url is None:
            raise ValueError("url cannot be null: give a new URL or leave it out")
        if "events" in self.model_fields_set and self.events is None:
            raise ValueError('events cannot be null: give a list, ["*"] for every event')
        if "enabled" in self.model_fields_set and self.enabled is None:
            raise ValueError("enabled is true or false")
        return self


#: Longest overlap of a rotation: how long the previous secret may keep signing (7 days).
MAX_KEEP_PREVIOUS_S = 7 * 24 * 3600


class WebhookRotate(_Request):
    """How long the secret being replaced keeps signing deliveries beside the new one."""

    keep_previous_s: int = Field(
        default=86_400,
        ge=0,
        le=MAX_KEEP_PREVIOUS_S,
        description="Seconds the previous secret stays valid (0: not at all; at most 7 days; default 1 day)",
    )
