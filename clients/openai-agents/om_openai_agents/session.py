"""`OMSession`: an Agents SDK session whose history is om's context for one thread.

A plain session hands the model the whole transcript, and the transcript grows until it no longer fits.
This one hands it what om would: the thread's observations and reflections as system items, then only the
messages not yet observed. The runner reads the history before each run (`get_items`: a turn with no new
message, which answers with the context) and writes what the run added (`add_items`: a turn with those
messages, which om stores once per id and observes in the background).

om's memory is append-only per message: a stored message is never taken back one at a time, so `pop_item`
refuses (the runner only pops to roll back a write after an OpenAI server-conversation retry, and carries
on when a session refuses); `clear_session` erases the whole thread.
"""

from __future__ import annotations

import os
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, cast

from om_client import AsyncOMClient, OMNotFound
from om_openai_agents.mapping import context_to_items, items_to_turn_messages, limit_items

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.memory import SessionSettings

__all__ = ["OMSession", "OMSessionUnsupported"]


class OMSessionUnsupported(NotImplementedError):
    """What om cannot do for a session: take back one stored message."""


class OMSession:
    """The Agents SDK `Session` protocol backed by om: `session_id` is the om thread id.

    `client` is the caller's (not closed here); without one the session opens its own from `base_url` and
    `api_key` (default: the `OM_BASE_URL` and `OM_API_KEY` environment variables) and closes it in
    `aclose()` or at the end of `async with`. `resource_id` is the user or entity the thread
    belongs to (om shares resource-scoped memory across its threads; default: the thread id).
    `actor_model` names the model answering (`provider/model`), which om's token counting and cost
    figures use. `session_settings.limit` keeps the latest items of the conversation; om's memory items
    always lead (`mapping.limit_items`).
    """

    def __init__(
        self,
        session_id: str,
        client: AsyncOMClient | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        resource_id: str | None = None,
        actor_model: str | None = None,
        session_settings: SessionSettings | None = None,
    ) -> None:
        self.session_id = session_id
        self.session_settings = session_settings
        self._owned = client is None
        self._client = client if client is not None else _own_client(base_url, api_key)
        self._resource_id = resource_id
        self._actor_model = actor_model

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the client the session opened (a client the caller passed stays open)."""
        if self._owned:
            await self._client.aclose()

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """om's context for the thread as input items: memory first, then the unobserved messages."""
        turn = await self._client.post_turn(
            self.session_id,
            [],
            resource_id=self._resource_id,
            actor_model=self._actor_model,
            context="openai",
        )
        messages = turn.context.openai_messages if turn.context is not None else []
        return cast("list[TResponseInputItem]", limit_items(context_to_items(messages), limit))

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Post the items as one turn (ended when the last is the assistant's reply)."""
        messages = items_to_turn_messages(cast("list[dict[str, Any]]", items))
        if not messages:
            return
        await self._client.post_turn(
            self.session_id,
            messages,
            resource_id=self._resource_id,
            actor_model=self._actor_model,
            context="none",
        )

    async def pop_item(self) -> TResponseInputItem | None:
        """Refused: om never takes back one stored message (module docstring)."""
        raise OMSessionUnsupported(
            "om's memory keeps every stored message: pop_item cannot remove one. "
            "Use clear_session() to erase the whole thread."
        )

    async def clear_session(self) -> None:
        """Erase the thread: its messages, observations and config (a thread never written is fine)."""
        try:
            await self._client.delete_thread(self.session_id)
        except OMNotFound:
            return


def _own_client(base_url: str | None, api_key: str | None) -> AsyncOMClient:
    url = base_url or os.environ.get("OM_BASE_URL")
    if not url:
        raise ValueError("OMSession needs a client, a base_url or the OM_BASE_URL environment variable")
    return AsyncOMClient(url, api_key if api_key is not None else os.environ.get("OM_API_KEY"))
