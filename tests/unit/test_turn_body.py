"""The `/turns` body built in one pass equals the documented `TurnResponse` serialised, for every kind of
part (fields that do not apply left out, OM's bookkeeping stripped, None inside tool payloads kept)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pydantic_core
from sqlalchemy import Engine

from om_api.openai_format import to_openai
from om_api.routes.common import event_out
from om_api.schemas import StatusPayload, StoredMessage, TurnContext, TurnRequest, TurnResponse
from om_api.turn_body import turn_body
from om_core.config.options import ObservationalMemoryConfig
from om_core.engine import MemoryEngine, TurnResult
from om_core.messages import Message, Part
from om_core.models.client import ModelClient
from tests.support.workers import HoldingExecutor

START = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def reference(result: TurnResult, resource_id: str) -> TurnResponse:
    """The response as the schema defines it, built the slow, obvious way."""
    return TurnResponse(
        thread_id=result.thread_id,
        resource_id=resource_id,
        record_id=result.record_id,
        context=TurnContext(
            system_messages=result.system_messages,
            continuation_reminder=result.continuation_reminder,
            messages=[StoredMessage.of(m) for m in result.messages],
            openai_messages=result.context.to_openai_messages(to_openai(result.messages)),
            tools=result.tools,
        ),
        status=StatusPayload.model_validate(result.status),
        events=[event_out(e) for e in result.events],
        blocked=result.blocked,
        degraded=result.degraded,
        degraded_reason=result.degraded_reason,
    )


def varied_messages() -> list[Message]:
    at = [START + timedelta(minutes=i) for i in range(4)]
    return [
        Message(id="u1", role="user", created_at=at[0], metadata={"client": {"ua": None, "n": 1}},
                parts=[Part(type="text", text="Find the report from March 3rd"),
                       Part(type="image", url="https://example.com/a.png", mime_type="image/png",
                            provider_metadata={"openai": {"detail": "low"}})]),
        Message(id="a1", role="assistant", created_at=at[1],
                parts=[Part(type="step-start", model="openai/gpt-4o"),
                       Part(type="tool-invocation", tool_call_id="c1", tool_name="search", state="result",
                            args={"q": "report", "page": None}, result=[{"title": None, "id": 7}])]),
        Message(id="a2", role="assistant", created_at=at[2],
                parts=[Part(type="text", text="Found it: 42 pages."),
                       Part(type="data-progress", data={"done": True, "left": None})]),
        Message(id="u2", role="user", created_at=at[3], parts=[Part(type="text", text="Summarise it")]),
    ]  # fmt: skip


def test_the_one_pass_body_equals_the_documented_response(sqlite_engine: Engine) -> None:
    config = ObservationalMemoryConfig.parse(True)
    engine = MemoryEngine(sqlite_engine, models=ModelClient(), config=config, executor=HoldingExecutor())
    messages = varied_messages()
    for turn in (messages[:2], messages[2:]):
        result = engine.ingest_turn("t-body", "r-body", turn)
        expected = reference(result, "r-body").model_dump(mode="json", by_alias=True)
        body = turn_body(result, "r-body")
        assert body == expected
        assert json.loads(pydantic_core.to_json(body)) == json.loads(
            reference(result, "r-body").model_dump_json(by_alias=True)
        )
    stored_parts = [p for m in body["context"]["messages"] for p in m["parts"]]
    assert len(stored_parts) == 7, "every stored part comes back"
    assert all(None not in p.values() for p in stored_parts), "fields that do not apply are left out"
    assert all("om" not in (p.get("providerMetadata") or {}) for p in stored_parts), "bookkeeping stripped"
    tool = next(p for p in stored_parts if p["type"] == "tool-invocation")
    assert tool["args"] == {"q": "report", "page": None}, "None inside a tool payload is data, kept"


def test_each_context_form_is_the_documented_response_with_only_that_form(sqlite_engine: Engine) -> None:
    config = ObservationalMemoryConfig.parse(True)
    engine = MemoryEngine(sqlite_engine, models=ModelClient(), config=config, executor=HoldingExecutor())
    messages = varied_messages()
    engine.ingest_turn("t-forms", "r-forms", messages[:2])
    result = engine.ingest_turn("t-forms", "r-forms", messages[2:])
    full = reference(result, "r-forms").model_dump(mode="json", by_alias=True)
    assert full["context"]["messages"] and full["context"]["openai_messages"]

    only_openai = turn_body(result, "r-forms", "openai")
    assert only_openai["context"] == {**full["context"], "form": "openai", "messages": []}
    only_stored = turn_body(result, "r-forms", "messages")
    assert only_stored["context"] == {**full["context"], "form": "messages", "openai_messages": []}
    for body in (only_openai, only_stored):
        assert TurnResponse.model_validate(body).model_dump(mode="json", by_alias=True) == body


def test_a_turn_without_context_stores_the_same_and_reports_the_same_status(sqlite_engine: Engine) -> None:
    """The reply call of an exchange needs no context back: the turn skips building it, and nothing else
    about the turn changes (what is stored, the status, the events)."""
    config = ObservationalMemoryConfig.parse(True)
    engine = MemoryEngine(sqlite_engine, models=ModelClient(), config=config, executor=HoldingExecutor())
    messages = varied_messages()
    results = {}
    for thread, with_context in (("t-with", True), ("t-without", False)):
        engine.ingest_turn(thread, "r-same", messages[:2])
        results[thread] = engine.ingest_turn(thread, "r-same", messages[2:], with_context=with_context)
    with_, without = results["t-with"], results["t-without"]
    assert with_.with_context and with_.messages and with_.system_messages is not None
    assert not without.with_context and without.messages == [] and without.system_messages == []

    def comparable(result: TurnResult) -> str:
        status = {**dict(result.status), "recordId": None}
        return json.dumps(status, sort_keys=True, default=str).replace("t-without", "t-with")

    assert comparable(without) == comparable(with_)
    assert [e.type for e in without.events] == [e.type for e in with_.events]
    body = turn_body(without, "r-same", "none")
    assert body["context"] is None
    assert TurnResponse.model_validate(body).model_dump(mode="json", by_alias=True) == body
    # The next call with context shows everything the context-less one stored.
    after = engine.ingest_turn("t-without", "r-same", [])
    assert [m.id for m in after.messages] == [m.id for m in with_.messages]


def test_an_omitted_context_is_openai_unless_the_call_ends_the_turn() -> None:
    """The cheap default: the form a chat-completions call needs, and nothing for the call that posts the
    reply (which goes to no model); any form asked for is kept as asked."""

    def form(*roles: str, **fields: object) -> str:
        messages = [{"id": f"m{i}", "role": role, "text": "x"} for i, role in enumerate(roles)]
        return TurnRequest.model_validate({"messages": messages, **fields}).context_form()

    assert form("user") == "openai"
    assert form("tool") == "openai"
    assert form() == "openai", "no new message: the caller wants the context"
    assert form("assistant") == "none"
    assert form("user", "assistant") == "none", "the last message decides"
    assert form("assistant", turn_end=False) == "openai", "a step of a turn that goes on: its context"
    assert form("user", turn_end=True) == "none"
    for asked in ("full", "messages", "openai", "none"):
        assert form("user", context=asked) == asked
        assert form("assistant", context=asked) == asked
