"""The tools behind `/mcp`, answered by the API's own route functions in this process, as the caller.

Each tool calls the function that serves the same operation over HTTP with the caller's `Principal` (the
tenant the `/mcp` request's key belongs to), so a tool sees exactly what that key sees through `/v1/`:
another tenant's thread or resource is "not found" in the same words, and every check a route makes (the
request models, the turn limits, the working-memory schema and version) is made here too. The route
functions are synchronous, like FastAPI runs them: each call goes to the thread pool.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.concurrency import run_in_threadpool

from om_api.auth import Principal
from om_api.errors import ApiError
from om_api.mcp.tools import (
    JsonObject,
    ListThreadsArgs,
    ObservationsArgs,
    PostTurnArgs,
    SearchArgs,
    ThreadArgs,
    ToolFailure,
    UpdateWorkingMemoryArgs,
)
from om_api.routes import manage, recall, search, threads, working_memory
from om_api.runtime import ApiRuntime
from om_api.schemas import SearchBody, ThreadSearchBody, TurnRequest, WorkingMemoryPut
from om_core.errors import OMConfigError
from om_core.store.history import MessageConflict

T = TypeVar("T")


def _failure(exc: ApiError) -> ToolFailure:
    where = f" ({exc.field})" if exc.field else ""
    return ToolFailure(f"{exc.code}{where}: {exc.message}")


def _json(value: Any) -> JsonObject:
    """A route's answer as JSON data: a response model, or a `Response` whose body is JSON."""
    if isinstance(value, BaseModel):
        data: JsonObject = value.model_dump(mode="json", by_alias=True)
        return data
    body = getattr(value, "body", b"")
    loaded: JsonObject = json.loads(bytes(body)) if body else {}
    return loaded


def _request_model(model: type[BaseModel], values: dict[str, Any]) -> Any:
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        raise ToolFailure(f"invalid_request ({where}): {error['msg']}") from None


class InProcessBackend:
    """The `MemoryBackend` of one `/mcp` request: this process's runtime, as `caller`."""

    def __init__(self, runtime: ApiRuntime, caller: Principal) -> None:
        self.runtime = runtime
        self.caller = caller

    async def _run(self, route: Callable[..., T], *args: Any, **kwargs: Any) -> JsonObject:
        try:
            answer = await run_in_threadpool(route, *args, **kwargs)
        except ApiError as exc:
            raise _failure(exc) from None
        except (MessageConflict, OMConfigError) as exc:
            raise ToolFailure(str(exc)) from None
        return _json(answer)

    async def search(self, args: SearchArgs) -> JsonObject:
        values: dict[str, Any] = {"query": args.query, "limit": args.limit, "kinds": args.kinds}
        if args.thread_id is not None:
            body = _request_model(ThreadSearchBody, values)
            answer = await self._run(search.search_thread, args.thread_id, body, self.runtime, self.caller)
            if answer.get("resource_id") != args.resource_id:
                raise ToolFailure(
                    f"thread {args.thread_id!r} belongs to resource {answer.get('resource_id')!r}, not "
                    f"{args.resource_id!r}: pass its resource_id"
                )
            return answer
        body = _request_model(SearchBody, values)
        return await self._run(search.search_resource, args.resource_id, body, self.runtime, self.caller)

    async def recall(self, thread_id: str, arguments: JsonObject) -> JsonObject:
        return await self._run(recall.post_recall, thread_id, self.runtime, self.caller, arguments)

    async def observations(self, args: ObservationsArgs) -> JsonObject:
        return await self._run(
            threads.get_observations,
            args.thread_id,
            self.runtime,
            self.caller,
            history_limit=args.history_limit,
            history_offset=0,
        )

    async def get_working_memory(self, args: ThreadArgs) -> JsonObject:
        return await self._run(working_memory.get_thread_memory, args.thread_id, self.runtime, self.caller)

    async def update_working_memory(self, args: UpdateWorkingMemoryArgs) -> JsonObject:
        body = _request_model(
            WorkingMemoryPut, {"content": args.content, "expected_version": args.expected_version}
        )
        return await self._run(
            working_memory.put_thread_memory, args.thread_id, body, self.runtime, self.caller
        )

    async def list_threads(self, args: ListThreadsArgs) -> JsonObject:
        return await self._run(
            manage.list_threads,
            self.runtime,
            self.caller,
            limit=args.limit,
            cursor=args.cursor,
            resource_id=args.resource_id,
            q=args.q,
        )

    async def post_turn(self, args: PostTurnArgs) -> JsonObject:
        body = _request_model(
            TurnRequest,
            {
                "resource_id": args.resource_id,
                "messages": [m.model_dump(exclude_none=True) for m in args.messages],
                "context": args.context,
            },
        )
        return await self._run(threads.post_turn, args.thread_id, body, self.runtime, self.caller)
