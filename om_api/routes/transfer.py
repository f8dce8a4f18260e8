"""Export and import (`om_core.transfer`): a thread's or a resource's memory streamed out as JSON Lines,
and a file of those lines written back into the caller's tenant.

An export names only the caller's own thread or resource (another tenant's is "not found"); an import
stores every id the file carries under the caller's tenant, so a file can never reach another tenant's
rows. The import is refused whole (before anything is written) when it has more lines than
`OM_MAX_IMPORT_LINES`; a line that is wrong is refused with its number, and the threads before it stay
imported (the import is idempotent: fix the file and send it again).
"""

from __future__ import annotations

from collections.abc import Iterator

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool
from starlette.responses import StreamingResponse

from om_api.auth import Caller, Runtime
from om_api.errors import ApiError, thread_not_found
from om_api.routes.common import ResourceId, ThreadId, errors
from om_core.transfer import export, importer, service
from om_core.transfer.records import Line, dump_line

router = APIRouter(prefix="/v1", tags=["export and import"])

NDJSON = "application/x-ndjson"
_STATUS = {"too_large": 413, "invalid": 422, "conflict": 409}


class ImportResponse(BaseModel):
    """What an import wrote (`messages`, ...) and what it found already stored (`*_skipped`)."""

    model_config = ConfigDict(extra="forbid")

    lines: int = Field(description="Lines read (the header included)")
    resources: int
    threads: int = Field(description="Threads created by this import")
    threads_existing: int = Field(description="Threads that existed: only their new messages were added")
    messages: int
    messages_skipped: int = Field(description="Messages already stored (same id in the same thread)")
    records: int = Field(description="Observation log generations written")
    records_skipped: int
    groups: int
    groups_skipped: int
    working_memory: int
    working_memory_skipped: int
    source: str = Field(description="`om`, or `mastra` for a file read from the original's storage")


def _ndjson(lines: Iterator[Line], filename: str) -> StreamingResponse:
    return StreamingResponse(
        (dump_line(line) for line in lines),
        media_type=NDJSON,
        headers={"Content-Disposition": f'attachment; filename="{filename}.jsonl"'},
    )


_EXPORT = {
    200: {"content": {NDJSON: {"schema": {"type": "string"}}}, "description": "The memory as JSON Lines"},
    **errors(401, 404, 422, 503),
}


@router.get(
    "/threads/{thread_id}/export",
    response_class=StreamingResponse,
    responses=_EXPORT,
    summary="Export a thread: its messages, observation log generations, groups and working memory, as "
    "JSON Lines (docs/guide/export-import.md)",
)
def export_thread(thread_id: ThreadId, runtime: Runtime, caller: Caller) -> StreamingResponse:
    try:
        lines = export.export_thread(runtime.engine.db, caller.tenant_id, thread_id)
    except export.ExportNotFound:
        raise thread_not_found(thread_id) from None
    return _ndjson(lines, f"thread-{thread_id}")


@router.get(
    "/resources/{resource_id}/export",
    response_class=StreamingResponse,
    responses=_EXPORT,
    summary="Export a resource: its shared log and working memory, then every thread of it, as JSON Lines",
)
def export_resource(resource_id: ResourceId, runtime: Runtime, caller: Caller) -> StreamingResponse:
    try:
        lines = export.export_resource(runtime.engine.db, caller.tenant_id, resource_id)
    except export.ExportNotFound:
        raise ApiError(404, "resource_not_found", f"no resource {resource_id!r}: check the id") from None
    return _ndjson(lines, f"resource-{resource_id}")


@router.post(
    "/import",
    response_model=ImportResponse,
    responses=errors(401, 409, 413, 422, 503),
    summary="Import a file of JSON Lines (an export) into the caller's memory; idempotent by message id",
    openapi_extra={
        # The body is read as bytes whatever its type; text/plain is listed for tools that send no ndjson.
        "requestBody": {
            "required": True,
            "content": {NDJSON: {"schema": {"type": "string"}}, "text/plain": {"schema": {"type": "string"}}},
        },
    },
)
async def import_file(request: Request, runtime: Runtime, caller: Caller) -> ImportResponse:
    body = await request.body()
    lines = body.split(b"\n")
    limits = service.limits_of(runtime.settings)
    count = sum(1 for line in lines if line.strip())
    if count > limits.max_lines:
        raise ApiError(
            413,
            "payload_too_large",
            f"the file has {count} lines, over the limit of {limits.max_lines} (OM_MAX_IMPORT_LINES): split "
            "it by resource or by thread and import each part",
            limit=limits.max_lines,
        )
    try:
        report = await run_in_threadpool(
            service.import_into, runtime.engine, lines, tenant_id=caller.tenant_id, limits=limits
        )
    except importer.ImportRefused as exc:
        raise ApiError(_STATUS[exc.reason], f"import_{exc.reason}", str(exc)) from None
    return ImportResponse.model_validate({k: v for k, v in report.as_dict().items() if k != "done"})
