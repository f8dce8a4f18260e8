"""Working memory (behaviour §8.7): a small document of durable facts about a user (or one conversation) that
the actor sees on every turn, and that the API, the actor or the Observer rewrites whole.

What it is here:

* one document per resource (`workingMemory.scope: "resource"`, the default: shared by the user's
  threads) or per thread, Markdown (from `workingMemory.template`, or the default template) or a JSON
  object valid against `workingMemory.schema`;
* written only through `update`: the content is checked (size; JSON parsed and validated against the
  schema), the version compared with the writer's `expected_version` under the row lock, and a
  `data-om-working-memory` event written in the same transaction;
* shown to the actor after the stable observation prefix (`actor_messages`), so an update never
  invalidates the cached log: as a state signal (a system message of its own after every other memory
  message) with `useStateSignals`, else as the first of the volatile messages; with `agentManaged` the
  actor also gets the instruction to keep it current and the `updateWorkingMemory` tool.

A memory never written reads as the template (Markdown) or `{}` (JSON) at version 0.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import Connection, Engine

from om_core.config.options import ResolvedConfig, ResolvedWorkingMemory
from om_core.context.own_messages import WORKING_MEMORY_LEAD
from om_core.errors import OMError
from om_core.store import working_memory as rows
from om_core.store.history import ThreadRow
from om_core.store.outbox import write_events
from om_core.store.payloads import WorkingMemoryPayload
from om_core.store.types import NewEvent, StoredEvent
from om_core.tenancy.scoped_ids import StoredId, public_id

__all__ = [
    "DEFAULT_TEMPLATE",
    "MAX_CONTENT_BYTES",
    "UPDATE_TOOL_NAME",
    "WORKING_MEMORY_EVENT",
    "Target",
    "WorkingMemory",
    "WorkingMemoryConflict",
    "WorkingMemoryDisabled",
    "WorkingMemoryInvalid",
    "actor_messages",
    "parse_content",
    "read",
    "read_at",
    "target_for_resource",
    "target_for_thread",
    "update",
    "update_at",
    "update_tool",
]

Author = Literal["api", "observer", "actor"]

WORKING_MEMORY_EVENT = "data-om-working-memory"
UPDATE_TOOL_NAME = "updateWorkingMemory"
#: The most a working memory may hold: it is shown on every turn, so it must stay small.
MAX_CONTENT_BYTES = 64 * 1024

#: The Markdown a memory starts from when the config gives no template (the reference's default shape).
DEFAULT_TEMPLATE = """# User Information
- **First Name**:
- **Last Name**:
- **Location**:
- **Occupation**:
- **Interests**:
- **Goals**:
- **Events**:
- **Facts**:
- **Projects**:
"""


class WorkingMemoryDisabled(OMError):
    """Working memory is off for this thread or resource (or its scope does not fit the route)."""

    def __init__(self, message: str) -> None:
        super().__init__("WORKING_MEMORY_DISABLED", message)


class WorkingMemoryInvalid(OMError, ValueError):
    """The content cannot be stored: too large, not JSON in schema mode, or not valid against the schema.
    The message says what to fix."""

    def __init__(self, message: str) -> None:
        super().__init__("WORKING_MEMORY_INVALID", message)


class WorkingMemoryConflict(OMError):
    """The memory changed since the writer read it: `current_version` is the one that won."""

    def __init__(self, expected: int, current: int) -> None:
        super().__init__(
            "WORKING_MEMORY_VERSION_CONFLICT",
            f"expectedVersion is {expected} but the working memory is at version {current}: read it again, "
            "apply your change to what it holds now, and send that version",
        )
        self.expected = expected
        self.current_version = current

    def __reduce__(self) -> tuple[Any, ...]:
        return (WorkingMemoryConflict, (self.expected, self.current_version))


@dataclass(frozen=True)
class Target:
    """Which memory: the key of its row and what it belongs to (stored ids)."""

    lookup_key: str
    scope: Literal["thread", "resource"]
    thread_id: StoredId | None
    resource_id: StoredId


@dataclass(frozen=True)
class WorkingMemory:
    """A memory as read: `content` is text (Markdown, or JSON text in schema mode); version 0 means never
    written (the content is then the template, or `{}`)."""

    scope: Literal["thread", "resource"]
    format: Literal["markdown", "json"]
    content: str
    version: int
    updated_at: datetime | None
    updated_by: str | None
    thread_id: StoredId | None
    resource_id: StoredId

    @property
    def value(self) -> Any:
        """The content as clients get it: the JSON object in schema mode, else the Markdown text."""
        return json.loads(self.content) if self.format == "json" else self.content


def target_for_thread(thread: ThreadRow, cfg: ResolvedConfig) -> Target:
    """The memory a thread's turns see: its resource's (resource scope) or its own."""
    wm = _enabled(cfg)
    if wm.scope == "resource":
        return Target(f"resource:{thread.resource_id}", "resource", None, thread.resource_id)
    return Target(f"thread:{thread.id}", "thread", thread.id, thread.resource_id)


def target_for_resource(resource_id: StoredId, cfg: ResolvedConfig) -> Target:
    """A resource's memory; only resource-scoped memories belong to a resource."""
    wm = _enabled(cfg)
    if wm.scope != "resource":
        raise WorkingMemoryDisabled(
            "working memory is per thread here (workingMemory.scope is 'thread'): use "
            "/v1/threads/{id}/working-memory, or set workingMemory.scope to 'resource'"
        )
    return Target(f"resource:{resource_id}", "resource", None, resource_id)


def _enabled(cfg: ResolvedConfig) -> ResolvedWorkingMemory:
    if not cfg.working_memory.enabled:
        raise WorkingMemoryDisabled(
            "working memory is off for this thread or resource: set workingMemory.enabled to true in its "
            "config"
        )
    return cfg.working_memory


def _initial(wm: ResolvedWorkingMemory) -> str:
    if wm.format == "json":
        return "{}"
    return wm.template if wm.template is not None else DEFAULT_TEMPLATE


def read_at(conn: Connection, target: Target, cfg: ResolvedConfig) -> WorkingMemory:
    """The memory as stored now, in the caller's connection (a turn reads it with its other reads)."""
    wm = _enabled(cfg)
    row = rows.read(conn, target.lookup_key)
    if row is None or row.version == 0:
        return WorkingMemory(
            target.scope, wm.format, _initial(wm), 0, None, None, target.thread_id, target.resource_id
        )
    # A memory written in the other format (the config changed since) reads as written: its text is kept.
    fmt: Literal["markdown", "json"] = "json" if row.format == "json" else "markdown"
    return WorkingMemory(
        scope=target.scope,
        format=fmt,
        content=row.content,
        version=row.version,
        updated_at=row.updated_at,
        updated_by=row.updated_by,
        thread_id=row.thread_id,
        resource_id=row.resource_id,
    )


def read(db: Engine, target: Target, cfg: ResolvedConfig) -> WorkingMemory:
    with db.connect() as conn:
        return read_at(conn, target, cfg)


def parse_content(wm: ResolvedWorkingMemory, content: object) -> str:
    """The text to store for `content`, or `WorkingMemoryInvalid` saying what to fix.

    Markdown mode takes a string. Schema mode takes the JSON object itself or its JSON text, validated
    against the schema; it is stored as compact JSON text."""
    if wm.format == "json":
        value = content
        if isinstance(content, str):
            try:
                value = json.loads(content)
            except ValueError as exc:
                raise WorkingMemoryInvalid(
                    f"content is not JSON ({exc}); send the memory as one JSON object"
                ) from None
        if not isinstance(value, Mapping):
            raise WorkingMemoryInvalid(
                "content must be one JSON object matching workingMemory.schema (this memory is in schema "
                "mode)"
            )
        _validate(wm, value)
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    else:
        if not isinstance(content, str):
            raise WorkingMemoryInvalid(
                "content must be a string of Markdown (this memory has no workingMemory.schema)"
            )
        text = content
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_CONTENT_BYTES:
        raise WorkingMemoryInvalid(
            f"content is {size} bytes; a working memory holds at most {MAX_CONTENT_BYTES} bytes: keep only "
            "durable facts"
        )
    if "\x00" in text:
        raise WorkingMemoryInvalid("content holds a NUL character, which cannot be stored; remove it")
    return text


def _validate(wm: ResolvedWorkingMemory, value: Mapping[str, Any]) -> None:
    """Through om_core.tenancy.json_schema, which fetches nothing and bounds the work, whatever the schema
    holds (it may have been stored before the write checks existed)."""
    from om_core.tenancy.json_schema import SchemaRefused, validate

    assert wm.schema is not None, "schema mode has a schema"
    try:
        mismatch = validate(wm.schema, value)
    except SchemaRefused as exc:
        raise WorkingMemoryInvalid(
            f"workingMemory.schema cannot be used ({exc.field('workingMemory.schema')}: {exc.detail}); fix "
            "the schema in the thread's or resource's config"
        ) from None
    if mismatch is not None:
        where = mismatch.where or "(the object)"
        raise WorkingMemoryInvalid(
            f"content does not match workingMemory.schema at {where}: {mismatch.message}"
        )


def update_at(
    conn: Connection,
    target: Target,
    cfg: ResolvedConfig,
    content: object,
    *,
    expected_version: int | None = None,
    by: Author,
    via_thread: StoredId | None = None,
) -> tuple[WorkingMemory, list[StoredEvent]]:
    """Store `content` as the memory's next version with its `data-om-working-memory` event, in the
    caller's transaction (raise to roll both back). `via_thread` names the thread the write came through
    (the event then reaches that thread's stream), when it is not the memory's own."""
    wm = _enabled(cfg)
    text = parse_content(wm, content)
    written = rows.write(
        conn,
        lookup_key=target.lookup_key,
        scope=target.scope,
        thread_id=target.thread_id,
        resource_id=target.resource_id,
        content=text,
        format=wm.format,
        updated_by=by,
        expected_version=expected_version,
    )
    if isinstance(written, rows.Conflict):
        raise WorkingMemoryConflict(expected_version or 0, written.current_version)
    memory = WorkingMemory(
        scope=target.scope,
        format=wm.format,
        content=written.content,
        version=written.version,
        updated_at=written.updated_at,
        updated_by=written.updated_by,
        thread_id=target.thread_id,
        resource_id=target.resource_id,
    )
    thread_id = target.thread_id or via_thread
    payload: WorkingMemoryPayload = {
        "scope": target.scope,
        "threadId": public_id(thread_id) if thread_id is not None else None,
        "resourceId": public_id(target.resource_id),
        "version": memory.version,
        "format": memory.format,
        "updatedBy": by,
        "content": memory.value,
    }
    events = write_events(
        conn,
        lookup_key=target.lookup_key,
        thread_id=thread_id,
        resource_id=target.resource_id,
        record_id=None,
        events=[NewEvent(WORKING_MEMORY_EVENT, payload, f"working-memory:{memory.version}")],
    )
    return memory, events


def update(
    db: Engine,
    target: Target,
    cfg: ResolvedConfig,
    content: object,
    *,
    expected_version: int | None = None,
    by: Author,
    via_thread: StoredId | None = None,
) -> tuple[WorkingMemory, list[StoredEvent]]:
    """`update_at` in a transaction of its own. Publish the events after it returns."""
    with db.begin() as conn:
        return update_at(
            conn, target, cfg, content, expected_version=expected_version, by=by, via_thread=via_thread
        )


# -------------------------------------------------------------------------------------- the actor's view


def _instruction(wm: ResolvedWorkingMemory) -> str:
    shape = (
        "one JSON object matching this JSON Schema (the complete object, not a patch):\n"
        + json.dumps(wm.schema, ensure_ascii=False)
        if wm.format == "json"
        else "the complete updated Markdown (keep the structure of the memory above; fill in or correct "
        "lines, remove what is no longer true)"
    )
    return (
        "<working-memory-instructions>\n"
        "The working memory above holds durable facts about the user (name, preferences, goals, ongoing "
        "projects). When the user tells you something that belongs there, or something there stops being "
        f"true, call the `{UPDATE_TOOL_NAME}` tool with `content`: {shape}. The content replaces the whole "
        "memory. Do not call it for facts that are already recorded or only matter to this message, and "
        "do not tell the user you are updating it.\n"
        "</working-memory-instructions>"
    )


def actor_messages(memory: WorkingMemory, wm: ResolvedWorkingMemory) -> list[str]:
    """The system messages that show the memory to the actor: the `<working-memory>` block, then, when the
    actor manages it, how to update it."""
    body = memory.content.strip() or "(empty)"
    messages = [f"{WORKING_MEMORY_LEAD}\n<working-memory>\n{body}\n</working-memory>"]
    if wm.agent_managed:
        messages.append(_instruction(wm))
    return messages


def update_tool(wm: ResolvedWorkingMemory) -> dict[str, Any]:
    """The chat-completions function tool the actor calls to rewrite the memory. Its arguments are the
    body of `PUT .../working-memory` as they stand (`{"content": ...}`)."""
    content: dict[str, Any] = (
        dict(wm.schema)
        if wm.format == "json" and wm.schema is not None
        else {"type": "string", "description": "The complete updated working memory, in Markdown."}
    )
    return {
        "type": "function",
        "function": {
            "name": UPDATE_TOOL_NAME,
            "description": (
                "Replace your working memory about the user with an updated version. Send the whole "
                "memory: anything left out is forgotten."
            ),
            "parameters": {
                "type": "object",
                "properties": {"content": content},
                "required": ["content"],
                "additionalProperties": False,
            },
        },
    }
