"""What can be learned locally about an attachment's bytes.

An attachment's `data` may be base64, a `data:` URI, raw bytes (or their JSON forms), or a reference
such as an http(s) or storage URL. Token heuristics need the byte size and sometimes the first bytes
(image headers); both are read without decoding the whole payload, and nothing is ever fetched.
"""

from __future__ import annotations

import binascii
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import unquote_to_bytes

_URL_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")
_BASE64 = re.compile(r"[A-Za-z0-9+/=_\-]+")
_URLSAFE = str.maketrans("-_", "+/")


@dataclass(frozen=True, slots=True)
class Body:
    """An attachment payload, classified. At most one of base64_text / raw / remote_url is set."""

    media_type: str | None = None
    base64_text: str | None = None
    raw: bytes | None = None
    remote_url: str | None = None

    @property
    def measurable(self) -> bool:
        return self.base64_text is not None or self.raw is not None

    @property
    def byte_size(self) -> int | None:
        """Decoded size: `floor(len * 3 / 4) - padding` for base64, the length for raw bytes."""
        if self.raw is not None:
            return len(self.raw)
        if self.base64_text is None:
            return None
        text = self.base64_text
        padding = 2 if text.endswith("==") else 1 if text.endswith("=") else 0
        return max(0, len(text) * 3 // 4 - padding)

    def head(self, limit: int) -> bytes:
        """The first `limit` bytes (fewer if the body is shorter), decoding only what is needed."""
        if self.raw is not None:
            return self.raw[:limit]
        if self.base64_text is None:
            return b""
        chars = -(-limit // 3) * 4
        chunk = self.base64_text[:chars]
        chunk = chunk[: len(chunk) - len(chunk) % 4]
        if "-" in chunk or "_" in chunk:
            chunk = chunk.translate(_URLSAFE)
        try:
            return binascii.a2b_base64(chunk)[:limit]
        except binascii.Error:
            return b""


EMPTY_BODY = Body()


def classify_body(value: object) -> Body:
    """Classify an attachment's `data` (or URL) without decoding it."""
    if isinstance(value, bytes | bytearray | memoryview):
        return Body(raw=bytes(value))
    if isinstance(value, str):
        return _classify_text(value.strip())
    if isinstance(value, Mapping):
        # Node's Buffer.toJSON() shape: {"type": "Buffer", "data": [..]}.
        if value.get("type") == "Buffer":
            return _from_int_list(value.get("data"))
        return EMPTY_BODY
    if isinstance(value, Sequence):
        return _from_int_list(value)
    return EMPTY_BODY


def _classify_text(text: str) -> Body:
    if not text:
        return EMPTY_BODY
    if text[:5].lower() == "data:":
        header, _, payload = text[5:].partition(",")
        media_type = header.split(";", 1)[0].strip().lower() or None
        if ";base64" in header.lower():
            return Body(media_type=media_type, base64_text=payload.strip())
        return Body(media_type=media_type, raw=unquote_to_bytes(payload))
    if _URL_SCHEME.match(text):
        return Body(remote_url=text)
    if _BASE64.fullmatch(text):
        return Body(base64_text=text)
    return EMPTY_BODY


def _from_int_list(value: object) -> Body:
    if isinstance(value, Sequence) and all(
        isinstance(b, int) and not isinstance(b, bool) and 0 <= b < 256 for b in value
    ):
        return Body(raw=bytes(value))
    return EMPTY_BODY
