"""The MCP tools: what each one does, the arguments it takes (every size bounded), and which call of a
`MemoryBackend` answers it.

The tools are the API's own operations under names a model can pick from: search, recall, the
observations of a thread, working memory read and written, the caller's threads, and posting a turn.
Nothing here imports the MCP SDK: `serving.py` turns these definitions into the SDK's tools, and the two
backends (`in_process.py` behind `/mcp`, `remote.py` behind `om mcp`) answer them, so both transports
offer the same tools with the same arguments.

Arguments are checked here, once, against the models below (`parse_arguments`), before any backend
sees them: the SDK forwards whatever a client sends, and the HTTP body limit alone would let one call ask
for unbounded work. The backends then apply the API's own checks on top (the request models of the
routes, the tenant's limits).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Protocol

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StringConstraints,
    ValidationError,
    field_validator,
)

from om_client.models import ID_PATTERN
from om_core.recall.tool import RECALL_TOOL

#: A thread or resource id, as the API takes it.
Identifier = Annotated[str, StringConstraints(pattern=ID_PATTERN, min_length=1, max_length=255)]

#: Most characters of a query, of one message's text and of a working-memory document.
MAX_QUERY_CHARS = 2_000
MAX_TEXT_CHARS = 100_000
MAX_MEMORY_CHARS = 100_000
#: Most messages one `post_turn` call stores.
MAX_TURN_MESSAGES = 20
#: Most characters of any one string argument of `recall` (its ids, query, dates).
MAX_RECALL_STRING = 2_000

JsonObject = dict[str, Any]

#: The key under the ASGI scope's `state` where `endpoint.py` leaves the backend of an `/mcp` request.
BACKEND_STATE = "om_mcp_backend"


class ToolFailure(Exception):
    """A call the tool answers with an error result (`isError`): the message says what to fix, and the
    model reads it."""


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=False)


class SearchArgs(_Args):
    resource_id: Identifier = Field(description="The user or entity whose memory to search")
    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS, description="Words, codes or a question")
    thread_id: Identifier | None = Field(
        default=None, description="Only this thread of the resource (leave out for all of them)"
    )
    limit: StrictInt = Field(default=10, ge=1, le=50, description="Most results (1-50)")
    kinds: list[Literal["group", "message"]] | None = Field(
        default=None,
        max_length=2,
        description="Only observation groups, only raw messages, or both (default)",
    )


class ThreadArgs(_Args):
    thread_id: Identifier = Field(description="The conversation's id")


class ObservationsArgs(ThreadArgs):
    history_limit: StrictInt = Field(
        default=0, ge=0, le=20, description="Past generations of the log to include (0-20)"
    )


class UpdateWorkingMemoryArgs(ThreadArgs):
    content: Annotated[str, Field(max_length=MAX_MEMORY_CHARS)] | dict[str, Any] = Field(
        description="The whole new working memory: Markdown text, or the JSON object in schema mode"
    )
    expected_version: StrictInt | None = Field(
        default=None,
        ge=0,
        le=2**62,
        description="The version you read (refused when the memory changed since); leave out to overwrite",
    )

    @field_validator("content")
    @classmethod
    def _bounded(cls, content: str | dict[str, Any]) -> str | dict[str, Any]:
        if isinstance(content, dict) and len(json.dumps(content)) > MAX_MEMORY_CHARS:
            raise ValueError(f"at most {MAX_MEMORY_CHARS} characters as JSON")
        return content


class ListThreadsArgs(_Args):
    resource_id: Identifier | None = Field(default=None, description="Only the threads of this resource")
    q: str | None = Field(
        default=None, min_length=1, max_length=255, description="Only threads whose id or title contains this"
    )
    limit: StrictInt = Field(default=20, ge=1, le=100, description="Threads per page (1-100)")
    cursor: str | None = Field(
        default=None,
        max_length=512,
        pattern=r"^[A-Za-z0-9_-]+$",
        description="The previous page's next_cursor; leave out for the first page",
    )


class TurnMessageArgs(_Args):
    id: Identifier | None = Field(
        default=None, description="The message's id: a message sent again with the same id is stored once"
    )
    role: Literal["user", "assistant", "system"]
    text: str = Field(min_length=1, max_length=MAX_TEXT_CHARS)


class PostTurnArgs(ThreadArgs):
    resource_id: Identifier | None = Field(
        default=None, description="The user or entity the thread belongs to; defaults to the thread id"
    )
    messages: list[TurnMessageArgs] = Field(min_length=1, max_length=MAX_TURN_MESSAGES)
    context: Literal["openai", "messages", "none"] = Field(
        default="none",
        description="The context to answer with: `openai` (chat-completions messages), `messages`, or "
        "`none` (just store the messages)",
    )


class RecallArgs(_Args):
    """The recall tool's own arguments (`om_core.recall.RECALL_TOOL`), plus the thread they read from.
    The core checks their meaning; here only their kind and size, so no call carries an unbounded
    string to it."""

    model_config = ConfigDict(extra="allow")

    thread_id: Identifier


def _recall_schema() -> JsonObject:
    schema: JsonObject = copy.deepcopy(RECALL_TOOL["function"]["parameters"])
    for prop in schema["properties"].values():
        if prop.get("type") == "string" and "enum" not in prop:
            prop["maxLength"] = MAX_RECALL_STRING
        if prop.get("type") == "integer":
            prop.setdefault("maximum", 10_000_000)
    schema["properties"] = {
        "thread_id": {
            "type": "string",
            "pattern": ID_PATTERN,
            "maxLength": 255,
            "description": "The conversation whose memory the recall reads",
        },
        **schema["properties"],
    }
    schema["required"] = ["thread_id"]
    return schema


RECALL_SCHEMA = _recall_schema()


def _recall_problem(name: str, value: Any) -> str | None:
    """What is wrong with one recall argument, or None."""
    prop: Mapping[str, Any] | None = RECALL_SCHEMA["properties"].get(name)
    if prop is None:
        return f"unknown argument; recall takes {', '.join(sorted(RECALL_SCHEMA['properties']))}"
    if prop["type"] == "string":
        if not isinstance(value, str) or len(value) > MAX_RECALL_STRING:
            return f"a string of at most {MAX_RECALL_STRING} characters"
        if "enum" in prop and value not in prop["enum"]:
            return f"one of {', '.join(prop['enum'])}"
    elif prop["type"] == "integer":
        low, high = prop.get("minimum", -(2**31)), prop.get("maximum", 10_000_000)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            return f"an integer from {low} to {high}"
    return None


def _check_recall(args: RecallArgs) -> RecallArgs:
    for name, value in (args.model_extra or {}).items():
        problem = _recall_problem(name, value)
        if problem is not None:
            raise ToolFailure(f"invalid arguments: {name[:100]}: {problem}")
    return args


class MemoryBackend(Protocol):
    """What answers the tools: the API in this process (`in_process.py`) or a server through the Python
    client (`remote.py`). Each method returns the API's JSON answer; a refusal is a `ToolFailure`."""

    async def search(self, args: SearchArgs) -> JsonObject: ...

    async def recall(self, thread_id: str, arguments: JsonObject) -> JsonObject: ...

    async def observations(self, args: ObservationsArgs) -> JsonObject: ...

    async def get_working_memory(self, args: ThreadArgs) -> JsonObject: ...

    async def update_working_memory(self, args: UpdateWorkingMemoryArgs) -> JsonObject: ...

    async def list_threads(self, args: ListThreadsArgs) -> JsonObject: ...

    async def post_turn(self, args: PostTurnArgs) -> JsonObject: ...


@dataclass(frozen=True)
class ToolDef:
    """One tool: its name and description for the model, its arguments, and the backend call."""

    name: str
    title: str
    description: str
    args: type[_Args]
    run: Callable[[MemoryBackend, Any], Awaitable[JsonObject]]
    read_only: bool = True
    schema: JsonObject | None = None

    def input_schema(self) -> JsonObject:
        return self.schema if self.schema is not None else self.args.model_json_schema()


async def _recall(backend: MemoryBackend, args: RecallArgs) -> JsonObject:
    return await backend.recall(args.thread_id, dict(args.model_extra or {}))


TOOLS: tuple[ToolDef, ...] = (
    ToolDef(
        "search_memory",
        "Search memory",
        "Search a user's (resource's) stored messages and observation groups by words and, when vectors "
        "are on, by meaning. Needs retrieval on in the resource's config.",
        SearchArgs,
        lambda backend, args: backend.search(args),
    ),
    ToolDef(
        "recall",
        "Recall raw messages",
        "Read the raw messages behind a thread's memory page by page, list the threads it can read, or "
        "search them (the recall tool om gives chat models). Needs retrieval on in the thread's config.",
        RecallArgs,
        _recall,
        schema=RECALL_SCHEMA,
    ),
    ToolDef(
        "get_observations",
        "Observations of a thread",
        "The thread's observation log: the active observations, buffered chunks, the current task and, "
        "with history_limit, past generations.",
        ObservationsArgs,
        lambda backend, args: backend.observations(args),
    ),
    ToolDef(
        "get_working_memory",
        "Read working memory",
        "The working memory the thread's turns see (its resource's in resource scope), with its version.",
        ThreadArgs,
        lambda backend, args: backend.get_working_memory(args),
    ),
    ToolDef(
        "update_working_memory",
        "Replace working memory",
        "Replace the thread's working memory whole. Pass expected_version (from get_working_memory) to be "
        "refused rather than overwrite a change you never saw.",
        UpdateWorkingMemoryArgs,
        lambda backend, args: backend.update_working_memory(args),
        read_only=False,
    ),
    ToolDef(
        "list_threads",
        "List threads",
        "The caller's threads, newest first, a page at a time (pass next_cursor back for the next page); "
        "optionally those of one resource or whose id or title contains q.",
        ListThreadsArgs,
        lambda backend, args: backend.list_threads(args),
    ),
    ToolDef(
        "post_turn",
        "Post a turn",
        "Store new messages of a conversation in the thread's memory (creating the thread on first use); "
        "with context `openai` or `messages`, answer with the context for the next model call.",
        PostTurnArgs,
        lambda backend, args: backend.post_turn(args),
        read_only=False,
    ),
)

TOOLS_BY_NAME: Mapping[str, ToolDef] = {tool.name: tool for tool in TOOLS}


def _validation_message(exc: ValidationError) -> str:
    problems = []
    for error in exc.errors()[:5]:
        where = ".".join(str(part) for part in error["loc"]) or "arguments"
        problems.append(f"{where}: {error['msg']}")
    return "invalid arguments: " + "; ".join(problems)


def parse_arguments(name: str, arguments: Mapping[str, Any] | None) -> tuple[ToolDef, _Args]:
    """The tool called and its checked arguments, or a `ToolFailure` naming what to fix."""
    tool = TOOLS_BY_NAME.get(name)
    if tool is None:
        raise ToolFailure(f"unknown tool {name[:100]!r}: the tools are {', '.join(TOOLS_BY_NAME)}")
    try:
        args = tool.args.model_validate(dict(arguments or {}))
    except ValidationError as exc:
        raise ToolFailure(_validation_message(exc)) from None
    if isinstance(args, RecallArgs):
        _check_recall(args)
    return tool, args


async def call_tool(backend: MemoryBackend, name: str, arguments: Mapping[str, Any] | None) -> JsonObject:
    """One tool call: arguments checked, then the backend's answer."""
    tool, args = parse_arguments(name, arguments)
    return await tool.run(backend, args)
