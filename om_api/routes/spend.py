"""`GET /v1/usage/spend`: the caller's tenant's memory-model tokens and cost per UTC day, per thread per
day, and the budget state the operator set, for the dashboard's spend panel and a tenant's own reports.

The reads are `om_core.store.usage_days`, bounded by `OM_USAGE_MAX_DAYS` (the longest window served; a
longer one asked for is cut to it) and `OM_USAGE_MAX_ROWS` (per-thread rows in one answer; `truncated` says
when more exist). Only the
caller's tenant's rows are read; another tenant's thread id is "not found".
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, Query

from om_api.auth import Caller, Runtime
from om_api.routes.common import errors, require_thread
from om_api.routes.usage import memory_budget
from om_api.schemas import ID_PATTERN, DaySpend, SpendResponse, ThreadDaySpend
from om_core.store.usage import UsageTotals, utc_day
from om_core.store.usage_days import tenant_days, tenant_thread_days, thread_days
from om_core.tenancy.scoped_ids import public_id

router = APIRouter(tags=["usage"])

#: The most days any server serves (`OM_USAGE_MAX_DAYS` cannot be set higher).
MAX_DAYS = 3660

Days = Annotated[
    int,
    Query(
        ge=1,
        le=MAX_DAYS,
        description="How many UTC days back, today included; more than OM_USAGE_MAX_DAYS are served as "
        "OM_USAGE_MAX_DAYS (first_day says which)",
    ),
]
ThreadFilter = Annotated[
    str | None,
    Query(pattern=ID_PATTERN, min_length=1, max_length=255, description="Only this thread's spend"),
]


def _spend(day: date, usage: UsageTotals) -> DaySpend:
    return DaySpend(
        day=day.isoformat(),
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        total_tokens=usage.total_tokens,
        cost_usd=usage.cost_usd,
        cycles=usage.cycles,
    )


@router.get(
    "/v1/usage/spend",
    response_model=SpendResponse,
    responses=errors(401, 404, 422),
    summary="Memory-model tokens and cost per day, for the tenant or one thread, with today's budget state",
)
def get_spend(
    runtime: Runtime, caller: Caller, days: Days = 30, thread: ThreadFilter = None
) -> SpendResponse:
    settings = runtime.settings
    # The operator's bound is a setting, so the OpenAPI document cannot carry it: a longer window is served
    # cut to it (schema-valid requests are accepted), and `first_day` says where it starts.
    days = min(days, settings.usage_max_days)
    tenant = caller.tenant_id or ""
    now = datetime.now(UTC)
    last = utc_day(now)
    first = last - timedelta(days=days - 1)
    if thread is not None:
        stored = require_thread(runtime, caller, thread).id
        series = thread_days(runtime.db, stored, first, last)
        per_thread: list[ThreadDaySpend] = []
        truncated = False
    else:
        series = tenant_days(runtime.db, tenant, first, last)
        rows, truncated = tenant_thread_days(runtime.db, tenant, first, last, limit=settings.usage_max_rows)
        per_thread = [
            ThreadDaySpend(thread_id=public_id(r.thread_id), **_spend(r.day, r.usage).model_dump())
            for r in rows
        ]
    return SpendResponse(
        first_day=first.isoformat(),
        last_day=last.isoformat(),
        thread_id=thread,
        days=[_spend(d.day, d.usage) for d in series],
        threads=per_thread,
        truncated=truncated,
        budget=memory_budget(runtime, tenant, now),
    )
