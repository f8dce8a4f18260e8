"""Resource routes: the threads of a user or entity."""

from __future__ import annotations

from fastapi import APIRouter, Response
from pydantic import ValidationError

from om_api.auth import Caller, Runtime
from om_api.errors import ApiError
from om_api.routes.common import COMMON_ERRORS, ResourceId
from om_api.routes.threads import config_error
from om_api.schemas import ResourceConfigRequest, ResourceConfigResponse, ThreadInfo, ThreadsResponse
from om_core import public_id, queries, tenancy
from om_core.errors import OMConfigError

router = APIRouter(prefix="/v1/resources", tags=["resources"])


@router.get(
    "/{resource_id}/threads",
    response_model=ThreadsResponse,
    responses=COMMON_ERRORS,
    summary="The resource's threads, oldest first",
)
def get_threads(resource_id: ResourceId, runtime: Runtime, caller: Caller) -> ThreadsResponse:
    stored = visible_resource(runtime, caller, resource_id)
    threads = queries.threads_of_resource(runtime.db, stored, caller.tenant_id)
    return ThreadsResponse(
        resource_id=resource_id,
        threads=[
            ThreadInfo(
                thread_id=public_id(t.id),
                resource_id=public_id(t.resource_id),
                title=t.title or t.om_metadata.get("threadTitle"),
                created_at=t.created_at,
                updated_at=t.updated_at,
                last_activity_at=t.last_activity_at,
                last_actor_model=t.last_actor_model,
                config_overrides=t.config_overrides,
            )
            for t in threads
        ],
    )


def visible_resource(runtime: Runtime, caller: Caller, resource_id: str) -> str:
    """The stored id of the caller's resource; 404 when the caller has none under this id (another
    tenant's answers exactly the same)."""
    stored = caller.stored_id(resource_id)
    if not tenancy.resource_visible(runtime.db, caller.tenant_id, stored):
        raise _not_found(resource_id)
    return stored


def _not_found(resource_id: str) -> ApiError:
    return ApiError(
        404,
        "resource_not_found",
        f"resource {resource_id!r} does not exist for this API key; PUT its config or post a turn with this "
        "resource_id",
    )


@router.get(
    "/{resource_id}/config",
    response_model=ResourceConfigResponse,
    responses=COMMON_ERRORS,
    summary="The resource's config overrides (merged under each thread's own) and its effective config",
)
def get_resource_config(resource_id: ResourceId, runtime: Runtime, caller: Caller) -> ResourceConfigResponse:
    stored = visible_resource(runtime, caller, resource_id)
    overrides = queries.resource_config_overrides(runtime.db, stored)
    return ResourceConfigResponse(
        resource_id=resource_id,
        overrides=overrides,
        effective=queries.effective_config(runtime.engine, overrides),
    )


@router.put(
    "/{resource_id}/config",
    response_model=ResourceConfigResponse,
    responses=COMMON_ERRORS,
    summary="Replace the resource's config overrides (validated; applies to all its threads)",
)
def put_resource_config(
    resource_id: ResourceId, body: ResourceConfigRequest, runtime: Runtime, caller: Caller
) -> ResourceConfigResponse:
    stored = caller.stored_id(resource_id)
    if not tenancy.claim_resource(runtime.db, caller.tenant_id, stored):
        raise _not_found(resource_id)
    try:
        effective = queries.set_resource_config_overrides(runtime.engine, stored, body.overrides)
    except (ValidationError, OMConfigError) as exc:
        raise config_error(exc) from None
    return ResourceConfigResponse(
        resource_id=resource_id,
        overrides=dict(body.overrides) if body.overrides else None,
        effective=effective,
    )


@router.delete(
    "/{resource_id}",
    status_code=204,
    response_class=Response,
    responses=COMMON_ERRORS,
    summary="Delete the resource: all its threads (messages, observations, chunks, events), its shared log "
    "and its config",
)
def delete_resource(resource_id: ResourceId, runtime: Runtime, caller: Caller) -> Response:
    stored = visible_resource(runtime, caller, resource_id)
    if not queries.delete_resource(runtime.db, stored, runtime.engine.coordination):
        raise _not_found(resource_id)
    return Response(status_code=204)
