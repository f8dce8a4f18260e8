"""Plain functions behind `om serve` and `om keys create|revoke|list` (the `om` CLI wires them up).

Settings come from the environment (`OM_DATABASE_URL`, `OM_AUTH`, `OM_EXECUTOR`, ...).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from om_api.settings import ApiSettings
from om_core import tenancy
from om_core.process.startup_heap import freeze_startup_heap
from om_core.store.db import make_engine

if TYPE_CHECKING:
    from om_api.runtime import Adapters

__all__ = ["keys_create", "keys_list", "keys_revoke", "serve"]


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
