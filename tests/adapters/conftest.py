"""One real `om serve` (Postgres, Redis, keys, the offline memory model) for the framework adapters'
tests, started once; each test gets a fresh tenant's key."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine

from om_client import OMClient
from om_core.tenancy import access
from tests.support.api_server import ApiServer, run_api_server

#: The actor models the adapters' turns name (om counts tokens and cost by them).
ALLOWED = "om-actor/echo,openai/gpt-4o-mini*"


@pytest.fixture(scope="session")
def stack(
    postgres_url: str, redis_url: str, pg_engine: Engine, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApiServer]:
    log_dir = tmp_path_factory.mktemp("om-serve")
    with run_api_server(postgres_url, redis_url, log_dir, env={"OM_ACTOR_MODELS": ALLOWED}) as server:
        yield server


@pytest.fixture
def key(pg_engine: Engine, tenant: str) -> str:
    """A key of a fresh tenant."""
    return access.create_key(pg_engine, tenant, "adapter-test").secret


@pytest.fixture
def om(stack: ApiServer, key: str) -> Iterator[OMClient]:
    """A client of that tenant."""
    with OMClient(stack.base_url, key, timeout=60) as client:
        yield client


@pytest.fixture
def other_key(pg_engine: Engine) -> str:
    """A key of another fresh tenant."""
    from tests.support.api_server import new_id

    return access.create_key(pg_engine, new_id("other"), "adapter-test").secret
