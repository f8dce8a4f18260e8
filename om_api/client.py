"""Python client for the om API, sync (`OMClient`) and async (`AsyncOMClient`), typed with the server's
own schemas.

    from om_api.client import OMClient

    with OMClient("http://127.0.0.1:8088", api_key="omk_…") as om:
        turn = om.post_turn("thread-1", [{"role": "user", "text": "Hi, I'm Dana"}], resource_id="user-42")
        reply = my_model(turn.context.openai_messages)          # memory + unobserved messages
        om.post_turn("thread-1", [{"role": "assistant", "text": reply}], resource_id="user-42")
        for event in om.events("thread-1", follow=False):      # data-om-* parts, replayable
            print(event.id, event.type)

Errors raise `OMAPIError` subclasses carrying the server's `code`, `message` and `field`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Literal, Self, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel

from om_api.schemas import (
    ConfigResponse,
    ContextForm,
    HealthResponse,
    KeyUsageResponse,
    MessagesResponse,
    ObservationEditResponse,
    ObservationsResponse,
    OMEvent,
    OperationResponse,
    Page,
    ReadinessResponse,
    ResourceConfigResponse,
    SearchResponse,
    StatusPayload,
    ThreadDetail,
    ThreadInfo,
    ThreadsResponse,
    TurnMessage,
    TurnResponse,
)
from om_core import Message

__all__ = [
    "UNSET",
    "AsyncOMClient",
    "MessageInput",
    "OMAPIError",
    "OMBadRequest",
    "OMClient",
    "OMConflict",
    "OMNotFound",
    "OMPayloadTooLarge",
    "OMUnauthorized",
    "OMUnavailable",
    "line_sha256",
]

MessageInput = TurnMessage | Message | Mapping[str, Any]
Model = TypeVar("Model", bound=BaseModel)


class OMAPIError(Exception):
    """An error answer of the API: `status`, and the body's `code`, `message`, `field` and `limit`."""

    def __init__(
        self, status: int, code: str, message: str, field: str | None = None, limit: int | None = None
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.limit = limit


class OMBadRequest(OMAPIError):
    """400/422: a field is invalid (`field` names it)."""


class OMUnauthorized(OMAPIError):
    """401: missing, unknown or revoked API key."""


class OMNotFound(OMAPIError):
    """404: the thread or resource does not exist for this key."""


class OMConflict(OMAPIError):
    """409: the request conflicts with stored data (a message id reused with another role...)."""


class OMPayloadTooLarge(OMAPIError):
    """413: a message or the request is over a limit (`limit` says which)."""


class OMUnavailable(OMAPIError):
    """503: the database or broker is down. A broker outage stores nothing; a database outage may cut a
    turn part-way, so retry with the same message ids (a stored message is not stored twice)."""


_ERRORS: dict[int, type[OMAPIError]] = {
    400: OMBadRequest,
    401: OMUnauthorized,
    404: OMNotFound,
    409: OMConflict,
    413: OMPayloadTooLarge,
    422: OMBadRequest,
    503: OMUnavailable,
}


def _raise_for(response: httpx.Response) -> None:
    if response.status_code < 400:
        return
    try:
        detail = response.json().get("error", {})
    except (ValueError, AttributeError):
        detail = {}
    error_type = _ERRORS.get(response.status_code, OMAPIError)
    raise error_type(
        response.status_code,
        str(detail.get("code", "error")),
        str(detail.get("message", response.text[:500])),
        detail.get("field"),
        detail.get("limit"),
    )


def _message_body(message: MessageInput) -> dict[str, Any]:
    if isinstance(message, TurnMessage):
        return message.model_dump(mode="json", by_alias=True, exclude_none=True)
    if isinstance(message, Message):
        parts = [
            p.model_dump(mode="json", by_alias=True, exclude_none=True, exclude={"seq"})
            for p in message.parts
        ]
        return {
            "id": message.id,
            "role": message.role,
            "parts": parts,
            "created_at": message.created_at.isoformat(),
            "metadata": message.metadata,
        }
    return dict(message)


def _turn_body(
    messages: Iterable[MessageInput],
    resource_id: str | None,
    actor_model: str | None,
    step_number: int,
    turn_end: bool | None,
    actor_provider_options: Mapping[str, Any] | None = None,
    context: ContextForm = "full",
) -> dict[str, Any]:
    body: dict[str, Any] = {"messages": [_message_body(m) for m in messages], "step_number": step_number}
    if context != "full":
        body["context"] = context
    if actor_provider_options is not None:
        body["actor_provider_options"] = dict(actor_provider_options)
    if resource_id is not None:
        body["resource_id"] = resource_id
    if actor_model is not None:
        body["actor_model"] = actor_model
    if turn_end is not None:
        body["turn_end"] = turn_end
    return body


def _thread(thread_id: str, tail: str = "") -> str:
    return f"/v1/threads/{quote(thread_id, safe='')}{tail}"


def _resource(resource_id: str, tail: str = "") -> str:
    return f"/v1/resources/{quote(resource_id, safe='')}{tail}"


def _search_body(
    query: str,
    limit: int,
    thread_ids: Sequence[str] | None,
    after: datetime | None,
    before: datetime | None,
    kinds: Sequence[Literal["group", "message"]] | None,
) -> dict[str, Any]:
    body: dict[str, Any] = {"query": query, "limit": limit}
    if thread_ids is not None:
        body["thread_ids"] = list(thread_ids)
    if after is not None:
        body["after"] = after.isoformat()
    if before is not None:
        body["before"] = before.isoformat()
    if kinds is not None:
        body["kinds"] = list(kinds)
    return body


class _Unset:
    """A field not sent (distinct from None, which a PATCH sends as null to clear the field)."""


UNSET: Any = _Unset()


def _page_params(limit: int, cursor: str | None, **extra: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"limit": limit, **{k: v for k, v in extra.items() if v is not None}}
    if cursor is not None:
        params["cursor"] = cursor
    return params


def _patch_body(title: Any, metadata: Any) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if title is not UNSET:
        body["title"] = title
    if metadata is not UNSET:
        body["metadata"] = dict(metadata) if metadata is not None else None
    return body


def line_sha256(line: str) -> str:
    """The precondition of an observation line edit: SHA-256 (hex) of the line's text as read."""
    return hashlib.sha256(line.encode()).hexdigest()


def _headers(api_key: str | None, extra: Mapping[str, str] | None) -> dict[str, str]:
    headers = dict(extra or {})
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


class _SSEParser:
    """Turns SSE lines into events (`id:` cursor + `data:` JSON); comments and `retry:` are skipped."""

    def __init__(self) -> None:
        self.data: list[str] = []
        self.cursor: str | None = None

    def feed(self, line: str) -> OMEvent | None:
        if line == "":
            if not self.data:
                return None
            payload, self.data = "\n".join(self.data), []
            event = OMEvent.model_validate(json.loads(payload))
            return event.model_copy(update={"cursor": self.cursor})
        if line.startswith("data:"):
            self.data.append(line[5:].removeprefix(" "))
        elif line.startswith("id:"):
            self.cursor = line[3:].removeprefix(" ")
        return None


class OMClient:
    """Synchronous client. Use as a context manager, or call `close()`."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout: float = 120.0,
        headers: Mapping[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._http = httpx.Client(
            base_url=base_url,
            headers=_headers(api_key, headers),
            timeout=timeout,
            transport=transport,
            # uvicorn closes a keep-alive connection idle for 5 s; reusing one at that moment is a reset
            # request, so the client lets idle connections go first.
            limits=httpx.Limits(keepalive_expiry=3.0),
        )

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _call(self, model: type[Model], method: str, path: str, **kwargs: Any) -> Model:
        response = self._http.request(method, path, **kwargs)
        _raise_for(response)
        return model.model_validate(response.json())

    def post_turn(
        self,
        thread_id: str,
        messages: Iterable[MessageInput],
        *,
        resource_id: str | None = None,
        actor_model: str | None = None,
        step_number: int = 0,
        turn_end: bool | None = None,
        actor_provider_options: Mapping[str, Any] | None = None,
        context: ContextForm = "full",
    ) -> TurnResponse:
        """Store the turn's messages; the answer carries the actor's context in `context` form (`none`
        for a call whose answer will not go to the model, such as posting the assistant's reply)."""
        body = _turn_body(
            messages, resource_id, actor_model, step_number, turn_end, actor_provider_options, context
        )
        return self._call(TurnResponse, "POST", _thread(thread_id, "/turns"), json=body)

    def status(self, thread_id: str) -> StatusPayload:
        return self._call(StatusPayload, "GET", _thread(thread_id, "/status"))

    def observations(
        self, thread_id: str, *, history_limit: int = 20, history_offset: int = 0
    ) -> ObservationsResponse:
        params = {"history_limit": history_limit, "history_offset": history_offset}
        return self._call(ObservationsResponse, "GET", _thread(thread_id, "/observations"), params=params)

    def messages(
        self, thread_id: str, *, limit: int = 50, before_seq: int | None = None, cursor: str | None = None
    ) -> MessagesResponse:
        """One page of messages, newest page first: pass the page's `next_cursor` as `cursor` for the
        older one (`before_seq` is the older way to say the same)."""
        params = _page_params(limit, cursor, before_seq=before_seq)
        return self._call(MessagesResponse, "GET", _thread(thread_id, "/messages"), params=params)

    def threads(self, resource_id: str, *, limit: int = 50, cursor: str | None = None) -> ThreadsResponse:
        """One page of the resource's threads, oldest first (`next_cursor` for the next page)."""
        params = _page_params(limit, cursor)
        return self._call(ThreadsResponse, "GET", _resource(resource_id, "/threads"), params=params)

    def list_threads(
        self, *, resource_id: str | None = None, limit: int = 50, cursor: str | None = None
    ) -> Page[ThreadInfo]:
        """One page of this key's threads (by id), or of one resource's (oldest first)."""
        params = _page_params(limit, cursor, resource_id=resource_id)
        return self._call(Page[ThreadInfo], "GET", "/v1/threads", params=params)

    def iter_threads(self, *, resource_id: str | None = None, page_size: int = 100) -> Iterator[ThreadInfo]:
        """Every thread of `list_threads`, page after page."""
        cursor: str | None = None
        while True:
            page = self.list_threads(resource_id=resource_id, limit=page_size, cursor=cursor)
            yield from page.items
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def thread(self, thread_id: str) -> ThreadDetail:
        """The thread with its title, metadata and counts."""
        return self._call(ThreadDetail, "GET", _thread(thread_id))

    def update_thread(self, thread_id: str, *, title: Any = UNSET, metadata: Any = UNSET) -> ThreadDetail:
        """Set the title and/or the caller's metadata (None clears one; one left out is kept)."""
        return self._call(ThreadDetail, "PATCH", _thread(thread_id), json=_patch_body(title, metadata))

    def edit_observation(
        self, thread_id: str, line: int, text: str, *, expected: str
    ) -> ObservationEditResponse:
        """Replace line `line` (0-based, of `active.observations`) whose text you read as `expected`; an
        `OMConflict` when the log changed since."""
        body = {"text": text, "expected_sha256": line_sha256(expected)}
        return self._call(
            ObservationEditResponse, "PATCH", _thread(thread_id, f"/observations/{line}"), json=body
        )

    def delete_observation(self, thread_id: str, line: int, *, expected: str) -> ObservationEditResponse:
        """Forget line `line` (read as `expected`): gone from the log and every copy of its memory."""
        params = {"expected_sha256": line_sha256(expected)}
        return self._call(
            ObservationEditResponse, "DELETE", _thread(thread_id, f"/observations/{line}"), params=params
        )

    def usage(self) -> KeyUsageResponse:
        """What this client's key spent on actor models through the proxy."""
        return self._call(KeyUsageResponse, "GET", "/v1/usage")

    def search(
        self,
        resource_id: str,
        query: str,
        *,
        limit: int = 10,
        thread_ids: Sequence[str] | None = None,
        after: datetime | None = None,
        before: datetime | None = None,
        kinds: Sequence[Literal["group", "message"]] | None = None,
    ) -> SearchResponse:
        """Search the resource's raw messages and observation groups (its config needs `retrieval`)."""
        body = _search_body(query, limit, thread_ids, after, before, kinds)
        return self._call(SearchResponse, "POST", _resource(resource_id, "/search"), json=body)

    def search_thread(
        self,
        thread_id: str,
        query: str,
        *,
        limit: int = 10,
        after: datetime | None = None,
        before: datetime | None = None,
        kinds: Sequence[Literal["group", "message"]] | None = None,
    ) -> SearchResponse:
        """Search one thread's raw messages and observation groups."""
        body = _search_body(query, limit, None, after, before, kinds)
        return self._call(SearchResponse, "POST", _thread(thread_id, "/search"), json=body)

    def recall(self, thread_id: str, **params: Any) -> dict[str, Any]:
        """Answer a recall tool call on the thread: `params` are the call's arguments as the model wrote
        them (`mode`, `cursor`, `threadId`, `page`, `partIndex`, ...); the answer is the tool's result."""
        response = self._http.post(_thread(thread_id, "/recall"), json=params)
        _raise_for(response)
        answer: dict[str, Any] = response.json()
        return answer

    def observe(self, thread_id: str, *, wait: bool = True) -> OperationResponse:
        return self._call(OperationResponse, "POST", _thread(thread_id, "/observe"), json={"wait": wait})

    def reflect(self, thread_id: str, *, prompt: str | None = None, wait: bool = True) -> OperationResponse:
        body: dict[str, Any] = {"wait": wait}
        if prompt is not None:
            body["prompt"] = prompt
        return self._call(OperationResponse, "POST", _thread(thread_id, "/reflect"), json=body)

    def get_config(self, thread_id: str) -> ConfigResponse:
        return self._call(ConfigResponse, "GET", _thread(thread_id, "/config"))

    def set_config(
        self, thread_id: str, overrides: Mapping[str, Any] | None, *, resource_id: str | None = None
    ) -> ConfigResponse:
        body: dict[str, Any] = {"overrides": dict(overrides) if overrides is not None else None}
        if resource_id is not None:
            body["resource_id"] = resource_id
        return self._call(ConfigResponse, "PUT", _thread(thread_id, "/config"), json=body)

    def get_resource_config(self, resource_id: str) -> ResourceConfigResponse:
        return self._call(ResourceConfigResponse, "GET", _resource(resource_id, "/config"))

    def set_resource_config(
        self, resource_id: str, overrides: Mapping[str, Any] | None
    ) -> ResourceConfigResponse:
        """Overrides for every thread of the resource (a thread's own are merged over them)."""
        body = {"overrides": dict(overrides) if overrides is not None else None}
        return self._call(ResourceConfigResponse, "PUT", _resource(resource_id, "/config"), json=body)

    def delete_thread(self, thread_id: str) -> None:
        _raise_for(self._http.delete(_thread(thread_id)))

    def delete_resource(self, resource_id: str) -> None:
        """Delete the resource with all its threads, its shared log and its config."""
        _raise_for(self._http.delete(_resource(resource_id)))

    def events(
        self, thread_id: str, *, last_event_id: str | int | None = None, follow: bool = True
    ) -> Iterator[OMEvent]:
        """The thread's events: those the cursor has not seen (all, without one), then, if `follow`, live
        ones. Resume after a disconnect with the `cursor` of the last event handled."""
        headers = {"Last-Event-ID": str(last_event_id)} if last_event_id is not None else {}
        params = {"follow": str(follow).lower()}
        timeout = (
            httpx.Timeout(self._http.timeout.connect or 10.0, read=None) if follow else self._http.timeout
        )
        with self._http.stream(
            "GET", _thread(thread_id, "/events"), headers=headers, params=params, timeout=timeout
        ) as response:
            if response.status_code >= 400:
                response.read()
                _raise_for(response)
            parser = _SSEParser()
            for line in response.iter_lines():
                event = parser.feed(line)
                if event is not None:
                    yield event

    def health(self) -> HealthResponse:
        return self._call(HealthResponse, "GET", "/healthz")

    def ready(self) -> ReadinessResponse:
        response = self._http.get("/readyz")
        if response.status_code not in (200, 503):
            _raise_for(response)
        return ReadinessResponse.model_validate(response.json())


class AsyncOMClient:
    """Asynchronous client with the same methods as `OMClient` (awaitable; `events` is an async iterator)."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout: float = 120.0,
        headers: Mapping[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._http = httpx.AsyncClient(
            base_url=base_url, headers=_headers(api_key, headers), timeout=timeout, transport=transport
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _call(self, model: type[Model], method: str, path: str, **kwargs: Any) -> Model:
        response = await self._http.request(method, path, **kwargs)
        _raise_for(response)
        return model.model_validate(response.json())

    async def post_turn(
        self,
        thread_id: str,
        messages: Iterable[MessageInput],
        *,
        resource_id: str | None = None,
        actor_model: str | None = None,
        step_number: int = 0,
        turn_end: bool | None = None,
        actor_provider_options: Mapping[str, Any] | None = None,
        context: ContextForm = "full",
    ) -> TurnResponse:
        """Store the turn's messages; the answer carries the actor's context in `context` form (`none`
        for a call whose answer will not go to the model, such as posting the assistant's reply)."""
        body = _turn_body(
            messages, resource_id, actor_model, step_number, turn_end, actor_provider_options, context
        )
        return await self._call(TurnResponse, "POST", _thread(thread_id, "/turns"), json=body)

    async def status(self, thread_id: str) -> StatusPayload:
        return await self._call(StatusPayload, "GET", _thread(thread_id, "/status"))

    async def observations(
        self, thread_id: str, *, history_limit: int = 20, history_offset: int = 0
    ) -> ObservationsResponse:
        params = {"history_limit": history_limit, "history_offset": history_offset}
        return await self._call(
            ObservationsResponse, "GET", _thread(thread_id, "/observations"), params=params
        )

    async def messages(
        self, thread_id: str, *, limit: int = 50, before_seq: int | None = None, cursor: str | None = None
    ) -> MessagesResponse:
        params = _page_params(limit, cursor, before_seq=before_seq)
        return await self._call(MessagesResponse, "GET", _thread(thread_id, "/messages"), params=params)

    async def threads(
        self, resource_id: str, *, limit: int = 50, cursor: str | None = None
    ) -> ThreadsResponse:
        params = _page_params(limit, cursor)
        return await self._call(ThreadsResponse, "GET", _resource(resource_id, "/threads"), params=params)

    async def list_threads(
        self, *, resource_id: str | None = None, limit: int = 50, cursor: str | None = None
    ) -> Page[ThreadInfo]:
        params = _page_params(limit, cursor, resource_id=resource_id)
        return await self._call(Page[ThreadInfo], "GET", "/v1/threads", params=params)

    async def iter_threads(
        self, *, resource_id: str | None = None, page_size: int = 100
    ) -> AsyncIterator[ThreadInfo]:
        cursor: str | None = None
        while True:
            page = await self.list_threads(resource_id=resource_id, limit=page_size, cursor=cursor)
            for item in page.items:
                yield item
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def thread(self, thread_id: str) -> ThreadDetail:
        return await self._call(ThreadDetail, "GET", _thread(thread_id))

    async def update_thread(
        self, thread_id: str, *, title: Any = UNSET, metadata: Any = UNSET
    ) -> ThreadDetail:
        return await self._call(ThreadDetail, "PATCH", _thread(thread_id), json=_patch_body(title, metadata))

    async def edit_observation(
        self, thread_id: str, line: int, text: str, *, expected: str
    ) -> ObservationEditResponse:
        body = {"text": text, "expected_sha256": line_sha256(expected)}
        return await self._call(
            ObservationEditResponse, "PATCH", _thread(thread_id, f"/observations/{line}"), json=body
        )

    async def delete_observation(
        self, thread_id: str, line: int, *, expected: str
    ) -> ObservationEditResponse:
        params = {"expected_sha256": line_sha256(expected)}
        return await self._call(
            ObservationEditResponse, "DELETE", _thread(thread_id, f"/observations/{line}"), params=params
        )

    async def search(
        self,
        resource_id: str,
        query: str,
        *,
        limit: int = 10,
        thread_ids: Sequence[str] | None = None,
        after: datetime | None = None,
        before: datetime | None = None,
        kinds: Sequence[Literal["group", "message"]] | None = None,
    ) -> SearchResponse:
        """Search the resource's raw messages and observation groups (its config needs `retrieval`)."""
        body = _search_body(query, limit, thread_ids, after, before, kinds)
        return await self._call(SearchResponse, "POST", _resource(resource_id, "/search"), json=body)

    async def search_thread(
        self,
        thread_id: str,
        query: str,
        *,
        limit: int = 10,
        after: datetime | None = None,
        before: datetime | None = None,
        kinds: Sequence[Literal["group", "message"]] | None = None,
    ) -> SearchResponse:
        """Search one thread's raw messages and observation groups."""
        body = _search_body(query, limit, None, after, before, kinds)
        return await self._call(SearchResponse, "POST", _thread(thread_id, "/search"), json=body)

    async def usage(self) -> KeyUsageResponse:
        """What this client's key spent on actor models through the proxy."""
        return await self._call(KeyUsageResponse, "GET", "/v1/usage")

    async def recall(self, thread_id: str, **params: Any) -> dict[str, Any]:
        """`OMClient.recall`, awaited."""
        response = await self._http.post(_thread(thread_id, "/recall"), json=params)
        _raise_for(response)
        answer: dict[str, Any] = response.json()
        return answer

    async def observe(self, thread_id: str, *, wait: bool = True) -> OperationResponse:
        return await self._call(
            OperationResponse, "POST", _thread(thread_id, "/observe"), json={"wait": wait}
        )

    async def reflect(
        self, thread_id: str, *, prompt: str | None = None, wait: bool = True
    ) -> OperationResponse:
        body: dict[str, Any] = {"wait": wait}
        if prompt is not None:
            body["prompt"] = prompt
        return await self._call(OperationResponse, "POST", _thread(thread_id, "/reflect"), json=body)

    async def get_config(self, thread_id: str) -> ConfigResponse:
        return await self._call(ConfigResponse, "GET", _thread(thread_id, "/config"))

    async def set_config(
        self, thread_id: str, overrides: Mapping[str, Any] | None, *, resource_id: str | None = None
    ) -> ConfigResponse:
        body: dict[str, Any] = {"overrides": dict(overrides) if overrides is not None else None}
        if resource_id is not None:
            body["resource_id"] = resource_id
        return await self._call(ConfigResponse, "PUT", _thread(thread_id, "/config"), json=body)

    async def get_resource_config(self, resource_id: str) -> ResourceConfigResponse:
        return await self._call(ResourceConfigResponse, "GET", _resource(resource_id, "/config"))

    async def set_resource_config(
        self, resource_id: str, overrides: Mapping[str, Any] | None
    ) -> ResourceConfigResponse:
        """Overrides for every thread of the resource (a thread's own are merged over them)."""
        body = {"overrides": dict(overrides) if overrides is not None else None}
        return await self._call(ResourceConfigResponse, "PUT", _resource(resource_id, "/config"), json=body)

    async def delete_thread(self, thread_id: str) -> None:
        _raise_for(await self._http.delete(_thread(thread_id)))

    async def delete_resource(self, resource_id: str) -> None:
        """Delete the resource with all its threads, its shared log and its config."""
        _raise_for(await self._http.delete(_resource(resource_id)))

    async def events(
        self, thread_id: str, *, last_event_id: str | int | None = None, follow: bool = True
    ) -> AsyncIterator[OMEvent]:
        headers = {"Last-Event-ID": str(last_event_id)} if last_event_id is not None else {}
        params = {"follow": str(follow).lower()}
        timeout = (
            httpx.Timeout(self._http.timeout.connect or 10.0, read=None) if follow else self._http.timeout
        )
        async with self._http.stream(
            "GET", _thread(thread_id, "/events"), headers=headers, params=params, timeout=timeout
        ) as response:
            if response.status_code >= 400:
                await response.aread()
                _raise_for(response)
            parser = _SSEParser()
            async for line in response.aiter_lines():
                event = parser.feed(line)
                if event is not None:
                    yield event

    async def health(self) -> HealthResponse:
        return await self._call(HealthResponse, "GET", "/healthz")

    async def ready(self) -> ReadinessResponse:
        response = await self._http.get("/readyz")
        if response.status_code not in (200, 503):
            _raise_for(response)
        return ReadinessResponse.model_validate(response.json())
