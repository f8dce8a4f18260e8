"""The `/turns` response body, built as plain JSON data in one pass.

A turn answers with every unobserved message, and the window holds tens of messages before it is observed.
Building `TurnResponse` models for them and letting FastAPI check and serialise the result cost three
model passes per message per turn (dump, validate, dump again) and was a large share of the turn's CPU.
This builds the same document directly; `TurnResponse` stays the documented schema, and a test holds the
two byte-for-byte equal.
"""

from __future__ import annotations

from typing import Any

import pydantic_core
from fastapi import Response

from om_api.openai_format import to_openai
from om_api.routes.common import event_out
from om_api.schemas import ContextForm, StatusPayload
from om_core import Message, TurnResult

#: OM's own per-part bookkeeping (token estimates) under providerMetadata, not shown to API callers.
OWN_METADATA = "om"


def stored_message_data(message: Message) -> dict[str, Any]:
    """A message as `StoredMessage` serialises it: parts without the fields that do not apply to their kind
    and without OM's bookkeeping."""
    data = message.model_dump(mode="json", by_alias=True)
    data["parts"] = [_compact_part(part) for part in data["parts"]]
    return data


def _compact_part(part: dict[str, Any]) -> dict[str, Any]:
    compact = {key: value for key, value in part.items() if value is not None}
    provider = compact.get("providerMetadata")
    if isinstance(provider, dict) and OWN_METADATA in provider:
        rest = {key: value for key, value in provider.items() if key != OWN_METADATA}
        if rest:
            compact["providerMetadata"] = rest
        else:
            del compact["providerMetadata"]
    return compact


def turn_body(result: TurnResult, resource_id: str, form: ContextForm = "full") -> dict[str, Any]:
    """What `TurnResponse(...).model_dump(mode="json", by_alias=True)` would give for this turn, with the
    context in `form` (`none` only when the engine was asked for no context)."""
    return {
        "thread_id": result.thread_id,
        "resource_id": resource_id,
        "record_id": result.record_id,
        "context": _context(result, form) if form != "none" else None,
        "status": StatusPayload.model_validate(result.status).model_dump(mode="json", by_alias=True),
        "events": [event_out(e).model_dump(mode="json", by_alias=True) for e in result.events],
        "blocked": result.blocked,
        "degraded": result.degraded,
        "degraded_reason": result.degraded_reason,
    }


def _context(result: TurnResult, form: ContextForm) -> dict[str, Any]:
    return {
        "form": form,
        "system_messages": list(result.system_messages),
        "continuation_reminder": result.continuation_reminder,
        "messages": [stored_message_data(m) for m in result.messages] if form != "openai" else [],
        "openai_messages": (
            result.context.to_openai_messages(to_openai(result.messages)) if form != "messages" else []
        ),
        "tools": list(result.tools),
    }


def turn_json_response(result: TurnResult, resource_id: str, form: ContextForm = "full") -> Response:
    body = turn_body(result, resource_id, form)
    return Response(pydantic_core.to_json(body), media_type="application/json")
