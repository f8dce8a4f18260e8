"""The one pagination convention of every list the API returns: `limit` and an opaque `cursor` in,
`items` and `next_cursor` out.

Pages are keyset pages, never offsets: a cursor holds the sort key of the last item a page returned, and
the next page starts strictly after it. So an item inserted or deleted while a client walks the list can
never shift another item into a page it already read (no repeats) or past the page it is about to read
(no skips); items added behind the cursor simply appear on a later page. The cursor is opaque to clients
(URL-safe base64 of a small JSON list) so its contents can change without breaking them; a cursor that
does not decode is a `CursorError`, which the API answers with 422 saying to start again without one.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, TypeVar

__all__ = ["DEFAULT_LIMIT", "MAX_LIMIT", "CursorError", "Page", "decode_cursor", "encode_cursor"]

T = TypeVar("T")

#: A page's size when the caller names none, and the largest it may ask for.
DEFAULT_LIMIT = 50
MAX_LIMIT = 500
#: Cursors are short; anything longer was not made by `encode_cursor`.
MAX_CURSOR_LENGTH = 2048

#: What a cursor holds, per list: a version-like tag, so a cursor of one list is refused by another.
Key = tuple[str | int, ...]


class CursorError(ValueError):
    """A cursor that this service did not hand out (or for another list)."""


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page: its items in list order, and the cursor of the next page (None on the last one)."""

    items: list[T]
    next_cursor: str | None = None


def encode_cursor(kind: str, key: Key) -> str:
    """The opaque cursor of a page that ends at `key` (the sort key of its last item) in list `kind`."""
    raw = json.dumps([kind, *key], separators=(",", ":"), ensure_ascii=False).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(kind: str, cursor: str, shape: Sequence[type]) -> Key:
    """The sort key a cursor of list `kind` holds, checked against `shape` (the type of each part)."""
    if len(cursor) > MAX_CURSOR_LENGTH:
        raise CursorError("the cursor is longer than any cursor this service returns")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        value = json.loads(raw)
    except (binascii.Error, ValueError) as exc:
        raise CursorError("the cursor is not one this service returned") from exc
    if not isinstance(value, list) or not value or value[0] != kind or len(value) != len(shape) + 1:
        raise CursorError("the cursor belongs to another list or is damaged")
    key = value[1:]
    for part, expected in zip(key, shape, strict=True):
        if expected is datetime:
            if not isinstance(part, str):
                raise CursorError("the cursor is damaged")
            try:
                moment = datetime.fromisoformat(part)
            except ValueError as exc:
                raise CursorError("the cursor is damaged") from exc
            if moment.tzinfo is None:
                raise CursorError("the cursor is damaged")
        elif not isinstance(part, expected) or isinstance(part, bool):
            raise CursorError("the cursor is damaged")
    return tuple(key)
