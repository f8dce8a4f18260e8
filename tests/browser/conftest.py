"""Fixtures of the dashboard's browser tests: one production-shaped stack per session, chromium, pages.

`ui_stack` is what a deployment runs: `om serve` (preflight, auth by keys) in celery mode on the test
Postgres and Redis, Celery workers consuming every queue of the task table, and beat for the periodic
maintenance (idle activation, stale-work recovery). It is package-scoped: started once for all of
tests/browser (its processes cost several seconds of imports each on a two-core machine) and stopped when
the last browser test is done, so it does not run beside the rest of `make test`. Every test gets fresh
tenants' keys from it (`tenants`), so tests never see each other's threads.

Pages come from one chromium for the package (`browser`), each test in its own context (`page`: a laptop
viewport, fresh storage), so a sign-in kept in sessionStorage never leaks into the next test.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright
from sqlalchemy import Engine

from om_core.engine import QUEUES
from om_core.tenancy import access
from tests.support.api_server import ApiServer, new_id, run_api_server
from tests.support.browser import LAPTOP, launch_chromium
from tests.support.browser import screenshot as save_screenshot
from tests.support.workers import TEST_WORKER_ENV, WorkerCluster, worker_cluster

#: The stack's Redis database (each worker cluster of the suite has its own: see tests/support/workers.py).
REDIS_DB = 7

#: Small thresholds so a few turns buffer, activate and reflect: what the dashboard's tests watch happen.
SMALL_CYCLE = {"observation": {"messageTokens": 1500}, "reflection": {"observationTokens": 600}}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/browser/ carries the `browser` mark (selection only: `-m browser` or
    `-m "not browser"`; `make test` runs them all)."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.browser)


@dataclass(frozen=True)
class Tenant:
    """A tenant and one of its API keys."""

    id: str
    key: str


@dataclass
class UiStack:
    """The running stack: the API's base URL, its workers, and a way to make tenants with keys."""

    api: ApiServer
    workers: WorkerCluster
    db: Engine

    @property
    def base_url(self) -> str:
        return self.api.base_url

    @property
    def ui_url(self) -> str:
        return f"{self.api.base_url}/ui/"

    def new_tenant(self, prefix: str = "tenant") -> Tenant:
        tenant_id = new_id(prefix)
        return Tenant(tenant_id, access.create_key(self.db, tenant_id, "browser").secret)


@pytest.fixture(scope="package")
def ui_stack(
    postgres_url: str, redis_url: str, pg_engine: Engine, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[UiStack]:
    workdir = tmp_path_factory.mktemp("ui-stack")
    with worker_cluster(
        postgres_url=postgres_url,
        redis_url=redis_url,
        workdir=workdir,
        db=REDIS_DB,
        env={"OM_MODEL": "om-local/extractive", "OM_WORKER_BEAT_INTERVAL_S": "1"},
    ) as workers:
        # One worker on every queue (two processes, so a reflection never waits behind a buffering run)
        # and beat; started together so their imports overlap.
        workers.start_workers([(list(QUEUES), 2)], beats=1)
        env = {
            **TEST_WORKER_ENV,
            "OM_EXECUTOR": "celery",
            "OM_AUTH": "keys",
            "OM_BLOCKING_DEADLINE_S": "60",
            "OM_FLOWER_URL": "http://127.0.0.1:5555/",
        }
        with run_api_server(postgres_url, workers.redis_url, workdir, env=env, om_serve=True) as api:
            yield UiStack(api, workers, pg_engine)


@pytest.fixture
def tenants(ui_stack: UiStack) -> tuple[Tenant, Tenant]:
    """Two fresh tenants with a key each: the second is the outsider of the cross-tenant checks."""
    return ui_stack.new_tenant("alice"), ui_stack.new_tenant("mallory")


@pytest.fixture(scope="package")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        chromium = launch_chromium(playwright)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A laptop-sized page in a context of its own (fresh cookies and storage)."""
    context = browser.new_context(viewport=LAPTOP)  # type: ignore[arg-type]
    page = context.new_page()
    try:
        yield page
    finally:
        context.close()


@pytest.fixture
def screenshot() -> Callable[[Page, str], Path]:
    """`screenshot(page, name)` saves `test-output/screenshots/<name>.png`."""
    return lambda page, name: save_screenshot(page, name)
