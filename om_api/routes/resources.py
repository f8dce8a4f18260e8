"""Resource routes: the caller's resources with their totals, and the threads of a user or entity."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response
from pydantic import ValidationError

from om_api.auth import Caller, Runtime
from om_api.errors import ApiError
from om_api.routes.common import (
    COMMON_ERRORS,
    LIMIT_DEFAULT,
    Cursor,
    Limit,
    ResourceId,
    bad_cursor,
    errors,
    listed_thread,
)
from om_api.routes.threads import config_error
from om_api.schemas import (
    Page,
    ResourceConfigRequest,
    ResourceConfigResponse,
    ResourceSummary,
    ThreadsResponse,
)
from om_core import StoredId, dashboard, queries
from om_core.errors import OMConfigError
from om_core.pagination import CursorError
from om_core.tenancy import access

router = APIRouter(prefix="/v1/resources", tags=["resources"])

ResourceSearch = Annotated[
    str | None,
    Query(min_length=1, max_length=255, description="Only resources whose id contains this text (any case)"),
]


@router.get(
    "",
    response_model=Page[ResourceSummary],
    responses=errors(401, 422, 503),
    summary="The caller's resources by id, one page at a time (limit, cursor → items, next_cursor), each "
    "with its threads, messages, last activity and OM's cost; `q` keeps those whose id contains it",
)
def list_resources(
    runtime: Runtime,
    caller: Caller,
    limit: Limit = LIMIT_DEFAULT,
    cursor: Cursor = None,
    q: ResourceSearch = None,
) -> Page[ResourceSummary]:
    try:
        page = dashboard.resources_page(
            runtime.db, tenant_id=caller.tenant_id, q=q, cursor=cursor, limit=limit
        )
    except CursorError as exc:
        raise bad_cursor(exc) from None
    return Page[ResourceSummary](
        items=[ResourceSummary(**vars(r)) for r in page.items], next_cursor=page.next_cursor
    )


@router.get(
    "/{resource_id}/threads",
    response_model=ThreadsResponse,
    responses=COMMON_ERRORS,
    summary="The resource's threads, oldest first, one page at a time (limit, cursor → items, next_cursor)",
)
def get_threads(
    resource_id: ResourceId,
    runtime: Runtime,
    caller: Caller,
    limit: Limit = LIMIT_DEFAULT,
    cursor: Cursor = None,
) -> ThreadsResponse:
    stored = visible_resource(runtime, caller, resource_id)
    try:
        page = queries.threads_page(
            runtime.db, tenant_id=caller.tenant_id, resource_id=stored, cursor=cursor, limit=limit
        )
    except CursorError as exc:
        raise bad_cursor(exc) from None
    items = [listed_thread(t) for t in page.items]
    return ThreadsResponse(resource_id=resource_id, items=items, next_cursor=page.next_cursor, threads=items)


def visible_resource(runtime: Runtime, caller: Caller, resource_id: str) -> StoredId:
    """The stored id of the caller's resource; 404 when the caller has none under this id (another
    tenant's answers exactly the same)."""
    stored = caller.stored_id(resource_id)
    if not access.resource_visible(runtime.db, caller.tenant_id, stored):
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
    if not access.claim_resource(runtime.db, caller.tenant_id, stored):
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
    summary="Erase the resource and everything of it (a data-subject request): its threads, messages, "
    "observations, chunks, groups, search entries, events, shared log and config",
)
def delete_resource(resource_id: ResourceId, runtime: Runtime, caller: Caller) -> Response:
    stored = visible_resource(runtime, caller, resource_id)
    if not runtime.engine.delete_resource(stored):
        raise _not_found(resource_id)
    return Response(status_code=204)
