"""Plain functions behind `om serve`, `om keys create|revoke|list` and `om tenants limits|list` (the `om` CLI
wires them up).

Settings come from the environment (`OM_DATABASE_URL`, `OM_AUTH`, `OM_EXECUTOR`, ...).
"""

from __future__ import annotations

import logging

from om_adapters.logs import configure_logging
from om_api.loopback import loopback_bind
from om_api.settings import ApiSettings
from om_core.process.startup_heap import freeze_startup_heap
from om_core.store.db import make_engine
from om_core.tenancy import access
from om_core.tenancy.limits import TenantLimits, clear_tenant_limits, read_tenant_limits, set_tenant_limits

__all__ = [
    "keys_create",
    "keys_list",
    "keys_revoke",
    "open_without_auth",
    "serve",
    "tenant_limits_clear",
    "tenant_limits_list",
    "tenant_limits_set",
]

log = logging.getLogger("om.api")


def open_without_auth(settings: ApiSettings, host: str, port: int, *, insecure_no_auth: bool) -> str | None:
    """Why the API must not start: no authentication on an address other machines can reach, which the
    operator did not ask for by name. Refused rather than logged (a log line is read after the port was
    open). None when it may start."""
    if settings.auth != "none" or loopback_bind(host) or insecure_no_auth:
        return None
    return (
        f"OM_AUTH=none on {host}:{port} would let anyone who reaches that address read and change every "
        "thread: set OM_AUTH=keys (create keys with `om keys create`), bind a loopback address "
        "(--host 127.0.0.1), or pass --insecure-no-auth if every client that can reach it is trusted"
    )


def serve(
    host: str | None = None,
    port: int | None = None,
    *,
    log_level: str = "info",
    insecure_no_auth: bool = False,
) -> None:
    """Run the API with uvicorn until interrupted (one process; scale out with more replicas). Without
    authentication it binds only loopback addresses unless `insecure_no_auth` (ValueError otherwise)."""
    import uvicorn
    from uvicorn.config import LOGGING_CONFIG

    from om_api.app import create_app

    settings = ApiSettings()
    host = host or settings.api_host
    port = port or settings.api_port
    problem = open_without_auth(settings, host, port, insecure_no_auth=insecure_no_auth)
    if problem is not None:
        raise ValueError(problem)
    configure_logging(settings.log_format, log_level)
    if settings.auth == "none" and not loopback_bind(host):
        log.warning(
            "--insecure-no-auth: serving %s:%d without authentication; requests must still name a "
            "loopback host (localhost, 127.0.0.1, [::1])",
            host,
            port,
        )
    app = create_app(settings)
    freeze_startup_heap()
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level=log_level,
        proxy_headers=True,
        # JSON lines: uvicorn's loggers (its access log too) propagate to om's handler instead of its own.
        log_config=None if settings.log_format == "json" else LOGGING_CONFIG,
        # Live event streams never end on their own; do not let them hold a shutdown forever.
        timeout_graceful_shutdown=10,
    )


def keys_create(tenant: str, name: str) -> str:
    """Issue an API key for `tenant` and return it. It is shown once: only its hash is stored."""
    engine = make_engine(ApiSettings().database_url)
    try:
        return access.create_key(engine, tenant, name).secret
    finally:
        engine.dispose()


def keys_revoke(key_id: str) -> bool:
    """Revoke a key by its public id (`omk_…`, the part before the second underscore); False if unknown."""
    engine = make_engine(ApiSettings().database_url)
    try:
        return access.revoke_key(engine, key_id)
    finally:
        engine.dispose()


def keys_list(tenant: str | None = None) -> list[access.ApiKey]:
    """Every key (or one tenant's), oldest first, without secrets."""
    engine = make_engine(ApiSettings().database_url)
    try:
        return access.list_keys(engine, tenant)
    finally:
        engine.dispose()


def tenant_limits_set(tenant: str, limits: TenantLimits) -> TenantLimits:
    """Set the given fields of the tenant's limits (the others keep their stored value); returns all."""
    engine = make_engine(ApiSettings().database_url)
    try:
        return set_tenant_limits(engine, tenant, limits)
    finally:
        engine.dispose()


def tenant_limits_clear(tenant: str) -> bool:
    """Drop the tenant's limits (the settings apply again); False when it had none."""
    engine = make_engine(ApiSettings().database_url)
    try:
        return clear_tenant_limits(engine, tenant)
    finally:
        engine.dispose()


def tenant_limits_list() -> dict[str, TenantLimits]:
    """Every tenant the operator gave its own limits, by tenant id."""
    engine = make_engine(ApiSettings().database_url)
    try:
        return read_tenant_limits(engine)
    finally:
        engine.dispose()
