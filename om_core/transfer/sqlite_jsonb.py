"""SQLite's binary JSON (JSONB, SQLite 3.45+), which LibSQL stores some of the original's JSON columns in.

The original's LibSQL store writes a thread's `metadata` with `jsonb(...)`: a blob, not JSON text. Reading
it with `json(...)` needs an SQLite new enough on the reading side; decoding it here needs nothing. The
format (https://sqlite.org/jsonb.html): each element is a header, then its payload. The header's low four
bits are the type; its high four bits are the payload size (0-11), or say that the size follows in the
next 1, 2, 4 or 8 bytes (12-15, big-endian). Containers hold their elements back to back.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["JsonbError", "decode", "looks_like_jsonb"]

_NULL, _TRUE, _FALSE, _INT, _INT5, _FLOAT, _FLOAT5 = 0, 1, 2, 3, 4, 5, 6
_TEXT, _TEXTJ, _TEXT5, _TEXTRAW, _ARRAY, _OBJECT = 7, 8, 9, 10, 11, 12
#: Nesting deeper than this is refused: a crafted blob must not exhaust the stack.
MAX_DEPTH = 200


class JsonbError(ValueError):
    """The blob is not well-formed JSONB."""


def looks_like_jsonb(blob: bytes) -> bool:
    """True when the blob's first element is a container that spans the whole blob exactly."""
    try:
        kind, start, end = _header(blob, 0)
    except JsonbError:
        return False
    return kind in (_ARRAY, _OBJECT) and end == len(blob) and start <= end


def decode(blob: bytes) -> Any:
    """The JSON value of a JSONB blob. Raises `JsonbError` on a malformed one."""
    value, end = _element(bytes(blob), 0, 0)
    if end != len(blob):
        raise JsonbError(f"trailing bytes after the value at offset {end}")
    return value


def _header(blob: bytes, at: int) -> tuple[int, int, int]:
    """(type, payload start, payload end) of the element at `at`."""
    if at >= len(blob):
        raise JsonbError(f"element header past the end at offset {at}")
    first = blob[at]
    kind, size_code = first & 0x0F, first >> 4
    if size_code <= 11:
        start, size = at + 1, size_code
    else:
        width = {12: 1, 13: 2, 14: 4, 15: 8}[size_code]
        if at + 1 + width > len(blob):
            raise JsonbError(f"size field past the end at offset {at}")
        start, size = at + 1 + width, int.from_bytes(blob[at + 1 : at + 1 + width], "big")
    end = start + size
    if end > len(blob):
        raise JsonbError(f"payload past the end at offset {at}")
    return kind, start, end


#: JSON5 escapes JSON lacks, rewritten to JSON's: `\xHH`, `\'`, `\0`, and a line continuation.
_JSON5_ESCAPES = re.compile(r"\\(x[0-9a-fA-F]{2}|'|0|\r?\n)")


def _json5_text(text: str) -> str:
    def to_json(match: re.Match[str]) -> str:
        escape = match.group(1)
        if escape.startswith("x"):
            return "\\u00" + escape[1:]
        return {"'": "'", "0": "\\u0000"}.get(escape, "")

    return str(json.loads('"' + _JSON5_ESCAPES.sub(to_json, text) + '"'))


def _element(blob: bytes, at: int, depth: int) -> tuple[Any, int]:
    if depth > MAX_DEPTH:
        raise JsonbError(f"nested deeper than {MAX_DEPTH}")
    kind, start, end = _header(blob, at)
    if kind == _ARRAY:
        items, cursor = [], start
        while cursor < end:
            item, cursor = _element(blob, cursor, depth + 1)
            items.append(item)
        return items, end
    if kind == _OBJECT:
        obj: dict[str, Any] = {}
        cursor = start
        while cursor < end:
            key, cursor = _element(blob, cursor, depth + 1)
            if cursor >= end:
                raise JsonbError(f"object key without a value at offset {cursor}")
            value, cursor = _element(blob, cursor, depth + 1)
            obj[str(key)] = value
        return obj, end
    return _scalar(kind, blob[start:end], at), end


_CONSTANTS: dict[int, Any] = {_NULL: None, _TRUE: True, _FALSE: False}


def _scalar(kind: int, payload: bytes, at: int) -> Any:
    if kind in _CONSTANTS:
        return _CONSTANTS[kind]
    if kind in (_INT, _INT5):
        text = payload.decode("ascii")
        hexadecimal = kind == _INT5 and text.lower().lstrip("+-").startswith("0x")
        return int(text, 0) if hexadecimal else int(text)
    if kind in (_FLOAT, _FLOAT5):
        return float(payload.decode("ascii"))
    if kind in (_TEXT, _TEXTRAW):
        return payload.decode("utf-8")
    if kind == _TEXTJ:
        return json.loads('"' + payload.decode("utf-8") + '"')
    if kind == _TEXT5:
        return _json5_text(payload.decode("utf-8"))
    raise JsonbError(f"reserved element type {kind} at offset {at}")
