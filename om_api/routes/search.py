"""Search routes: a resource's (or one thread's) raw messages and observation groups, lexical and semantic.

A thread search needs `retrieval` on in the thread's effective config; a resource search covers the
resource's indexed threads, those whose own config has it on (`MemoryEngine.search_resource`), and is
refused only when none is (409 either way, saying which config to change and the field to set); semantic
ranking runs when `retrieval.vector` is on, and a database that cannot store vectors is a 409 naming what to
install, never a silent fall back to words only. Ids of another tenant are 404, like ids nobody used.
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import APIRouter

from om_api.auth import Caller, Runtime
from om_api.errors import ApiError
from om_api.routes.common import COMMON_ERRORS, ResourceId, ThreadId, errors, require_thread
from om_api.routes.resources import visible_resource
from om_api.schemas import SearchBody, SearchResponse, SearchResult, ThreadSearchBody
from om_core import StoredId, public_id
from om_core.search import (
    NothingIndexed,
    RetrievalDisabled,
    SearchHit,
    SearchRequest,
    VectorSearchUnavailable,
)

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


def _thread_fix(thread_id: str) -> str:
    return (
        f"set `overrides.retrieval: true` in the thread's config (PUT /v1/threads/{thread_id}/config "
        '{"overrides": {"retrieval": true}}; `retrieval.vector: true` for semantic search)'
    )


def _resource_off(resource_id: str, asked: bool) -> str:
    """What to change when a resource search covers no indexed thread: the resource's config (all its
    threads) or one thread's config (that thread), with the field to set."""
    where = (
        "none of the threads in `thread_ids` has retrieval on in its config, so none of them is indexed"
        if asked
        else f"retrieval is off in resource {resource_id!r}'s config and in every one of its threads' "
        "configs, so none of its threads is indexed"
    )
    return (
        f"{where}: set `overrides.retrieval: true` in the resource's config (PUT /v1/resources/{resource_id}"
        '/config {"overrides": {"retrieval": true}}) to index and search all its threads, or in a thread\'s '
        "config (PUT /v1/threads/{thread_id}/config, same field) to index and search that thread; "
        "`retrieval.vector: true` adds semantic search"
    )


def _run(call: Callable[[], list[SearchHit]], off: Callable[[bool], str]) -> list[SearchHit]:
    try:
        return call()
    except NothingIndexed as exc:
        raise ApiError(409, "retrieval_disabled", off(exc.asked)) from None
    except RetrievalDisabled:
        raise ApiError(409, "retrieval_disabled", off(False)) from None
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
    request = _request(stored, body, threads)
    hits = _run(
        lambda: runtime.engine.search_resource(request),
        lambda asked: _resource_off(resource_id, asked),
    )
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
    request = _request(thread.resource_id, body, (thread.id,))
    hits = _run(
        lambda: runtime.engine.search(request, cfg),
        lambda _asked: (
            f"retrieval is off in thread {thread_id!r}'s config, so nothing of it is indexed: "
            + _thread_fix(thread_id)
        ),
    )
    return _response(public_id(thread.resource_id), hits)
