"""The recall tool through the HTTP API on Postgres (`POST /v1/threads/{id}/recall`), and the tool with its
guidance in a turn's context: a conversation with tool calls and multi-part messages is posted, then read
back page by page as a model would, across threads, scopes, resources and tenants."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine

from om_api.client import AsyncOMClient, OMBadRequest, OMClient, OMConflict, OMNotFound
from om_core.recall import RECALL_TOOL, recall_guidance
from om_core.tenancy import access
from tests.support.api_server import ApiServer, api_server, new_id, om, tenant_key

__all__ = ["api_server", "om", "tenant_key"]  # fixtures used below

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

QUIET = {"observation": {"messageTokens": 200_000}, "reflection": {"observationTokens": 200_000}}
T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
SECRET = "INV-55821-QX"


def at(minute: int) -> str:
    return (T0 + timedelta(minutes=minute)).isoformat()


def conversation(prefix: str = "m") -> list[dict[str, Any]]:
    """Twelve messages: plain texts, an assistant step with a tool call and its result, a data part."""
    messages: list[dict[str, Any]] = []
    for i in range(12):
        role = "user" if i % 2 == 0 else "assistant"
        message: dict[str, Any] = {"id": f"{prefix}{i}", "role": role, "created_at": at(i)}
        if i == 3:
            message["parts"] = [
                {"type": "step-start"},
                {"type": "text", "text": "Let me look that invoice up."},
                {
                    "type": "tool-invocation",
                    "toolCallId": "call-1",
                    "toolName": "find_invoice",
                    "state": "result",
                    "args": {"customer": "Dana"},
                    "result": {"invoice": SECRET, "total": 1234.5, "notes": "paid " * 200},
                },
                {"type": "data-progress", "data": {"done": True}},
                {"type": "text", "text": "Found it."},
            ]
        elif i == 6:
            message["parts"] = [{"type": "data-progress", "data": {"step": 1}}]
        else:
            message["text"] = f"{prefix} message {i} about the trip to Porto"
        messages.append(message)
    return messages


def ids_in(answer: dict[str, Any]) -> list[str]:
    return re.findall(r"^\*\*\w+ \([^)]*\)\*\* \[([^\]]+)\]:$", answer["messages"], re.MULTILINE)


def post(client: OMClient, thread: str, resource: str, messages: list[dict[str, Any]], config: Any) -> None:
    client.set_config(thread, {**QUIET, "retrieval": config}, resource_id=resource)
    client.post_turn(thread, messages, resource_id=resource)


@pytest.fixture
def other_tenant(api_server: ApiServer, pg_engine: Engine) -> Iterator[OMClient]:
    key = access.create_key(pg_engine, new_id("other"), "test").secret
    with OMClient(api_server.base_url, key, timeout=60) as client:
        yield client


def test_a_model_pages_through_a_conversation_with_recall(om: OMClient) -> None:
    thread, resource = new_id("trip"), new_id("user")
    post(om, thread, resource, conversation(), True)

    first = om.recall(thread, cursor="m1", limit=3)
    assert ids_in(first) == ["m2", "m3", "m4"] and first["count"] == 3
    assert first["hasNextPage"] is True and first["hasPrevPage"] is False
    assert "[p2] [Tool Result: find_invoice]" in first["messages"], "the tool result keeps its index"
    assert "[p0]" not in first["messages"].split("[m3]:")[1].split("[m4]")[0], "step-start is not shown"
    second = om.recall(thread, cursor="m1", limit=3, page=2)
    assert ids_in(second) == ["m5", "m7", "m8"], "a data-only message takes no page slot"
    back = om.recall(thread, cursor="m5", limit=2, page=-1)
    assert ids_in(back) == ["m3", "m4"] and (back["hasNextPage"], back["hasPrevPage"]) == (False, True)
    newest = om.recall(thread, anchor="end", limit=2)
    assert ids_in(newest) == ["m10", "m11"] and newest["cursor"] == "m10"

    full = om.recall(thread, cursor="m3", partIndex=2)
    assert full["messageId"] == "m3" and full["type"] == "tool-result" and SECRET in full["text"]
    assert '"customer": "Dana"' in full["text"] and full["truncated"] is False
    high = om.recall(thread, cursor="m2", detail="high", limit=1)
    assert "[p1] Let me look that invoice up." in high["messages"]
    assert 'partIndex=2 on cursor="m3"' in high["messages"] and high["count"] == 1
    beyond = om.recall(thread, cursor="m3", partIndex=9)
    assert beyond["messageId"] == "m4" and "m3" in beyond["note"]
    hint = om.recall(thread, cursor="m2:m9")
    assert hint["count"] == 0 and 'cursor="m2"' in hint["messages"] and 'cursor="m9"' in hint["messages"]


def test_threads_and_cursors_across_a_users_conversations(om: OMClient, other_tenant: OMClient) -> None:
    resource, stranger = new_id("user"), new_id("user")
    first, second, elsewhere = new_id("t"), new_id("t"), new_id("t")
    post(om, first, resource, conversation("a"), True)
    post(om, second, resource, conversation("b"), True)
    post(om, elsewhere, stranger, conversation("c"), True)
    post(other_tenant, first, resource, conversation("z"), True)  # same ids, another tenant

    listed = om.recall(first, mode="threads")
    found = re.findall(r"id: (\S+)", listed["threads"])
    assert sorted(found) == sorted([first, second]) and listed["count"] == 2
    assert f"← current\n  id: {first}" in listed["threads"]

    guidance = om.recall(first, cursor="b4")
    assert guidance["count"] == 0 and f'threadId="{second}"' in guidance["messages"]
    assert ids_in(om.recall(first, cursor="b4", threadId=second, limit=1)) == ["b5"]
    assert ids_in(om.recall(first, threadId=second, limit=1)) == ["b0"]

    for cursor in ("c4", "z4"):  # another resource of the tenant, the same thread of another tenant
        with pytest.raises(OMNotFound) as caught:
            om.recall(first, cursor=cursor)
        assert caught.value.code == "recall_not_found"
        assert f'could not resolve cursor "{cursor}"' in caught.value.message
    with pytest.raises(OMNotFound) as missing:
        om.recall(first, threadId=elsewhere)
    # Nothing of the stranger's thread is shown but the id asked for (a random id may hold "c0" itself).
    assert missing.value.code == "recall_not_found"
    assert "c0" not in missing.value.message.replace(elsewhere, ""), missing.value.message
    with pytest.raises(OMNotFound) as theirs:
        other_tenant.recall(second, mode="threads")
    assert theirs.value.code == "thread_not_found"

    om.set_config(second, {**QUIET, "retrieval": {"scope": "thread"}}, resource_id=resource)
    alone = om.recall(second, mode="threads")
    assert alone["count"] == 1 and re.findall(r"id: (\S+)", alone["threads"]) == [second]
    with pytest.raises(OMNotFound):
        om.recall(second, cursor="a4")


def test_bad_arguments_and_retrieval_off_are_answered_with_the_fix(om: OMClient) -> None:
    thread, resource = new_id("t"), new_id("user")
    post(om, thread, resource, conversation(), True)
    with pytest.raises(OMBadRequest) as caught:
        om.recall(thread, limit=25)
    assert caught.value.status == 422 and caught.value.field == "limit" and "20" in caught.value.message
    with pytest.raises(OMBadRequest) as search:
        om.recall(thread, mode="search")
    assert search.value.field == "query"
    assert om.recall(thread, mode="search", query="porto")["count"] == 0, "search is not configured"

    off = new_id("t")
    post(om, off, resource, conversation(), False)
    with pytest.raises(OMConflict) as refused:
        om.recall(off)
    assert refused.value.code == "retrieval_disabled" and "retrieval true" in refused.value.message


def test_the_async_client_recalls_too(api_server: ApiServer, om: OMClient, tenant_key: str) -> None:
    thread, resource = new_id("t"), new_id("user")
    post(om, thread, resource, conversation(), True)

    async def read() -> dict[str, Any]:
        async with AsyncOMClient(api_server.base_url, tenant_key, timeout=60) as client:
            return await client.recall(thread, cursor="m0", limit=1)

    assert ids_in(asyncio.run(read())) == ["m1"]


def test_a_turn_offers_the_recall_tool_and_its_guidance_only_with_retrieval_on(om: OMClient) -> None:
    resource = new_id("user")
    on, thread_scope, off = new_id("on"), new_id("scoped"), new_id("off")
    om.set_config(
        on, {**QUIET, "retrieval": {"instructions": "Quote invoice ids exactly."}}, resource_id=resource
    )
    om.set_config(thread_scope, {**QUIET, "retrieval": {"scope": "thread"}}, resource_id=resource)
    om.set_config(off, QUIET, resource_id=resource)
    hello = [{"id": "m0", "role": "user", "text": "hello"}]

    turn = om.post_turn(on, hello, resource_id=resource)
    assert turn.context.tools == [RECALL_TOOL]
    guidance = recall_guidance("resource", False, "Quote invoice ids exactly.")
    assert turn.context.system_messages == [guidance], "resource scope: guidance before any observation"
    assert turn.context.openai_messages[0] == {"role": "system", "content": guidance}

    scoped = om.post_turn(thread_scope, hello, resource_id=resource)
    assert scoped.context.tools == [RECALL_TOOL] and scoped.context.system_messages == []

    plain = om.post_turn(off, hello, resource_id=resource)
    assert plain.context.tools == [] and plain.context.system_messages == []
    assert all("recall" not in str(m.get("content")) for m in plain.context.openai_messages)


RANGE = re.compile(r"_range: `([^`]+)`_")


def scripted_actor(om: OMClient, thread: str, turn: Any, wanted: str) -> str | None:
    """What a model following the guidance does to find an exact value its memory has only summarised:
    take each observation group's range from the context, read its first message, then page forward from
    it until the range's last message."""
    assert [tool["function"]["name"] for tool in turn.context.tools] == ["recall"]
    for ranges in RANGE.findall("\n".join(turn.context.system_messages)):
        start, end = ranges.split(",")[0].split(":")[0], ranges.split(",")[-1].split(":")[1]
        seen = om.recall(thread, cursor=start, partIndex=0)["text"]
        page = 1
        while True:
            answer = om.recall(thread, cursor=start, page=page, limit=5)
            seen += answer["messages"]
            if wanted in seen:
                return ranges
            if end in ids_in(answer) or not answer["hasNextPage"]:
                break
            page += 1
    return None


def test_a_scripted_actor_finds_an_observed_detail_through_the_turns_tool(om: OMClient) -> None:
    thread, resource = new_id("long"), new_id("user")
    config = {
        "retrieval": {"scope": "thread"},
        "observation": {"messageTokens": 1200, "bufferTokens": False},
        "reflection": {"observationTokens": 200_000},
    }
    om.set_config(thread, config, resource_id=resource)
    planted = "locker code 4417-ZETA-93"
    turns = []
    for i in range(24):
        role = "user" if i % 2 == 0 else "assistant"
        said = (
            f"By the way, my {planted}, please keep it."
            if i == 2
            else (
                f"Turn {i}: we keep talking about the harbor, lanterns and copper kettles " + "and more " * 40
            )
        )
        turns.append(
            om.post_turn(
                thread, [{"id": f"m{i}", "role": role, "text": said}], resource_id=resource, context="full"
            )
        )
    last = turns[-1]
    assert RANGE.search("\n".join(last.context.system_messages)), "observations were grouped with ranges"
    assert all(m.id != "m2" for m in last.context.messages), "the planted message left the raw context"
    found = scripted_actor(om, thread, last, "4417-ZETA-93")
    assert found is not None, "recall read the exact value back"
    spans = [[int(end.removeprefix("m")) for end in piece.split(":")] for piece in found.split(",")]
    assert any(start <= 2 <= end for start, end in spans), f"found through the group that covers m2: {found}"


def test_after_reflection_the_condensed_groups_range_still_leads_to_the_exact_value(om: OMClient) -> None:
    thread, resource = new_id("reflected"), new_id("user")
    config = {
        "retrieval": {"scope": "thread"},
        "observation": {"messageTokens": 1200, "bufferTokens": False},
        "reflection": {"observationTokens": 500},
    }
    om.set_config(thread, config, resource_id=resource)
    planted = "4417-ZETA-93"
    last = None
    for i in range(40):
        role = "user" if i % 2 == 0 else "assistant"
        said = (
            f"My locker code is {planted}."
            if i == 2
            else (
                f"Turn {i}: notes on the {['harbor', 'orchard', 'canyon', 'meadow'][i % 4]} trip, day {i}, "
                + " ".join(f"item{i}x{k}" for k in range(40))
            )
        )
        message = {"id": f"m{i}", "role": role, "text": said}
        last = om.post_turn(thread, [message], resource_id=resource, context="full")
    assert last is not None
    view = om.observations(thread)
    assert view.active is not None and view.active.generation_count >= 1, "the log was reflected"
    found = scripted_actor(om, thread, last, planted)
    assert found is not None, "the reflected log still points at the raw message holding the value"
    spans = [[int(end.removeprefix("m")) for end in piece.split(":")] for piece in found.split(",")]
    assert spans[0][0] <= 2 <= spans[-1][1]
