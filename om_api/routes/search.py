"""Search routes: a resource's (or one thread's) raw messages and observation groups, lexical and semantic.

Both need `retrieval` on in the effective config (409 otherwise, saying how to turn it on); semantic
ranking runs when `retrieval.vector` is on, and a database that cannot store vectors is a 409 naming what to
install, never a silent fall back to words only. Ids of another tenant are 404, like ids nobody used.
"""

from __future__ import annotations

from fastapi import APIRouter

from om_api.auth import Caller, Runtime
from om_api.errors import ApiError
from om_api.routes.common import COMMON_ERRORS, ResourceId, ThreadId, errors, require_thread
from om_api.routes.resources import visible_resource
from om_api.schemas import SearchBody, SearchResponse, SearchResult, ThreadSearchBody
from om_core import StoredId, public_id
from om_core.config.options import ResolvedConfig
from om_core.search import RetrievalDisabled, SearchHit, SearchRequest, VectorSearchUnavailable

router = APIRouter(tags=["search"])

SEARCH_ERRORS = {**COMMON_ERRORS, **errors(409)}


def _request(
    resource_id: StoredId, body: ThreadSearchBody, thread_ids: tuple[StoredId, ...] | None
) -> SearchRequest:
    return SearchRequest(
        resource_id=resource_id,
        query=body.query,
        limit=body.limit,
        thread_ids=thread_ids,
        after=body.after,
        before=body.before,
        kinds=tuple(body.kinds) if body.kinds else ("group", "message"),
    )


def _run(runtime: Runtime, request: SearchRequest, cfg: ResolvedConfig, what: str) -> list[SearchHit]:
    try:
        return runtime.engine.search(request, cfg)
    except RetrievalDisabled:
        raise ApiError(
            409,
            "retrieval_disabled",
            f"retrieval is off for {what}, so nothing of it is indexed: set `retrieval: true` (and "
            "`retrieval.vector: true` for semantic search) in its config (PUT .../config)",
        ) from None
    except VectorSearchUnavailable as exc:
        raise ApiError(409, "vector_search_unavailable", str(exc)) from None


def _response(resource_id: str, hits: list[SearchHit]) -> SearchResponse:
    results = [
        SearchResult(
            kind=hit.kind,
            id=hit.ref,
            thread_id=public_id(hit.thread_id),
            text=hit.text,
            at=hit.at,
            score=hit.score,
            ranges=hit.ranges,
            sources=list(hit.sources),
        )
        for hit in hits
    ]
    return SearchResponse(resource_id=resource_id, results=results, count=len(results))


@router.post(
    "/v1/resources/{resource_id}/search",
    response_model=SearchResponse,
    responses=SEARCH_ERRORS,
    summary="Search the resource's messages and observation groups (retrieval on)",
)
def search_resource(
    resource_id: ResourceId, body: SearchBody, runtime: Runtime, caller: Caller
) -> SearchResponse:
    stored = visible_resource(runtime, caller, resource_id)
    threads = tuple(caller.stored_id(t) for t in body.thread_ids) if body.thread_ids is not None else None
    cfg = runtime.engine.resource_config(stored)
    hits = _run(runtime, _request(stored, body, threads), cfg, f"resource {resource_id!r}")
    return _response(resource_id, hits)


@router.post(
    "/v1/threads/{thread_id}/search",
    response_model=SearchResponse,
    responses=SEARCH_ERRORS,
    summary="Search one thread's messages and observation groups (retrieval on)",
)
def search_thread(
    thread_id: ThreadId, body: ThreadSearchBody, runtime: Runtime, caller: Caller
) -> SearchResponse:
    # No `thread_ids` here (the body refuses it as an unknown field): a thread search covers its thread.
    thread = require_thread(runtime, caller, thread_id)
    cfg = runtime.engine.config_for(thread.effective_overrides)
    hits = _run(runtime, _request(thread.resource_id, body, (thread.id,)), cfg, f"thread {thread_id!r}")
    return _response(public_id(thread.resource_id), hits)
