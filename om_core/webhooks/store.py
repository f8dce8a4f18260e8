"""Webhook endpoints as rows: registration, reads, the delivery state, the last attempts, the event feed.

An endpoint belongs to one tenant (`''` without tenancy) and sees the events of that tenant's threads only:
the feed filters the outbox by the stored thread id's tenant part (`<tenant>/<id>`, `scoped_ids`).
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, delete, func, insert, select, update

from om_core.store import schema
from om_core.store.db import read_only
from om_core.store.types import StoredEvent
from om_core.tenancy.scoped_ids import SCOPE_SEPARATOR, StoredId
from om_core.webhooks.signing import new_secret

#: Attempts kept per endpoint for `GET /v1/webhooks/{id}/deliveries`; older ones are deleted.
KEEP_ATTEMPTS = 200
#: The event types an endpoint can ask for besides exact names: every event.
ALL_EVENTS = "*"
States = ("active", "failing", "dead")


@dataclass(frozen=True)
class Endpoint:
    id: str
    tenant_id: str
    url: str
    events: tuple[str, ...]
    description: str | None
    secret: str
    enabled: bool
    state: str
    cursor: int
    failures: int
    next_attempt_at: datetime | None
    last_error: str | None
    last_delivered_at: datetime | None
    delivered_total: int
    failed_total: int
    created_at: datetime
    updated_at: datetime
    #: The secret a rotation replaced: it signs too until dropped or `previous_secret_expires_at`.
    previous_secret: str | None = None
    previous_secret_expires_at: datetime | None = None
    #: Send the deprecated `OM-Signature` header besides the standard ones.
    legacy_signature: bool = False

    def wants(self, event_type: str) -> bool:
        return ALL_EVENTS in self.events or event_type in self.events

    def previous_valid(self, now: datetime) -> bool:
        return self.previous_secret is not None and (
            self.previous_secret_expires_at is None or self.previous_secret_expires_at > now
        )

    def signing_secrets(self, now: datetime) -> tuple[str, ...]:
        """The secrets a delivery at `now` is signed with: the current one, then the previous one while
        it is still valid."""
        if self.previous_valid(now):
            assert self.previous_secret is not None
            return (self.secret, self.previous_secret)
        return (self.secret,)


@dataclass(frozen=True)
class Attempt:
    id: int
    event_id: int
    event_type: str
    thread_id: StoredId | None
    attempt: int
    outcome: str
    status_code: int | None
    error: str | None
    duration_ms: int
    created_at: datetime


def _endpoint(row: Any) -> Endpoint:
    return Endpoint(
        id=row.id,
        tenant_id=row.tenant_id,
        url=row.url,
        events=tuple(row.events or ()),
        description=row.description,
        secret=row.secret,
        enabled=bool(row.enabled),
        state=row.state,
        cursor=int(row.cursor),
        failures=int(row.failures),
        next_attempt_at=row.next_attempt_at,
        last_error=row.last_error,
        last_delivered_at=row.last_delivered_at,
        delivered_total=int(row.delivered_total),
        failed_total=int(row.failed_total),
        created_at=row.created_at,
        updated_at=row.updated_at,
        previous_secret=row.previous_secret,
        previous_secret_expires_at=row.previous_secret_expires_at,
        legacy_signature=bool(row.legacy_signature),
    )


def _latest_event_id(conn: Connection) -> int:
    return int(conn.execute(select(func.max(schema.events.c.id))).scalar() or 0)


def create(
    db: Engine, *, tenant_id: str, url: str, events: Sequence[str], description: str | None, now: datetime
) -> Endpoint:
    """A new endpoint that receives the events written from now on (its cursor starts at the outbox's end)."""
    endpoint_id = f"wh_{secrets.token_hex(12)}"
    with db.begin() as conn:
        values = {
            "id": endpoint_id,
            "tenant_id": tenant_id,
            "url": url,
            "events": list(dict.fromkeys(events)),
            "description": description,
            "secret": new_secret(),
            "legacy_signature": False,
            "enabled": True,
            "state": "active",
            "cursor": _latest_event_id(conn),
            "failures": 0,
            "delivered_total": 0,
            "failed_total": 0,
            "created_at": now,
            "updated_at": now,
        }
        conn.execute(insert(schema.webhook_endpoints).values(values))
    found = get(db, endpoint_id, tenant_id=tenant_id)
    assert found is not None
    return found


def get(db: Engine, endpoint_id: str, *, tenant_id: str | None) -> Endpoint | None:
    """The endpoint, when it exists and (with `tenant_id` given) belongs to that tenant."""
    W = schema.webhook_endpoints
    query = select(W).where(W.c.id == endpoint_id)
    if tenant_id is not None:
        query = query.where(W.c.tenant_id == tenant_id)
    with db.connect() as conn:
        row = conn.execute(query).first()
    return _endpoint(row) if row is not None else None


def list_for(db: Engine, tenant_id: str, *, limit: int = 100, after: str | None = None) -> list[Endpoint]:
    W = schema.webhook_endpoints
    query = select(W).where(W.c.tenant_id == tenant_id).order_by(W.c.id).limit(limit)
    if after is not None:
        query = query.where(W.c.id > after)
    with db.connect() as conn:
        return [_endpoint(row) for row in conn.execute(query)]


def patch(
    db: Engine, endpoint_id: str, tenant_id: str, changes: dict[str, Any], now: datetime
) -> Endpoint | None:
    """Apply `changes` (url, events, description, enabled, legacy_signature). Enabling an endpoint revives
    a dead one: its failures are forgotten and the next pass retries the event it stopped at."""
    W = schema.webhook_endpoints
    values = dict(changes)
    if values.get("enabled") is True:
        values.update(state="active", failures=0, next_attempt_at=None)
    if "events" in values:
        values["events"] = list(dict.fromkeys(values["events"]))
    with db.begin() as conn:
        done = conn.execute(
            update(W)
            .where(W.c.id == endpoint_id, W.c.tenant_id == tenant_id)
            .values(**values, updated_at=now)
        )
    return get(db, endpoint_id, tenant_id=tenant_id) if done.rowcount else None


def rotate_secret(
    db: Engine, endpoint_id: str, tenant_id: str, *, keep_previous_s: float, now: datetime
) -> Endpoint | None:
    """A new current secret; the one it replaces stays valid for `keep_previous_s` (0: not at all). A
    previous secret still held from an earlier rotation is dropped: at most two secrets sign."""
    W = schema.webhook_endpoints
    keep = keep_previous_s > 0
    with db.begin() as conn:
        done = conn.execute(
            update(W)
            .where(W.c.id == endpoint_id, W.c.tenant_id == tenant_id)
            .values(
                previous_secret=W.c.secret if keep else None,
                previous_secret_expires_at=now + timedelta(seconds=keep_previous_s) if keep else None,
                secret=new_secret(),
                updated_at=now,
            )
        )
    return get(db, endpoint_id, tenant_id=tenant_id) if done.rowcount else None


def drop_previous_secret(db: Engine, endpoint_id: str, tenant_id: str, *, now: datetime) -> Endpoint | None:
    """End a rotation early: only the current secret signs from now on."""
    W = schema.webhook_endpoints
    with db.begin() as conn:
        done = conn.execute(
            update(W)
            .where(W.c.id == endpoint_id, W.c.tenant_id == tenant_id)
            .values(previous_secret=None, previous_secret_expires_at=None, updated_at=now)
        )
    return get(db, endpoint_id, tenant_id=tenant_id) if done.rowcount else None


def remove(db: Engine, endpoint_id: str, tenant_id: str) -> bool:
    with db.begin() as conn:
        conn.execute(
            delete(schema.webhook_attempts).where(schema.webhook_attempts.c.endpoint_id == endpoint_id)
        )
        done = conn.execute(
            delete(schema.webhook_endpoints).where(
                schema.webhook_endpoints.c.id == endpoint_id,
                schema.webhook_endpoints.c.tenant_id == tenant_id,
            )
        )
    return bool(done.rowcount)


def attempts(db: Engine, endpoint_id: str, *, limit: int = 50, before: int | None = None) -> list[Attempt]:
    """The endpoint's attempts, newest first."""
    A = schema.webhook_attempts
    query = select(A).where(A.c.endpoint_id == endpoint_id).order_by(A.c.id.desc()).limit(limit)
    if before is not None:
        query = query.where(A.c.id < before)
    with db.connect() as conn:
        return [
            Attempt(
                id=int(r.id),
                event_id=int(r.event_id),
                event_type=r.event_type,
                thread_id=r.thread_id,
                attempt=int(r.attempt),
                outcome=r.outcome,
                status_code=r.status_code,
                error=r.error,
                duration_ms=int(r.duration_ms),
                created_at=r.created_at,
            )
            for r in conn.execute(query)
        ]


def backlog(db: Engine, endpoint: Endpoint, limit: int = 10_000) -> int:
    """Events of the endpoint's tenant past its cursor (at most `limit`; subscribed or not)."""
    E = schema.events
    inner = select(E.c.id).where(E.c.id > endpoint.cursor, _tenant_filter(endpoint.tenant_id)).limit(limit)
    with db.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(inner.subquery())).scalar() or 0)


# --------------------------------------------------------------------------------------------- the feed


def _tenant_filter(tenant_id: str) -> Any:
    E = schema.events
    if tenant_id:
        prefix = tenant_id.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + SCOPE_SEPARATOR
        return E.c.thread_id.like(prefix + "%", escape="\\")
    return E.c.thread_id.not_like("%" + SCOPE_SEPARATOR + "%")


def _owned(tenant_id: str, thread_id: StoredId | None) -> bool:
    """The exact rule behind the SQL prefix: a tenant named `a` must not see tenant `a/b`'s threads."""
    return thread_id is not None and thread_id.rpartition(SCOPE_SEPARATOR)[0] == tenant_id


def feed(
    db: Engine, endpoint: Endpoint, *, settled_before: datetime, limit: int
) -> tuple[list[StoredEvent], int]:
    """(the tenant's settled events past the cursor, in id order; the id the cursor may move to when all of
    them are handled). The second value also covers other tenants' settled events, so an endpoint whose
    tenant is quiet does not rescan them at every run."""
    E = schema.events
    with db.connect() as conn:
        rows = conn.execute(
            select(E)
            .where(
                E.c.id > endpoint.cursor, E.c.created_at <= settled_before, _tenant_filter(endpoint.tenant_id)
            )
            .order_by(E.c.id)
            .limit(limit)
        ).all()
        if len(rows) == limit:
            watermark = int(rows[-1].id)
        else:
            watermark = int(
                conn.execute(
                    select(func.max(E.c.id)).where(E.c.id > endpoint.cursor, E.c.created_at <= settled_before)
                ).scalar()
                or endpoint.cursor
            )
    events = [
        StoredEvent(
            id=int(r.id),
            type=r.type,
            thread_id=r.thread_id,
            lookup_key=r.lookup_key,
            record_id=r.record_id,
            cycle_id=r.cycle_id,
            payload=dict(r.payload),
            created_at=r.created_at,
        )
        for r in rows
        if _owned(endpoint.tenant_id, r.thread_id)
    ]
    return events, watermark


# ----------------------------------------------------------------------------------- delivery state


def advance(db: Engine, endpoint_id: str, cursor: int, *, delivered: int, now: datetime) -> None:
    """Move the cursor forward (never back) after events were delivered or skipped; a delivery clears the
    failure streak."""
    W = schema.webhook_endpoints
    values: dict[str, Any] = {"cursor": func.greatest(W.c.cursor, cursor), "updated_at": now}
    with db.begin() as conn:
        if conn.dialect.name == "sqlite":
            values["cursor"] = func.max(W.c.cursor, cursor)
        if delivered:
            values.update(
                failures=0,
                state="active",
                next_attempt_at=None,
                last_error=None,
                last_delivered_at=now,
                delivered_total=W.c.delivered_total + delivered,
            )
        conn.execute(update(W).where(W.c.id == endpoint_id).values(**values))


def record_failure(
    db: Engine, endpoint: Endpoint, *, error: str, retry_in_s: float, max_failures: int, now: datetime
) -> Endpoint:
    """One more failed attempt of the event after the cursor: a backoff and `failing`, or `dead` past the
    bound."""
    failures = endpoint.failures + 1
    state = "dead" if failures >= max_failures else "failing"
    W = schema.webhook_endpoints
    with db.begin() as conn:
        conn.execute(
            update(W)
            .where(W.c.id == endpoint.id)
            .values(
                failures=failures,
                state=state,
                next_attempt_at=None if state == "dead" else now + timedelta(seconds=retry_in_s),
                last_error=error[:2000],
                failed_total=W.c.failed_total + 1,
                updated_at=now,
            )
        )
    found = get(db, endpoint.id, tenant_id=None)
    return found or endpoint


def record_attempt(
    db: Engine,
    endpoint_id: str,
    event: StoredEvent,
    *,
    attempt: int,
    outcome: str,
    status_code: int | None,
    error: str | None,
    duration_ms: int,
    now: datetime,
) -> None:
    """Log one attempt and keep only the endpoint's last `KEEP_ATTEMPTS`."""
    A = schema.webhook_attempts
    with db.begin() as conn:
        conn.execute(
            insert(A).values(
                endpoint_id=endpoint_id,
                event_id=event.id,
                event_type=event.type,
                thread_id=event.thread_id,
                attempt=attempt,
                outcome=outcome,
                status_code=status_code,
                error=error[:2000] if error else None,
                duration_ms=duration_ms,
                created_at=now,
            )
        )
        oldest_kept = (
            select(A.c.id)
            .where(A.c.endpoint_id == endpoint_id)
            .order_by(A.c.id.desc())
            .offset(KEEP_ATTEMPTS)
            .limit(1)
        ).scalar_subquery()
        conn.execute(delete(A).where(A.c.endpoint_id == endpoint_id, A.c.id <= oldest_kept))


def due(db: Engine, now: datetime, limit: int) -> list[Endpoint]:
    """Enabled, not dead endpoints whose backoff is over and whose cursor is behind the outbox's end."""
    W = schema.webhook_endpoints
    with db.connect() as conn:
        latest = _latest_event_id(conn)
        rows = conn.execute(
            select(W)
            .where(
                W.c.enabled.is_(True),
                W.c.state != "dead",
                W.c.cursor < latest,
                (W.c.next_attempt_at.is_(None)) | (W.c.next_attempt_at <= now),
            )
            .order_by(W.c.updated_at)
            .limit(limit)
        ).all()
    return [_endpoint(row) for row in rows]


def totals(db: Engine) -> dict[str, Any]:
    """What `/metrics` reports: attempts by outcome, endpoints by state, summed over every endpoint."""
    W = schema.webhook_endpoints
    with read_only(db) as conn:
        sums = conn.execute(select(func.sum(W.c.delivered_total), func.sum(W.c.failed_total))).first()
        states = conn.execute(select(W.c.state, func.count()).group_by(W.c.state)).all()
    return {
        "delivered": int((sums[0] if sums else 0) or 0),
        "failed": int((sums[1] if sums else 0) or 0),
        "states": {str(state): int(count) for state, count in states},
    }
