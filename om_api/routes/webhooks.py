"""`/v1/webhooks`: a tenant's webhook endpoints, their signing secret (shown once) and delivery state.

The rules (target validation, signing, delivery) are `om_core.webhooks`; this module only translates HTTP.
Every endpoint belongs to the caller's tenant: another tenant's id is "not found", like a thread's.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Path, Response

from om_api.auth import Caller, Principal, Runtime
from om_api.errors import ApiError
from om_api.routes.common import COMMON_ERRORS, LIMIT_DEFAULT, Cursor, Limit, bad_cursor, errors
from om_api.schemas import (
    Page,
    WebhookAttempt,
    WebhookCreate,
    WebhookCreated,
    WebhookDeliveries,
    WebhookInfo,
    WebhookPatch,
    WebhookRotate,
)
from om_core.pagination import CursorError, decode_cursor, encode_cursor
from om_core.tenancy.scoped_ids import public_id
from om_core.webhooks import store
from om_core.webhooks.targets import WebhookTargetRefused, check_target

router = APIRouter(prefix="/v1/webhooks", tags=["webhooks"])

WebhookId = Annotated[
    str,
    Path(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_]+$", description="The webhook's id (wh_...)"),
]
_LIST = "webhooks"
_ATTEMPTS = "webhook-attempts"


def _tenant(caller: Principal) -> str:
    """The endpoint's owner: the caller's tenant, or `''` on a server without keys."""
    return caller.tenant_id or ""


def _info(endpoint: store.Endpoint) -> WebhookInfo:
    if not endpoint.previous_valid(datetime.now(UTC)):  # an expired previous secret signs nothing
        endpoint = replace(endpoint, previous_secret=None, previous_secret_expires_at=None)
    return WebhookInfo(
        id=endpoint.id,
        url=endpoint.url,
        events=list(endpoint.events),
        description=endpoint.description,
        enabled=endpoint.enabled,
        state=endpoint.state,
        failures=endpoint.failures,
        next_attempt_at=endpoint.next_attempt_at,
        last_error=endpoint.last_error,
        last_delivered_at=endpoint.last_delivered_at,
        delivered_total=endpoint.delivered_total,
        failed_total=endpoint.failed_total,
        created_at=endpoint.created_at,
        updated_at=endpoint.updated_at,
        legacy_signature=endpoint.legacy_signature,
        previous_secret_expires_at=endpoint.previous_secret_expires_at,
    )


def _not_found(endpoint_id: str) -> ApiError:
    return ApiError(
        404,
        "webhook_not_found",
        f"no webhook {endpoint_id!r} for this API key's tenant: list them with GET /v1/webhooks",
    )


def _checked(runtime: Runtime, url: str) -> str:
    try:
        return check_target(url, allow_private=runtime.settings.webhook_allow_private)
    except WebhookTargetRefused as exc:
        raise ApiError(422, "webhook_target_refused", str(exc), field="body.url") from exc


def _own(runtime: Runtime, caller: Principal, endpoint_id: str) -> store.Endpoint:
    endpoint = store.get(runtime.db, endpoint_id, tenant_id=_tenant(caller))
    if endpoint is None:
        raise _not_found(endpoint_id)
    return endpoint


@router.post(
    "",
    response_model=WebhookCreated,
    status_code=201,
    responses=errors(401, 422),
    summary="Register a webhook endpoint; the answer holds its signing secret, shown only this once",
)
def create_webhook(body: WebhookCreate, runtime: Runtime, caller: Caller) -> WebhookCreated:
    url = _checked(runtime, body.url)
    endpoint = store.create(
        runtime.db,
        tenant_id=_tenant(caller),
        url=url,
        events=body.events,
        description=body.description,
        now=runtime.engine.clock(),
    )
    return WebhookCreated(**_info(endpoint).model_dump(), secret=endpoint.secret)


@router.get("", response_model=Page[WebhookInfo], responses=COMMON_ERRORS, summary="The caller's webhooks")
def list_webhooks(
    runtime: Runtime, caller: Caller, limit: Limit = LIMIT_DEFAULT, cursor: Cursor = None
) -> Page[WebhookInfo]:
    after: str | None = None
    if cursor is not None:
        try:
            after = str(decode_cursor(_LIST, cursor, (str,))[0])
        except CursorError as exc:
            raise bad_cursor(exc) from exc
    found = store.list_for(runtime.db, _tenant(caller), limit=limit + 1, after=after)
    items = [_info(e) for e in found[:limit]]
    following = encode_cursor(_LIST, (found[limit - 1].id,)) if len(found) > limit else None
    return Page[WebhookInfo](items=items, next_cursor=following)


@router.get("/{endpoint_id}", response_model=WebhookInfo, responses=COMMON_ERRORS, summary="One webhook")
def get_webhook(endpoint_id: WebhookId, runtime: Runtime, caller: Caller) -> WebhookInfo:
    return _info(_own(runtime, caller, endpoint_id))


@router.patch(
    "/{endpoint_id}",
    response_model=WebhookInfo,
    responses=errors(401, 404, 422),
    summary="Change a webhook's url, events, description or enabled (enabled: true revives a dead one)",
)
def patch_webhook(
    endpoint_id: WebhookId, body: WebhookPatch, runtime: Runtime, caller: Caller
) -> WebhookInfo:
    _own(runtime, caller, endpoint_id)
    changes = body.model_dump(exclude_unset=True)
    if "url" in changes:
        changes["url"] = _checked(runtime, changes["url"])
    updated = store.patch(runtime.db, endpoint_id, _tenant(caller), changes, runtime.engine.clock())
    if updated is None:
        raise _not_found(endpoint_id)
    return _info(updated)


@router.delete(
    "/{endpoint_id}", status_code=204, responses=COMMON_ERRORS, summary="Remove a webhook and its attempts"
)
def delete_webhook(endpoint_id: WebhookId, runtime: Runtime, caller: Caller) -> Response:
    if not store.remove(runtime.db, endpoint_id, _tenant(caller)):
        raise _not_found(endpoint_id)
    return Response(status_code=204)


@router.post(
    "/{endpoint_id}/rotate-secret",
    response_model=WebhookCreated,
    responses=errors(401, 404, 422),
    summary="Replace the signing secret; the previous one keeps signing (both signatures sent) for a while",
)
def rotate_secret(
    endpoint_id: WebhookId, runtime: Runtime, caller: Caller, body: WebhookRotate | None = None
) -> WebhookCreated:
    keep = (body or WebhookRotate()).keep_previous_s
    rotated = store.rotate_secret(
        runtime.db, endpoint_id, _tenant(caller), keep_previous_s=keep, now=datetime.now(UTC)
    )
    if rotated is None:
        raise _not_found(endpoint_id)
    return WebhookCreated(**_info(rotated).model_dump(), secret=rotated.secret)


@router.delete(
    "/{endpoint_id}/previous-secret",
    response_model=WebhookInfo,
    responses=COMMON_ERRORS,
    summary="End a rotation now: only the current secret signs deliveries from here on",
)
def drop_previous_secret(endpoint_id: WebhookId, runtime: Runtime, caller: Caller) -> WebhookInfo:
    dropped = store.drop_previous_secret(runtime.db, endpoint_id, _tenant(caller), now=datetime.now(UTC))
    if dropped is None:
        raise _not_found(endpoint_id)
    return _info(dropped)


@router.get(
    "/{endpoint_id}/deliveries",
    response_model=WebhookDeliveries,
    responses=COMMON_ERRORS,
    summary="A webhook's delivery state and its last attempts, newest first",
)
def list_deliveries(
    endpoint_id: WebhookId,
    runtime: Runtime,
    caller: Caller,
    limit: Limit = LIMIT_DEFAULT,
    cursor: Cursor = None,
) -> WebhookDeliveries:
    endpoint = _own(runtime, caller, endpoint_id)
    before: int | None = None
    if cursor is not None:
        try:
            before = int(decode_cursor(_ATTEMPTS, cursor, (int,))[0])
        except CursorError as exc:
            raise bad_cursor(exc) from exc
    found = store.attempts(runtime.db, endpoint.id, limit=limit + 1, before=before)
    items = [
        WebhookAttempt(
            id=a.id,
            event_id=a.event_id,
            event_type=a.event_type,
            thread_id=public_id(a.thread_id) if a.thread_id else None,
            attempt=a.attempt,
            outcome=a.outcome,
            status_code=a.status_code,
            error=a.error,
            duration_ms=a.duration_ms,
            created_at=a.created_at,
        )
        for a in found[:limit]
    ]
    return WebhookDeliveries(
        items=items,
        next_cursor=encode_cursor(_ATTEMPTS, (found[limit - 1].id,)) if len(found) > limit else None,
        endpoint_id=endpoint.id,
        state=endpoint.state,
        pending=store.backlog(runtime.db, endpoint),
        failures=endpoint.failures,
        next_attempt_at=endpoint.next_attempt_at,
        last_error=endpoint.last_error,
    )
