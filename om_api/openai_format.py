"""Chat-completions messages to stored messages and back, for the proxy and the turn response.

Chat-completions requests carry the whole conversation on every call and no message ids. The proxy gives
each message an id derived from the conversation up to and including it (a hash chain), so a history sent
again maps to the same ids and storage keeps each message once; only what is new gets stored. The
caller's leading system/developer messages are its instructions, not conversation: they are passed to the
model every time and never stored or observed. A user or assistant message's `name` (who wrote it, when
several people share the conversation) is stored as the message's `metadata.name` and given back.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from om_core import Message, Part
from om_core.messages import SPEAKER_KEY, TOOL_KIND

__all__ = ["SPEAKER_ROLES", "from_openai", "split_instructions", "to_openai"]

_INSTRUCTION_ROLES = ("system", "developer")
#: The roles whose `name` says who wrote the message (a tool or function message's `name` is the tool's).
SPEAKER_ROLES = ("user", "assistant")


def split_instructions(
    messages: Sequence[Mapping[str, Any]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(leading system/developer messages, the conversation after them)."""
    lead = 0
    while lead < len(messages) and messages[lead].get("role") in _INSTRUCTION_ROLES:
        lead += 1
    return [dict(m) for m in messages[:lead]], [dict(m) for m in messages[lead:]]


def _canonical(message: Mapping[str, Any]) -> str:
    keys = ("role", "content", "tool_calls", "tool_call_id", "name")
    return json.dumps({k: message.get(k) for k in keys}, sort_keys=True, ensure_ascii=False, default=str)


def _content_parts(content: Any) -> list[Part]:
    if content is None:
        return []
    if isinstance(content, str):
        return [Part(type="text", text=content)] if content else []
    parts: list[Part] = []
    for item in content if isinstance(content, list) else []:
        if not isinstance(item, Mapping):
            continue
        kind = item.get("type")
        if kind == "text" and isinstance(item.get("text"), str):
            parts.append(Part(type="text", text=item["text"]))
        elif kind == "image_url":
            image = item.get("image_url")
            url = image.get("url") if isinstance(image, Mapping) else image
            if isinstance(url, str):
                parts.append(Part(type="image", url=url))
        elif kind == "file" and isinstance(item.get("file"), Mapping):
            file = item["file"]
            parts.append(Part(type="file", data=file.get("file_data"), filename=file.get("filename")))
    return parts


def _arguments(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw


def _tool_result(content: Any) -> Any:
    if isinstance(content, list):
        return "\n".join(
            str(item.get("text", "")) for item in content if isinstance(item, Mapping) and "text" in item
        )
    return content


def from_openai(
    conversation: Sequence[Mapping[str, Any]], *, created_at: datetime, id_prefix: str = "oai"
) -> list[Message]:
    """Stored-model messages for a chat-completions conversation (instructions already split off)."""
    chain = hashlib.sha256(b"om-chat")
    tool_names: dict[str, str] = {}
    out: list[Message] = []
    for raw in conversation:
        chain.update(_canonical(raw).encode())
        message_id = f"{id_prefix}-{chain.hexdigest()[:32]}"
        role = raw.get("role")
        parts: list[Part] = []
        if role == "assistant":
            parts = _content_parts(raw.get("content"))
            for call in raw.get("tool_calls") or []:
                function = call.get("function") or {}
                call_id = str(call.get("id") or "")
                name = str(function.get("name") or "unknown")
                tool_names[call_id] = name
                parts.append(
                    Part(
                        type=TOOL_KIND,
                        tool_call_id=call_id,
                        tool_name=name,
                        state="call",
                        args=_arguments(function.get("arguments")),
                    )
                )
            stored_role = "assistant"
        elif role in ("tool", "function"):
            call_id = str(raw.get("tool_call_id") or raw.get("name") or "")
            parts = [
                Part(
                    type=TOOL_KIND,
                    tool_call_id=call_id,
                    tool_name=tool_names.get(call_id) or raw.get("name") or "unknown",
                    state="result",
                    result=_tool_result(raw.get("content")),
                )
            ]
            stored_role = "tool"
        else:
            parts = _content_parts(raw.get("content"))
            stored_role = "system" if role in _INSTRUCTION_ROLES else "user"
        if not parts:
            continue
        speaker = raw.get("name") if role in SPEAKER_ROLES else None
        metadata = {SPEAKER_KEY: speaker} if isinstance(speaker, str) and speaker else {}
        out.append(
            Message(id=message_id, role=stored_role, parts=parts, created_at=created_at, metadata=metadata)
        )
    return out


def _text_of(parts: Sequence[Part]) -> str:
    return "\n".join(p.text for p in parts if p.type == "text" and p.text)


def _user_content(parts: Sequence[Part]) -> str | list[dict[str, Any]]:
    if all(p.type == "text" for p in parts):
        return _text_of(parts)
    content: list[dict[str, Any]] = []
    for part in parts:
        if part.type == "text" and part.text:
            content.append({"type": "text", "text": part.text})
        elif part.type == "image" and (part.url or isinstance(part.data, str)):
            url = part.url or str(part.data)
            if not url.startswith(("http://", "https://", "data:")):
                url = f"data:{part.mime_type or 'image/png'};base64,{url}"
            content.append({"type": "image_url", "image_url": {"url": url}})
        elif part.type == "file":
            content.append(
                {"type": "text", "text": f"[attached file {part.filename or ''}]".replace(" ]", "]")}
            )
    return content


def _result_text(result: Any) -> str:
    return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, default=str)


def to_openai(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Chat-completions messages for stored messages (only what a model can read: no data parts, no
    reasoning). Every tool message follows an assistant message calling it, as chat APIs require: a
    result whose call is not in the list (the engine shows observed calls again beside their results,
    so this is a result that answers no stored call) gets a call rebuilt from what the result holds
    (its id, tool name and arguments if it carries them) rather than being dropped from the actor's view."""
    out: list[dict[str, Any]] = []
    called: set[str] = set()
    for message in messages:
        visible = [p for p in message.parts if p.is_visible and p.type != "reasoning"]
        if not visible:
            continue
        if message.role == "assistant":
            entries = _assistant_entries(visible, called)
            if message.speaker:
                entries[0]["name"] = message.speaker
            out.extend(entries)
        elif message.role == "tool":
            for p in visible:
                if p.type != TOOL_KIND:
                    continue
                if (p.tool_call_id or "") not in called:
                    out.append({"role": "assistant", "content": None, "tool_calls": [_call_entry(p)]})
                    called.add(p.tool_call_id or "")
                out.append(_tool_message(p))
        else:
            content = _user_content(visible)
            if content:
                entry: dict[str, Any] = {"role": message.role, "content": content}
                if message.speaker and message.role == "user":
                    entry["name"] = message.speaker
                out.append(entry)
    return out


def _assistant_entries(visible: Sequence[Part], called: set[str]) -> list[dict[str, Any]]:
    """One assistant message with its calls (each call id once, however many parts it has: a call part
    and its result part appended later), then a tool message per answered call."""
    tools = [p for p in visible if p.type == TOOL_KIND]
    firsts: dict[str, Part] = {}
    for p in tools:
        firsts.setdefault(p.tool_call_id or "", p)
    entry: dict[str, Any] = {"role": "assistant", "content": _text_of(visible) or None}
    if firsts:
        entry["tool_calls"] = [_call_entry(p) for p in firsts.values()]
        called.update(firsts)
    answers: dict[str, Part] = {}
    for p in tools:
        if p.result is not None or p.state in ("result", "output-error", "output-denied"):
            answers.setdefault(p.tool_call_id or "", p)
    return [entry, *(_tool_message(p) for p in answers.values())]


def _call_entry(part: Part) -> dict[str, Any]:
    return {
        "id": part.tool_call_id or "",
        "type": "function",
        "function": {"name": part.tool_name or "unknown", "arguments": _result_text(part.args or {})},
    }


def _tool_message(part: Part) -> dict[str, Any]:
    if part.state == "output-denied":
        body: Any = part.approval_reason or "the tool call was not approved"
    else:
        body = part.error_text if part.state == "output-error" and part.error_text else part.result
    return {"role": "tool", "tool_call_id": part.tool_call_id or "", "content": _result_text(body)}
