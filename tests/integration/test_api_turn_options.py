"""Turn options through the real API process and Postgres: temporal-gap reminders in the turn's events
and on the SSE stream, and the actor's provider options on a turn (`actor_provider_options`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine, select

from om_api.client import OMClient
from om_core.engine import lookup_key
from om_core.store import history, schema
from om_core.tenancy.scoped_ids import scoped_id
from tests.support.api_server import ApiServer, api_server, collect_events, new_id, om, tenant_key

__all__ = ["api_server", "om", "tenant_key"]  # fixtures used below

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

T0 = datetime(2026, 5, 4, 9, 0, tzinfo=UTC)


def post_turn(server: ApiServer, key: str, thread: str, body: dict[str, Any]) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"}
    return httpx.post(f"{server.base_url}/v1/threads/{thread}/turns", json=body, headers=headers, timeout=60)


def message(message_id: str, role: str, text: str, at: datetime) -> dict[str, Any]:
    return {"id": message_id, "role": role, "text": text, "created_at": at.isoformat()}


def test_a_turn_after_a_pause_reports_a_system_reminder_in_its_events_and_on_the_stream(
    om: OMClient, api_server: ApiServer, tenant_key: str
) -> None:
    thread = new_id("gap")
    om.set_config(thread, {"temporalMarkers": True}, resource_id=thread)
    om.post_turn(thread, [message("u0", "user", "Book a table for two", T0)])
    om.post_turn(thread, [message("a0", "assistant", "Which evening?", T0 + timedelta(minutes=1))])
    turn = om.post_turn(
        thread, [message("u1", "user", "Saturday", T0 + timedelta(days=2, hours=1))], context="messages"
    )

    [reminder] = [e for e in turn.events if e.type == "data-system-reminder"]
    assert reminder.data["gapText"] == "2 days later"
    assert reminder.data["precedesMessageId"] == "u1"
    ids = [m.id for m in turn.context.messages]
    assert ids[ids.index("u1") - 1].startswith("__temporal_gap_"), ids
    streamed = collect_events(
        api_server.base_url,
        tenant_key,
        thread,
        lambda got: any(e.type == "data-system-reminder" for e in got),
        deadline_s=30,
    )
    assert [e.id for e in streamed if e.type == "data-system-reminder"] == [reminder.id]


def test_the_actors_provider_options_set_when_the_idle_trigger_is_due(
    om: OMClient, tenant: str, pg_engine: Engine
) -> None:
    thread = new_id("ttl")
    om.set_config(thread, {"activateAfterIdle": "auto"}, resource_id=thread)
    om.post_turn(thread, [message("u0", "user", "Summarise the memo", T0)])
    answered = T0 + timedelta(minutes=1)
    om.post_turn(
        thread,
        [message("a0", "assistant", "The memo asks for a budget.", answered)],
        actor_model="anthropic/claude-sonnet-4-5",
        actor_provider_options={"anthropic": {"cacheControl": {"type": "ephemeral", "ttl": "1h"}}},
    )
    T = schema.triggers
    with pg_engine.connect() as conn:
        due = conn.execute(
            select(T.c.due_at).where(T.c.lookup_key == lookup_key(scoped_id(tenant, thread)))
        ).scalar()
    assert due == answered + timedelta(hours=1)


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ("1h", "valid dictionary"),
        ({"anthropic": "1h"}, "valid dictionary"),
        ({"": {"x": 1}}, "provider names must be 1 to 64 characters"),
        ({"anthropic": {"note": "x" * 20_000}}, "larger than 16384 bytes"),
    ],
)
def test_invalid_provider_options_are_refused_and_nothing_is_stored(
    api_server: ApiServer, tenant_key: str, tenant: str, pg_engine: Engine, options: Any, says: str
) -> None:
    thread = new_id("bad-options")
    body = {"messages": [message("u0", "user", "hello", T0)], "actor_provider_options": options}
    response = post_turn(api_server, tenant_key, thread, body)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"].startswith("actor_provider_options"), error
    assert says in error["message"], error
    assert history.get_thread(pg_engine, scoped_id(tenant, thread)) is None


def test_a_turn_without_context_answers_openai_and_its_reply_call_none(
    api_server: ApiServer, tenant_key: str
) -> None:
    """The documented exchange is the default: the user message's answer carries the chat-completions form
    only, the reply's carries no context; a form asked for is answered as before."""
    thread = new_id("default")
    user = post_turn(
        api_server, tenant_key, thread, {"messages": [message("u0", "user", "Hi, I'm Dana", T0)]}
    )
    assert user.status_code == 200, user.text
    context = user.json()["context"]
    assert context["form"] == "openai" and context["messages"] == []
    assert context["openai_messages"][-1] == {"role": "user", "content": "Hi, I'm Dana"}
    reply = post_turn(
        api_server, tenant_key, thread, {"messages": [message("a0", "assistant", "Hello!", T0)]}
    )
    assert reply.status_code == 200, reply.text
    assert reply.json()["context"] is None
    assert reply.json()["status"]["windows"]["active"]["messages"]["tokens"] > 0, "the status is still there"

    asked = {
        form: post_turn(api_server, tenant_key, thread, {"messages": [], "context": form}).json()["context"]
        for form in ("full", "messages", "openai", "none")
    }
    assert asked["none"] is None
    full = asked["full"]
    assert full["form"] == "full" and [m["id"] for m in full["messages"]] == ["u0", "a0"]
    assert [m["role"] for m in full["openai_messages"]] == ["user", "assistant"]
    assert asked["messages"] == {**full, "form": "messages", "openai_messages": []}
    assert asked["openai"] == {**full, "form": "openai", "messages": []}
    step = {"messages": [message("a1", "assistant", "Looking it up", T0)], "turn_end": False}
    assert post_turn(api_server, tenant_key, thread, step).json()["context"]["form"] == "openai"
