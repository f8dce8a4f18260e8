"""A resource search covers the resource's indexed threads (issue 33): retrieval switched on in each
thread's config, not the resource's, makes those threads searchable from the resource; a thread whose own
config turns it off is never searched; another tenant's and another resource's threads never appear; and
when nothing is indexed the 409 names the config to change and the field. Real server, Postgres, the
inline executor indexing in the background."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine

from om_api.client import OMClient, OMConflict
from om_core.tenancy import access
from tests.support.api_server import ApiServer, api_server, new_id, om, tenant_key
from tests.support.workers import wait_until

__all__ = ["api_server", "om", "tenant_key"]  # fixtures used below

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

CODE = "ZX-55120-QP"


def _turn(text: str) -> list[dict[str, object]]:
    return [
        {"id": "m0", "role": "user", "text": text},
        {"id": "m1", "role": "assistant", "text": "Noted, I will keep that in mind."},
    ]


@pytest.fixture
def intruder(api_server: ApiServer, pg_engine: Engine) -> Iterator[OMClient]:
    """A key of another tenant, which uses the same resource and thread ids."""
    key = access.create_key(pg_engine, new_id("other-tenant"), "test").secret
    with OMClient(api_server.base_url, key, timeout=60) as client:
        yield client


def test_threads_with_retrieval_on_are_searched_from_their_resource_and_only_they(
    om: OMClient, intruder: OMClient
) -> None:
    user, other_user = new_id("user"), new_id("user")
    on, off, elsewhere = new_id("t-on"), new_id("t-off"), new_id("t-else")
    # Retrieval on in the thread's config only; the resource's config says nothing.
    om.set_config(on, {"retrieval": True}, resource_id=user)
    om.post_turn(on, _turn(f"My parcel locker code is {CODE}."), resource_id=user)
    om.post_turn(off, _turn(f"{CODE} is also written on the fridge."), resource_id=user)
    # Same tenant, another resource, indexed: never part of `user`'s search.
    om.set_config(elsewhere, {"retrieval": True}, resource_id=other_user)
    om.post_turn(elsewhere, _turn(f"{CODE} belongs to someone else."), resource_id=other_user)
    # Another tenant with the very same ids, indexed: never part of it either.
    intruder.set_config(on, {"retrieval": True}, resource_id=user)
    intruder.post_turn(on, _turn(f"Intruder text {CODE}."), resource_id=user)

    wait_until(lambda: om.search(user, CODE).count >= 1, deadline_s=60, what="the thread indexed")
    wait_until(lambda: om.search(other_user, CODE).count >= 1, deadline_s=60, what="other resource indexed")
    wait_until(lambda: intruder.search(user, CODE).count >= 1, deadline_s=60, what="the intruder indexed")
    found = om.search(user, CODE, limit=50)
    assert {(r.thread_id, r.id) for r in found.results} == {(on, "m0")}
    assert all("Intruder" not in r.text and "someone else" not in r.text for r in found.results)
    assert [r.thread_id for r in intruder.search(user, CODE).results] == [on]
    assert "Intruder" in intruder.search(user, CODE).results[0].text

    # Narrowed to the thread that is not indexed: refused, saying which config to change.
    with pytest.raises(OMConflict) as narrowed:
        om.search(user, CODE, thread_ids=[off])
    assert narrowed.value.code == "retrieval_disabled"
    assert "thread_ids" in narrowed.value.message and "overrides.retrieval" in narrowed.value.message
    # Narrowed to both: only the indexed one answers.
    both = om.search(user, CODE, thread_ids=[on, off])
    assert {r.thread_id for r in both.results} == {on}


def test_a_thread_turning_retrieval_off_is_left_out_of_its_resource_search(om: OMClient) -> None:
    user, kept, opted_out = new_id("user"), new_id("t"), new_id("t")
    om.set_resource_config(user, {"retrieval": True})
    om.post_turn(kept, _turn(f"Locker {CODE} at the gym."), resource_id=user)
    om.set_config(opted_out, {"retrieval": False}, resource_id=user)
    om.post_turn(opted_out, _turn(f"Private note {CODE}."), resource_id=user)
    wait_until(lambda: om.search(user, CODE).count >= 1, deadline_s=60, what="the kept thread indexed")
    assert {r.thread_id for r in om.search(user, CODE, limit=50).results} == {kept}


def test_nothing_indexed_is_a_409_naming_both_configs_and_the_field(om: OMClient) -> None:
    user, thread = new_id("user"), new_id("t")
    om.post_turn(thread, _turn("Gardening, tomatoes and the weather."), resource_id=user)
    with pytest.raises(OMConflict) as refused:
        om.search(user, "tomatoes")
    message = refused.value.message
    assert refused.value.code == "retrieval_disabled"
    assert f"PUT /v1/resources/{user}/config" in message and "PUT /v1/threads/" in message
    assert "overrides.retrieval: true" in message
    with pytest.raises(OMConflict) as thread_refused:
        om.search_thread(thread, "tomatoes")
    assert f"PUT /v1/threads/{thread}/config" in thread_refused.value.message
    assert "overrides.retrieval: true" in thread_refused.value.message
