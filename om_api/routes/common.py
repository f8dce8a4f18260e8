"""Pieces every route module uses: path parameters, error documentation, thread lookup, event shapes."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Path

from om_api.auth import Principal
from om_api.errors import thread_not_found
from om_api.runtime import ApiRuntime
from om_api.schemas import ID_PATTERN, ErrorResponse, OMEvent
from om_core import StoredEvent, tenancy
from om_core.store.history import ThreadRow

ThreadId = Annotated[
    str, Path(pattern=ID_PATTERN, min_length=1, max_length=255, description="The conversation's id")
]
ResourceId = Annotated[
    str, Path(pattern=ID_PATTERN, min_length=1, max_length=255, description="The user or entity's id")
]


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI entries for the error statuses a route can answer (all share `ErrorResponse`)."""
    described = {
        400: "The actor model refused the request",
        401: "Missing or unknown API key",
        404: "Unknown thread (or another tenant's)",
        409: "The request conflicts with what is stored",
        413: "A message or the body is over a limit",
        422: "A field is invalid; `error.field` names it",
        429: "The actor model is rate limited",
        502: "The actor model failed or cannot be called",
        503: "The database or the broker is unreachable; retry with the same message ids",
        504: "The actor model did not answer in time",
    }
    return {s: {"model": ErrorResponse, "description": described[s]} for s in statuses}


COMMON_ERRORS = errors(401, 404, 422, 503)


def require_thread(runtime: ApiRuntime, caller: Principal, thread_id: str) -> ThreadRow:
    """The caller's thread by the id it chose; its `id` is the stored id the core works with."""
    thread = tenancy.owned_thread(runtime.db, caller.tenant_id, caller.stored_id(thread_id))
    if thread is None:
        raise thread_not_found(thread_id)
    return thread


def event_out(event: StoredEvent) -> OMEvent:
    return OMEvent(id=event.id, type=event.type, data=event.payload)
