"""API keys and thread ownership: which tenant may see which thread.

A key is `omk_<12 hex>_<secret>`. The `omk_<12 hex>` part is its public id (safe to log and list); only a
SHA-256 of the secret is stored, so a leaked database does not leak usable keys, and verification is one
primary-key lookup plus a constant-time compare.

Thread and resource ids belong to their tenant (`om_core.tenancy.scoped_ids`): a thread is stored under an id
that includes its tenant, so a tenant asking for another tenant's thread asks for a key that does not exist
and gets the answer for an id nobody ever used. Ownership is also a column, checked as a second wall.
`tenant_id=None` means "no tenancy" (the embedded mode without auth): every thread is visible.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Engine, select, update

from om_core.errors import OMError
from om_core.store import history, schema
from om_core.tenancy.scoped_ids import MAX_TENANT_LENGTH, StoredId, public_id, scoped_id

__all__ = [
    "KEY_PREFIX",
    "ApiKey",
    "IssuedKey",
    "KeyUsage",
    "KeyVerifier",
    "ResourceMismatch",
    "ThreadNotVisible",
    "check_turn_access",
    "claim_thread",
    "create_key",
    "create_thread_for",
    "key_usage",
    "list_keys",
    "owned_thread",
    "public_id",
    "record_key_usage",
    "resource_visible",
    "revoke_key",
    "scoped_id",
    "verify_key",
]

KEY_PREFIX = "omk_"
_KEY_RE = re.compile(r"^(omk_[0-9a-f]{12})_([A-Za-z0-9_-]{20,200})$")
K = schema.api_keys
T = schema.threads


@dataclass(frozen=True)
class KeyUsage:
    """What a key spent on actor models through the proxy, as of the read that produced it."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0


@dataclass(frozen=True)
class ApiKey:
    """A stored key, without its secret. `usage` is as of the read (a key remembered by `KeyVerifier`
    carries the usage of its verification; read `key_usage` for the current one)."""

    id: str
    tenant_id: str
    name: str
    created_at: datetime
    revoked_at: datetime | None
    usage: KeyUsage = field(default_factory=KeyUsage)

    @property
    def active(self) -> bool:
        return self.revoked_at is None


@dataclass(frozen=True)
class IssuedKey:
    """A new key. `secret` is the full key string; it is shown once and never stored."""

    key: ApiKey
    secret: str


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


_USAGE_COLUMNS = (K.c.actor_calls, K.c.actor_prompt_tokens, K.c.actor_completion_tokens, K.c.actor_cost_usd)


def _usage_from_mapping(mapping: Any) -> KeyUsage:
    return KeyUsage(
        calls=int(mapping["actor_calls"]),
        prompt_tokens=int(mapping["actor_prompt_tokens"]),
        completion_tokens=int(mapping["actor_completion_tokens"]),
        cost_usd=float(mapping["actor_cost_usd"]),
    )


def _key_from_row(row: object) -> ApiKey:
    mapping = row._mapping  # type: ignore[attr-defined]
    return ApiKey(
        id=mapping["id"],
        tenant_id=mapping["tenant_id"],
        name=mapping["name"],
        created_at=mapping["created_at"],
        revoked_at=mapping["revoked_at"],
        usage=_usage_from_mapping(mapping),
    )


def create_key(db: Engine, tenant_id: str, name: str) -> IssuedKey:
    """Issue a key bound to `tenant_id`. The returned secret is the only copy."""
    if not tenant_id.strip():
        raise ValueError("a key needs a tenant id (any non-empty name for the customer or app)")
    if len(tenant_id) > MAX_TENANT_LENGTH or not tenant_id.isprintable():
        raise ValueError(f"a tenant id is at most {MAX_TENANT_LENGTH} printable characters")
    key_id = KEY_PREFIX + secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    now = datetime.now(UTC)
    with db.begin() as conn:
        conn.execute(
            K.insert().values(
                id=key_id,
                tenant_id=tenant_id,
                name=name,
                secret_sha256=_digest(secret),
                created_at=now,
                revoked_at=None,
            )
        )
    stored = ApiKey(id=key_id, tenant_id=tenant_id, name=name, created_at=now, revoked_at=None)
    return IssuedKey(key=stored, secret=f"{key_id}_{secret}")


def revoke_key(db: Engine, key_id: str) -> bool:
    """Revoke a key by its public id; False when no active key has that id."""
    with db.begin() as conn:
        result = conn.execute(
            update(K).where(K.c.id == key_id, K.c.revoked_at.is_(None)).values(revoked_at=datetime.now(UTC))
        )
    return bool(result.rowcount)


def list_keys(db: Engine, tenant_id: str | None = None) -> list[ApiKey]:
    query = select(K.c.id, K.c.tenant_id, K.c.name, K.c.created_at, K.c.revoked_at, *_USAGE_COLUMNS).order_by(
        K.c.created_at
    )
    if tenant_id is not None:
        query = query.where(K.c.tenant_id == tenant_id)
    with db.connect() as conn:
        return [_key_from_row(row) for row in conn.execute(query)]


def record_key_usage(
    db: Engine, key_id: str, *, prompt_tokens: int, completion_tokens: int, cost_usd: float
) -> None:
    """Add one actor call to the key's counters. One `UPDATE ... SET x = x + n`: concurrent calls of the
    same key (several requests, several API replicas) add up instead of overwriting each other."""
    with db.begin() as conn:
        conn.execute(
            update(K)
            .where(K.c.id == key_id)
            .values(
                actor_calls=K.c.actor_calls + 1,
                actor_prompt_tokens=K.c.actor_prompt_tokens + max(prompt_tokens, 0),
                actor_completion_tokens=K.c.actor_completion_tokens + max(completion_tokens, 0),
                actor_cost_usd=K.c.actor_cost_usd + max(cost_usd, 0.0),
            )
        )


def key_usage(db: Engine, key_id: str) -> KeyUsage | None:
    """The key's actor usage now; None when no key has that id."""
    with db.connect() as conn:
        row = conn.execute(select(*_USAGE_COLUMNS).where(K.c.id == key_id)).first()
    return None if row is None else _usage_from_mapping(row._mapping)


def verify_key(db: Engine, presented: str) -> ApiKey | None:
    """The active key `presented` stands for, or None (malformed, unknown, revoked or wrong secret)."""
    match = _KEY_RE.match(presented.strip())
    if match is None:
        return None
    key_id, secret = match.groups()
    with db.connect() as conn:
        row = conn.execute(select(K).where(K.c.id == key_id)).first()
    if row is None:
        return None
    if not hmac.compare_digest(row._mapping["secret_sha256"], _digest(secret)):
        return None
    key = _key_from_row(row)
    return key if key.active else None


class KeyVerifier:
    """`verify_key` that remembers keys it accepted for `ttl_s` seconds.

    Every request is authenticated, and a database round trip per request was a measurable share of a
    turn. The price is that a revoked key keeps working for at most `ttl_s` in each API process; `ttl_s=0`
    turns the memory off. Refusals are never remembered: a key created a moment ago works at once, and
    unknown keys cannot fill the memory.
    """

    def __init__(
        self, db: Engine, ttl_s: float = 5.0, *, max_entries: int = 10_000, clock: Any = time.monotonic
    ) -> None:
        self.db = db
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._clock = clock
        self._accepted: dict[str, tuple[ApiKey, float]] = {}
        self._lock = threading.Lock()

    def remembered(self, presented: str) -> ApiKey | None:
        """The key if it was accepted less than `ttl_s` ago, without touching the database."""
        if self.ttl_s <= 0:
            return None
        with self._lock:
            entry = self._accepted.get(_fingerprint(presented))
        return entry[0] if entry is not None and entry[1] > self._clock() else None

    def verify(self, presented: str) -> ApiKey | None:
        if self.ttl_s <= 0:
            return verify_key(self.db, presented)
        remembered = self.remembered(presented)
        if remembered is not None:
            return remembered
        fingerprint = _fingerprint(presented)
        now = self._clock()
        key = verify_key(self.db, presented)
        with self._lock:
            if key is None:
                self._accepted.pop(fingerprint, None)
            else:
                if len(self._accepted) >= self.max_entries:
                    self._accepted.clear()
                self._accepted[fingerprint] = (key, now + self.ttl_s)
        return key


def _fingerprint(presented: str) -> str:
    return hashlib.sha256(presented.encode()).hexdigest()


def _visible(owner: str | None, tenant_id: str | None) -> bool:
    """Whether a stored row of `owner` is the caller's. Stored ids already include the tenant, so this
    holds for every row a caller can name; it is checked anyway, as a second wall behind the first."""
    return tenant_id is None or owner == tenant_id


def _resource_owner(conn: Connection, resource_id: StoredId) -> tuple[bool, str | None]:
    row = conn.execute(
        select(schema.resources.c.tenant_id).where(schema.resources.c.id == resource_id)
    ).first()
    return (row is not None, row[0] if row is not None else None)


def claim_thread(db: Engine, tenant_id: str | None, thread_id: StoredId, resource_id: StoredId) -> bool:
    """Create the thread (stored ids) for `tenant_id`, or confirm the tenant already owns it; False only
    if a row under these stored ids belongs to someone else, which callers answer as "not found"."""
    with db.begin() as conn:
        owner = conn.execute(select(T.c.tenant_id).where(T.c.id == thread_id)).first()
        if owner is None:
            exists, resource_owner = _resource_owner(conn, resource_id)
            if exists and not _visible(resource_owner, tenant_id):
                return False
            history.ensure_thread(conn, thread_id, resource_id, tenant_id)
            owner = conn.execute(select(T.c.tenant_id).where(T.c.id == thread_id)).first()
    return owner is not None and _visible(owner[0], tenant_id)


def owned_thread(db: Engine, tenant_id: str | None, thread_id: StoredId) -> history.ThreadRow | None:
    """The thread under its stored id if the tenant may see it; None otherwise (one answer for both)."""
    thread = history.get_thread(db, thread_id)
    if thread is None or not _visible(thread.tenant_id, tenant_id):
        return None
    return thread


def claim_resource(db: Engine, tenant_id: str | None, resource_id: StoredId) -> bool:
    """Create the resource (stored id) for `tenant_id`, or confirm the tenant owns it; False only if a row
    under this stored id belongs to someone else (answered as "not found")."""
    with db.begin() as conn:
        exists, owner = _resource_owner(conn, resource_id)
        if exists:
            return _visible(owner, tenant_id)
        history.ensure_resource(conn, resource_id, tenant_id)
    return True


def resource_visible(db: Engine, tenant_id: str | None, resource_id: StoredId) -> bool:
    """Whether the resource (stored id) exists and belongs to the tenant (or tenancy is off)."""
    with db.connect() as conn:
        exists, owner = _resource_owner(conn, resource_id)
    return exists and _visible(owner, tenant_id)


class ThreadNotVisible(OMError, LookupError):
    """A stored row under the caller's ids belongs to someone else. It cannot happen while stored ids
    include the tenant; if it ever does, it is answered exactly like a missing thread."""

    def __init__(self, thread_id: StoredId, resource_id: StoredId) -> None:
        self.thread_id = thread_id
        self.resource_id = resource_id
        super().__init__(
            "THREAD_NOT_FOUND",
            f"thread {public_id(thread_id)!r} does not exist for this API key; post a turn to create it",
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (ThreadNotVisible, (self.thread_id, self.resource_id))


class ResourceMismatch(OMError, ValueError):
    """A turn named a resource other than the one its thread belongs to (a thread never moves)."""

    def __init__(self, thread_id: StoredId, actual: StoredId, given: StoredId) -> None:
        self.thread_id = thread_id
        self.actual = actual
        self.given = given
        super().__init__(
            "RESOURCE_MISMATCH",
            f"thread {public_id(thread_id)!r} belongs to resource {public_id(actual)!r}, not "
            f"{public_id(given)!r}: send its resource_id (or leave it out)",
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (ResourceMismatch, (self.thread_id, self.actual, self.given))


def create_thread_for(
    conn: Connection, tenant_id: str | None, thread_id: StoredId, resource_id: StoredId
) -> history.ThreadRow:
    """Create the thread (stored ids) for the tenant inside the caller's transaction and return it
    locked. A resource row of someone else under the same stored id is refused (see `_visible`)."""
    exists, owner = _resource_owner(conn, resource_id)
    if exists and not _visible(owner, tenant_id):
        raise ThreadNotVisible(thread_id, resource_id)
    history.ensure_thread(conn, thread_id, resource_id, tenant_id)
    thread = history.lock_thread(conn, thread_id)
    assert thread is not None, "ensure_thread created the row in this transaction"
    return thread


def check_turn_access(thread: history.ThreadRow, tenant_id: str | None, resource_id: StoredId | None) -> None:
    """Raise unless the tenant may write to the thread under the resource it named (if any)."""
    if not _visible(thread.tenant_id, tenant_id):
        raise ThreadNotVisible(thread.id, resource_id or thread.resource_id)
    if resource_id is not None and thread.resource_id != resource_id:
        raise ResourceMismatch(thread.id, thread.resource_id, resource_id)
