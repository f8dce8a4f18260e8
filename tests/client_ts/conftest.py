"""The `om serve` and the tenant key that the Node packages' tests (the client, the AI SDK adapter) share."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine

from om_core.tenancy import access
from tests.support.api_server import ApiServer, run_api_server
from tests.support.node_packages import Built, node_and_npm, node_modules, scratch_copy


@pytest.fixture(scope="session")
def ts_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Built]:
    """A scratch copy of clients/typescript, built in the background while the server starts."""
    node, npm = node_and_npm()
    modules = node_modules(npm, "typescript")
    build = Built(node, npm, scratch_copy("typescript", tmp_path_factory.mktemp("ts"), modules))
    try:
        yield build
    finally:
        build.stop()


@pytest.fixture(scope="session")
def server(
    postgres_url: str, redis_url: str, pg_engine: Engine, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApiServer]:
    """`om serve` as production starts it, with keys auth, the inline executor and the offline model."""
    log_dir = tmp_path_factory.mktemp("api")
    with run_api_server(postgres_url, redis_url, log_dir, om_serve=True) as api:
        yield api


@pytest.fixture(scope="session")
def api_key(pg_engine: Engine) -> str:
    tenant = f"tenant-ts-{os.urandom(4).hex()}"
    return access.create_key(pg_engine, tenant, "ts-client").secret
