"""Who is calling: an API key (`Authorization: Bearer omk_…`) bound to a tenant, or nobody in particular
when the server runs with `OM_AUTH=none` (embedded mode, said loudly at start).

The bearer scheme is what OpenAI clients send with their `api_key`, so the proxy works with an OM key in
place of a provider key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from om_adapters.request_context import TENANT
from om_api.errors import ApiError
from om_api.runtime import ApiRuntime
from om_core import PublicId, StoredId, scoped_id

bearer = HTTPBearer(auto_error=False, description="An OM API key: `om keys create <tenant> <name>`")


@dataclass(frozen=True)
class Principal:
    """The caller. `tenant_id` None means tenancy is off and every thread is visible."""

    tenant_id: str | None
    key_id: str | None = None

    def stored_id(self, public: str) -> StoredId:
        """The stored id of one of the caller's threads or resources: ids are the tenant's own. Where a
        string from the request becomes a `PublicId`: the API's id pattern has refused `/` in it."""
        return scoped_id(self.tenant_id, PublicId(public))


def _runtime_of(request: Request) -> ApiRuntime:
    runtime: ApiRuntime = request.app.state.runtime
    return runtime


# Both dependencies are coroutines: FastAPI runs a plain-function dependency in the thread pool, a hop
# per dependency per request that cost more than the work it wrapped.


async def get_runtime(request: Request) -> ApiRuntime:
    return _runtime_of(request)


def _unauthorized(message: str) -> ApiError:
    return ApiError(401, "unauthorized", message, headers={"WWW-Authenticate": "Bearer"})


async def authenticate(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Principal:
    """A key verified within `OM_AUTH_CACHE_S` is accepted without leaving the event loop; any other
    is looked up in the database from the thread pool."""
    runtime = _runtime_of(request)
    if runtime.settings.auth == "none":
        return Principal(tenant_id=None)
    token = credentials.credentials if credentials is not None else request.headers.get("x-api-key")
    if not token:
        raise _unauthorized(
            "missing API key: send 'Authorization: Bearer <key>' (create a key with `om keys create`)"
        )
    key = runtime.keys.remembered(token)
    if key is None:
        key = await run_in_threadpool(runtime.keys.verify, token)
    if key is None:
        raise _unauthorized("the API key is unknown or revoked: check it, or create a new one")
    request.state.tenant_id = key.tenant_id
    TENANT.set(key.tenant_id)  # for the request's log lines and the tasks it sends
    return Principal(tenant_id=key.tenant_id, key_id=key.id)


Runtime = Annotated[ApiRuntime, Depends(get_runtime)]
Caller = Annotated[Principal, Depends(authenticate)]
