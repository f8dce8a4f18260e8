"""Signing webhook bodies, and how a receiver verifies them.

`OM-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<raw body>")>`. The timestamp is inside
the signed text, so a receiver that refuses a `t` older than `REPLAY_WINDOW_S` refuses a replayed request,
and one that remembers `OM-Event-Id`s it handled drops the duplicates at-least-once delivery may send.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time

SIGNATURE_HEADER = "OM-Signature"
REPLAY_WINDOW_S = 300


def new_secret() -> str:
    return f"whsec_{secrets.token_hex(24)}"


def signature(secret: str, timestamp: int, body: bytes) -> str:
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={mac}"


def verify(secret: str, header: str, body: bytes, *, now: float | None = None) -> bool:
    """What a receiver runs: the MAC matches and the timestamp is within the replay window."""
    fields = dict(item.split("=", 1) for item in header.split(",") if "=" in item)
    try:
        timestamp = int(fields["t"])
    except (KeyError, ValueError):
        return False
    if abs((now if now is not None else time.time()) - timestamp) > REPLAY_WINDOW_S:
        return False
    expected = signature(secret, timestamp, body).split("v1=", 1)[1]
    return hmac.compare_digest(expected, fields.get("v1", ""))
