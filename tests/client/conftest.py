"""One real `om serve` (Postgres, Redis, keys, the fake actor) for every test of the client that needs a
server, started once: the standalone-install test, the stream-resume tests and `GET /v1/models`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine

from om_core.tenancy import access
from tests.support.api_server import ApiServer, run_api_server

#: The operator's allow-list of the test server: one model written out, two patterns.
ALLOWED = "om-actor/echo,openai/gpt-4o-mini*,ollama/llama3*"


@pytest.fixture(scope="session")
def stack(
    postgres_url: str, redis_url: str, pg_engine: Engine, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApiServer]:
    log_dir = tmp_path_factory.mktemp("om-serve")
    env = {"OM_ACTOR_MODELS": ALLOWED}
    with run_api_server(postgres_url, redis_url, log_dir, env=env, om_serve=True) as server:
        yield server


@pytest.fixture
def key(pg_engine: Engine, tenant: str) -> str:
    """A key of a fresh tenant."""
    return access.create_key(pg_engine, tenant, "client-test").secret
