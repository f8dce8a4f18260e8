"""Tenancy against a real server: a key sees only its tenant's threads and resources; another tenant's
thread answers exactly like a missing one and cannot be written; keys are stored hashed and revocable."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, select

from om_api import cli
from om_api.client import OMClient, OMNotFound, OMUnauthorized
from om_core.store import history, schema
from om_core.tenancy import access
from om_core.tenancy.scoped_ids import scoped_id
from tests.support.api_server import ApiServer, api_server, new_id, run_api_server
from tests.support.workers import wait_until

__all__ = ["api_server"]  # fixture used below

pytestmark = [pytest.mark.postgres, pytest.mark.redis]


@pytest.fixture
def two_tenants(api_server: ApiServer, pg_engine: Engine) -> Iterator[tuple[OMClient, OMClient]]:
    a = access.create_key(pg_engine, new_id("tenant-a"), "a").secret
    b = access.create_key(pg_engine, new_id("tenant-b"), "b").secret
    with OMClient(api_server.base_url, a) as first, OMClient(api_server.base_url, b) as second:
        yield first, second


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
    issued = access.create_key(pg_engine, new_id("tenant"), "ci")
    with OMClient(api_server.base_url, issued.secret) as client:
        client.post_turn(new_id("t"), [{"role": "user", "text": "hello"}])
        with pg_engine.connect() as conn:
            row = conn.execute(select(schema.api_keys).where(schema.api_keys.c.id == issued.key.id)).one()
        assert issued.secret not in [str(v) for v in row]
        assert issued.secret.split("_", 2)[2] not in [str(v) for v in row]
        assert access.revoke_key(pg_engine, issued.key.id)
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
    assert not access.revoke_key(pg_engine, issued.key.id), "revoking twice reports nothing to revoke"


def test_a_key_is_accepted_from_memory_only_until_its_ttl(pg_engine: Engine) -> None:
    issued = access.create_key(pg_engine, new_id("tenant"), "ttl")
    now = [100.0]
    verifier = access.KeyVerifier(pg_engine, ttl_s=5, clock=lambda: now[0])
    first = verifier.verify(issued.secret)
    assert first is not None and first.id == issued.key.id
    assert access.revoke_key(pg_engine, issued.key.id)
    assert verifier.verify(issued.secret) is first, "trusted from memory within the TTL"
    now[0] += 5.01
    assert verifier.verify(issued.secret) is None, "asked the database again after the TTL"
    assert verifier.verify("omk_000000000000_" + "x" * 30) is None
    fresh = access.create_key(pg_engine, new_id("tenant"), "fresh")
    accepted = access.KeyVerifier(pg_engine, ttl_s=0).verify(fresh.secret)
    assert accepted is not None and accepted.id == fresh.key.id


def test_the_cli_key_functions(postgres_url: str, pg_engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OM_DATABASE_URL", postgres_url)
    tenant = new_id("cli-tenant")
    secret = cli.keys_create(tenant, "laptop")
    assert secret.startswith("omk_")
    listed = cli.keys_list(tenant)
    assert [(k.tenant_id, k.name, k.active) for k in listed] == [(tenant, "laptop", True)]
    assert access.verify_key(pg_engine, secret) is not None
    assert cli.keys_revoke(listed[0].id)
    assert access.verify_key(pg_engine, secret) is None
    assert [k.active for k in cli.keys_list(tenant)] == [False]


@pytest.fixture
def open_server(postgres_url: str, redis_url: str, pg_engine: Engine, tmp_path: Path) -> Iterator[ApiServer]:
    with run_api_server(postgres_url, redis_url, tmp_path, env={"OM_AUTH": "none"}) as server:
        yield server


def test_without_auth_ids_are_stored_as_given_and_the_log_says_so(
    open_server: ApiServer, pg_engine: Engine
) -> None:
    """Without auth there is one namespace, stored as given; a tenant's thread of the same id (stored under
    its tenant) is another thread, which the open server cannot name."""
    thread, tenant = new_id("open"), new_id("tenant")
    access.claim_thread(pg_engine, tenant, scoped_id(tenant, thread), scoped_id(tenant, thread))
    with OMClient(open_server.base_url) as client:
        client.post_turn(thread, [{"id": "m0", "role": "user", "text": "anyone may read this"}])
        assert client.status(thread).thread_id == thread
    stored = history.get_thread(pg_engine, thread)
    assert stored is not None and stored.tenant_id is None
    tenants_thread = history.get_thread(pg_engine, scoped_id(tenant, thread))
    assert tenants_thread is not None and tenants_thread.last_seq == 0, "the tenant's thread is untouched"
    assert "AUTHENTICATION IS OFF" in open_server.log_text()
