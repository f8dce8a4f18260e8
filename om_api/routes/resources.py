"""Resource routes: the threads of a user or entity."""

from __future__ import annotations

from fastapi import APIRouter

from om_api.auth import Caller, Runtime
from om_api.errors import ApiError
from om_api.routes.common import COMMON_ERRORS, ResourceId
from om_api.schemas import ThreadInfo, ThreadsResponse
from om_core import public_id, queries, tenancy

router = APIRouter(prefix="/v1/resources", tags=["resources"])


@router.get(
    "/{resource_id}/threads",
    response_model=ThreadsResponse,
    responses=COMMON_ERRORS,
    summary="The resource's threads, oldest first",
)
def get_threads(resource_id: ResourceId, runtime: Runtime, caller: Caller) -> ThreadsResponse:
    stored = caller.stored_id(resource_id)
    if not tenancy.resource_visible(runtime.db, caller.tenant_id, stored):
        raise ApiError(
            404,
            "resource_not_found",
            f"resource {resource_id!r} has no threads for this API key; post a turn with this resource_id",
        )
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
