"""The tools the proxy answers itself (`recall`, and `updateWorkingMemory` for an actor-managed working
memory), and how each actor call of its tool loop is built from the caller's request.

A chat backend behind the OpenAI proxy never sees the memory's own tools: when the thread's config turns
`retrieval` on, the proxy adds `recall` to the tools the actor model gets, runs every `recall` call the
model makes and calls the model again with the results, so the caller receives only the final answer
(`om_api.proxy.chat_completions` runs the loop; README, "The recall tool loop", states the rules). This
module holds what that loop needs and does no I/O of its own:

- `InternalTools`: the schemas to offer and a blocking `call(name, arguments_json) -> str` that turns any
  outcome, a bad argument included, into the tool message's content (a model's mistake is something the
  model can fix on its next step, not an HTTP error of the caller);
- `recall_tools_for`: the one place that decides whether a thread gets `recall` and what answers it;
  `memory_tools_for` adds `updateWorkingMemory` when the thread's actor manages its working memory;
- the pure helpers that build each round's call and sort a reply's tool calls into ours and the caller's.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from om_core import MemoryEngine, StoredId
from om_core.config.options import ResolvedConfig
from om_core.recall import RECALL_TOOL, RecallInvalid, RecallNotFound
from om_core.store import history
from om_core.working_memory import document as wm

__all__ = [
    "InternalTool",
    "InternalTools",
    "memory_tools_for",
    "recall_tools_for",
    "round_call",
    "tool_name",
]

log = logging.getLogger("om.api.proxy")

#: What answers an internal tool: the parsed arguments in, a JSON-serialisable result out. It blocks
#: (database reads), so the proxy runs it on a worker thread.
ToolRun = Callable[[Mapping[str, Any]], Any]


def tool_name(tool: Mapping[str, Any]) -> str | None:
    """The name a caller's tool entry declares (`function` and `custom` tools), None when it has none."""
    for kind in ("function", "custom"):
        spec = tool.get(kind)
        if isinstance(spec, Mapping) and isinstance(spec.get("name"), str):
            return str(spec["name"])
    return None


def _call_name(call: Mapping[str, Any]) -> str:
    function = call.get("function")
    return str(function.get("name") or "") if isinstance(function, Mapping) else ""


def _error(message: str) -> str:
    return json.dumps({"error": message}, ensure_ascii=False)


@dataclass(frozen=True)
class InternalTool:
    #: The OpenAI function-tool schema offered to the actor: `{"type": "function", "function": {...}}`.
    schema: Mapping[str, Any]
    run: ToolRun
    #: Exceptions that mean the arguments were wrong: their message goes back to the model so it can
    #: correct the call. Any other exception is the server's failure: logged, and the model is told only
    #: that the tool failed.
    input_errors: tuple[type[Exception], ...] = ()

    @property
    def name(self) -> str:
        return str(self.schema["function"]["name"])


@dataclass(frozen=True)
class InternalTools:
    """The tools the proxy offers and answers for one request (built per request: what `recall` may read
    depends on the thread)."""

    tools: tuple[InternalTool, ...]
    _by_name: dict[str, InternalTool] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", {tool.name: tool for tool in self.tools})

    def schemas(self) -> list[dict[str, Any]]:
        return [json.loads(json.dumps(tool.schema)) for tool in self.tools]

    def names(self) -> frozenset[str]:
        return frozenset(self._by_name)

    def owns(self, call: Mapping[str, Any]) -> bool:
        """Whether a tool call of the model names one of these tools."""
        return _call_name(call) in self._by_name

    def split(self, calls: Sequence[Mapping[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(calls of these tools, the caller's calls), each in the model's order. Ours get an id when the
        model gave none, since the tool message answering a call names it."""
        ours: list[dict[str, Any]] = []
        theirs: list[dict[str, Any]] = []
        for raw in calls:
            call = dict(raw)
            if self.owns(call):
                call["id"] = call.get("id") or f"call_{uuid.uuid4().hex[:24]}"
                ours.append(call)
            else:
                theirs.append(call)
        return ours, theirs

    def conflict(self, caller_tools: Sequence[Any]) -> tuple[int, str] | None:
        """(index, name) of the first caller tool named like one of these, which would make every call of
        that name ambiguous; None when there is none."""
        for index, tool in enumerate(caller_tools):
            name = tool_name(tool) if isinstance(tool, Mapping) else None
            if name is not None and name in self._by_name:
                return index, name
        return None

    def call(self, name: str, arguments_json: str) -> str:
        """The content of the tool message answering a call: the result as JSON, or `{"error": ...}`
        saying what was wrong. Never raises: the model gets an answer to every call it made."""
        tool = self._by_name.get(name)
        if tool is None:
            return _error(f"there is no tool named {name!r} here")
        try:
            arguments = json.loads(arguments_json) if arguments_json.strip() else {}
        except ValueError as exc:
            return _error(f"the arguments are not valid JSON ({exc}): send one JSON object")
        if not isinstance(arguments, dict):
            return _error("the arguments must be one JSON object")
        try:
            result = tool.run(arguments)
        except tool.input_errors as exc:
            return _error(str(exc) or type(exc).__name__)
        except Exception:
            log.exception("the proxy's %s tool failed", name)
            return _error(f"{name} failed on the server; answer without it")
        return json.dumps(result, ensure_ascii=False, default=str)


# ------------------------------------------------------------------------------------- the recall tool


def recall_tools_for(
    engine: MemoryEngine, thread_id: StoredId, config: ResolvedConfig
) -> InternalTools | None:
    """The proxy's tools for a request on `thread_id` (stored id, the thread just ingested): `recall` when
    memory and `retrieval` are on for the thread (behaviour §9.2: the tool is added when `retrieval` is
    truthy), else None (the proxy then passes tools and replies through untouched).

    A call's wrong arguments, and a cursor or thread the thread cannot read, go back to the model as
    the tool's answer (`RecallInvalid`, `RecallNotFound`: their messages say what to do instead).
    """
    if not (config.enabled and config.retrieval):
        return None

    def run(arguments: Mapping[str, Any]) -> Any:
        return engine.recall(thread_id, arguments)

    return InternalTools((InternalTool(RECALL_TOOL, run, input_errors=(RecallInvalid, RecallNotFound)),))


def working_memory_tool_for(
    engine: MemoryEngine, thread_id: StoredId, config: ResolvedConfig
) -> InternalTool | None:
    """`updateWorkingMemory` when memory is on and the thread's actor manages its working memory (§8.7
    `agentManaged`), else None. A call writes the memory as the actor (`updated_by` "actor"), with no
    version check (the model sent the whole memory it saw this turn); content the schema refuses goes back
    to the model with the validator's message."""
    memory = config.working_memory
    if not (config.enabled and memory.enabled and memory.agent_managed):
        return None

    def run(arguments: Mapping[str, Any]) -> Any:
        if "content" not in arguments:
            raise wm.WorkingMemoryInvalid("send the whole updated working memory as `content`")
        thread = history.get_thread(engine.db, thread_id)
        if thread is None:
            raise wm.WorkingMemoryInvalid("this conversation no longer exists")
        target = wm.target_for_thread(thread, config)
        written = engine.write_working_memory(
            target, config, arguments["content"], by="actor", via_thread=thread_id
        )
        return {"updated": True, "version": written.version}

    return InternalTool(wm.update_tool(memory), run, input_errors=(wm.WorkingMemoryInvalid,))


def memory_tools_for(
    engine: MemoryEngine, thread_id: StoredId, config: ResolvedConfig
) -> InternalTools | None:
    """Every tool the proxy answers for the thread: `recall` (retrieval on) and `updateWorkingMemory`
    (actor-managed working memory); None when there is none."""
    recall = recall_tools_for(engine, thread_id, config)
    tools = list(recall.tools) if recall is not None else []
    memory = working_memory_tool_for(engine, thread_id, config)
    if memory is not None:
        tools.append(memory)
    return InternalTools(tuple(tools)) if tools else None


# ------------------------------------------------------------------------------------- one actor call


def _names_ours(tool_choice: Any, tools: InternalTools) -> bool:
    if not isinstance(tool_choice, Mapping):
        return False
    spec = tool_choice.get("function") or tool_choice.get("custom")
    return isinstance(spec, Mapping) and spec.get("name") in tools.names()


def round_call(
    call: Mapping[str, Any],
    messages: list[dict[str, Any]],
    tools: InternalTools | None,
    *,
    offer: bool,
) -> dict[str, Any]:
    """The keywords of one actor call of the loop: the request's call with the conversation so far, and
    the caller's tools plus ours while rounds remain (`offer`). The call after the last round offers only
    the caller's tools (none at all when it sent none, so `tool_choice` goes too), so the model has to
    answer; a `tool_choice` naming one of ours is dropped from it."""
    out = {**call, "messages": messages}
    if tools is None:
        return out
    caller_tools = list(call.get("tools") or [])
    if offer:
        out["tools"] = [*caller_tools, *tools.schemas()]
        return out
    if caller_tools:
        out["tools"] = caller_tools
    else:
        for name in ("tools", "tool_choice", "parallel_tool_calls"):
            out.pop(name, None)
    if _names_ours(out.get("tool_choice"), tools):
        out.pop("tool_choice")
    return out


def answered_round(
    content: str | None, calls: Sequence[Mapping[str, Any]], results: Sequence[str]
) -> list[dict[str, Any]]:
    """The messages a recall round adds to the actor's conversation: the assistant message with its calls,
    then one tool message per call, naming the call it answers."""
    assistant: dict[str, Any] = {"role": "assistant", "content": content or None, "tool_calls": list(calls)}
    answers = [
        {"role": "tool", "tool_call_id": str(call.get("id") or ""), "content": result}
        for call, result in zip(calls, results, strict=True)
    ]
    return [assistant, *answers]


def summed_usage(usages: Sequence[Mapping[str, Any] | None]) -> dict[str, int]:
    """The OpenAI `usage` of several actor calls: their token counts added up."""
    total = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    for usage in usages:
        for key in total:
            value = (usage or {}).get(key)
            total[key] += value if isinstance(value, int) and value > 0 else 0
    return total
