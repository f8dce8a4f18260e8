"""`POST /v1/threads/{id}/recall`: the recall tool (§9.3–§9.4) for a chat backend whose model called it.

The body is the tool call's arguments as the model wrote them (the schema is `context.tools` of a turn,
`om_core.recall.RECALL_TOOL`); the answer is what to hand back to the model as the tool's result. The
arguments are checked by the core, not by FastAPI, so a bad one is answered with the tool's own parameter
name and a fix the model can follow. A thread of another tenant is 404 like any unknown thread; a cursor
or thread the active thread cannot read is 404 too (`recall_not_found`), with the same words whether it
exists elsewhere or not.
"""

from __future__ import annotations

from typing import Annotated, Any

import pydantic_core
from fastapi import APIRouter, Body, Response

from om_api.auth import Caller, Runtime
from om_api.errors import ApiError
from om_api.routes.common import COMMON_ERRORS, ThreadId, errors, require_thread
from om_api.schemas import RecallResponse
from om_core.recall import RECALL_TOOL, RecallInvalid, RecallNotFound, RetrievalDisabled

router = APIRouter(prefix="/v1/threads", tags=["recall"])

_BODY_DOC = {
    "requestBody": {
        "content": {"application/json": {"schema": RECALL_TOOL["function"]["parameters"]}},
        "description": "The recall tool call's arguments, as the model wrote them",
    }
}


@router.post(
    "/{thread_id}/recall",
    response_model=RecallResponse,
    responses={**COMMON_ERRORS, **errors(409)},
    summary="Answer a recall tool call: raw messages, the user's threads, or search results",
    openapi_extra=_BODY_DOC,
)
def post_recall(
    thread_id: ThreadId,
    runtime: Runtime,
    caller: Caller,
    body: Annotated[dict[str, Any] | None, Body()] = None,
) -> Response:
    thread = require_thread(runtime, caller, thread_id)
    try:
        answer = runtime.engine.recall(thread.id, body or {})
    except RecallInvalid as exc:
        raise ApiError(422, "invalid_recall", str(exc), field=exc.field or None) from None
    except RecallNotFound as exc:
        raise ApiError(404, "recall_not_found", str(exc)) from None
    except RetrievalDisabled:
        raise ApiError(
            409,
            "retrieval_disabled",
            f"recall is off for thread {thread_id!r} (its effective config has retrieval: false): "
            f"PUT /v1/threads/{thread_id}/config with overrides.retrieval true (or an object such as "
            '{"scope": "thread"}) to enable it',
            field="overrides.retrieval",
        ) from None
    return Response(pydantic_core.to_json(answer), media_type="application/json")
