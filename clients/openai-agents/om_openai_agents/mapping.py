"""The two translations an om session needs, pure so they are tested without a server.

The Agents SDK keeps a session as Responses-API input items; om stores chat messages made of parts and
answers with its context as chat-completions messages (`TurnContext.openai_messages`). Items go to om as
turn messages (`items_to_turn_messages`); om's context comes back as items (`context_to_items`).

What has no place in om's message model is left out rather than guessed at: reasoning items (om never
shows reasoning to the actor), hosted-tool calls (web search, file search, computer use, MCP) and file ids
(om stores the file itself or a URL, not a reference to the provider's storage).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["context_to_items", "items_to_turn_messages", "limit_items"]

TOOL_KIND = "tool-invocation"
_SYSTEM_ROLES = ("system", "developer")
_TEXT_TYPES = ("input_text", "output_text", "text")


def _arguments(raw: Any) -> Any:
    """A call's arguments as om stores them: the parsed JSON object, or the raw string when it is none."""
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw


def _content_parts(content: Any) -> list[dict[str, Any]]:
    """om parts of a message item's content: text (refusals included), images by URL, inline files."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    parts: list[dict[str, Any]] = []
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        if kind in _TEXT_TYPES and isinstance(block.get("text"), str) and block["text"]:
            parts.append({"type": "text", "text": block["text"]})
        elif kind == "refusal" and isinstance(block.get("refusal"), str):
            parts.append({"type": "text", "text": block["refusal"]})
        elif kind == "input_image" and isinstance(block.get("image_url"), str):
            parts.append({"type": "image", "url": block["image_url"]})
        elif kind == "input_file" and isinstance(block.get("file_data"), str):
            parts.append({"type": "file", "data": block["file_data"], "filename": block.get("filename")})
    return parts


def _output_text(output: Any) -> str:
    """A function call's output as text: a string as is, a list of content blocks by their text."""
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return "\n".join(
            str(block.get("text", "")) for block in output if isinstance(block, Mapping) and "text" in block
        )
    return json.dumps(output, ensure_ascii=False, default=str)


def _append(out: list[dict[str, Any]], role: str, part: dict[str, Any]) -> None:
    """Add a part to the last message when it has `role`, else start a message: an assistant's calls go
    in the message that made them and consecutive outputs in one tool message, as om's chat form wants."""
    if out and out[-1]["role"] == role:
        out[-1]["parts"].append(part)
    else:
        out.append({"role": role, "parts": [part]})


def items_to_turn_messages(items: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """om turn messages (`{"role", "parts"}`) for session items, in order: a user or system message per
    message item, an assistant message per assistant text with the function calls that follow it, a tool
    message per run of function-call outputs. Items om has no form for are skipped (module docstring)."""
    out: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    for item in items:
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            parts = _content_parts(item.get("content"))
            if not parts:
                continue
            role = item.get("role")
            if role == "assistant":
                out.append({"role": "assistant", "parts": parts})
            else:
                out.append({"role": "system" if role in _SYSTEM_ROLES else "user", "parts": parts})
        elif kind == "function_call":
            call_id, name = str(item.get("call_id") or ""), str(item.get("name") or "unknown")
            names[call_id] = name
            call = {
                "type": TOOL_KIND,
                "tool_call_id": call_id,
                "tool_name": name,
                "state": "call",
                "args": _arguments(item.get("arguments")),
            }
            _append(out, "assistant", call)
        elif kind == "function_call_output":
            call_id = str(item.get("call_id") or "")
            result = {
                "type": TOOL_KIND,
                "tool_call_id": call_id,
                "tool_name": names.get(call_id, "unknown"),
                "state": "result",
                "result": _output_text(item.get("output")),
            }
            _append(out, "tool", result)
    return out


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(block["text"]) for block in content if isinstance(block, Mapping) and "text" in block
        )
    return ""


def _user_content(content: Any) -> str | list[dict[str, Any]]:
    if not isinstance(content, list):
        return _text(content)
    blocks: list[dict[str, Any]] = []
    for block in content:
        if not isinstance(block, Mapping):
            continue
        if block.get("type") == "text":
            blocks.append({"type": "input_text", "text": str(block.get("text", ""))})
        elif block.get("type") == "image_url":
            image = block.get("image_url")
            url = image.get("url") if isinstance(image, Mapping) else image
            if isinstance(url, str):
                blocks.append({"type": "input_image", "image_url": url, "detail": "auto"})
    return blocks


def context_to_items(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Session items for om's context in chat-completions form: system and user messages as they are,
    an assistant message as its text then one `function_call` item per call, a tool message as a
    `function_call_output`."""
    items: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        if role == "assistant":
            text = _text(message.get("content"))
            if text:
                items.append({"role": "assistant", "content": text})
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                items.append(
                    {
                        "type": "function_call",
                        "call_id": str(call.get("id") or ""),
                        "name": str(function.get("name") or "unknown"),
                        "arguments": str(function.get("arguments") or "{}"),
                    }
                )
        elif role == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": str(message.get("tool_call_id") or ""),
                    "output": _text(message.get("content")),
                }
            )
        elif role in _SYSTEM_ROLES:
            items.append({"role": "system", "content": _text(message.get("content"))})
        else:
            content = _user_content(message.get("content"))
            if content:
                items.append({"role": "user", "content": content})
    return items


def limit_items(items: list[dict[str, Any]], limit: int | None) -> list[dict[str, Any]]:
    """The leading system items (om's memory: observations, reflections, hints) and the latest `limit`
    of the rest. The memory is what replaces the older history, so a limit never cuts it away."""
    if limit is None:
        return items
    lead = 0
    while lead < len(items) and items[lead].get("role") == "system":
        lead += 1
    rest = items[lead:]
    return items[:lead] + (rest[-limit:] if limit > 0 else [])
