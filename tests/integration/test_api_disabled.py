"""`enabled: false` through the HTTP API (a real server process, inline executor, Postgres): a thread whose
config turns OM off gets its plain history back, no memory work, and a 409 naming the field for manual
observe/reflect; switching OM on observes what was stored meanwhile."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Engine, func, select

from om_api.client import OMClient, OMConflict
from om_core.engine import lookup_key
from om_core.store import records, schema
from om_core.tenancy.scoped_ids import scoped_id
from tests.support.api_server import api_server, new_id, om, tenant_key
from tests.support.invariants import check_thread
from tests.support.workers import wait_until

__all__ = ["api_server", "om", "tenant_key"]  # fixtures used below

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

CYCLE = {"observation": {"messageTokens": 1500}, "reflection": {"observationTokens": 600}}
VOCABULARY = ("harbor", "lantern", "copper", "meadow", "signal", "orchard", "velvet", "canyon", "ember")


def message(i: int, words: int) -> dict[str, Any]:
    text = f"Message {i} is about " + " ".join(
        VOCABULARY[(i * 7 + k * k) % len(VOCABULARY)] for k in range(words)
    )
    return {"id": f"m{i}", "role": "user" if i % 2 == 0 else "assistant", "text": text}


def cursor(db: Engine, thread_id: str) -> int:
    head = records.get_head(db, lookup_key(thread_id))
    return head.last_observed_seq if head is not None else 0


def last_seq_of(db: Engine, thread_id: str, message_id: str) -> int:
    with db.connect() as conn:
        query = select(func.max(schema.parts.c.seq)).where(
            schema.parts.c.thread_id == thread_id, schema.parts.c.message_id == message_id
        )
        return int(conn.execute(query).scalar() or 0)


def test_a_thread_with_memory_off_gets_its_history_and_observes_it_once_switched_on(
    om: OMClient, pg_engine: Engine, tenant: str
) -> None:
    thread = new_id("off")
    stored = scoped_id(tenant, thread)
    om.set_config(thread, {**CYCLE, "enabled": False}, resource_id=thread)
    turns = [om.post_turn(thread, [message(i, 20)], context="full") for i in range(40)]

    for n, turn in enumerate(turns, start=1):
        assert [m.id for m in turn.context.messages] == [f"m{i}" for i in range(n)], "the plain history"
        assert turn.context.system_messages == [] and turn.context.continuation_reminder == ""
        assert turn.events == [] and not turn.blocked and not turn.degraded
        assert [m["role"] for m in turn.context.openai_messages] == [m.role for m in turn.context.messages]
    assert list(om.events(thread, follow=False)) == [], "no OM event while OM is off"
    view = om.observations(thread)
    assert (
        view.active is not None and view.active.observations == "" and view.active.observed_through_seq == 0
    )
    assert view.buffered_chunks == []

    for call in (lambda: om.observe(thread), lambda: om.reflect(thread, prompt="keep names")):
        with pytest.raises(OMConflict) as refused:
            call()
        assert refused.value.code == "memory_disabled"
        assert refused.value.field == "overrides.enabled"
        assert "enabled" in refused.value.message and thread in refused.value.message
    assert list(om.events(thread, follow=False)) == [], "a refused operation wrote nothing"

    om.set_config(thread, CYCLE)
    backlog_end = last_seq_of(pg_engine, stored, "m39")
    later = [om.post_turn(thread, [message(i, 70)], context="full") for i in range(40, 70)]
    wait_until(
        lambda: cursor(pg_engine, stored) >= backlog_end,
        deadline_s=60,
        what="the backlog stored while OM was off to be observed",
    )
    assert any(t.context.system_messages for t in later), "memory reached the actor once OM was on"
    assert not any(t.degraded for t in later)
    assert check_thread(pg_engine, stored).violations == []
