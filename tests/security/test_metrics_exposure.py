"""`/metrics` names every tenant with its tokens and cost: no anonymous caller and no tenant key reads it.

Issue 28, item 6 (and the worker half of item 10), tried as an attacker: a victim tenant spends through the
proxy, so its name is a label of the actor-usage series; the attacker, anonymous or holding an ordinary
key of its own tenant, asks the API port for `/metrics`. The real app on the test Postgres (keys auth,
inline executor, the fake actor `om-actor/echo` as the model).

- Without a scrape token the API port answers 404, saying how to enable metrics; nothing names a tenant.
- With `OM_METRICS_TOKEN` only that token reads it (the positive control: the victim's name is there).
- `OM_METRICS_PORT` serves the same series on a listener of its own, bound to loopback by default.
- A worker's metrics listener binds loopback by default too.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine
from starlette.testclient import TestClient

from om_api.app import create_app
from om_api.settings import ApiSettings
from om_core.tenancy import access
from tests.support.api_server import free_port

pytestmark = [pytest.mark.postgres]

TOKEN = "scrape-" + "s3cr3t" * 4
ACTOR = "om-actor/echo"


def _settings(postgres_url: str, **extra: Any) -> ApiSettings:
    return ApiSettings(
        database_url=postgres_url,
        auth="keys",
        executor="inline",
        model="om-local/extractive",
        actor_models="om-actor/*",
        plugins="tests.support.fake_actor",
        **extra,
    )


@pytest.fixture(scope="module")
def victim(pg_engine: Engine) -> access.IssuedKey:
    return access.create_key(pg_engine, f"victim-{uuid.uuid4().hex[:8]}", "victim")


@pytest.fixture(scope="module")
def attacker(pg_engine: Engine) -> str:
    return access.create_key(pg_engine, f"attacker-{uuid.uuid4().hex[:8]}", "attacker").secret


def _spend(client: TestClient, key: str) -> None:
    """One proxy call: the key's tenant becomes a label of `om_actor_model_*` in this app's registry."""
    response = client.post(
        "/v1/chat/completions",
        json={"model": ACTOR, "messages": [{"role": "user", "content": "hello"}]},
        headers={"Authorization": f"Bearer {key}", "X-OM-Thread-Id": f"m-{uuid.uuid4().hex[:10]}"},
    )
    assert response.status_code == 200, response.text


@pytest.fixture
def default_app(postgres_url: str, victim: access.IssuedKey) -> Iterator[TestClient]:
    with TestClient(create_app(_settings(postgres_url))) as client:
        _spend(client, victim.secret)
        yield client


@pytest.fixture
def token_app(postgres_url: str, victim: access.IssuedKey) -> Iterator[TestClient]:
    with TestClient(create_app(_settings(postgres_url, metrics_token=TOKEN))) as client:
        _spend(client, victim.secret)
        yield client


def _callers(attacker: str, victim: access.IssuedKey) -> dict[str, dict[str, str]]:
    return {
        "anonymous": {},
        "a tenant key": {"Authorization": f"Bearer {attacker}"},
        "the victim's own key": {"Authorization": f"Bearer {victim.secret}"},
        "a guessed token": {"Authorization": "Bearer " + "x" * len(TOKEN)},
        "the token without its scheme": {"Authorization": TOKEN},
        "the token as basic auth": {"Authorization": f"Basic {TOKEN}"},
    }


def test_by_default_the_api_port_serves_no_metrics_to_anyone(
    default_app: TestClient, attacker: str, victim: access.IssuedKey
) -> None:
    for who, headers in _callers(attacker, victim).items():
        response = default_app.get("/metrics", headers=headers)
        assert response.status_code == 404, who
        assert victim.key.tenant_id not in response.text and "om_actor_model" not in response.text, who
        message = response.json()["error"]["message"]
        assert "OM_METRICS_TOKEN" in message and "OM_METRICS_PORT" in message, "it says how to enable them"


def test_with_a_scrape_token_only_the_token_reads_metrics(
    token_app: TestClient, attacker: str, victim: access.IssuedKey
) -> None:
    for who, headers in _callers(attacker, victim).items():
        response = token_app.get("/metrics", headers=headers)
        assert response.status_code == 401, who
        assert response.headers["www-authenticate"].startswith("Bearer"), who
        assert victim.key.tenant_id not in response.text, who
    scraped = token_app.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert scraped.status_code == 200
    assert scraped.headers["content-type"].startswith("text/plain")
    assert f'tenant="{victim.key.tenant_id}"' in scraped.text, "the scraper sees every tenant's usage"


def test_a_short_scrape_token_is_refused_at_start(postgres_url: str) -> None:
    with pytest.raises(ValueError, match="OM_METRICS_TOKEN must be at least 16 characters"):
        _settings(postgres_url, metrics_token="guessable")


def test_the_metrics_port_serves_them_on_loopback_and_the_api_port_still_does_not(
    postgres_url: str, victim: access.IssuedKey, attacker: str
) -> None:
    port = free_port()
    assert ApiSettings.model_fields["metrics_host"].default == "127.0.0.1"
    with TestClient(create_app(_settings(postgres_url, metrics_port=port))) as client:
        _spend(client, victim.secret)
        listener = client.app.state.metrics_listener  # type: ignore[attr-defined]
        assert listener.bound_address() == ("127.0.0.1", port), "loopback unless OM_METRICS_HOST says else"
        scraped = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
        assert scraped.status_code == 200
        assert f'tenant="{victim.key.tenant_id}"' in scraped.text
        on_api = client.get("/metrics", headers={"Authorization": f"Bearer {attacker}"})
        assert on_api.status_code == 404 and victim.key.tenant_id not in on_api.text
        assert "its own listener" in on_api.json()["error"]["message"]
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2)  # stopped with the app


def test_a_worker_serves_its_metrics_on_loopback_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker's own start-up path (`om_workers.tasks`, run when a worker boots) with only the port
    set, as `om worker` runs in the embedded stack."""
    from om_workers import tasks
    from om_workers.metrics import MULTIPROC_ENV

    port = free_port()
    for name in [n for n in os.environ if n.startswith("OM_WORKER_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("OM_WORKER_METRICS_PORT", str(port))
    monkeypatch.delenv(MULTIPROC_ENV, raising=False)
    monkeypatch.setattr(tasks, "_metrics_server", None)
    tasks._serve_metrics()
    server = tasks._metrics_server
    try:
        assert server is not None, "the worker serves its metrics"
        assert server._server.server_address[:2] == ("127.0.0.1", port)
        assert httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).status_code == 200
    finally:
        tasks._stop_metrics()
        _restore_single_process_values()


def _restore_single_process_values() -> None:
    """The worker switched prometheus_client to multiprocess values for this process: switch back, so
    later tests' registries count in memory again."""
    from prometheus_client import values

    os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)
    values.ValueClass = values.get_value_class()  # type: ignore[no-untyped-call]
