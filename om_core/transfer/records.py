"""The JSON Lines transfer format, version 1: one JSON object per line, each with a `kind`.

The first line is a `header` (the format's name and `version`); then, per resource, its `resource` line,
its shared log's `record` lines (resource scope) and its `working_memory`, then each of its threads: the
`thread` line, its `message` lines (each with its parts, in sequence order), its `record` lines (every
generation of the observation log, each with its buffered and activated chunks), its observation `group`
lines and its `working_memory`. Ids are the public ids a tenant chose: a file names no tenant, and an
import stores every id under the importing tenant (`om_core.tenancy.scoped_ids`).

The models are strict (`extra="forbid"`): a line with a field this version does not know is refused with
the field's name, so a newer file is never half-read. docs/guide/export-import.md documents every field.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, TypeAdapter

from om_client.messages import Part
from om_client.models import ID_PATTERN

__all__ = [
    "FORMAT",
    "VERSION",
    "ChunkLine",
    "GroupLine",
    "HeaderLine",
    "Line",
    "MessageLine",
    "RecordLine",
    "ResourceLine",
    "ThreadLine",
    "WorkingMemoryLine",
    "dump_line",
    "parse_line",
]

#: The format's name, in every header.
FORMAT = "om-memory"
#: The version this code writes and reads. A reader refuses any other.
VERSION = 1

PublicId = Annotated[str, Field(pattern=ID_PATTERN, max_length=255)]
#: Counts and sequence numbers fit a signed 64-bit column with room to grow.
Count = Annotated[int, Field(ge=0, le=2**53)]


class _Line(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HeaderLine(_Line):
    """The first line: what the file is, which version of the format, what it holds and where it came
    from (`om`, or `mastra` for a file read from the original's storage)."""

    kind: Literal["header"] = "header"
    format: Literal["om-memory"] = "om-memory"
    version: Literal[1] = 1
    scope: Literal["thread", "resource", "tenant"]
    source: Literal["om", "mastra"] = "om"
    exported_at: AwareDatetime


class ResourceLine(_Line):
    """A resource (a user or entity) and the config overrides every one of its threads inherits."""

    kind: Literal["resource"] = "resource"
    id: PublicId
    config_overrides: dict[str, Any] | None = None
    created_at: AwareDatetime


class ThreadLine(_Line):
    """A thread. `metadata` is OM's per-thread state: current task, suggested response, the Observer's
    title, the caller's metadata (`clientMetadata`) and the values its extractors kept, each at its
    extractor's key path. `last_seq` is the last sequence number its parts used."""

    kind: Literal["thread"] = "thread"
    id: PublicId
    resource_id: PublicId
    title: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    config_overrides: dict[str, Any] | None = None
    last_seq: Count = 0
    last_actor_model: str | None = Field(default=None, max_length=255)
    last_activity_at: AwareDatetime | None = None
    created_at: AwareDatetime
    updated_at: AwareDatetime


class MessageLine(_Line):
    """A message with its parts; every part carries its `seq` (the thread's order of parts, which the
    observation cursors count in). A message that grew has parts with later sequence numbers."""

    kind: Literal["message"] = "message"
    thread_id: PublicId
    id: Annotated[str, Field(min_length=1, max_length=255)]
    role: Literal["user", "assistant", "system", "tool"]
    created_at: AwareDatetime
    metadata: dict[str, Any] = Field(default_factory=dict)
    parts: list[Part] = Field(max_length=10_000)


class ChunkLine(_Line):
    """A buffered observation chunk of a record: `from_seq` < covered parts' seq <= `to_seq`."""

    id: Annotated[str, Field(min_length=1, max_length=64)]
    position: Count
    state: Literal["buffered", "activated", "superseded"]
    cycle_id: Annotated[str, Field(min_length=1, max_length=128)]
    observations: str
    token_count: Count
    message_ids: list[str] = Field(default_factory=list)
    message_tokens: Count
    thread_id: PublicId | None = None
    from_seq: Count
    to_seq: Count
    last_observed_at: AwareDatetime | None = None
    created_at: AwareDatetime
    activated_at: AwareDatetime | None = None
    current_task: str | None = None
    suggested_continuation: str | None = None
    thread_title: str | None = None


class RecordLine(_Line):
    """One generation of an observation log (thread scope: `thread_id` set; resource scope: the
    resource's shared log). `superseded_by` names the generation that replaced it (None: the live one);
    `last_observed_seq` is the cursor: parts up to it are in the log."""

    kind: Literal["record"] = "record"
    id: Annotated[str, Field(min_length=1, max_length=64)]
    scope: Literal["thread", "resource"]
    thread_id: PublicId | None = None
    resource_id: PublicId
    origin_type: Literal["initial", "reflection"] = "initial"
    generation_count: Count
    superseded_by: str | None = Field(default=None, max_length=64)
    active_observations: str = ""
    observation_token_count: Count = 0
    last_observed_seq: Count = 0
    last_observed_at: AwareDatetime | None = None
    last_buffered_seq: Count = 0
    last_buffered_at_time: AwareDatetime | None = None
    last_buffered_at_tokens: Count = 0
    buffered_reflection: str | None = None
    buffered_reflection_tokens: Count | None = None
    buffered_reflection_input_tokens: Count | None = None
    reflected_observation_line_count: Count | None = None
    buffered_reflection_cycle_id: str | None = Field(default=None, max_length=128)
    pending_message_tokens: Count = 0
    total_tokens_observed: Count = 0
    observed_timezone: str = Field(default="UTC", max_length=64)
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: AwareDatetime
    updated_at: AwareDatetime
    chunks: list[ChunkLine] = Field(default_factory=list, max_length=10_000)


class GroupLine(_Line):
    """An observation group (retrieval mode): the text a cycle logged and the message ranges it came from."""

    kind: Literal["group"] = "group"
    id: Annotated[str, Field(min_length=1, max_length=32)]
    scope: Literal["thread", "resource"]
    thread_id: PublicId
    resource_id: PublicId
    cycle_id: Annotated[str, Field(min_length=1, max_length=128)]
    group_kind: Literal["observation", "reflection"]
    ranges: str
    text: str
    observed_at: AwareDatetime
    created_at: AwareDatetime


class WorkingMemoryLine(_Line):
    """A working-memory document: a thread's (`thread_id` set) or its resource's."""

    kind: Literal["working_memory"] = "working_memory"
    scope: Literal["thread", "resource"]
    thread_id: PublicId | None = None
    resource_id: PublicId
    content: str
    format: Literal["markdown", "json"] = "markdown"
    version: Annotated[int, Field(ge=1)] = 1
    updated_at: AwareDatetime
    updated_by: Literal["api", "observer", "actor"] = "api"


Line = Annotated[
    HeaderLine | ResourceLine | ThreadLine | MessageLine | RecordLine | GroupLine | WorkingMemoryLine,
    Field(discriminator="kind"),
]
_LINE: TypeAdapter[Line] = TypeAdapter(Line)


def parse_line(text: str | bytes) -> Line:
    """One line of a file, validated (pydantic's `ValidationError` names the field that is wrong)."""
    return _LINE.validate_json(text)


def dump_line(line: Line) -> str:
    """One line as written: compact JSON, no newline inside, the newline at the end."""
    return line.model_dump_json(by_alias=True, exclude_none=True) + "\n"
