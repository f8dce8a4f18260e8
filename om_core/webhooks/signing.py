"""Signing webhook bodies per the Standard Webhooks specification, and the deprecated om scheme.

Standard Webhooks (https://www.standardwebhooks.com), what every delivery carries:

- `webhook-id`: the message id, the same on every retry of one event (`evt_<outbox id>`): receivers
  dedupe by it, since delivery is at least once;
- `webhook-timestamp`: unix seconds of this attempt, inside the signed text, so a receiver refusing a
  timestamp older than its tolerance (the libraries: 5 minutes) refuses a replayed request;
- `webhook-signature`: `v1,<base64 HMAC-SHA256(key, "<id>.<timestamp>.<raw body>")>`, space-separated
  when more than one secret is valid (during a rotation, the new secret's first, then the previous one's).

The secret is `whsec_<base64 of the key>`, so the `standardwebhooks` libraries (Python, TypeScript, Go, ...)
verify a delivery given the secret as shown. Secrets made before Standard Webhooks were `whsec_<hex>`:
hex digits are base64 digits too, so those secrets decode to a key the same way, whatever library reads
them, and endpoints keep them.

The om scheme, `OM-Signature: t=<unix>,v1=<hex HMAC-SHA256(secret as text, "<t>.<raw body>")>`, is
deprecated: it is sent only to endpoints whose `legacy_signature` flag is on (migration 0010 set it on every
endpoint registered before, so no receiver broke), besides the standard headers; a tenant turns it off once
its receiver verifies the standard ones.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import time
from collections.abc import Mapping, Sequence

SECRET_PREFIX = "whsec_"
#: Random bytes of a new secret's key (the specification asks for 24 to 64).
SECRET_BYTES = 32
ID_HEADER = "webhook-id"
TIMESTAMP_HEADER = "webhook-timestamp"
SIGNATURE_HEADER_STANDARD = "webhook-signature"
#: The deprecated om header (`legacy_signature` endpoints only).
SIGNATURE_HEADER = "OM-Signature"
REPLAY_WINDOW_S = 300


def new_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def secret_key(secret: str) -> bytes:
    """The HMAC key a `whsec_<base64>` secret stands for (the libraries' reading: unpadded allowed)."""
    text = secret.removeprefix(SECRET_PREFIX)
    try:
        key = base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError("a webhook secret is whsec_ followed by base64") from exc
    if not key:
        raise ValueError("a webhook secret may not be empty")
    return key


def message_id(event_id: int) -> str:
    """The `webhook-id` of an outbox event: the same on every retry and for every endpoint."""
    return f"evt_{event_id}"


def standard_signature(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """`v1,<base64 HMAC-SHA256>` of `<msg_id>.<timestamp>.<body>` with the secret's key."""
    signed = f"{msg_id}.{timestamp}.".encode() + body
    mac = hmac.new(secret_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(mac).decode()


def standard_headers(secrets_: Sequence[str], msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The three Standard Webhooks headers, one signature per valid secret (the current one first)."""
    return {
        ID_HEADER: msg_id,
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER_STANDARD: " ".join(
            standard_signature(secret, msg_id, timestamp, body) for secret in secrets_
        ),
    }


def verify_standard(
    secret: str, headers: Mapping[str, str], body: bytes, *, now: float | None = None
) -> bool:
    """What a receiver runs (the libraries do the same): one `v1` signature matches, timestamp in window."""
    lower = {k.lower(): v for k, v in headers.items()}
    msg_id, stamp, given = (lower.get(h) for h in (ID_HEADER, TIMESTAMP_HEADER, SIGNATURE_HEADER_STANDARD))
    if not (msg_id and stamp and given):
        return False
    try:
        timestamp = int(stamp)
    except ValueError:
        return False
    if abs((now if now is not None else time.time()) - timestamp) > REPLAY_WINDOW_S:
        return False
    expected = standard_signature(secret, msg_id, timestamp, body)
    return any(hmac.compare_digest(expected, candidate) for candidate in given.split(" "))


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """The deprecated `OM-Signature` value: the secret's text (not its decoded key) is the HMAC key."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={mac}"


def verify(secret: str, header: str, body: bytes, *, now: float | None = None) -> bool:
    """The deprecated scheme's check: the MAC matches and the timestamp is within the replay window."""
    fields = dict(item.split("=", 1) for item in header.split(",") if "=" in item)
    try:
        timestamp = int(fields["t"])
    except (KeyError, ValueError):
        return False
    if abs((now if now is not None else time.time()) - timestamp) > REPLAY_WINDOW_S:
        return False
    expected = signature(secret, timestamp, body).split("v1=", 1)[1]
    return hmac.compare_digest(expected, fields.get("v1", ""))
