"""The message and part model shared by every layer: the client's wire shape, and the server's and the
core's model (`om_core.messages` imports it from here; this module imports only pydantic).

A message is a role plus an ordered list of parts. Parts are append-only once stored: a message that grows
(an assistant message gaining tool results) grows by new parts, each stamped by storage with a per-thread
sequence number (`seq`). "Observed" means `seq <= cursor`, so coverage is tracked per part, never per
message, and a part appended later to an already observed message is still seen by the Observer.

The JSON shape accepts both snake_case and the camelCase names chat SDKs send (`toolCallId`,
`mimeType`, `createdAt`, ...).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, BaseModel, BeforeValidator, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel


def _json_int(value: Any) -> Any:
    if isinstance(value, bool | str):
        raise ValueError("must be a JSON integer (not a boolean or a string)")
    return value


def _json_datetime(value: Any) -> Any:
    if isinstance(value, bool | int | float):
        raise ValueError("must be an ISO 8601 date-time string")
    return value


#: An integer as JSON Schema means it: a number with no fraction (`3` or `3.0`), never `true` or `"3"`
#: (pydantic's lax mode would take both, so the schema would be looser than the server's validation).
JsonInt = Annotated[int, BeforeValidator(_json_int)]
#: A date-time as JSON Schema means it: an ISO 8601 string, never a number of seconds.
JsonDateTime = Annotated[datetime, BeforeValidator(_json_datetime)]

Role = Literal["user", "assistant", "system", "tool"]

ToolState = Literal[
    "partial-call",
    "call",
    "approval-requested",
    "approval-responded",
    "result",
    "output-denied",
    "output-error",
]

#: Part kinds that carry no content for the actor or the Observer (never counted, never observed).
NON_CONTENT_PREFIXES = ("data-",)
TEXT_KINDS = ("text", "reasoning")
TOOL_KIND = "tool-invocation"
ATTACHMENT_KINDS = ("image", "file")
#: The part types besides the `data-*` kinds (the schema of `Part.type` says the same).
KNOWN_PART_TYPES = ("text", "reasoning", TOOL_KIND, "image", "file", "step-start", "source")

#: The metadata key holding who wrote a message when several people share a thread (a turn message's
#: `name`, OpenAI's message `name`). The Observer's transcript shows it beside the role.
SPEAKER_KEY = "name"
SPEAKER_NAME_MAX = 64
#: A speaker's name: letters and digits of any script, `_ . ' -` and inner spaces (every name OpenAI's
#: `^[a-zA-Z0-9_-]{1,64}$` allows, and `José María`, `O'Brien`). No colon, parenthesis, bracket, quote or
#: newline, so a name can never forge a transcript line (`User (2:30 PM): ...`) or a tag the Observer reads.
SPEAKER_NAME_PATTERN = r"^[\w.'-](?:[\w .'-]{0,62}[\w.'-])?$"
_SPEAKER_NAME_RE = re.compile(SPEAKER_NAME_PATTERN)


def speaker_name_problem(value: object) -> str | None:
    """Why `value` cannot be a speaker's name, or None when it can."""
    if not isinstance(value, str):
        return "must be a string"
    if not _SPEAKER_NAME_RE.fullmatch(value):
        return (
            f"must be 1-{SPEAKER_NAME_MAX} letters, digits, _ . ' - or inner spaces (no colon, bracket, "
            "parenthesis, quote or newline), e.g. 'Alice' or 'Jean-Luc'"
        )
    return None


class _Model(BaseModel):
    model_config = ConfigDict(populate_by_name=True, alias_generator=to_camel, extra="forbid")


class Part(_Model):
    """One part of a message.

    `type` is one of `text`, `reasoning`, `tool-invocation`, `image`, `file`, `step-start`, or any
    `data-*` kind (OM's own markers are `data-om-*`). Fields that do not apply to a kind stay None.
    """

    #: At most 64 characters: the width of the stored part's `type` column.
    type: str = Field(
        max_length=64,
        json_schema_extra={
            "anyOf": [
                {"type": "string", "enum": list(KNOWN_PART_TYPES)},
                {"type": "string", "pattern": "^data-"},
            ]
        },
    )
    text: str | None = None

    # tool-invocation
    tool_call_id: str | None = None
    tool_name: str | None = None
    state: ToolState | None = None
    args: Any = None
    result: Any = None
    error_text: str | None = None
    approval_reason: str | None = None

    # image / file: `data` is base64, a data: URI or a URL; for `data-*` parts it is the payload.
    data: Any = None
    url: str | None = None
    mime_type: str | None = None
    filename: str | None = None
    width: JsonInt | None = None
    height: JsonInt | None = None
    detail: str | None = None

    # step-start: the actor model of that step ("provider/model").
    model: str | None = None

    provider_metadata: dict[str, Any] | None = None
    created_at: JsonDateTime | None = None

    #: Assigned by storage: monotonically increasing inside the thread. None until stored.
    seq: JsonInt | None = Field(default=None, validation_alias=AliasChoices("seq", "sequence"))

    @field_validator("type")
    @classmethod
    def _known_type(cls, value: str) -> str:
        if value not in KNOWN_PART_TYPES and not value.startswith("data-"):
            raise ValueError(
                f"unknown part type {value!r}: use one of {sorted(KNOWN_PART_TYPES)} or a 'data-*' kind"
            )
        return value

    @field_validator("created_at")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        return ensure_utc(value) if value is not None else None

    @property
    def is_data(self) -> bool:
        return self.type.startswith("data-")

    @property
    def is_om_marker(self) -> bool:
        return self.type.startswith("data-om-")

    @property
    def is_visible(self) -> bool:
        """True when the part is content the actor or the Observer would see."""
        return not self.is_data and self.type != "step-start"


class Message(_Model):
    """A stored or incoming chat message."""

    id: str
    role: Role
    parts: list[Part] = Field(default_factory=list)
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    thread_id: str | None = None
    resource_id: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("created_at")
    @classmethod
    def _aware(cls, value: datetime) -> datetime:
        return ensure_utc(value)

    @property
    def has_visible_content(self) -> bool:
        return any(part.is_visible for part in self.parts)

    @property
    def speaker(self) -> str | None:
        """Who wrote the message (`metadata.name`), when it is a valid speaker's name; anything else stored
        there (an imported value, say) is ignored rather than shown to a model."""
        value = self.metadata.get(SPEAKER_KEY)
        return value if isinstance(value, str) and speaker_name_problem(value) is None else None

    @property
    def max_seq(self) -> int | None:
        seqs = [p.seq for p in self.parts if p.seq is not None]
        return max(seqs) if seqs else None

    def with_parts(self, parts: list[Part]) -> Message:
        """A copy of this message holding only `parts` (used for partially observed messages)."""
        return self.model_copy(update={"parts": list(parts)})

    def part_time(self, part: Part) -> datetime:
        return part.created_at or self.created_at


def ensure_utc(value: datetime) -> datetime:
    """Naive datetimes are taken as UTC; aware ones are converted. Storage never sees a naive time."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def text_message(
    message_id: str, role: Role, text: str, created_at: datetime | None = None, **extra: Any
) -> Message:
    """Convenience constructor for the common one-text-part message."""
    return Message(
        id=message_id,
        role=role,
        parts=[Part(type="text", text=text)],
        created_at=created_at or datetime.now(UTC),
        **extra,
    )
