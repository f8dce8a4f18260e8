"""Requests per second per tenant: a token bucket per tenant in each API process, 429 over it.

Every authenticated `/v1/` and `/mcp` request takes one token from its tenant's bucket (all the tenant's
keys share it). The bucket holds `burst` tokens and refills at `rate` per second: `OM_TENANT_RATE_LIMIT` and
`OM_TENANT_RATE_BURST`, or the tenant's own (`om tenants limits`, `om_core.tenancy.limits`). An empty
bucket answers 429 with `Retry-After` and the IETF `RateLimit-Policy` / `RateLimit` fields
(draft-ietf-httpapi-ratelimit-headers); every limited response carries the two fields, so a client can
slow down before it is refused.

What it costs a turn: nothing leaves the process. The caller's key is the one the authentication layer
remembers (`KeyVerifier.remembered`; a key not remembered is verified here, off the event loop, and the
route then finds it remembered), and the per-tenant limits are re-read from the database once every
`OM_TENANT_LIMITS_REFRESH_S` by one request, never per request.

What it does not do: the buckets are per process. With N API processes behind a balancer, a tenant may
make up to N times the rate in total; the operator divides the intended total by N. Health checks,
readiness, metrics, the dashboard's static files and the OpenAPI documents are not under `/v1/` and never
limited; requests without a valid key are not counted (they get their 401 from the route).
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine
from starlette.concurrency import run_in_threadpool

from om_api.errors import error_body
from om_api.runtime import ApiRuntime
from om_core.tenancy.limits import TenantLimits, read_tenant_limits

log = logging.getLogger("om.api")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: The policy's name in the `RateLimit-Policy` and `RateLimit` fields.
POLICY = "tenant"
#: Paths whose requests are counted: the REST API and the MCP endpoint (`om_api.mcp`).
LIMITED_PREFIXES = ("/v1/", "/mcp")


@dataclass(frozen=True)
class Rate:
    """A bucket's shape: `per_s` tokens a second (0: unlimited), at most `burst` held."""

    per_s: float
    burst: int

    @property
    def unlimited(self) -> bool:
        return self.per_s <= 0

    @property
    def window_s(self) -> int:
        """Seconds an empty bucket takes to fill: the `w` of the policy."""
        return max(1, math.ceil(self.burst / self.per_s))


@dataclass(frozen=True)
class Decision:
    """One request's answer: whether it may go on, the tokens left, and the seconds until one more token
    (`retry_after_s`, the `Retry-After` of a refusal) and until the bucket is full (`full_in_s`)."""

    allowed: bool
    remaining: int
    retry_after_s: int
    full_in_s: int


class TokenBuckets:
    """A token bucket per tenant. Bounded: past `max_entries` tenants, the buckets that have filled up
    again are forgotten (a forgotten bucket starts full, so forgetting a full one changes nothing)."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic, max_entries: int = 100_000) -> None:
        self._clock = clock
        self.max_entries = max_entries
        self._buckets: dict[str, tuple[float, float, Rate]] = {}
        self._lock = threading.Lock()

    def take(self, tenant: str, rate: Rate) -> Decision:
        now = self._clock()
        with self._lock:
            entry = self._buckets.get(tenant)
            tokens = float(rate.burst) if entry is None else _refilled(entry, now, rate)
            allowed = tokens >= 1.0
            if allowed:
                tokens -= 1.0
            if entry is None and len(self._buckets) >= self.max_entries:
                self._forget_full(now)
            self._buckets[tenant] = (tokens, now, rate)
        return Decision(
            allowed=allowed,
            remaining=int(tokens),
            retry_after_s=0 if tokens >= 1.0 else max(1, math.ceil((1.0 - tokens) / rate.per_s)),
            full_in_s=math.ceil((rate.burst - tokens) / rate.per_s),
        )

    def _forget_full(self, now: float) -> None:
        for tenant, entry in list(self._buckets.items()):
            if _refilled(entry, now, entry[2]) >= entry[2].burst:
                del self._buckets[tenant]


def _refilled(entry: tuple[float, float, Rate], now: float, rate: Rate) -> float:
    """The bucket's tokens now, under `rate` (the tenant's limits may have changed since)."""
    tokens, at, _ = entry
    return min(float(rate.burst), tokens + max(0.0, now - at) * rate.per_s)


class TenantLimitsCache:
    """The operator's per-tenant limits as this process last read them, re-read every `refresh_s`. A
    failed read keeps the previous limits (and is retried after `refresh_s`): a database blip must not
    turn every tenant's limits off or on."""

    def __init__(self, db: Engine, refresh_s: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.db = db
        self.refresh_s = refresh_s
        self._clock = clock
        self._limits: dict[str, TenantLimits] = {}
        self._next_read = 0.0
        self._reading = False

    def due(self) -> bool:
        """Whether a read is due and nobody is reading: the caller that gets True does the read."""
        if self._reading or self._clock() < self._next_read:
            return False
        self._reading = True
        return True

    def refresh(self) -> None:
        try:
            self._limits = read_tenant_limits(self.db)
        except Exception:
            log.warning("could not read the per-tenant limits; keeping the previous ones", exc_info=True)
        finally:
            self._next_read = self._clock() + self.refresh_s
            self._reading = False

    def get(self, tenant: str) -> TenantLimits | None:
        return self._limits.get(tenant)


def rate_for(limits: TenantLimits | None, default_per_s: float, default_burst: int) -> Rate:
    """The tenant's own values where the operator set them, the settings' otherwise."""
    per_s = limits.requests_per_s if limits is not None and limits.requests_per_s is not None else None
    burst = limits.burst if limits is not None and limits.burst is not None else None
    return Rate(
        per_s=default_per_s if per_s is None else per_s, burst=default_burst if burst is None else burst
    )


def presented_key(scope: Scope) -> str | None:
    """The key as the authentication layer reads it: a bearer token, else `X-API-Key`."""
    api_key: str | None = None
    headers: list[tuple[bytes, bytes]] = scope.get("headers") or []
    for name, value in headers:
        if name == b"authorization":
            scheme, _, credentials = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and credentials.strip():
                return credentials.strip()
        elif name == b"x-api-key":
            api_key = value.decode("latin-1")
    return api_key or None


def _fields(rate: Rate, decision: Decision) -> list[tuple[bytes, bytes]]:
    reset = decision.retry_after_s if decision.remaining == 0 else decision.full_in_s
    return [
        (b"ratelimit-policy", f'"{POLICY}";q={rate.burst};w={rate.window_s}'.encode()),
        (b"ratelimit", f'"{POLICY}";r={decision.remaining};t={reset}'.encode()),
    ]


class TenantRateLimit:
    """The ASGI middleware: one token per authenticated `/v1/` or `/mcp` request, 429 when the bucket is
    empty."""

    def __init__(self, app: ASGIApp, runtime: ApiRuntime, buckets: TokenBuckets | None = None) -> None:
        self.app = app
        self.runtime = runtime
        settings = runtime.settings
        self.default_per_s = settings.tenant_rate_limit
        self.default_burst = settings.tenant_rate_burst
        self.enabled = settings.auth == "keys"
        self.buckets = buckets or TokenBuckets()
        self.limits = TenantLimitsCache(runtime.db, settings.tenant_limits_refresh_s)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        tenant = await self._tenant(scope) if self.enabled else None
        if tenant is None:
            await self.app(scope, receive, send)
            return
        if self.limits.due():
            await run_in_threadpool(self.limits.refresh)
        rate = rate_for(self.limits.get(tenant), self.default_per_s, self.default_burst)
        if rate.unlimited:
            await self.app(scope, receive, send)
            return
        decision = self.buckets.take(tenant, rate)
        fields = _fields(rate, decision)
        if not decision.allowed:
            await self._refuse(send, rate, decision, fields)
            return

        async def send_with_fields(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), *fields]
            await send(message)

        await self.app(scope, receive, send_with_fields)

    async def _tenant(self, scope: Scope) -> str | None:
        """The verified tenant of the request's key, or None (not limited: not `/v1/` or `/mcp`, or no
        valid key)."""
        if scope["type"] != "http" or not str(scope.get("path", "")).startswith(LIMITED_PREFIXES):
            return None
        presented = presented_key(scope)
        if presented is None:
            return None
        keys = self.runtime.keys
        key = keys.remembered(presented)
        if key is None:
            key = await run_in_threadpool(keys.verify, presented)
        return None if key is None else str(key.tenant_id)

    async def _refuse(
        self, send: Send, rate: Rate, decision: Decision, fields: list[tuple[bytes, bytes]]
    ) -> None:
        message = (
            f"too many requests: this tenant may make {rate.per_s:g} requests per second (bursts of "
            f"{rate.burst}) to this server; retry after {decision.retry_after_s} s (Retry-After), and "
            "spread requests out or ask the operator for a higher limit"
        )
        body = json.dumps(error_body("rate_limited", message, limit=rate.burst)).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"retry-after", str(decision.retry_after_s).encode()),
            *fields,
        ]
        await send({"type": "http.response.start", "status": 429, "headers": headers})
        await send({"type": "http.response.body", "body": body})
