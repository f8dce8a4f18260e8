"""One endpoint's delivery run: its tenant's settled events past its cursor, one at a time, in id order.

An event is sent until a 2xx comes back; only then does the cursor move past it, so a crash between the
answer and the cursor write sends it again (at least once: receivers dedupe by `webhook-id`, the same on
every attempt, or `OM-Event-Id`). Each attempt is signed per Standard Webhooks (`signing.py`). The first
failure stops the run with a backoff: later events wait behind it, which keeps every thread's events in
order. Events the endpoint did not subscribe to are passed over without a request. The URL's host is
resolved and checked once at the start of the run and every request of the run goes to that checked
address (`targets.py`): a name re-pointed after the check is not followed. Bounded timeouts
(connect 3 s, 10 s per read), no redirects, one endpoint per run under its lock: a dead or slow endpoint
holds one `om.webhook` worker for at most a timeout per attempt and delays no other endpoint's cursor, no
turn and no cycle.

The request goes to the checked address, not to a fresh lookup of the name: the HTTP client is handed the
URL with its host replaced by the address (`Target.pinned_url`), so it has no name to resolve, and the
receiver still sees the registered host: it is the `Host` header and, for https, the TLS server name
(httpx's `sni_hostname` request extension, which httpcore passes to the SSL context as
`server_hostname`), so the SNI is the host's and the certificate is verified against the host, not the
address. Only httpx's public API; the connection pool is keyed by the address, which is what is connected
to. The client ignores the environment's proxies (`HTTP_PROXY`, `HTTPS_PROXY`): a proxy would make its own
connection (and for a CONNECT tunnel httpcore would send the address as SNI), so the pinning could not be
promised. It keeps the environment's trust store (`SSL_CERT_FILE`, `SSL_CERT_DIR`) for operators whose
receivers use a private CA. Redirects are off and both bounds are set per request, whatever client a
caller passes.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from sqlalchemy import Engine

from om_core.store.types import StoredEvent
from om_core.tenancy.scoped_ids import public_id
from om_core.webhooks import store
from om_core.webhooks.policy import WebhookPolicy
from om_core.webhooks.signing import SIGNATURE_HEADER, message_id, signature, standard_headers
from om_core.webhooks.targets import Target, WebhookTargetRefused, resolve_target

log = logging.getLogger("om.webhooks")

#: Events read from the outbox per query.
PAGE = 100


@dataclass
class RunReport:
    delivered: int = 0
    skipped: int = 0
    failed: bool = False
    #: The run stopped on its time budget with events left: the caller queues another run.
    more: bool = False


def body_of(event: StoredEvent) -> bytes:
    """The JSON a receiver gets: the event as the SSE stream and the outbox carry it, public ids only."""
    document: dict[str, Any] = {
        "id": event.id,
        "type": event.type,
        "threadId": public_id(event.thread_id) if event.thread_id else None,
        "createdAt": event.created_at.isoformat().replace("+00:00", "Z"),
        "data": event.payload,
    }
    return json.dumps(document, separators=(",", ":"), sort_keys=True).encode()


def _client() -> httpx.Client:
    """A delivery run's HTTP client: the environment's trust store, not its proxies; no redirects."""
    return httpx.Client(
        verify=httpx.create_ssl_context(trust_env=True), trust_env=False, follow_redirects=False
    )


def _post(
    http: httpx.Client, target: Target, body: bytes, headers: dict[str, str], timeout: httpx.Timeout
) -> httpx.Response:
    """POST to the target's checked address, with its host as the `Host` header and the TLS name."""
    return http.post(
        target.pinned_url,
        content=body,
        headers={**headers, "Host": target.authority},
        extensions={"sni_hostname": target.host},
        timeout=timeout,
        follow_redirects=False,
    )


def signed_headers(
    endpoint: store.Endpoint, event: StoredEvent, body: bytes, *, now: float
) -> dict[str, str]:
    """A delivery's headers: the Standard Webhooks three (one signature per valid secret), om's event
    id and type, and the deprecated `OM-Signature` for endpoints that still get it."""
    timestamp = int(now)
    secrets = endpoint.signing_secrets(datetime.fromtimestamp(now, UTC))
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "om-webhooks/1",
        **standard_headers(secrets, message_id(event.id), timestamp, body),
        "OM-Event-Id": str(event.id),
        "OM-Event-Type": event.type,
    }
    if endpoint.legacy_signature:
        headers[SIGNATURE_HEADER] = signature(endpoint.secret, timestamp, body)
    return headers


def _send(
    http: httpx.Client, target: Target, endpoint: store.Endpoint, event: StoredEvent, timeout: httpx.Timeout
) -> tuple[int | None, str | None]:
    body = body_of(event)
    headers = signed_headers(endpoint, event, body, now=time.time())
    try:
        response = _post(http, target, body, headers, timeout)
    except httpx.HTTPError as exc:
        what = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return None, f"{what} (connecting to {target.address} for {target.host})"
    if 200 <= response.status_code < 300:
        return response.status_code, None
    return response.status_code, f"HTTP {response.status_code}"


def _fail(
    db: Engine,
    endpoint: store.Endpoint,
    policy: WebhookPolicy,
    *,
    error: str,
    skipped_to: int,
    now: datetime,
) -> None:
    """Record a failed run: the cursor first moves past the events before the failure that this endpoint
    does not subscribe to (up to `skipped_to`), then the failure counts toward the backoff."""
    if skipped_to > endpoint.cursor:
        store.advance(db, endpoint.id, skipped_to, delivered=0, now=now)
        endpoint = store.get(db, endpoint.id, tenant_id=None) or endpoint
    store.record_failure(
        db,
        endpoint,
        error=error,
        retry_in_s=policy.backoff_s(endpoint.failures + 1),
        max_failures=policy.max_failures,
        now=now,
    )


def deliver_endpoint(
    db: Engine,
    endpoint_id: str,
    policy: WebhookPolicy,
    *,
    clock: Callable[[], datetime],
    client: httpx.Client | None = None,
) -> RunReport:
    """Run one endpoint's delivery (the caller holds the endpoint's lock)."""
    report = RunReport()
    endpoint = store.get(db, endpoint_id, tenant_id=None)
    now = clock()
    if endpoint is None or not endpoint.enabled or endpoint.state == "dead":
        return report
    if endpoint.next_attempt_at is not None and endpoint.next_attempt_at > now:
        return report
    try:
        # Resolved once per run; every request of the run goes to this checked address.
        target = resolve_target(endpoint.url, allow_private=policy.allow_private)
    except WebhookTargetRefused as exc:
        _fail(db, endpoint, policy, error=str(exc), skipped_to=endpoint.cursor, now=now)
        report.failed = True
        return report
    own = client is None
    http = client or _client()
    timeout = httpx.Timeout(policy.timeout_s, connect=policy.connect_timeout_s)
    started = time.monotonic()
    try:
        while True:
            events, watermark = store.feed(
                db, endpoint, settled_before=clock() - timedelta(seconds=policy.settle_s), limit=PAGE
            )
            cursor = endpoint.cursor
            for event in events:
                if not endpoint.wants(event.type):
                    cursor = event.id
                    report.skipped += 1
                    continue
                began = time.monotonic()
                status, error = _send(http, target, endpoint, event, timeout)
                took = int((time.monotonic() - began) * 1000)
                at = clock()
                store.record_attempt(
                    db,
                    endpoint.id,
                    event,
                    attempt=endpoint.failures + 1,
                    outcome="failed" if error else "delivered",
                    status_code=status,
                    error=error,
                    duration_ms=took,
                    now=at,
                )
                if error is not None:
                    _fail(db, endpoint, policy, error=error, skipped_to=cursor, now=at)
                    log.info("webhook %s: event %d failed (%s)", endpoint.id, event.id, error)
                    report.failed = True
                    return report
                # Persisted per event: a crash re-sends at most the one event in flight.
                store.advance(db, endpoint.id, event.id, delivered=1, now=at)
                endpoint = store.get(db, endpoint.id, tenant_id=None) or endpoint
                cursor = event.id
                report.delivered += 1
            # Every row up to the watermark was considered (delivered, or not this endpoint's to send).
            before = endpoint.cursor
            cursor = max(cursor, watermark)
            if cursor > endpoint.cursor:
                store.advance(db, endpoint.id, cursor, delivered=0, now=clock())
                endpoint = store.get(db, endpoint.id, tenant_id=None) or endpoint
            if cursor <= before and not events:
                return report
            if time.monotonic() - started > policy.run_budget_s:
                report.more = True
                return report
    finally:
        if own:
            http.close()
