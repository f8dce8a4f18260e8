"""Thread routes: post a turn, read memory and messages, manual observe/reflect, config, delete.

Routes are plain (sync) functions: FastAPI runs them on its thread pool, where the engine's blocking
database work and, past `blockAfter`, its bounded wait belong.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Response
from pydantic import ValidationError

from om_api.auth import Caller, Principal, Runtime
from om_api.errors import ApiError, field_path, thread_not_found
from om_api.routes.common import (
    COMMON_ERRORS,
    LIMIT_DEFAULT,
    Cursor,
    Limit,
    ThreadId,
    bad_cursor,
    errors,
    event_out,
    require_thread,
)
from om_api.runtime import ApiRuntime
from om_api.schemas import (
    ActiveLog,
    BufferedChunk,
    BufferedReflection,
    ConfigRequest,
    ConfigResponse,
    Generation,
    MessagesResponse,
    ObservationsResponse,
    ObserveRequest,
    OperationResponse,
    ReflectRequest,
    StatusPayload,
    StoredMessage,
    TurnRequest,
    TurnResponse,
)
from om_api.settings import ApiSettings
from om_api.turn_body import turn_json_response
from om_core import queries
from om_core.engine import MemoryDisabled, OperationOutcome, TurnResult
from om_core.errors import OMConfigError
from om_core.pagination import CursorError
from om_core.store import history
from om_core.tenancy import access
from om_core.tenancy.scoped_ids import PublicId, StoredId, public_id, scoped_id

router = APIRouter(prefix="/v1/threads", tags=["threads"])

#: The broker's failures (not the memory model's) propagate from manual work to the 503 handlers, as the
#: database's do.
_BROKER: tuple[type[BaseException], ...] = ()
try:
    from kombu.exceptions import OperationalError as _KombuError
    from redis.exceptions import RedisError as _RedisError

    _BROKER = (_RedisError, _KombuError)
except ImportError:  # pragma: no cover - both are dependencies
    pass


# ------------------------------------------------------------------------------------------- turns


def _check_limits(body: TurnRequest, settings: ApiSettings) -> None:
    if len(body.messages) > settings.max_messages_per_turn:
        raise ApiError(
            413,
            "too_many_messages",
            f"{len(body.messages)} messages in one turn; the limit is {settings.max_messages_per_turn} "
            "(OM_MAX_MESSAGES_PER_TURN): send them in several turns",
            field="messages",
            limit=settings.max_messages_per_turn,
        )
    for index, message in enumerate(body.messages):
        parts = len(message.parts) if message.parts is not None else 1
        if parts > settings.max_parts_per_message:
            raise ApiError(
                413,
                "too_many_parts",
                f"messages[{index}] has {parts} parts; the limit is {settings.max_parts_per_message} "
                "(OM_MAX_PARTS_PER_MESSAGE)",
                field=f"messages[{index}].parts",
                limit=settings.max_parts_per_message,
            )
        size = len(message.model_dump_json(exclude_none=True).encode())
        if size > settings.max_message_bytes:
            raise ApiError(
                413,
                "message_too_large",
                f"messages[{index}] is {size} bytes; the limit is {settings.max_message_bytes} bytes "
                "(OM_MAX_MESSAGE_BYTES): shrink or split it (large files belong in URLs)",
                field=f"messages[{index}]",
                limit=settings.max_message_bytes,
            )


def _claim(runtime: ApiRuntime, caller: Principal, thread_id: str, resource_id: str) -> history.ThreadRow:
    """Create or confirm the caller's thread (public ids in, the stored row out)."""
    stored = caller.stored_id(thread_id)
    if not access.claim_thread(runtime.db, caller.tenant_id, stored, caller.stored_id(resource_id)):
        raise thread_not_found(thread_id)
    thread = history.get_thread(runtime.db, stored)
    if thread is None:  # deleted between the two reads
        raise thread_not_found(thread_id)
    if thread.resource_id != caller.stored_id(resource_id):
        raise ApiError(
            409,
            "resource_mismatch",
            f"thread {thread_id!r} belongs to resource {public_id(thread.resource_id)!r}, not "
            f"{resource_id!r}: send its resource_id (or leave it out)",
            field="resource_id",
        )
    return thread


def ingest(
    runtime: ApiRuntime,
    tenant_id: str | None,
    thread_id: str,
    resource_id: str | None,
    messages: list[Any],
    *,
    actor_model: str | None = None,
    step_number: int = 0,
    turn_end: bool | None = None,
    provider_options: dict[str, Any] | None = None,
    with_context: bool = True,
    memory_options: dict[str, Any] | None = None,
) -> tuple[TurnResult, str]:
    """The turn path shared by `/turns` and the proxy: check the broker, then one engine turn, which also
    creates the thread for the caller or confirms the caller owns it (inside its store transaction). Ids
    are the caller's public ones; the engine gets the stored ids, which include the tenant.

    The broker is checked first so that a turn refused for an unreachable broker writes nothing at all.
    """
    runtime.require_broker()
    try:
        result = runtime.engine.ingest_turn(
            scoped_id(tenant_id, PublicId(thread_id)),
            scoped_id(tenant_id, PublicId(resource_id)) if resource_id is not None else None,
            messages,
            actor_model=actor_model,
            step_number=step_number,
            turn_end=turn_end,
            tenant_id=tenant_id,
            provider_options=provider_options,
            with_context=with_context,
            memory_options=memory_options,
        )
    except access.ThreadNotVisible as exc:
        raise ApiError(404, "thread_not_found", str(exc)) from None
    except access.ResourceMismatch as exc:
        raise ApiError(409, "resource_mismatch", str(exc), field="resource_id") from None
    runtime.metrics.observe_turn(blocked=result.blocked, degraded=result.degraded)
    return result, result.resource_id


@router.post(
    "/{thread_id}/turns",
    response_model=TurnResponse,
    responses={**COMMON_ERRORS, **errors(409, 413)},
    summary="Store a turn's messages and get the context for the next model call",
)
def post_turn(thread_id: ThreadId, body: TurnRequest, runtime: Runtime, caller: Caller) -> Response:
    _check_limits(body, runtime.settings)
    form = body.context_form()
    result, resource = ingest(
        runtime,
        caller.tenant_id,
        thread_id,
        body.resource_id,
        [m.to_message() for m in body.messages],
        actor_model=body.actor_model,
        step_number=body.step_number,
        turn_end=body.turn_end,
        provider_options=body.actor_provider_options,
        with_context=form != "none",
        memory_options=body.memory_options,
    )
    # Serialised here, in one pass; `TurnResponse` (response_model) documents the same body.
    return turn_json_response(result, resource, form)


# ---------------------------------------------------------------------------------------- reading


def _status_or_none(runtime: ApiRuntime, thread_id: StoredId) -> StatusPayload | None:
    try:
        return StatusPayload.model_validate(runtime.engine.status(thread_id))
    except KeyError:
        return None


@router.get(
    "/{thread_id}/status",
    response_model=StatusPayload,
    responses=COMMON_ERRORS,
    summary="The thread's data-om-status payload",
)
def get_status(thread_id: ThreadId, runtime: Runtime, caller: Caller) -> StatusPayload:
    thread = require_thread(runtime, caller, thread_id)
    status = _status_or_none(runtime, thread.id)
    if status is None:
        raise ApiError(
            404, "no_memory_yet", f"thread {thread_id!r} has no memory record yet: post a turn first"
        )
    return status


@router.get(
    "/{thread_id}/observations",
    response_model=ObservationsResponse,
    responses=COMMON_ERRORS,
    summary="Active observation log, buffered chunks, buffered reflection and past generations",
)
def get_observations(
    thread_id: ThreadId,
    runtime: Runtime,
    caller: Caller,
    history_limit: Annotated[int, Query(ge=0, le=200, description="Past generations to return")] = 20,
    history_offset: Annotated[int, Query(ge=0, le=1_000_000)] = 0,
) -> ObservationsResponse:
    thread = require_thread(runtime, caller, thread_id)
    view = queries.observations_view(
        runtime.db,
        thread,
        history_limit=history_limit,
        history_offset=history_offset,
        log_key=runtime.engine.log_key_of(thread),
    )
    return ObservationsResponse(
        thread_id=view.thread_id,
        resource_id=view.resource_id,
        active=ActiveLog(**vars(view.active)) if view.active is not None else None,
        buffered_chunks=[
            BufferedChunk(
                cycle_id=c.cycle_id,
                observations=c.observations,
                observation_tokens=c.token_count,
                message_tokens=c.message_tokens,
                message_ids=c.message_ids,
                from_seq=c.from_seq,
                to_seq=c.to_seq,
                created_at=c.created_at,
                last_observed_at=c.last_observed_at,
            )
            for c in view.buffered_chunks
        ],
        buffered_reflection=(
            BufferedReflection(**vars(view.buffered_reflection)) if view.buffered_reflection else None
        ),
        generations=[Generation(**vars(g)) for g in view.generations],
        current_task=view.current_task,
        suggested_response=view.suggested_response,
        title=view.title,
    )


@router.get(
    "/{thread_id}/messages",
    response_model=MessagesResponse,
    responses=COMMON_ERRORS,
    summary="Stored messages, newest page first; page back with cursor (limit, cursor → items, next_cursor)",
)
def get_messages(
    thread_id: ThreadId,
    runtime: Runtime,
    caller: Caller,
    limit: Limit = LIMIT_DEFAULT,
    cursor: Cursor = None,
    before_seq: Annotated[
        int | None, Query(ge=1, le=2**62, description="next_before_seq of a page (older callers; use cursor)")
    ] = None,
) -> MessagesResponse:
    thread = require_thread(runtime, caller, thread_id)
    if cursor is not None:
        try:
            before_seq = queries.messages_cursor_seq(cursor)
        except CursorError as exc:
            raise bad_cursor(exc) from None
    page = queries.messages_page(runtime.db, thread.id, before_seq=before_seq, limit=limit)
    messages = [StoredMessage.of(m) for m in page.messages]
    return MessagesResponse(
        thread_id=thread_id,
        items=messages,
        next_cursor=queries.messages_cursor(page.next_before_seq),
        messages=messages,
        next_before_seq=page.next_before_seq,
    )


# -------------------------------------------------------------------------------------- operations


def _require_enabled(runtime: ApiRuntime, thread: history.ThreadRow) -> None:
    """Manual work on a thread with OM off is refused, not silently skipped: the caller asked for memory
    work that cannot happen, and the fix is one config field."""
    try:
        runtime.engine.require_enabled(thread.id)
    except MemoryDisabled:
        thread_id = public_id(thread.id)
        raise ApiError(
            409,
            "memory_disabled",
            f"observational memory is off for thread {thread_id!r} (its effective config has enabled: "
            f"false): PUT /v1/threads/{thread_id}/config with overrides.enabled true to observe or reflect",
            field="overrides.enabled",
        ) from None


def _response(runtime: ApiRuntime, thread: history.ThreadRow, outcome: OperationOutcome) -> OperationResponse:
    return OperationResponse(
        thread_id=public_id(thread.id),
        operation=outcome.operation,
        cycle_id=outcome.cycle_id,
        completed=outcome.completed,
        applied=outcome.applied,
        error=outcome.error,
        events=[event_out(e) for e in outcome.events],
        status=_status_or_none(runtime, thread.id),
    )


@router.post(
    "/{thread_id}/observe",
    response_model=OperationResponse,
    responses={**COMMON_ERRORS, **errors(409)},
    summary="Observe the unobserved messages now (the manual observe API)",
)
def post_observe(
    thread_id: ThreadId,
    runtime: Runtime,
    caller: Caller,
    body: Annotated[ObserveRequest | None, Body()] = None,
) -> OperationResponse:
    thread = require_thread(runtime, caller, thread_id)
    wait = body.wait if body is not None else True
    _require_enabled(runtime, thread)
    runtime.require_broker()
    return _response(
        runtime, thread, runtime.engine.observe_now(thread.id, wait=wait, infrastructure=_BROKER)
    )


@router.post(
    "/{thread_id}/reflect",
    response_model=OperationResponse,
    responses={**COMMON_ERRORS, **errors(409)},
    summary="Reflect the observation log now, optionally with guidance (the manual reflect API)",
)
def post_reflect(
    thread_id: ThreadId,
    runtime: Runtime,
    caller: Caller,
    body: Annotated[ReflectRequest | None, Body()] = None,
) -> OperationResponse:
    thread = require_thread(runtime, caller, thread_id)
    request = body or ReflectRequest()
    _require_enabled(runtime, thread)
    runtime.require_broker()
    outcome = runtime.engine.reflect_now(thread.id, request.prompt, wait=request.wait, infrastructure=_BROKER)
    return _response(runtime, thread, outcome)


# ----------------------------------------------------------------------------------------- config


@router.get(
    "/{thread_id}/config",
    response_model=ConfigResponse,
    responses=COMMON_ERRORS,
    summary="The thread's config overrides and the effective config",
)
def get_config(thread_id: ThreadId, runtime: Runtime, caller: Caller) -> ConfigResponse:
    thread = require_thread(runtime, caller, thread_id)
    return ConfigResponse(
        thread_id=thread_id,
        overrides=thread.config_overrides,
        resource_overrides=thread.resource_overrides,
        effective=queries.effective_config(runtime.engine, thread.effective_overrides),
        **queries.thread_config_extras(runtime.engine, thread.id),
    )


@router.put(
    "/{thread_id}/config",
    response_model=ConfigResponse,
    responses={**COMMON_ERRORS, **errors(409)},
    summary="Replace the thread's config overrides (validated by the config model)",
)
def put_config(thread_id: ThreadId, body: ConfigRequest, runtime: Runtime, caller: Caller) -> ConfigResponse:
    if body.resource_id is not None:
        thread = _claim(runtime, caller, thread_id, body.resource_id)
    else:
        thread = require_thread(runtime, caller, thread_id)
    try:
        effective = queries.set_config_overrides(runtime.engine, thread.id, body.overrides)
    except (ValidationError, OMConfigError) as exc:
        raise config_error(exc) from None
    return ConfigResponse(
        thread_id=thread_id,
        overrides=dict(body.overrides) if body.overrides else None,
        resource_overrides=thread.resource_overrides,
        effective=effective,
        **queries.thread_config_extras(runtime.engine, thread.id),
    )


def config_error(exc: ValidationError | OMConfigError) -> ApiError:
    """A 422 naming the overrides field to fix."""
    if isinstance(exc, ValidationError):
        error = exc.errors()[0]
        field = field_path(error["loc"], skip_source=False)
        return ApiError(
            422, "invalid_config", f"overrides.{field}: {error['msg']}", field=f"overrides.{field}"
        )
    field = f"overrides.{exc.field}" if exc.field else "overrides"
    return ApiError(422, "invalid_config", f"{exc} (fix {field})", field=field)


# ----------------------------------------------------------------------------------------- delete


@router.delete(
    "/{thread_id}",
    status_code=204,
    response_class=Response,
    responses=COMMON_ERRORS,
    summary="Erase the thread and everything of it: messages, observations, chunks, groups, search entries, "
    "events",
)
def delete_thread(thread_id: ThreadId, runtime: Runtime, caller: Caller) -> Response:
    thread = require_thread(runtime, caller, thread_id)
    if not runtime.engine.delete_thread(thread.id):
        raise thread_not_found(thread_id)
    return Response(status_code=204)
