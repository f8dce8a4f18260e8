"""`GET /v1/usage`: what the calling key spent on actor models through the proxy, and where its tenant
stands against its daily memory-model budget.

A tenant sees its own key's counters (the same ones `om keys list` shows the operator) and its tenant's
budget state (the one that pauses observation, `om_core.tenancy.spend`), so a chat backend can watch its spend
and learn why observation paused without access to `/metrics`.
"""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import APIRouter

from om_api.auth import Caller, Runtime
from om_api.errors import ApiError
from om_api.routes.common import errors
from om_api.schemas import KeyUsageResponse, MemoryBudget
from om_core.tenancy import access, spend

router = APIRouter(tags=["usage"])


@router.get(
    "/v1/usage",
    response_model=KeyUsageResponse,
    responses=errors(401, 404, 503),
    summary="The calling API key's actor-model usage, and its tenant's memory-model budget today",
)
def get_usage(runtime: Runtime, caller: Caller) -> KeyUsageResponse:
    if caller.key_id is None or caller.tenant_id is None:
        raise ApiError(
            404,
            "no_api_key",
            "usage is counted per API key and this server runs without keys (OM_AUTH=none): read the "
            "om_actor_model_* series of /metrics instead",
        )
    usage = key_usage(runtime, caller)
    if usage is None:  # revoked and deleted between authentication and now
        raise ApiError(
            401, "unauthorized", "the API key is unknown or revoked: check it, or create a new one"
        )
    return usage


def key_usage(runtime: Runtime, caller: Caller) -> KeyUsageResponse | None:
    """The calling key's counters; None without a key (OM_AUTH=none) or for a key deleted since."""
    if caller.key_id is None or caller.tenant_id is None:
        return None
    usage = access.key_usage(runtime.db, caller.key_id)
    if usage is None:
        return None
    return KeyUsageResponse(
        key_id=caller.key_id,
        tenant_id=caller.tenant_id,
        calls=usage.calls,
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        cost_usd=usage.cost_usd,
        memory_budget=memory_budget(runtime, caller.tenant_id, datetime.now(UTC)),
    )


def memory_budget(runtime: Runtime, tenant_id: str, now: datetime) -> MemoryBudget:
    """Read now, not from the process's memory: this is where a tenant looks when observation paused."""
    state = spend.budget_state(
        runtime.db,
        tenant_id,
        now,
        default_budget_usd=runtime.settings.tenant_daily_budget_usd,
        max_age_s=0,
    )
    return MemoryBudget(
        daily_budget_usd=state.budget_usd,
        spent_today_usd=state.spent_usd,
        paused=state.paused,
        day=state.day.isoformat(),
        resets_at=state.resets_at,
    )
