"""Live events of a thread as Server-Sent Events (see `om_api.sse`), each stream holding a slot of the
key's and the process's caps (see `om_api.stream_slots`) until it ends."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from om_api.auth import Caller, Runtime
from om_api.routes.common import COMMON_ERRORS, ThreadId, require_thread
from om_api.schemas import ErrorResponse
from om_api.sse import CURSOR_PATTERN, ThreadFeeds, stream
from om_api.stream_slots import SlotResponse, StreamSlots
from om_core import StoredEvent
from om_core.store.outbox import list_events

router = APIRouter(prefix="/v1/threads", tags=["events"])

_SSE_DOC = {
    200: {
        "description": (
            "text/event-stream: each message has `id:` (a resume cursor for Last-Event-ID) and `data:` a "
            "JSON part `{id, type, data}`: the outbox id, a data-om-* type and its spec payload"
        ),
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
    },
    **COMMON_ERRORS,
    429: {
        "model": ErrorResponse,
        "description": (
            "Too many event streams open for this API key (OM_SSE_MAX_STREAMS_PER_KEY) or on this server "
            "(OM_SSE_MAX_STREAMS), or over this tenant's request rate; `Retry-After` says when to try again"
        ),
    },
}


@router.get(
    "/{thread_id}/events",
    response_class=StreamingResponse,
    responses=_SSE_DOC,
    summary="The thread's data-om-* events: replay after Last-Event-ID, then live",
)
async def get_events(
    thread_id: ThreadId,
    request: Request,
    runtime: Runtime,
    caller: Caller,
    last_event_id: Annotated[
        str | None,
        Header(
            alias="Last-Event-ID",
            pattern=CURSOR_PATTERN,
            max_length=4096,
            description="Resume cursor: the `id:` of the last message received (an event id also works)",
        ),
    ] = None,
    after: Annotated[
        str | None,
        Query(
            pattern=CURSOR_PATTERN,
            max_length=4096,
            description="The same resume cursor, for clients that cannot set the header",
        ),
    ] = None,
    follow: Annotated[bool, Query(description="Keep the stream open for live events")] = True,
) -> StreamingResponse:
    thread = await run_in_threadpool(require_thread, runtime, caller, thread_id)
    settings = runtime.settings
    slots: StreamSlots = request.app.state.stream_slots
    feeds: ThreadFeeds = request.app.state.thread_feeds
    slot = slots.take(caller.key_id)

    async def read(after_id: int, limit: int) -> list[StoredEvent]:
        return await run_in_threadpool(
            list_events, runtime.db, thread_id=thread.id, after_id=after_id, limit=limit
        )

    body = stream(
        thread_id=thread.id,
        cursor=last_event_id or after,
        follow=follow,
        read=read,
        feeds=feeds,
        heartbeat_s=settings.sse_heartbeat_s,
        settle_s=settings.sse_settle_s,
        is_disconnected=request.is_disconnected,
    )
    return SlotResponse(
        body,
        slot=slot,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
