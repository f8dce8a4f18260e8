"""Tenancy against a real server: a key sees only its tenant's threads and resources; another tenant's
thread answers exactly like a missing one and cannot be written; keys are stored hashed and revocable."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine, select

from om_api import cli
from om_api.client import OMClient, OMNotFound, OMUnauthorized
from om_core import tenancy
from om_core.store import schema
from om_core.store.outbox import list_events
from tests.support.api_server import ApiServer, api_server, new_id, run_api_server
from tests.support.workers import wait_until

__all__ = ["api_server"]  # fixture used below

pytestmark = [pytest.mark.postgres, pytest.mark.redis]


@pytest.fixture
def two_tenants(api_server: ApiServer, pg_engine: Engine) -> Iterator[tuple[OMClient, OMClient]]:
    a = tenancy.create_key(pg_engine, new_id("tenant-a"), "a").secret
    b = tenancy.create_key(pg_engine, new_id("tenant-b"), "b").secret
    with OMClient(api_server.base_url, a) as first, OMClient(api_server.base_url, b) as second:
        yield first, second


OTHER_TENANT_CALLS: list[tuple[str, str, dict[str, Any] | None]] = [
    ("GET", "/status", None),
    ("GET", "/observations", None),
    ("GET", "/messages", None),
    ("GET", "/config", None),
    ("GET", "/events?follow=false", None),
    ("POST", "/observe", None),
    ("POST", "/reflect", {"prompt": "x"}),
    ("PUT", "/config", {"overrides": {"observation": {"messageTokens": 500}}}),
    ("POST", "/turns", {"messages": [{"id": "intruder", "role": "user", "text": "let me in"}]}),
    ("DELETE", "", None),
]


def test_a_second_key_can_neither_read_nor_write_the_first_keys_thread(
    two_tenants: tuple[OMClient, OMClient], api_server: ApiServer, pg_engine: Engine
) -> None:
    owner, other = two_tenants
    thread, resource = new_id("private"), new_id("user")
    for i in range(4):
        owner.post_turn(
            thread, [{"id": f"m{i}", "role": "user", "text": f"secret number {i}"}], resource_id=resource
        )
    before_messages = [m.id for m in owner.messages(thread).messages]
    before_events = len(list_events(pg_engine, thread_id=thread))
    other_key = other._http.headers["Authorization"]

    def call(method: str, thread_id: str, path: str, body: dict[str, Any] | None) -> httpx.Response:
        url = f"{api_server.base_url}/v1/threads/{thread_id}{path}"
        return httpx.request(method, url, json=body, headers={"Authorization": other_key})

    for method, path, body in OTHER_TENANT_CALLS:
        response = call(method, thread, path, body)
        assert response.status_code == 404, (method, path, response.text)
        error = response.json()["error"]
        assert error["code"] == "thread_not_found"
        if path != "/turns":  # word for word the answer for a thread that does not exist
            ghost = new_id("ghost")
            assert (
                call(method, ghost, path, body).json()["error"]["message"].replace(ghost, thread)
                == error["message"]
            )

    with pytest.raises(OMNotFound):
        other.threads(resource)
    with pytest.raises(OMNotFound):  # a new thread cannot join another tenant's resource either
        other.post_turn(new_id("sneaky"), [{"role": "user", "text": "hi"}], resource_id=resource)

    assert [m.id for m in owner.messages(thread).messages] == before_messages
    assert len(list_events(pg_engine, thread_id=thread)) == before_events
    assert owner.get_config(thread).overrides is None
    assert [t.thread_id for t in owner.threads(resource).threads] == [thread]


def test_each_tenant_lists_only_its_own_threads(two_tenants: tuple[OMClient, OMClient]) -> None:
    first, second = two_tenants
    mine, theirs = new_id("mine"), new_id("theirs")
    first.post_turn(mine, [{"role": "user", "text": "one"}], resource_id=new_id("r"))
    second.post_turn(theirs, [{"role": "user", "text": "two"}])
    with pytest.raises(OMNotFound):
        first.status(theirs)
    with pytest.raises(OMNotFound):
        second.status(mine)
    assert second.status(theirs).thread_id == theirs


def test_keys_are_stored_hashed_and_revocation_takes_effect(api_server: ApiServer, pg_engine: Engine) -> None:
    issued = tenancy.create_key(pg_engine, new_id("tenant"), "ci")
    with OMClient(api_server.base_url, issued.secret) as client:
        client.post_turn(new_id("t"), [{"role": "user", "text": "hello"}])
        with pg_engine.connect() as conn:
            row = conn.execute(select(schema.api_keys).where(schema.api_keys.c.id == issued.key.id)).one()
        assert issued.secret not in [str(v) for v in row]
        assert issued.secret.split("_", 2)[2] not in [str(v) for v in row]
        assert tenancy.revoke_key(pg_engine, issued.key.id)
        revoked_at = time.monotonic()

        def refused() -> bool:
            try:
                client.post_turn(new_id("t"), [{"role": "user", "text": "hello again"}])
            except OMUnauthorized:
                return True
            return False

        # An API process trusts a verified key for OM_AUTH_CACHE_S (default 5 s), then asks again.
        wait_until(refused, deadline_s=15, what="the revoked key refused", every_s=0.5)
        assert time.monotonic() - revoked_at < 15
    assert not tenancy.revoke_key(pg_engine, issued.key.id), "revoking twice reports nothing to revoke"


def test_a_key_is_accepted_from_memory_only_until_its_ttl(pg_engine: Engine) -> None:
    issued = tenancy.create_key(pg_engine, new_id("tenant"), "ttl")
    now = [100.0]
    verifier = tenancy.KeyVerifier(pg_engine, ttl_s=5, clock=lambda: now[0])
    first = verifier.verify(issued.secret)
    assert first is not None and first.id == issued.key.id
    assert tenancy.revoke_key(pg_engine, issued.key.id)
    assert verifier.verify(issued.secret) is first, "trusted from memory within the TTL"
    now[0] += 5.01
    assert verifier.verify(issued.secret) is None, "asked the database again after the TTL"
    assert verifier.verify("omk_000000000000_" + "x" * 30) is None
    fresh = tenancy.create_key(pg_engine, new_id("tenant"), "fresh")
    accepted = tenancy.KeyVerifier(pg_engine, ttl_s=0).verify(fresh.secret)
    assert accepted is not None and accepted.id == fresh.key.id


def test_the_cli_key_functions(postgres_url: str, pg_engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OM_DATABASE_URL", postgres_url)
    tenant = new_id("cli-tenant")
    secret = cli.keys_create(tenant, "laptop")
    assert secret.startswith("omk_")
    listed = cli.keys_list(tenant)
    assert [(k.tenant_id, k.name, k.active) for k in listed] == [(tenant, "laptop", True)]
    assert tenancy.verify_key(pg_engine, secret) is not None
    assert cli.keys_revoke(listed[0].id)
    assert tenancy.verify_key(pg_engine, secret) is None
    assert [k.active for k in cli.keys_list(tenant)] == [False]


@pytest.fixture
def open_server(postgres_url: str, redis_url: str, pg_engine: Engine, tmp_path: Path) -> Iterator[ApiServer]:
    with run_api_server(postgres_url, redis_url, tmp_path, env={"OM_AUTH": "none"}) as server:
        yield server


def test_without_auth_everything_is_visible_and_the_log_says_so(
    open_server: ApiServer, pg_engine: Engine
) -> None:
    owned = new_id("owned")
    tenancy.claim_thread(pg_engine, new_id("tenant"), owned, owned)
    with OMClient(open_server.base_url) as client:
        client.post_turn(owned, [{"role": "user", "text": "anyone may read this"}])
        assert client.status(owned).thread_id == owned
    assert "AUTHENTICATION IS OFF" in open_server.log_text()
