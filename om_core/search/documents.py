"""What of a message or an observation group becomes searchable text.

A message's document is the text a reader would see of it: text and reasoning as written, a tool call's
name and arguments, its result or error, attachment file names. `data-*` parts (OM's markers, client
payloads) and `step-start` are never content, as everywhere else in OM. The whole message is one document,
so a message that grows later (a tool result arriving) is indexed again whole.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from om_core.messages import TOOL_KIND, Part

#: Longest document text kept. Postgres refuses a tsvector over 1 MB and embedding models take a few
#: thousand tokens; a longer message (a huge tool result) is indexed by its beginning.
MAX_DOCUMENT_CHARS = 100_000
#: Longest text sent to an embedding model for one document (about 2k tokens): embedding models read a
#: bounded input and a vector of a long text says little about any one detail of it.
MAX_EMBEDDED_CHARS = 8_000


def _compact(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)
    except (TypeError, ValueError):
        return str(value)


def part_text(part: Part) -> str:
    """The searchable text of one part; empty for parts that carry no content."""
    if not part.is_visible:
        return ""
    if part.type in ("text", "reasoning"):
        return part.text or ""
    if part.type == TOOL_KIND:
        pieces = [part.tool_name or "", _compact(part.args), _compact(part.result), part.error_text or ""]
        return "\n".join(piece for piece in pieces if piece)
    if part.type in ("image", "file"):
        return part.filename or ""
    return part.text or ""


def message_text(parts: Iterable[Part]) -> str:
    """The document of one message: its parts' texts, one per line, capped at `MAX_DOCUMENT_CHARS`."""
    text = "\n".join(piece for piece in (part_text(p) for p in parts) if piece.strip())
    return text[:MAX_DOCUMENT_CHARS]
