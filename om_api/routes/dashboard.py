"""What the memory dashboard (`/ui`) reads beyond the other routes: who the caller is (`/v1/whoami`), the
background machinery (`/v1/fleet`) and what a reflection changed (a generation's diff).

Like every route these only translate: the reads are `om_core.dashboard`'s, the workers and queue depths
the runtime's. Queue depths and workers are the operator's facts, the same for every caller; failures and
usage are the caller's tenant's only.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from om_api.auth import Caller, Runtime
from om_api.errors import ApiError
from om_api.routes.common import COMMON_ERRORS, ThreadId, errors, require_thread
from om_api.routes.usage import key_usage
from om_api.schemas import (
    DiffLineOut,
    FleetResponse,
    GenerationDiffResponse,
    OMUsage,
    QueueDepth,
    RecentFailure,
    WhoAmI,
    WorkerSeen,
)
from om_core import dashboard

router = APIRouter(tags=["dashboard"])

#: How long the fleet page waits for workers to answer the broadcast.
WORKER_REPLY_S = 1.0

Generation = Annotated[
    int, Path(ge=0, le=2_000_000_000, description="The generation's number (`generation_count`)")
]


@router.get(
    "/v1/whoami",
    response_model=WhoAmI,
    responses=errors(401, 503),
    summary="Who the caller is: whether keys are required, its tenant, where Flower is",
)
def whoami(runtime: Runtime, caller: Caller) -> WhoAmI:
    return WhoAmI(
        auth="none" if runtime.settings.auth == "none" else "key",
        tenant_id=caller.tenant_id,
        flower_url=runtime.settings.flower_url,
    )


@router.get(
    "/v1/fleet",
    response_model=FleetResponse,
    responses=errors(401, 503),
    summary="Queue depths, workers seen, the caller's recent failures and usage, the Flower link",
)
def fleet(runtime: Runtime, caller: Caller) -> FleetResponse:
    om_usage = dashboard.tenant_om_usage(runtime.db, caller.tenant_id)
    return FleetResponse(
        executor="celery" if runtime.distributed else "inline",
        queues=[QueueDepth(name=name, depth=depth) for name, depth in runtime.queue_depths().items()],
        workers=[
            WorkerSeen(name=name, queues=queues)
            for name, queues in runtime.workers_seen(WORKER_REPLY_S).items()
        ],
        recent_failures=[
            RecentFailure(**vars(f))
            for f in dashboard.recent_failures(runtime.db, tenant_id=caller.tenant_id)
        ],
        usage=key_usage(runtime, caller),
        om_usage=OMUsage.of(om_usage),
        flower_url=runtime.settings.flower_url,
    )


@router.get(
    "/v1/threads/{thread_id}/generations/{generation}/diff",
    response_model=GenerationDiffResponse,
    responses=COMMON_ERRORS,
    tags=["threads"],
    summary="What the reflection that made a generation changed: its log against the previous "
    "generation's, line by line (kept / added / removed)",
)
def generation_diff(
    thread_id: ThreadId, generation: Generation, runtime: Runtime, caller: Caller
) -> GenerationDiffResponse:
    thread = require_thread(runtime, caller, thread_id)
    diff = dashboard.generation_diff(
        runtime.db, thread, generation, log_key=runtime.engine.log_key_of(thread)
    )
    if diff is None:
        raise ApiError(
            404,
            "generation_not_found",
            f"thread {thread_id!r} has no generation {generation}: the generations are listed by "
            f"GET /v1/threads/{thread_id}/observations (active.generation_count and generations)",
            field="path.generation",
        )
    return GenerationDiffResponse(
        generation=diff.generation,
        previous_generation=diff.previous_generation,
        lines=[DiffLineOut(op=line.op, text=line.text) for line in diff.lines],
    )
