"""The tools behind `om mcp` (stdio): answered by an om server through the Python client, with its key.

A desktop MCP client starts `om mcp` as a child process; the tools it calls become API calls to
`OM_BASE_URL` with `OM_API_KEY`, so the server enforces everything (the tenant, the limits) exactly as
for any other client of that key. Refusals come back as the API's message, which the model reads.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

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
from om_client import AsyncOMClient, OMAPIError
from om_client.models import TurnMessage


def _dump(model: BaseModel) -> JsonObject:
    data: JsonObject = model.model_dump(mode="json", by_alias=True)
    return data


class RemoteBackend:
    """The `MemoryBackend` of `om mcp`: every tool one call of `client`."""

    def __init__(self, client: AsyncOMClient) -> None:
        self.client = client

    async def _guard(self, call: Any) -> Any:
        try:
            return await call
        except OMAPIError as exc:
            where = f" ({exc.field})" if exc.field else ""
            raise ToolFailure(f"{exc.code}{where}: {exc.message}") from None

    async def search(self, args: SearchArgs) -> JsonObject:
        if args.thread_id is not None:
            answer = await self._guard(
                self.client.search_thread(args.thread_id, args.query, limit=args.limit, kinds=args.kinds)
            )
            if answer.resource_id != args.resource_id:
                raise ToolFailure(
                    f"thread {args.thread_id!r} belongs to resource {answer.resource_id!r}, not "
                    f"{args.resource_id!r}: pass its resource_id"
                )
            return _dump(answer)
        return _dump(
            await self._guard(
                self.client.search(args.resource_id, args.query, limit=args.limit, kinds=args.kinds)
            )
        )

    async def recall(self, thread_id: str, arguments: JsonObject) -> JsonObject:
        answer: JsonObject = await self._guard(self.client.recall(thread_id, **arguments))
        return answer

    async def observations(self, args: ObservationsArgs) -> JsonObject:
        return _dump(
            await self._guard(self.client.observations(args.thread_id, history_limit=args.history_limit))
        )

    async def get_working_memory(self, args: ThreadArgs) -> JsonObject:
        return _dump(await self._guard(self.client.working_memory(args.thread_id)))

    async def update_working_memory(self, args: UpdateWorkingMemoryArgs) -> JsonObject:
        answer = self.client.set_working_memory(
            args.thread_id, args.content, expected_version=args.expected_version
        )
        return _dump(await self._guard(answer))

    async def list_threads(self, args: ListThreadsArgs) -> JsonObject:
        page = self.client.list_threads(
            resource_id=args.resource_id, limit=args.limit, cursor=args.cursor, q=args.q
        )
        return _dump(await self._guard(page))

    async def post_turn(self, args: PostTurnArgs) -> JsonObject:
        messages = [TurnMessage(id=m.id, role=m.role, text=m.text) for m in args.messages]
        answer = await self._guard(
            self.client.post_turn(
                args.thread_id, messages, resource_id=args.resource_id, context=args.context
            )
        )
        return _dump(answer)
