"""Managing memory: read a thread with its counts, set its title and metadata, list a tenant's threads,
and correct or forget one line of the observation log.

Every list pages the same way (`om_api.schemas.Page`, `om_core.pagination`). A line is addressed by its
0-based index in `active.observations` (as `GET /v1/threads/{id}/observations` returns it) split on `\\n`,
with the SHA-256 of the line as read: a log that changed meanwhile is a 409, never an edit of another line.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from om_api.auth import Caller, Runtime
from om_api.errors import ApiError, thread_not_found
from om_api.routes.common import (
    COMMON_ERRORS,
    LIMIT_DEFAULT,
    Cursor,
    Limit,
    ThreadId,
    bad_cursor,
    errors,
    listed_thread,
    require_thread,
    thread_info,
)
from om_api.routes.resources import visible_resource
from om_api.schemas import (
    ID_PATTERN,
    ObservationEditResponse,
    ObservationLineEdit,
    OMUsage,
    Page,
    ThreadCounts,
    ThreadDetail,
    ThreadInfo,
    ThreadPatch,
)
from om_core import queries
from om_core.engine import LineEditError, extracted_values
from om_core.pagination import CursorError
from om_core.store.history import ThreadRow
from om_core.store.usage import thread_usage
from om_core.tenancy.scoped_ids import public_id

router = APIRouter(prefix="/v1/threads", tags=["threads"])

LineIndex = Annotated[
    int,
    Path(ge=0, le=10_000_000, description="0-based index of the line in active.observations (split on \\n)"),
]
ExpectedSha256 = Annotated[
    str,
    Query(
        pattern=r"^[0-9a-f]{64}$",
        description="SHA-256 (hex) of the line's UTF-8 text as you read it (409 when it changed)",
    ),
]
Search = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=255,
        description="Only threads whose id or title contains this text (any case)",
    ),
]
ResourceFilter = Annotated[
    str | None,
    Query(pattern=ID_PATTERN, max_length=255, description="Only the threads of this resource (oldest first)"),
]


def _detail(runtime: Runtime, thread: ThreadRow) -> ThreadDetail:
    cfg = runtime.engine.config_for(thread.effective_overrides)
    summary = queries.thread_summary(runtime.db, thread, log_key=runtime.engine.log_key_of(thread))
    usage = thread_usage(runtime.db, thread.id)
    return ThreadDetail(
        **thread_info(thread, messages=summary.counts.messages, cost_usd=usage.cost_usd).model_dump(),
        scope="resource" if summary.scope == "resource" else "thread",
        counts=ThreadCounts(**vars(summary.counts)),
        extracted=extracted_values(cfg, thread),
        usage=OMUsage.of(usage),
    )


@router.get(
    "",
    response_model=Page[ThreadInfo],
    responses=COMMON_ERRORS,
    summary="The caller's threads, one page at a time (limit, cursor → items, next_cursor); by id, or a "
    "resource's oldest first; `q` keeps those whose id or title contains it",
)
def list_threads(
    runtime: Runtime,
    caller: Caller,
    limit: Limit = LIMIT_DEFAULT,
    cursor: Cursor = None,
    resource_id: ResourceFilter = None,
    q: Search = None,
) -> Page[ThreadInfo]:
    stored_resource = visible_resource(runtime, caller, resource_id) if resource_id is not None else None
    try:
        page = queries.threads_page(
            runtime.db,
            tenant_id=caller.tenant_id,
            resource_id=stored_resource,
            cursor=cursor,
            limit=limit,
            q=q,
        )
    except CursorError as exc:
        raise bad_cursor(exc) from None
    return Page[ThreadInfo](items=[listed_thread(t) for t in page.items], next_cursor=page.next_cursor)


@router.get(
    "/{thread_id}",
    response_model=ThreadDetail,
    responses=COMMON_ERRORS,
    summary="The thread: title, metadata, resource, times, and counts of its messages and memory",
)
def get_thread(thread_id: ThreadId, runtime: Runtime, caller: Caller) -> ThreadDetail:
    return _detail(runtime, require_thread(runtime, caller, thread_id))


@router.patch(
    "/{thread_id}",
    response_model=ThreadDetail,
    responses=COMMON_ERRORS,
    summary="Set the thread's title and/or metadata (a field left out is kept, null clears it)",
)
def patch_thread(thread_id: ThreadId, body: ThreadPatch, runtime: Runtime, caller: Caller) -> ThreadDetail:
    thread = require_thread(runtime, caller, thread_id)
    given = body.model_fields_set
    updated = queries.update_thread(
        runtime.db,
        thread.id,
        title=body.title if "title" in given else None,
        clear_title="title" in given and body.title is None,
        metadata=body.metadata if "metadata" in given else None,
        clear_metadata="metadata" in given and not body.metadata,
    )
    if updated is None:  # erased meanwhile
        raise thread_not_found(thread_id)
    return _detail(runtime, updated)


def _edit(
    runtime: Runtime, caller: Caller, thread_id: str, line: int, expected: str, text: str | None
) -> ObservationEditResponse:
    thread = require_thread(runtime, caller, thread_id)
    try:
        result = runtime.engine.edit_observation_line(thread.id, line, expected, text)
    except LineEditError as exc:
        raise _edit_error(exc, thread_id) from None
    return ObservationEditResponse(
        thread_id=public_id(thread.id),
        action="delete" if text is None else "update",
        line=line,
        cycle_id=result.cycle_id,
        record_id=result.record.id,
        previous_record_id=result.previous_record_id,
        generation_count=result.record.generation_count,
        observation_tokens=result.record.observation_token_count,
        observations=result.record.active_observations,
    )


def _edit_error(exc: LineEditError, thread_id: str) -> ApiError:
    if exc.code == "NO_OBSERVATIONS":
        return ApiError(404, "no_observations", f"thread {thread_id!r}: {exc}")
    if exc.code in ("OBSERVATION_LINE_CHANGED", "OBSERVATION_LOG_BUSY"):
        return ApiError(409, exc.code.lower(), str(exc), field=exc.field)
    return ApiError(422, exc.code.lower(), str(exc), field=exc.field)


@router.patch(
    "/{thread_id}/observations/{line}",
    response_model=ObservationEditResponse,
    responses={**COMMON_ERRORS, **errors(409)},
    summary="Correct one line of the active observation log (a new generation; data-om-observation-edit)",
)
def patch_observation_line(
    thread_id: ThreadId, line: LineIndex, body: ObservationLineEdit, runtime: Runtime, caller: Caller
) -> ObservationEditResponse:
    return _edit(runtime, caller, thread_id, line, body.expected_sha256, body.text)


@router.delete(
    "/{thread_id}/observations/{line}",
    response_model=ObservationEditResponse,
    responses={**COMMON_ERRORS, **errors(409)},
    summary="Forget one line of the active observation log: removed from the log, its past generations, "
    "chunks, groups and events (a new generation; data-om-observation-edit)",
)
def delete_observation_line(
    thread_id: ThreadId, line: LineIndex, expected_sha256: ExpectedSha256, runtime: Runtime, caller: Caller
) -> ObservationEditResponse:
    return _edit(runtime, caller, thread_id, line, expected_sha256, None)
