"""API keys and thread ownership: which tenant may see which thread.

A key is `omk_<12 hex>_<secret>`. The `omk_<12 hex>` part is its public id (safe to log and list); only a
SHA-256 of the secret is stored, so a leaked database does not leak usable keys, and verification is one
primary-key lookup plus a constant-time compare.

Thread and resource ids are global, so ownership is a column: a thread belongs to the tenant whose key
created it. A tenant asking for another tenant's thread gets the same answer as for a thread that does not
exist, so ids cannot be probed. `tenant_id=None` means "no tenancy" (the embedded mode without auth): every
thread is visible and new threads are stored without an owner.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import Connection, Engine, select, update

from om_core.store import history, schema

__all__ = [
    "KEY_PREFIX",
    "ApiKey",
    "IssuedKey",
    "claim_thread",
    "create_key",
    "list_keys",
    "owned_thread",
    "resource_visible",
    "revoke_key",
    "verify_key",
]

KEY_PREFIX = "omk_"
_KEY_RE = re.compile(r"^(omk_[0-9a-f]{12})_([A-Za-z0-9_-]{20,200})$")
K = schema.api_keys
T = schema.threads


@dataclass(frozen=True)
class ApiKey:
    """A stored key, without its secret."""

    id: str
    tenant_id: str
    name: str
    created_at: datetime
    revoked_at: datetime | None

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


def _key_from_row(row: object) -> ApiKey:
    mapping = row._mapping  # type: ignore[attr-defined]
    return ApiKey(
        id=mapping["id"],
        tenant_id=mapping["tenant_id"],
        name=mapping["name"],
        created_at=mapping["created_at"],
        revoked_at=mapping["revoked_at"],
    )


def create_key(db: Engine, tenant_id: str, name: str) -> IssuedKey:
    """Issue a key bound to `tenant_id`. The returned secret is the only copy."""
    if not tenant_id.strip():
        raise ValueError("a key needs a tenant id (any non-empty name for the customer or app)")
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
    query = select(K.c.id, K.c.tenant_id, K.c.name, K.c.created_at, K.c.revoked_at).order_by(K.c.created_at)
    if tenant_id is not None:
        query = query.where(K.c.tenant_id == tenant_id)
    with db.connect() as conn:
        return [_key_from_row(row) for row in conn.execute(query)]


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


def _visible(owner: str | None, tenant_id: str | None) -> bool:
    return tenant_id is None or owner == tenant_id


def _resource_owner(conn: Connection, resource_id: str) -> tuple[bool, str | None]:
    row = conn.execute(
        select(schema.resources.c.tenant_id).where(schema.resources.c.id == resource_id)
    ).first()
    return (row is not None, row[0] if row is not None else None)


def claim_thread(db: Engine, tenant_id: str | None, thread_id: str, resource_id: str) -> bool:
    """Create the thread owned by `tenant_id`, or confirm the tenant already owns it.

    False when the thread, or the resource a new thread would join, belongs to someone else; callers
    answer that exactly like "not found". Two tenants racing for a new id: the insert that lands first
    wins, the other gets False.
    """
    with db.begin() as conn:
        owner = conn.execute(select(T.c.tenant_id).where(T.c.id == thread_id)).first()
        if owner is None:
            exists, resource_owner = _resource_owner(conn, resource_id)
            if exists and not _visible(resource_owner, tenant_id):
                return False
            history.ensure_thread(conn, thread_id, resource_id, tenant_id)
            owner = conn.execute(select(T.c.tenant_id).where(T.c.id == thread_id)).first()
    return owner is not None and _visible(owner[0], tenant_id)


def owned_thread(db: Engine, tenant_id: str | None, thread_id: str) -> history.ThreadRow | None:
    """The thread if it exists and the tenant may see it; None otherwise (one answer for both cases)."""
    thread = history.get_thread(db, thread_id)
    if thread is None or not _visible(thread.tenant_id, tenant_id):
        return None
    return thread


def resource_visible(db: Engine, tenant_id: str | None, resource_id: str) -> bool:
    """Whether the resource exists and belongs to the tenant (or tenancy is off)."""
    with db.connect() as conn:
        exists, owner = _resource_owner(conn, resource_id)
    return exists and _visible(owner, tenant_id)
