"""Pieces every route module uses: path parameters, error documentation, thread lookup, event shapes."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Path, Query

from om_api.auth import Principal
from om_api.errors import ApiError, thread_not_found
from om_api.runtime import ApiRuntime
from om_api.schemas import ID_PATTERN, ErrorResponse, OMEvent, ThreadInfo
from om_core import StoredEvent
from om_core.pagination import DEFAULT_LIMIT, MAX_CURSOR_LENGTH, MAX_LIMIT, CursorError
from om_core.store.history import ThreadListing, ThreadRow, client_metadata
from om_core.tenancy import access
from om_core.tenancy.scoped_ids import public_id

ThreadId = Annotated[
    str, Path(pattern=ID_PATTERN, min_length=1, max_length=255, description="The conversation's id")
]
ResourceId = Annotated[
    str, Path(pattern=ID_PATTERN, min_length=1, max_length=255, description="The user or entity's id")
]


#: The request half of the one pagination convention (`om_api.schemas.Page` is the response half).
Limit = Annotated[int, Query(ge=1, le=MAX_LIMIT, description="Items per page")]
Cursor = Annotated[
    str | None,
    Query(
        max_length=MAX_CURSOR_LENGTH,
        pattern=r"^[A-Za-z0-9_-]+$",
        description="The previous page's next_cursor; leave out for the first page",
    ),
]
LIMIT_DEFAULT = DEFAULT_LIMIT


def bad_cursor(exc: CursorError) -> ApiError:
    """A cursor the list did not hand out: 422 naming `cursor`, saying how to start again."""
    return ApiError(
        422,
        "invalid_cursor",
        f"{exc}: pass a next_cursor of this list unchanged, or leave cursor out to start from the first page",
        field="query.cursor",
    )


def thread_info(thread: ThreadRow, *, messages: int, cost_usd: float) -> ThreadInfo:
    """How every list shows a thread (public ids; the caller's metadata, not OM's), with its message count
    and OM's cost for it."""
    return ThreadInfo(
        thread_id=public_id(thread.id),
        resource_id=public_id(thread.resource_id),
        title=thread.title or thread.om_metadata.get("threadTitle"),
        metadata=client_metadata(thread),
        created_at=thread.created_at,
        updated_at=thread.updated_at,
        last_activity_at=thread.last_activity_at,
        last_actor_model=thread.last_actor_model,
        config_overrides=thread.config_overrides,
        messages=messages,
        cost_usd=cost_usd,
    )


def listed_thread(listing: ThreadListing) -> ThreadInfo:
    """A row of a thread list (`history.page_threads` read its counts with the page)."""
    return thread_info(listing.thread, messages=listing.messages, cost_usd=listing.cost_usd)


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI entries for the error statuses a route can answer (all share `ErrorResponse`). A route that
    authenticates (401) can also be refused by the tenant's request rate (`TenantRateLimit`, 429), so that
    status is documented wherever 401 is."""
    described = {
        400: "The actor model refused the request",
        401: "Missing or unknown API key",
        404: "Unknown thread (or another tenant's)",
        409: "The request conflicts with what is stored",
        413: "A message or the body is over a limit",
        422: "A field is invalid; `error.field` names it",
        429: "Too many requests: over this tenant's request rate (`Retry-After` says when to retry), or, "
        "through the proxy, the actor model's rate limit",
        502: "The actor model failed or cannot be called",
        503: "The database or the broker is unreachable; retry with the same message ids",
        504: "The actor model did not answer in time",
    }
    answered = sorted({*statuses, 429} if 401 in statuses else set(statuses))
    return {s: {"model": ErrorResponse, "description": described[s]} for s in answered}


COMMON_ERRORS = errors(401, 404, 422, 503)


def require_thread(runtime: ApiRuntime, caller: Principal, thread_id: str) -> ThreadRow:
    """The caller's thread by the id it chose; its `id` is the stored id the core works with."""
    thread = access.owned_thread(runtime.db, caller.tenant_id, caller.stored_id(thread_id))
    if thread is None:
        raise thread_not_found(thread_id)
    return thread


def event_out(event: StoredEvent) -> OMEvent:
    return OMEvent(id=event.id, type=event.type, data=event.payload)
