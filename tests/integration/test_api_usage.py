"""Actor-model use through the proxy is metered per tenant: tokens and cost on the calling key (read back
with `GET /v1/usage` and `om keys list`) and in `/metrics` with a `tenant` label. Plain and streamed calls
both count, a streamed call even when the caller did not ask for usage; concurrent calls of one key all
add up (the counters are bumped with `UPDATE ... SET x = x + n`). Against a real server on the test
Postgres, with the fake actor `om-actor/echo` (priced at 1e-6 USD per prompt token, 2e-6 per completion
token) answering through litellm."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from alembic import command
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Engine, create_engine, inspect, text
from sqlalchemy.engine import make_url
from starlette.testclient import TestClient
from typer.testing import CliRunner

from om_api.app import create_app
from om_api.metrics import NO_TENANT
from om_api.settings import ApiSettings
from om_app.cli import app as om_cli
from om_core.store.db import make_engine
from om_core.store.migrate import alembic_config, upgrade
from om_core.tenancy import access
from tests.support.api_server import METRICS_HEADERS, METRICS_TOKEN, ApiServer, api_server, new_id

__all__ = ["api_server"]  # fixture used below

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

MODEL = "om-actor/echo"
PROMPT_PRICE, COMPLETION_PRICE = 0.000001, 0.000002
QUESTION = [{"role": "user", "content": "How many cafes are on the river front in Porto?"}]


def _price(prompt: int, completion: int) -> float:
    return prompt * PROMPT_PRICE + completion * COMPLETION_PRICE


def _headers(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", "X-OM-Thread-Id": new_id("usage")}


def _plain(server: ApiServer, key: str) -> dict[str, int]:
    body = {"model": MODEL, "messages": QUESTION}
    response = httpx.post(
        f"{server.base_url}/v1/chat/completions", json=body, headers=_headers(key), timeout=60
    )
    assert response.status_code == 200, response.text
    usage: dict[str, int] = response.json()["usage"]
    return usage


def _streamed(server: ApiServer, key: str, **fields: Any) -> list[dict[str, Any]]:
    body = {"model": MODEL, "messages": QUESTION, "stream": True, **fields}
    response = httpx.post(
        f"{server.base_url}/v1/chat/completions", json=body, headers=_headers(key), timeout=60
    )
    assert response.status_code == 200, response.text
    lines = [line.removeprefix("data: ") for line in response.text.splitlines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(line) for line in lines[:-1]]


def _usage(server: ApiServer, key: str) -> dict[str, Any]:
    response = httpx.get(
        f"{server.base_url}/v1/usage", headers={"Authorization": f"Bearer {key}"}, timeout=30
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def _actor_samples(metrics_text: str, tenant: str) -> dict[str, float]:
    """The om_actor_model_* samples of one tenant: calls, input, output, cost."""
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            labels = sample.labels
            if (
                labels.get("tenant") != tenant
                or labels.get("model") != MODEL
                or not sample.name.endswith("_total")
            ):
                continue
            if sample.name == "om_actor_model_calls_total":
                found["calls"] = sample.value
            elif sample.name == "om_actor_model_tokens_total":
                found[labels["direction"]] = sample.value
            elif sample.name == "om_actor_model_cost_usd_total":
                found["cost"] = sample.value
    return found


@pytest.fixture
def tenant(pg_engine: Engine) -> access.IssuedKey:
    return access.create_key(pg_engine, new_id("spender"), "usage")


def test_plain_and_streamed_calls_are_counted_on_the_key_and_in_metrics(
    api_server: ApiServer, pg_engine: Engine, tenant: access.IssuedKey, postgres_url: str
) -> None:
    key = tenant.secret
    bystander = access.create_key(pg_engine, new_id("bystander"), "usage").secret

    plain = _plain(api_server, key)
    with_usage = _streamed(api_server, key, stream_options={"include_usage": True})
    usage_chunks = [chunk for chunk in with_usage if chunk.get("usage")]
    assert len(usage_chunks) == 1 and usage_chunks[0]["choices"] == [], "the usage chunk the caller asked for"
    streamed = usage_chunks[0]["usage"]
    without_usage = _streamed(api_server, key)
    assert all("usage" not in chunk and chunk["choices"] for chunk in without_usage), "nothing unasked"
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in without_usage).startswith("Noted:")

    # The same question in a fresh thread gives the fake actor the same context, so the same usage.
    prompt = plain["prompt_tokens"] + 2 * streamed["prompt_tokens"]
    completion = plain["completion_tokens"] + 2 * streamed["completion_tokens"]
    assert prompt > 0 and completion > 0
    spent = _usage(api_server, key)
    assert spent["key_id"] == tenant.key.id and spent["tenant_id"] == tenant.key.tenant_id
    assert (spent["calls"], spent["prompt_tokens"], spent["completion_tokens"]) == (3, prompt, completion)
    assert spent["cost_usd"] == pytest.approx(_price(prompt, completion), rel=1e-6)
    assert _usage(api_server, bystander)["calls"] == 0, "another key's calls are not this key's"

    metrics = api_server.metrics()
    assert _actor_samples(metrics, tenant.key.tenant_id) == {
        "calls": 3,
        "input": prompt,
        "output": completion,
        "cost": pytest.approx(_price(prompt, completion), rel=1e-6),
    }

    listed = CliRunner().invoke(
        om_cli, ["keys", "list", "--tenant", tenant.key.tenant_id], env={"OM_DATABASE_URL": postgres_url}
    )
    assert listed.exit_code == 0, listed.output
    assert f"3 calls\t{prompt} prompt tokens\t{completion} completion tokens" in listed.output


def test_concurrent_calls_of_one_key_all_count(api_server: ApiServer, tenant: access.IssuedKey) -> None:
    with ThreadPoolExecutor(max_workers=8) as pool:
        usages = list(pool.map(lambda _: _plain(api_server, tenant.secret), range(16)))
    spent = _usage(api_server, tenant.secret)
    assert spent["calls"] == 16
    assert spent["prompt_tokens"] == sum(u["prompt_tokens"] for u in usages)
    assert spent["completion_tokens"] == sum(u["completion_tokens"] for u in usages)


def test_the_counters_are_added_in_the_database_not_overwritten(
    pg_engine: Engine, tenant: access.IssuedKey
) -> None:
    def spend(_: int) -> None:
        for _ in range(25):
            access.record_key_usage(
                pg_engine, tenant.key.id, prompt_tokens=3, completion_tokens=2, cost_usd=0.25
            )

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(spend, range(8)))
    usage = access.key_usage(pg_engine, tenant.key.id)
    assert usage == access.KeyUsage(calls=200, prompt_tokens=600, completion_tokens=400, cost_usd=50.0)
    assert access.key_usage(pg_engine, "omk_000000000000") is None


@pytest.fixture
def open_client(postgres_url: str, pg_engine: Engine) -> Iterator[TestClient]:
    settings = ApiSettings(
        database_url=postgres_url,
        auth="none",
        model="om-local/extractive",
        actor_models="om-actor/*",
        plugins="tests.support.fake_actor",
        metrics_token=METRICS_TOKEN,
    )
    with TestClient(create_app(settings), base_url="http://localhost") as client:
        yield client


def test_without_auth_usage_is_labelled_and_there_is_no_key_to_read(open_client: TestClient) -> None:
    scrape = open_client.get("/metrics", headers=METRICS_HEADERS).text
    before = _actor_samples(scrape, NO_TENANT).get("calls", 0)
    response = open_client.post(
        "/v1/chat/completions",
        json={"model": MODEL, "messages": QUESTION},
        headers={"X-OM-Thread-Id": new_id("open")},
    )
    assert response.status_code == 200, response.text
    usage = response.json()["usage"]
    after = _actor_samples(open_client.get("/metrics", headers=METRICS_HEADERS).text, NO_TENANT)
    assert after["calls"] == before + 1
    assert after["input"] >= usage["prompt_tokens"] > 0
    refused = open_client.get("/v1/usage")
    assert refused.status_code == 404
    assert refused.json()["error"]["code"] == "no_api_key"


# ------------------------------------------------------------------------------------ the migration


@pytest.fixture(params=["postgres", "sqlite"])
def fresh_database(request: pytest.FixtureRequest, postgres_url: str, tmp_path: Path) -> Iterator[str]:
    """An empty database of each kind (a new Postgres database next to the test one)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'om.db'}"
        return
    name = f"om_migrate_{uuid.uuid4().hex[:10]}"
    admin = create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(postgres_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def test_migration_0004_adds_zeroed_counters_to_existing_keys_and_reverts(fresh_database: str) -> None:
    engine = make_engine(fresh_database)
    try:
        upgrade(engine, "0003")
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO om_api_keys (id, tenant_id, name, secret_sha256, created_at) "
                    "VALUES ('omk_0123456789ab', 'old-tenant', 'old', :digest, CURRENT_TIMESTAMP)"
                ),
                {"digest": "0" * 64},
            )
        upgrade(engine, "0004")
        assert access.key_usage(engine, "omk_0123456789ab") == access.KeyUsage()
        access.record_key_usage(
            engine, "omk_0123456789ab", prompt_tokens=5, completion_tokens=7, cost_usd=0.5
        )
        [listed] = access.list_keys(engine, "old-tenant")
        assert listed.usage == access.KeyUsage(calls=1, prompt_tokens=5, completion_tokens=7, cost_usd=0.5)

        config = alembic_config()
        with engine.begin() as conn:
            config.attributes["connection"] = conn
            command.downgrade(config, "0003")
        columns = {c["name"] for c in inspect(engine).get_columns("om_api_keys")}
        assert not {c for c in columns if c.startswith("actor_")}
        assert "tenant_id" in columns
        upgrade(engine)
        assert access.key_usage(engine, "omk_0123456789ab") == access.KeyUsage()
    finally:
        engine.dispose()
