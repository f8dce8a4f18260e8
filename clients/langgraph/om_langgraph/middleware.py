"""`OMMiddleware`: LangChain v1 agent middleware that gives the model om's context instead of the transcript.

Why middleware and not a LangGraph `BaseStore`: a store holds key-value items that the agent reads and
writes by key (a namespace, a key, a JSON value, optionally searched). om's memory is not such items: it is
a context, rebuilt for each model call from the thread's observations and reflections plus the messages
not yet observed, and it changes because messages arrive (om observes and reflects in the background). A
store would have to invent keys for a log that has none, and the agent would still send the whole
transcript. Middleware sits where om works: around the model call (`wrap_model_call`). Before the call it
posts what is new in the conversation and replaces the model's history with om's context; after it, it
posts the model's reply. A checkpointer is not needed for memory (the graph's own state may stay short).

Each call: one `/turns` post with the new messages (answered with the context in chat-completions form),
the model, one post with the reply (ending the turn unless the reply calls tools).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain.agents.middleware.types import ExtendedModelResponse
from langchain_core.messages import AIMessage, BaseMessage
from langgraph.config import get_config

from om_client import AsyncOMClient, OMClient
from om_client.models import TurnResponse
from om_langgraph.mapping import from_context, new_messages, to_turn_messages, with_memory

__all__ = ["OMMiddleware"]

Answer = ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]


def _config_value(name: str) -> str | None:
    """`config["configurable"][name]` of the running graph, when there is one."""
    try:
        value = get_config().get("configurable", {}).get(name)
    except RuntimeError:  # not inside a graph run
        return None
    return str(value) if value is not None else None


def _reply_messages(answer: Answer) -> list[BaseMessage]:
    if isinstance(answer, AIMessage):
        return [answer]
    if isinstance(answer, ExtendedModelResponse):
        return list(answer.model_response.result)
    return list(answer.result)


def _ends_turn(reply: Sequence[BaseMessage]) -> bool:
    """The reply ends the turn unless it calls a tool (the agent loop then calls the model again)."""
    return not any(isinstance(m, AIMessage) and m.tool_calls for m in reply)


class OMMiddleware(AgentMiddleware):
    """om's memory around every model call of a `create_agent` agent.

    The om thread is `thread_id`, else the run's `config["configurable"]["thread_id"]` (the id a
    checkpointer uses too); the resource (the user whose memory threads may share) is `resource_id`, else
    `configurable["resource_id"]`, else om's default (the thread id). `actor_model` names the model
    answering (`provider/model`) for om's token counting and cost figures.

    `client` serves `invoke`/`stream`, `async_client` serves `ainvoke`/`astream`; the caller's clients
    are not closed here. Without them the middleware opens its own from `base_url` and `api_key`
    (default: `OM_BASE_URL`, `OM_API_KEY`): one sync client kept for its life, an async one per call
    (an async client is bound to the event loop that first used it).
    """

    def __init__(
        self,
        client: OMClient | None = None,
        *,
        async_client: AsyncOMClient | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        thread_id: str | None = None,
        resource_id: str | None = None,
        actor_model: str | None = None,
    ) -> None:
        super().__init__()
        self._client = client
        self._async_client = async_client
        self._base_url = base_url or os.environ.get("OM_BASE_URL")
        self._api_key = api_key if api_key is not None else os.environ.get("OM_API_KEY")
        self._thread_id = thread_id
        self._resource_id = resource_id
        self._actor_model = actor_model

    def _where(self) -> tuple[str, str | None]:
        thread = self._thread_id or _config_value("thread_id")
        if not thread:
            raise ValueError(
                "OMMiddleware needs a thread id: pass thread_id=... or run the agent with "
                "config={'configurable': {'thread_id': ...}}"
            )
        return thread, self._resource_id or _config_value("resource_id")

    def _url(self) -> str:
        if not self._base_url:
            raise ValueError(
                "OMMiddleware needs a client, a base_url or the OM_BASE_URL environment variable"
            )
        return self._base_url

    def _sync_client(self) -> OMClient:
        if self._client is None:
            self._client = OMClient(self._url(), self._api_key)
        return self._client

    def _with_context(self, request: ModelRequest[Any], turn: TurnResponse) -> ModelRequest[Any]:
        if turn.context is None or not turn.context.openai_messages:
            return request
        memory, history = from_context(turn.context.openai_messages)
        return request.override(messages=history, system_message=with_memory(request.system_message, memory))

    def wrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], ModelResponse[Any]]
    ) -> Answer:
        thread, resource = self._where()
        om = self._sync_client()
        common: dict[str, Any] = {"resource_id": resource, "actor_model": self._actor_model}
        new = to_turn_messages(new_messages(request.messages))
        turn = om.post_turn(thread, new, turn_end=False, context="openai", **common)
        answer: Answer = handler(self._with_context(request, turn))
        reply = _reply_messages(answer)
        if posted := to_turn_messages(reply):
            om.post_turn(thread, posted, turn_end=_ends_turn(reply), context="none", **common)
        return answer

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> Answer:
        if self._async_client is not None:
            return await self._acall(self._async_client, request, handler)
        async with AsyncOMClient(self._url(), self._api_key) as om:
            return await self._acall(om, request, handler)

    async def _acall(
        self,
        om: AsyncOMClient,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> Answer:
        thread, resource = self._where()
        common: dict[str, Any] = {"resource_id": resource, "actor_model": self._actor_model}
        new = to_turn_messages(new_messages(request.messages))
        turn = await om.post_turn(thread, new, turn_end=False, context="openai", **common)
        answer: Answer = await handler(self._with_context(request, turn))
        reply = _reply_messages(answer)
        if posted := to_turn_messages(reply):
            await om.post_turn(thread, posted, turn_end=_ends_turn(reply), context="none", **common)
        return answer
