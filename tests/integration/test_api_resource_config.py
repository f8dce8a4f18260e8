"""Per-resource config overrides through a real server: merged under each thread's own, shown by the
effective-config endpoints, validated like a thread's, and invisible to another tenant."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from sqlalchemy import Engine, func, select

from om_api.client import OMBadRequest, OMClient, OMNotFound
from om_core.engine import resource_key
from om_core.store import records, schema
from om_core.tenancy import access
from om_core.tenancy.scoped_ids import scoped_id
from tests.support.api_server import ApiServer, api_server, new_id

__all__ = ["api_server"]  # fixture used below

pytestmark = [pytest.mark.postgres, pytest.mark.redis]


@pytest.fixture
def two_tenants(api_server: ApiServer, pg_engine: Engine) -> Iterator[tuple[OMClient, OMClient]]:
    a = access.create_key(pg_engine, new_id("tenant-a"), "a").secret
    b = access.create_key(pg_engine, new_id("tenant-b"), "b").secret
    with OMClient(api_server.base_url, a) as first, OMClient(api_server.base_url, b) as second:
        yield first, second


def test_resource_overrides_are_merged_under_the_threads_own(two_tenants: tuple[OMClient, OMClient]) -> None:
    om, _other = two_tenants
    user, first, second = new_id("user"), new_id("t"), new_id("t")
    saved = om.set_resource_config(user, {"scope": "resource", "observation": {"messageTokens": 4000}})
    assert saved.overrides == {"scope": "resource", "observation": {"messageTokens": 4000}}
    assert saved.effective["scope"] == "resource"
    assert saved.effective["observation"]["messageTokens"] == 4000
    assert om.get_resource_config(user).overrides == saved.overrides

    om.post_turn(first, [{"role": "user", "text": "hello"}], resource_id=user)
    inherited = om.get_config(first)
    assert inherited.overrides is None
    assert inherited.resource_overrides == saved.overrides
    assert inherited.effective["scope"] == "resource"
    assert inherited.effective["observation"]["messageTokens"] == 4000

    own = om.set_config(second, {"observation": {"messageTokens": 6000}}, resource_id=user)
    assert own.effective["scope"] == "resource", "the resource's options the thread does not set still apply"
    assert own.effective["observation"]["messageTokens"] == 6000, "the thread's own option wins"
    assert om.status(first).windows.active.messages.threshold == 4000

    om.set_resource_config(user, None)
    assert om.get_config(first).effective["scope"] == "thread"


def test_invalid_resource_overrides_are_refused_with_the_field_and_nothing_is_stored(
    two_tenants: tuple[OMClient, OMClient],
) -> None:
    om, _other = two_tenants
    user = new_id("user")
    om.set_resource_config(user, {"observation": {"messageTokens": 3000}})
    with pytest.raises(OMBadRequest) as wrong_type:
        om.set_resource_config(user, {"observation": {"messageTokens": "lots"}})
    assert wrong_type.value.field == "overrides.observation.messageTokens"
    with pytest.raises(OMBadRequest) as rule:
        om.set_resource_config(user, {"observation": {"messageTokens": 1000, "bufferTokens": 5000}})
    assert rule.value.field is not None and rule.value.field.startswith("overrides.observation")
    assert om.get_resource_config(user).overrides == {"observation": {"messageTokens": 3000}}


def test_a_resource_override_that_breaks_an_existing_threads_config_is_refused(
    two_tenants: tuple[OMClient, OMClient],
) -> None:
    om, _other = two_tenants
    user, thread = new_id("user"), new_id("t")
    om.set_config(thread, {"observation": {"bufferTokens": 2500}}, resource_id=user)
    with pytest.raises(OMBadRequest):
        om.set_resource_config(user, {"observation": {"messageTokens": 2000}})
    assert om.get_resource_config(user).overrides is None


def test_another_tenants_resource_config_is_not_found(
    two_tenants: tuple[OMClient, OMClient], api_server: ApiServer
) -> None:
    om, other = two_tenants
    user = new_id("user")
    om.set_resource_config(user, {"scope": "resource"})
    with pytest.raises(OMNotFound):
        other.get_resource_config(user)
    # The same public id is the other tenant's own, separate resource.
    theirs = other.set_resource_config(user, {"observation": {"messageTokens": 5000}})
    assert theirs.effective["scope"] == "thread"
    assert om.get_resource_config(user).overrides == {"scope": "resource"}
    unknown = httpx.get(f"{api_server.base_url}/v1/resources/{new_id('nobody')}/config")
    assert unknown.status_code == 401


def test_deleting_a_resource_erases_its_threads_and_shared_log_and_nothing_of_another_tenant(
    two_tenants: tuple[OMClient, OMClient], pg_engine: Engine
) -> None:
    om, other = two_tenants
    user, threads = new_id("user"), [new_id("t"), new_id("t")]
    config = {"scope": "resource", "observation": {"messageTokens": 1000}}
    om.set_resource_config(user, config)
    other.set_resource_config(user, config)
    for thread in threads:
        for i in range(8):
            text = f"{thread} fact {i}: " + " ".join(f"word{(i * 5 + k) % 41}" for k in range(40))
            role = "user" if i % 2 == 0 else "assistant"
            om.post_turn(thread, [{"id": f"m{i}", "role": role, "text": text}], resource_id=user)
    other.post_turn(threads[0], [{"role": "user", "text": "the other tenant's own thread"}], resource_id=user)
    mine = scoped_id(om.usage().tenant_id, user)
    log = records.get_head(pg_engine, resource_key(mine))
    assert log is not None and log.active_observations, "the shared log existed"

    om.delete_resource(user)

    for thread in threads:
        with pytest.raises(OMNotFound):
            om.status(thread)
    with pytest.raises(OMNotFound):
        om.get_resource_config(user)
    with pytest.raises(OMNotFound):
        om.delete_resource(user)
    assert records.get_head(pg_engine, resource_key(mine)) is None
    with pg_engine.connect() as conn:
        left = conn.execute(
            select(func.count()).where(schema.events.c.lookup_key.like(f"%{mine}%"))
        ).scalar_one()
    assert left == 0
    assert other.status(threads[0]).thread_id == threads[0], "the other tenant's thread is untouched"
    assert other.get_resource_config(user).overrides == config
