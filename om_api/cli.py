"""Plain functions behind `om serve`, `om keys create|revoke|list` and `om tenants limits|list` (the `om` CLI
wires them up).

Settings come from the environment (`OM_DATABASE_URL`, `OM_AUTH`, `OM_EXECUTOR`, ...).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from om_api.settings import ApiSettings
from om_core import tenancy, tenant_limits
from om_core.process.startup_heap import freeze_startup_heap
from om_core.store.db import make_engine

if TYPE_CHECKING:
    from om_api.runtime import Adapters

__all__ = [
    "keys_create",
    "keys_list",
    "keys_revoke",
    "serve",
    "tenant_limits_clear",
    "tenant_limits_list",
    "tenant_limits_set",
]


def serve(
    host: str | None = None,
    port: int | None = None,
    *,
    log_level: str = "info",
    adapters: Adapters | None = None,
) -> None:
    """Run the API with uvicorn until interrupted (one process; scale out with more replicas). `adapters`
    are the workers' (`om_app.wiring`, passed by `om serve`): celery mode needs them."""
    import uvicorn

    from om_api.app import create_app

    settings = ApiSettings()
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = create_app(settings, adapters)
    freeze_startup_heap()
    uvicorn.run(
        app,
        host=host or settings.api_host,
        port=port or settings.api_port,
        log_level=log_level,
        proxy_headers=True,
        # Live event streams never end on their own; do not let them hold a shutdown forever.
        timeout_graceful_shutdown=10,
    )


def keys_create(tenant: str, name: str) -> str:
    """Issue an API key for `tenant` and return it. It is shown once: only its hash is stored."""
    engine = make_engine(ApiSettings().database_url)
    try:
        return tenancy.create_key(engine, tenant, name).secret
    finally:
        engine.dispose()


def keys_revoke(key_id: str) -> bool:
    """Revoke a key by its public id (`omk_…`, the part before the second underscore); False if unknown."""
    engine = make_engine(ApiSettings().database_url)
    try:
        return tenancy.revoke_key(engine, key_id)
    finally:
        engine.dispose()


def keys_list(tenant: str | None = None) -> list[tenancy.ApiKey]:
    """Every key (or one tenant's), oldest first, without secrets."""
    engine = make_engine(ApiSettings().database_url)
    try:
        return tenancy.list_keys(engine, tenant)
    finally:
        engine.dispose()


def tenant_limits_set(tenant: str, limits: tenant_limits.TenantLimits) -> tenant_limits.TenantLimits:
    """Set the given fields of the tenant's limits (the others keep their stored value); returns all."""
    engine = make_engine(ApiSettings().database_url)
    try:
        return tenant_limits.set_tenant_limits(engine, tenant, limits)
    finally:
        engine.dispose()


def tenant_limits_clear(tenant: str) -> bool:
    """Drop the tenant's limits (the settings apply again); False when it had none."""
    engine = make_engine(ApiSettings().database_url)
    try:
        return tenant_limits.clear_tenant_limits(engine, tenant)
    finally:
        engine.dispose()


def tenant_limits_list() -> dict[str, tenant_limits.TenantLimits]:
    """Every tenant the operator gave its own limits, by tenant id."""
    engine = make_engine(ApiSettings().database_url)
    try:
        return tenant_limits.read_tenant_limits(engine)
    finally:
        engine.dispose()
