"""The translations the middleware needs, pure so they are tested without a server.

LangChain messages go to om as turn messages (`to_turn_messages`); om's context comes back in its
chat-completions form and becomes the model's history (`from_context`): the leading system messages are
om's memory (they go into the agent's system message, `with_memory`), the rest are LangChain messages.

Content om has no part for is left out rather than guessed at: reasoning blocks (om never shows reasoning
to the actor), provider-specific blocks, and files referenced by a provider's id.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
)

__all__ = ["from_context", "new_messages", "to_turn_messages", "with_memory"]

TOOL_KIND = "tool-invocation"
#: What om accepts as a message id (`om_client.models.ID_PATTERN`, without importing the HTTP client).
_ID_CHARS = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:@+=~-")
#: A speaker's name om accepts (`om_client.messages.SPEAKER_NAME_PATTERN`; any om-client 0.1 installed).
_SPEAKER_RE = re.compile(r"[\w.'-](?:[\w .'-]{0,62}[\w.'-])?")


def _image_url(block: Mapping[str, Any]) -> str | None:
    """The URL of an image block: OpenAI's `image_url` form or LangChain's standard `image` block."""
    if block.get("type") == "image_url":
        image = block.get("image_url")
        url = image.get("url") if isinstance(image, Mapping) else image
        return url if isinstance(url, str) else None
    if block.get("type") == "image":
        if isinstance(block.get("url"), str):
            return str(block["url"])
        data = block.get("base64") or block.get("data")
        if isinstance(data, str):
            return f"data:{block.get('mime_type') or 'image/png'};base64,{data}"
    return None


def _content_parts(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    parts: list[dict[str, Any]] = []
    for block in content if isinstance(content, list) else []:
        if isinstance(block, str) and block:
            parts.append({"type": "text", "text": block})
        elif isinstance(block, Mapping):
            if block.get("type") == "text" and isinstance(block.get("text"), str) and block["text"]:
                parts.append({"type": "text", "text": block["text"]})
            elif (url := _image_url(block)) is not None:
                parts.append({"type": "image", "url": url})
    return parts


def _text(content: Any) -> str:
    return "\n".join(p["text"] for p in _content_parts(content) if p["type"] == "text")


def _message_id(message: BaseMessage) -> str | None:
    """The LangChain id when om can store it (a repeat of the same message is then stored once)."""
    mid = message.id
    return mid if isinstance(mid, str) and 0 < len(mid) <= 255 and set(mid) <= _ID_CHARS else None


def _tool_result(message: ToolMessage, name: str) -> dict[str, Any]:
    part: dict[str, Any] = {"type": TOOL_KIND, "tool_call_id": message.tool_call_id, "tool_name": name}
    if message.status == "error":
        return {**part, "state": "output-error", "error_text": _text(message.content) or "the tool failed"}
    return {**part, "state": "result", "result": _text(message.content)}


def to_turn_messages(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """om turn messages (`{"id"?, "role", "parts"}`) for LangChain messages: a human message's text and
    images, an AI message's text and tool calls, a tool message's result (or error); messages with no
    content om can hold are skipped."""
    out: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    for message in messages:
        parts: list[dict[str, Any]]
        if isinstance(message, AIMessage):
            role, parts = "assistant", _content_parts(message.content)
            for call in message.tool_calls:
                call_id = call.get("id") or ""
                names[call_id] = call["name"]
                parts.append(
                    {
                        "type": TOOL_KIND,
                        "tool_call_id": call_id,
                        "tool_name": call["name"],
                        "state": "call",
                        "args": call["args"],
                    }
                )
        elif isinstance(message, ToolMessage):
            name = message.name or names.get(message.tool_call_id, "unknown")
            role, parts = "tool", [_tool_result(message, name)]
        elif isinstance(message, SystemMessage):
            role, parts = "system", _content_parts(message.content)
        else:
            role, parts = "user", _content_parts(message.content)
        if not parts:
            continue
        entry: dict[str, Any] = {"role": role, "parts": parts}
        if (mid := _message_id(message)) is not None:
            entry["id"] = mid
        speaker = message.name if role in ("user", "assistant") else None
        if isinstance(speaker, str) and _SPEAKER_RE.fullmatch(speaker):
            entry["name"] = (
                speaker  # several people in one thread: who wrote it (a name om cannot take is left out)
            )
        out.append(entry)
    return out


def new_messages(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    """What the middleware has not posted yet: the messages after the last AI message (whose reply and
    everything before it were posted on earlier calls). Repeats are harmless: om stores an id once."""
    last = max((i for i, m in enumerate(messages) if isinstance(m, AIMessage)), default=-1)
    return list(messages[last + 1 :])


def _tool_calls(raw: Any) -> list[ToolCall]:
    calls: list[ToolCall] = []
    for call in raw or []:
        function = call.get("function") or {}
        try:
            args = json.loads(function.get("arguments") or "{}")
        except ValueError:
            args = {"input": function.get("arguments")}
        calls.append(
            ToolCall(
                id=str(call.get("id") or ""),
                name=str(function.get("name") or "unknown"),
                args=args if isinstance(args, dict) else {"input": args},
                type="tool_call",
            )
        )
    return calls


def _user_content(content: Any) -> str | list[str | dict[str, Any]]:
    if not isinstance(content, list):
        return _text(content)
    blocks: list[str | dict[str, Any]] = []
    for block in content:
        if isinstance(block, Mapping) and block.get("type") in ("text", "image_url"):
            blocks.append(dict(block))
    return blocks


def from_context(openai_messages: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[AnyMessage]]:
    """(om's memory: the texts of the leading system messages, the history as LangChain messages)."""
    lead = 0
    while lead < len(openai_messages) and openai_messages[lead].get("role") == "system":
        lead += 1
    memory = [_text(m.get("content")) for m in openai_messages[:lead]]
    history: list[AnyMessage] = []
    for message in openai_messages[lead:]:
        role = message.get("role")
        if role == "assistant":
            history.append(
                AIMessage(
                    content=_text(message.get("content")), tool_calls=_tool_calls(message.get("tool_calls"))
                )
            )
        elif role == "tool":
            content = _text(message.get("content"))
            history.append(ToolMessage(content=content, tool_call_id=str(message.get("tool_call_id") or "")))
        elif role == "system":
            history.append(SystemMessage(content=_text(message.get("content"))))
        else:
            history.append(HumanMessage(content=_user_content(message.get("content"))))
    return memory, history


def with_memory(system: SystemMessage | None, memory: Sequence[str]) -> SystemMessage | None:
    """The agent's system message with om's memory after it (one system message: some providers take
    no other, and the agent's own instructions stay first, as om's context puts them)."""
    text = "\n\n".join(m for m in memory if m)
    if not text:
        return system
    if system is None:
        return SystemMessage(content=text)
    if isinstance(system.content, str):
        return SystemMessage(content=f"{system.content}\n\n{text}" if system.content else text)
    return SystemMessage(content=[*system.content, {"type": "text", "text": text}])
