"""Working memory (behaviour §8.7) over HTTP: read it, and replace it whole.

`/v1/threads/{id}/working-memory` is the memory the thread's turns see (its resource's in resource scope,
its own in thread scope); `/v1/resources/{id}/working-memory` is a resource's, when its config keeps
working memory per resource. A write names the version it read (`expected_version`) to be refused with 409
rather than overwrite a change it never saw; content that does not match the schema is a 422 with the
validator's message. A thread or resource of another tenant is "not found".
"""

from __future__ import annotations

from fastapi import APIRouter

from om_api.auth import Caller, Runtime
from om_api.errors import ApiError
from om_api.routes.common import ResourceId, ThreadId, errors, require_thread
from om_api.routes.resources import visible_resource
from om_api.schemas import WorkingMemoryPut, WorkingMemoryResponse
from om_core.config.options import ResolvedConfig
from om_core.tenancy.scoped_ids import StoredId, public_id
from om_core.working_memory import document as wm

threads_router = APIRouter(prefix="/v1/threads", tags=["working memory"])
resources_router = APIRouter(prefix="/v1/resources", tags=["working memory"])

_ERRORS = errors(401, 404, 409, 422, 503)


def _out(memory: wm.WorkingMemory) -> WorkingMemoryResponse:
    return WorkingMemoryResponse(
        scope=memory.scope,
        format=memory.format,
        content=memory.value,
        version=memory.version,
        updated_at=memory.updated_at,
        updated_by=memory.updated_by,
        thread_id=public_id(memory.thread_id) if memory.thread_id is not None else None,
        resource_id=public_id(memory.resource_id),
    )


def _disabled(exc: wm.WorkingMemoryDisabled) -> ApiError:
    return ApiError(404, "working_memory_disabled", str(exc))


def _write(
    runtime: Runtime, target: wm.Target, cfg: ResolvedConfig, body: WorkingMemoryPut, via: StoredId | None
) -> WorkingMemoryResponse:
    try:
        memory = runtime.engine.write_working_memory(
            target, cfg, body.content, by="api", expected_version=body.expected_version, via_thread=via
        )
    except wm.WorkingMemoryInvalid as exc:
        raise ApiError(422, "invalid_working_memory", str(exc), field="content") from None
    except wm.WorkingMemoryConflict as exc:
        raise ApiError(409, "version_conflict", str(exc), field="expected_version") from None
    return _out(memory)


def _thread_target(
    runtime: Runtime, caller: Caller, thread_id: str
) -> tuple[wm.Target, ResolvedConfig, StoredId]:
    thread = require_thread(runtime, caller, thread_id)
    cfg = runtime.engine.config_for(thread.effective_overrides)
    try:
        return wm.target_for_thread(thread, cfg), cfg, thread.id
    except wm.WorkingMemoryDisabled as exc:
        raise _disabled(exc) from None


def _resource_target(runtime: Runtime, caller: Caller, resource_id: str) -> tuple[wm.Target, ResolvedConfig]:
    stored = visible_resource(runtime, caller, resource_id)
    cfg = runtime.engine.resource_config(stored)
    try:
        return wm.target_for_resource(stored, cfg), cfg
    except wm.WorkingMemoryDisabled as exc:
        raise _disabled(exc) from None


@threads_router.get(
    "/{thread_id}/working-memory",
    response_model=WorkingMemoryResponse,
    responses=_ERRORS,
    summary="The working memory the thread's turns see (its resource's in resource scope)",
)
def get_thread_memory(thread_id: ThreadId, runtime: Runtime, caller: Caller) -> WorkingMemoryResponse:
    target, cfg, _ = _thread_target(runtime, caller, thread_id)
    return _out(wm.read(runtime.db, target, cfg))


@threads_router.put(
    "/{thread_id}/working-memory",
    response_model=WorkingMemoryResponse,
    responses=_ERRORS,
    summary="Replace the thread's working memory (409 when expected_version is not the stored version)",
)
def put_thread_memory(
    thread_id: ThreadId, body: WorkingMemoryPut, runtime: Runtime, caller: Caller
) -> WorkingMemoryResponse:
    target, cfg, stored = _thread_target(runtime, caller, thread_id)
    return _write(runtime, target, cfg, body, stored)


@resources_router.get(
    "/{resource_id}/working-memory",
    response_model=WorkingMemoryResponse,
    responses=_ERRORS,
    summary="The resource's working memory (when its config keeps working memory per resource)",
)
def get_resource_memory(resource_id: ResourceId, runtime: Runtime, caller: Caller) -> WorkingMemoryResponse:
    target, cfg = _resource_target(runtime, caller, resource_id)
    return _out(wm.read(runtime.db, target, cfg))


@resources_router.put(
    "/{resource_id}/working-memory",
    response_model=WorkingMemoryResponse,
    responses=_ERRORS,
    summary="Replace the resource's working memory (409 when expected_version is not the stored version)",
)
def put_resource_memory(
    resource_id: ResourceId, body: WorkingMemoryPut, runtime: Runtime, caller: Caller
) -> WorkingMemoryResponse:
    target, cfg = _resource_target(runtime, caller, resource_id)
    return _write(runtime, target, cfg, body, None)
