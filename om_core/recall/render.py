"""How recall shows messages and parts (behaviour §9.4 "Formatting").

A message is a header line `**<role> (<YYYY-MM-DD HH:MM:SSZ>)** [<id>]:` and one line per shown part,
`  [p<index>] <text>`, where the index is the part's position in the stored message (so a model can ask
for exactly that part with `partIndex`, and indices may have gaps where hidden parts sit).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from om_core.messages import Part
from om_core.recall.budget import TOOL_RESULT_CAP, Count, cut_to_tokens
from om_core.store.recall_reads import recall_kind

__all__ = ["header", "part_kind", "part_text", "stamp"]


def stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def header(role: str, created_at: datetime, message_id: str) -> str:
    return f"**{role} ({stamp(created_at)})** [{message_id}]:"


def part_kind(part: Part) -> str:
    return recall_kind(part.type, part.state, part.result is not None)


def _serialised(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, indent=2, default=str)


def _outcome(part: Part) -> str:
    if part.state == "output-error":
        return f"Error: {part.error_text or 'the tool failed'}"
    if part.state == "output-denied":
        return f"Denied: {part.approval_reason or 'the call was not approved'}"
    if part.result is None or (isinstance(part.result, str | list | dict) and not part.result):
        return "[empty result]"
    return _serialised(part.result)


def part_text(part: Part, *, high: bool, count: Count) -> str:
    """A part's full text at a detail level: text and reasoning as written, tool calls by name (with
    their arguments in high detail), tool results with their outcome (at most 4000 tokens), attachments
    by file name, anything else by its type."""
    kind = part_kind(part)
    name = part.tool_name or "unknown"
    if kind in ("text", "reasoning"):
        return part.text or ""
    if kind == "tool-call":
        if high and part.args is not None:
            return f"[Tool Call: {name}]\n{_serialised(part.args)}"
        return f"[Tool Call: {name}]"
    if kind == "tool-result":
        outcome = _outcome(part)
        cut = cut_to_tokens(outcome, TOOL_RESULT_CAP, count)
        if cut is not None:
            outcome = f"{cut}\n... [result cut at {TOOL_RESULT_CAP} tokens]"
        if high and part.args is not None:
            arguments = json.dumps(part.args, ensure_ascii=False, default=str)
            return f"[Tool Result: {name}]\nArguments: {arguments}\n{outcome}"
        return f"[Tool Result: {name}]\n{outcome}"
    if kind in ("image", "file"):
        label = "Image" if kind == "image" else "File"
        return f"[{label}: {part.filename}]" if part.filename else f"[{label}]"
    return f"[{kind}]"


def part_line(index: int, text: str) -> str:
    return f"  [p{index}] {text}"
