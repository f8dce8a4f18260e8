"""The om API client, sync (`OMClient`) and async (`AsyncOMClient`), typed with the server's own wire
models (`om_client.models`).

    from om_client import OMClient

    with OMClient("http://127.0.0.1:8088", api_key="omk_…") as om:
        turn = om.post_turn("thread-1", [{"role": "user", "text": "Hi, I'm Dana"}], resource_id="user-42")
        reply = my_model(turn.context.openai_messages)          # memory + unobserved messages
        om.post_turn("thread-1", [{"role": "assistant", "text": reply}], resource_id="user-42")
        for event in om.events("thread-1", follow=False):      # data-om-* parts, replayable
            print(event.id, event.type)

Errors raise `OMAPIError` subclasses carrying the server's `code`, `message` and `field`. Calls that got
no answer or a 429/503 are retried with backoff and jitter, honouring `Retry-After` (`om_client.retry`);
a followed event stream that drops reconnects by itself from the last event it delivered.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Literal, Self, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel

from om_client.bodies import (
    api_key_from_env,
    base_url_from_env,
    chat_body,
    webhook_create_body,
    webhook_patch_body,
    webhook_path,
    working_memory_body,
)
from om_client.errors import OMAPIError, raise_for
from om_client.messages import Message
from om_client.models import (
    ConfigResponse,
    ContextForm,
    HealthResponse,
    KeyUsageResponse,
    MessagesResponse,
    ModelList,
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
from om_client.raw import AsyncRawMethods, RawMethods, record
from om_client.retry import Attempts, RetryPolicy
from om_client.server_models import (
    ChatCompletionResponse,
    FleetResponse,
    GenerationDiffResponse,
    ResourceSummary,
    SpendResponse,
    WebhookCreated,
    WebhookDeliveries,
    WebhookInfo,
    WhoAmI,
    WorkingMemoryResponse,
)

__all__ = ["UNSET", "AsyncOMClient", "MessageInput", "OMClient", "line_sha256"]

MessageInput = TurnMessage | Message | Mapping[str, Any]
Model = TypeVar("Model", bound=BaseModel)

#: Methods whose call is safe to send twice (POSTs are marked per call).
_IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE"})


def _new_message_id() -> str:
    return f"msg-{uuid.uuid4().hex}"


def _message_body(message: MessageInput) -> dict[str, Any]:
    """The message as `/turns` takes it, with an id: one the caller gave, else a new random one (what the
    server would assign), so that sending the turn again after a failure cannot store it twice."""
    if isinstance(message, TurnMessage):
        body = message.model_dump(mode="json", by_alias=True, exclude_none=True)
        body.setdefault("id", _new_message_id())
        return body
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
    body = dict(message)
    if body.get("id") is None:
        body["id"] = _new_message_id()
    return body


def _turn_body(
    messages: Iterable[MessageInput],
    resource_id: str | None,
    actor_model: str | None,
    step_number: int,
    turn_end: bool | None,
    actor_provider_options: Mapping[str, Any] | None = None,
    context: ContextForm | None = None,
    memory_options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {"messages": [_message_body(m) for m in messages], "step_number": step_number}
    if memory_options is not None:
        body["memory_options"] = dict(memory_options)
    if context is not None:
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


def _ndjson(lines: Iterable[Mapping[str, Any] | str]) -> bytes:
    """Transfer lines as one JSON Lines body."""
    return "".join(
        (line.rstrip("\n") if isinstance(line, str) else json.dumps(line, separators=(",", ":"))) + "\n"
        for line in lines
    ).encode()


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
    """Turns SSE lines into events (`id:` cursor + `data:` JSON); `retry:` is kept as the server's
    reconnection delay, comments are skipped."""

    def __init__(self, cursor: str | None = None) -> None:
        self.data: list[str] = []
        self.cursor = cursor
        self.retry_s: float | None = None

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
        elif line.startswith("retry:") and line[6:].strip().isdigit():
            self.retry_s = int(line[6:].strip()) / 1000
        return None


class _Resume:
    """The reconnection state of one event stream: the cursor of the last event delivered (sent back as
    `Last-Event-ID`) and the retries since the last delivered event."""

    def __init__(self, policy: RetryPolicy, last_event_id: str | int | None) -> None:
        self.cursor = str(last_event_id) if last_event_id is not None else None
        self.attempts = Attempts(policy, idempotent=True)
        self.server_retry_s: float | None = None

    def headers(self) -> dict[str, str]:
        return {"Last-Event-ID": self.cursor} if self.cursor is not None else {}

    def delivered(self, event: OMEvent) -> None:
        if event.cursor is not None:
            self.cursor = event.cursor
        self.attempts.reset()

    def wait_after(self, error: Exception) -> float:
        """Seconds to wait before reconnecting (at least the server's `retry:`), or raise."""
        wait = self.attempts.next_wait(error)
        return max(wait, self.server_retry_s) if self.server_retry_s is not None else wait


class _StreamEnded(httpx.RemoteProtocolError):
    """A followed stream that the server ended (it never does unless it is shutting down): reconnect."""


def _stream_timeout(http_timeout: httpx.Timeout, follow: bool) -> httpx.Timeout:
    return httpx.Timeout(http_timeout.connect or 10.0, read=None) if follow else http_timeout


class OMClient:
    """Synchronous client. Use as a context manager, or call `close()`."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 120.0,
        headers: Mapping[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        """`base_url` defaults to `OM_BASE_URL`, else http://127.0.0.1:8088; `api_key` to `OM_API_KEY`
        (`""`: send no key). `retry`: how calls are retried (default `RetryPolicy()`;
        `RetryPolicy.off()` never retries)."""
        self.retry = retry if retry is not None else RetryPolicy()
        self._sleep: Callable[[float], None] = time.sleep
        self._http = httpx.Client(
            base_url=base_url_from_env(base_url),
            headers=_headers(api_key_from_env(api_key), headers),
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

    @property
    def with_raw_response(self) -> RawMethods:
        """The same methods, returning the HTTP answer (`om_client.raw.RawResponse`): `.parse()` gives
        what the method returns."""
        return RawMethods(self)

    def _request(self, method: str, path: str, *, idempotent: bool | None = None, **kwargs: Any) -> Any:
        """The answer's JSON (None for an empty body), after retries (`om_client.retry`)."""
        attempts = Attempts(
            self.retry, idempotent=method in _IDEMPOTENT if idempotent is None else idempotent
        )
        while True:
            try:
                response = self._http.request(method, path, **kwargs)
                raise_for(response)
                record(response)
                return response.json() if response.content else None
            except (httpx.TransportError, OMAPIError) as error:
                self._sleep(attempts.next_wait(error))

    def _call(
        self, model: type[Model], method: str, path: str, *, idempotent: bool | None = None, **kwargs: Any
    ) -> Model:
        return model.model_validate(self._request(method, path, idempotent=idempotent, **kwargs))

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
        context: ContextForm | None = None,
        memory_options: Mapping[str, Any] | None = None,
    ) -> TurnResponse:
        """Store the turn's messages; the answer carries the actor's context in `context` form. Without
        one the server answers a call that ends the turn (by default: the last message is the
        assistant's reply) with no context (`none`: `TurnResponse.context` is None) and any other with
        the chat-completions form (`openai`); `full` or `messages` adds or gives the stored messages.

        Retried like a read: every message is sent with an id (a new random one when it has none) and
        the server stores a message id once per thread however often it is posted (a stored message is
        skipped, one reused with another role is a 409), so a turn sent again stores nothing twice.
        `memory_options` choose the memory models of the work this turn starts (docs/guide/models.md)."""
        body = _turn_body(
            messages,
            resource_id,
            actor_model,
            step_number,
            turn_end,
            actor_provider_options,
            context,
            memory_options,
        )
        return self._call(TurnResponse, "POST", _thread(thread_id, "/turns"), idempotent=True, json=body)

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
        self,
        *,
        resource_id: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        q: str | None = None,
    ) -> Page[ThreadInfo]:
        """One page of this key's threads (by id), or of one resource's (oldest first); `q` keeps those
        whose id or title contains it."""
        params = _page_params(limit, cursor, resource_id=resource_id, q=q)
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
        return self._call(
            ThreadDetail, "PATCH", _thread(thread_id), idempotent=True, json=_patch_body(title, metadata)
        )

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
            ObservationEditResponse,
            "DELETE",
            _thread(thread_id, f"/observations/{line}"),
            idempotent=False,
            params=params,
        )

    def models(self) -> ModelList:
        """The actor models the proxy may call for this key (`GET /v1/models`, OpenAI's list shape)."""
        return self._call(ModelList, "GET", "/v1/models")

    def usage(self) -> KeyUsageResponse:
        """What this client's key spent on actor models through the proxy."""
        return self._call(KeyUsageResponse, "GET", "/v1/usage")

    def spend(self, *, days: int = 30, thread_id: str | None = None) -> SpendResponse:
        """What om's own models (Observer, Reflector, extractors) spent for this key's tenant, per UTC day
        and per thread per day, with the budget state (`thread_id`: that thread's only)."""
        params: dict[str, Any] = {"days": days}
        if thread_id is not None:
            params["thread"] = thread_id
        return self._call(SpendResponse, "GET", "/v1/usage/spend", params=params)

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
        return self._call(
            SearchResponse, "POST", _resource(resource_id, "/search"), idempotent=True, json=body
        )

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
        return self._call(SearchResponse, "POST", _thread(thread_id, "/search"), idempotent=True, json=body)

    def recall(self, thread_id: str, **params: Any) -> dict[str, Any]:
        """Answer a recall tool call on the thread: `params` are the call's arguments as the model wrote
        them (`mode`, `cursor`, `threadId`, `page`, `partIndex`, ...); the answer is the tool's result."""
        answer: dict[str, Any] = self._request(
            "POST", _thread(thread_id, "/recall"), idempotent=True, json=params
        )
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
        self._request("DELETE", _thread(thread_id))

    def delete_resource(self, resource_id: str) -> None:
        """Delete the resource with all its threads, its shared log and its config."""
        self._request("DELETE", _resource(resource_id))

    def export_thread(self, thread_id: str) -> Iterator[dict[str, Any]]:
        """The thread's memory as transfer lines, one dict a line, read as they stream
        (docs/guide/export-import.md)."""
        yield from self._export(_thread(thread_id, "/export"))

    def export_resource(self, resource_id: str) -> Iterator[dict[str, Any]]:
        """The resource's memory (its shared log, working memory and every thread) as transfer lines."""
        yield from self._export(_resource(resource_id, "/export"))

    def _export(self, path: str) -> Iterator[dict[str, Any]]:
        with self._http.stream("GET", path) as response:
            if response.is_error:
                response.read()
                raise_for(response)
            for line in response.iter_lines():
                if line.strip():
                    yield json.loads(line)

    def import_records(self, lines: Iterable[Mapping[str, Any] | str]) -> dict[str, Any]:
        """Import transfer lines (dicts, or JSON text lines such as an export's) into this key's tenant;
        returns the counts. Idempotent, so it is retried like a read."""
        body = _ndjson(lines)
        headers = {"Content-Type": "application/x-ndjson"}
        result: dict[str, Any] = self._request(
            "POST", "/v1/import", content=body, headers=headers, idempotent=True
        )
        return result

    def events(
        self,
        thread_id: str,
        *,
        last_event_id: str | int | None = None,
        follow: bool = True,
        resume: bool = True,
    ) -> Iterator[OMEvent]:
        """The thread's events: those the cursor has not seen (all, without one), then, if `follow`, live
        ones. Each event's `cursor` covers it and everything before it.

        A dropped connection (or a 429/503 when opening) is retried by itself: the stream reconnects with
        `Last-Event-ID` set to the last delivered event's cursor, so no event is missed or repeated; the
        wait follows the client's `RetryPolicy` (at least the server's `retry:` delay), and its budget
        starts afresh with every delivered event. With `resume=False` an error is raised at once and a
        stream the server ends simply ends; to resume later by hand, pass the last event's `cursor` as
        `last_event_id`."""
        state = _Resume(self.retry if resume else RetryPolicy.off(), last_event_id)
        params = {"follow": str(follow).lower()}
        timeout = _stream_timeout(self._http.timeout, follow)
        while True:
            try:
                with self._http.stream(
                    "GET",
                    _thread(thread_id, "/events"),
                    headers=state.headers(),
                    params=params,
                    timeout=timeout,
                ) as response:
                    if response.status_code >= 400:
                        response.read()
                        raise_for(response)
                    parser = _SSEParser(state.cursor)
                    for line in response.iter_lines():
                        event = parser.feed(line)
                        state.server_retry_s = parser.retry_s or state.server_retry_s
                        if event is not None:
                            state.delivered(event)
                            yield event
                if not follow or not resume:
                    return
                raise _StreamEnded("the server ended a followed event stream")
            except (httpx.TransportError, OMAPIError) as error:
                self._sleep(state.wait_after(error))

    # ----------------------------------------------------------------- resources, working memory

    def list_resources(
        self, *, limit: int = 50, cursor: str | None = None, q: str | None = None
    ) -> Page[ResourceSummary]:
        """One page of this key's resources by id, with their totals; `q` keeps ids containing it."""
        params = _page_params(limit, cursor, q=q)
        return self._call(Page[ResourceSummary], "GET", "/v1/resources", params=params)

    def working_memory(self, thread_id: str) -> WorkingMemoryResponse:
        """The working memory the thread's turns see (its resource's in resource scope)."""
        return self._call(WorkingMemoryResponse, "GET", _thread(thread_id, "/working-memory"))

    def set_working_memory(
        self, thread_id: str, content: str | Mapping[str, Any], *, expected_version: int | None = None
    ) -> WorkingMemoryResponse:
        """Replace it whole; with `expected_version` (the version read) an `OMConflict` when it moved on.
        Retried only without `expected_version` (a retried write that had landed would be a conflict)."""
        body = working_memory_body(content, expected_version)
        return self._call(
            WorkingMemoryResponse,
            "PUT",
            _thread(thread_id, "/working-memory"),
            idempotent=expected_version is None,
            json=body,
        )

    def resource_working_memory(self, resource_id: str) -> WorkingMemoryResponse:
        """The resource's working memory (when its config keeps working memory per resource)."""
        return self._call(WorkingMemoryResponse, "GET", _resource(resource_id, "/working-memory"))

    def set_resource_working_memory(
        self, resource_id: str, content: str | Mapping[str, Any], *, expected_version: int | None = None
    ) -> WorkingMemoryResponse:
        """`set_working_memory` for a resource's working memory."""
        body = working_memory_body(content, expected_version)
        return self._call(
            WorkingMemoryResponse,
            "PUT",
            _resource(resource_id, "/working-memory"),
            idempotent=expected_version is None,
            json=body,
        )

    def generation_diff(self, thread_id: str, generation: int) -> GenerationDiffResponse:
        """What the reflection (or line edit) that made `generation` changed, line by line."""
        return self._call(
            GenerationDiffResponse, "GET", _thread(thread_id, f"/generations/{int(generation)}/diff")
        )

    # ------------------------------------------------------------------------------- webhooks

    def create_webhook(
        self, url: str, events: Iterable[str] = ("*",), *, description: str | None = None
    ) -> WebhookCreated:
        """Register an endpoint for this key's events; the answer's `secret` is shown only this once.
        Never retried (a second call would register a second endpoint)."""
        body = webhook_create_body(url, events, description)
        return self._call(WebhookCreated, "POST", "/v1/webhooks", idempotent=False, json=body)

    def list_webhooks(self, *, limit: int = 50, cursor: str | None = None) -> Page[WebhookInfo]:
        return self._call(Page[WebhookInfo], "GET", "/v1/webhooks", params=_page_params(limit, cursor))

    def webhook(self, endpoint_id: str) -> WebhookInfo:
        return self._call(WebhookInfo, "GET", webhook_path(endpoint_id))

    def update_webhook(
        self,
        endpoint_id: str,
        *,
        url: Any = UNSET,
        events: Any = UNSET,
        description: Any = UNSET,
        enabled: Any = UNSET,
        legacy_signature: Any = UNSET,
    ) -> WebhookInfo:
        """Change the fields given (`enabled=True` also revives a dead endpoint; `legacy_signature=False`
        stops the deprecated OM-Signature header)."""
        body = webhook_patch_body(
            UNSET,
            url=url,
            events=events,
            description=description,
            enabled=enabled,
            legacy_signature=legacy_signature,
        )
        return self._call(WebhookInfo, "PATCH", webhook_path(endpoint_id), idempotent=True, json=body)

    def delete_webhook(self, endpoint_id: str) -> None:
        self._request("DELETE", webhook_path(endpoint_id))

    def rotate_webhook_secret(self, endpoint_id: str, *, keep_previous_s: int = 86_400) -> WebhookCreated:
        """A new signing secret (returned once, in `secret`); the previous one keeps signing beside it for
        `keep_previous_s` seconds, so receivers can switch without dropping a delivery."""
        body = {"keep_previous_s": keep_previous_s}
        return self._call(WebhookCreated, "POST", webhook_path(endpoint_id, "/rotate-secret"), json=body)

    def end_webhook_rotation(self, endpoint_id: str) -> WebhookInfo:
        """Stop signing with the previous secret now (every receiver has the new one)."""
        return self._call(
            WebhookInfo, "DELETE", webhook_path(endpoint_id, "/previous-secret"), idempotent=True
        )

    def webhook_deliveries(
        self, endpoint_id: str, *, limit: int = 50, cursor: str | None = None
    ) -> WebhookDeliveries:
        """The endpoint's delivery state and its last attempts, newest first."""
        params = _page_params(limit, cursor)
        return self._call(WebhookDeliveries, "GET", webhook_path(endpoint_id, "/deliveries"), params=params)

    # ------------------------------------------------------------------------ proxy, operator

    def chat_completion(
        self,
        model: str,
        messages: Iterable[Mapping[str, Any]],
        *,
        thread_id: str | None = None,
        resource_id: str | None = None,
        **params: Any,
    ) -> ChatCompletionResponse:
        """One non-streamed call of the proxy (`POST /v1/chat/completions`) with the thread's memory;
        `params` are further chat-completions fields. Not retried: the proxy stores the turn."""
        body = chat_body(model, messages, thread_id, resource_id, params)
        return self._call(ChatCompletionResponse, "POST", "/v1/chat/completions", json=body)

    def whoami(self) -> WhoAmI:
        """Who this client's key is to the server (its tenant; `auth: none` without keys)."""
        return self._call(WhoAmI, "GET", "/v1/whoami")

    def fleet(self) -> FleetResponse:
        """Queues, workers, this tenant's recent failures and usage (what the dashboard shows)."""
        return self._call(FleetResponse, "GET", "/v1/fleet")

    def metrics(self, token: str) -> str:
        """The Prometheus text of `/metrics`, read with the operator's scrape token (OM_METRICS_TOKEN),
        not the client's key."""
        response = self._http.get("/metrics", headers={"Authorization": f"Bearer {token}"})
        raise_for(response)
        record(response)
        return response.text

    def health(self) -> HealthResponse:
        return self._call(HealthResponse, "GET", "/healthz")

    def ready(self) -> ReadinessResponse:
        response = self._http.get("/readyz")
        if response.status_code not in (200, 503):
            raise_for(response)
        record(response)
        return ReadinessResponse.model_validate(response.json())


class AsyncOMClient:
    """Asynchronous client with the same methods as `OMClient` (awaitable; `events` is an async iterator)."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 120.0,
        headers: Mapping[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.retry = retry if retry is not None else RetryPolicy()
        self._sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
        self._http = httpx.AsyncClient(
            base_url=base_url_from_env(base_url),
            headers=_headers(api_key_from_env(api_key), headers),
            timeout=timeout,
            transport=transport,
            limits=httpx.Limits(keepalive_expiry=3.0),
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    @property
    def with_raw_response(self) -> AsyncRawMethods:
        """`OMClient.with_raw_response`, awaited."""
        return AsyncRawMethods(self)

    async def _request(self, method: str, path: str, *, idempotent: bool | None = None, **kwargs: Any) -> Any:
        attempts = Attempts(
            self.retry, idempotent=method in _IDEMPOTENT if idempotent is None else idempotent
        )
        while True:
            try:
                response = await self._http.request(method, path, **kwargs)
                raise_for(response)
                record(response)
                return response.json() if response.content else None
            except (httpx.TransportError, OMAPIError) as error:
                await self._sleep(attempts.next_wait(error))

    async def _call(
        self, model: type[Model], method: str, path: str, *, idempotent: bool | None = None, **kwargs: Any
    ) -> Model:
        return model.model_validate(await self._request(method, path, idempotent=idempotent, **kwargs))

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
        context: ContextForm | None = None,
        memory_options: Mapping[str, Any] | None = None,
    ) -> TurnResponse:
        """Store the turn's messages; the answer carries the actor's context in `context` form. Without
        one the server answers a call that ends the turn (by default: the last message is the
        assistant's reply) with no context (`none`: `TurnResponse.context` is None) and any other with
        the chat-completions form (`openai`); `full` or `messages` adds or gives the stored messages.

        Retried like a read: every message is sent with an id (a new random one when it has none) and
        the server stores a message id once per thread however often it is posted (a stored message is
        skipped, one reused with another role is a 409), so a turn sent again stores nothing twice.
        `memory_options` choose the memory models of the work this turn starts (docs/guide/models.md)."""
        body = _turn_body(
            messages,
            resource_id,
            actor_model,
            step_number,
            turn_end,
            actor_provider_options,
            context,
            memory_options,
        )
        return await self._call(
            TurnResponse, "POST", _thread(thread_id, "/turns"), idempotent=True, json=body
        )

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
        self,
        *,
        resource_id: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        q: str | None = None,
    ) -> Page[ThreadInfo]:
        params = _page_params(limit, cursor, resource_id=resource_id, q=q)
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
        return await self._call(
            ThreadDetail, "PATCH", _thread(thread_id), idempotent=True, json=_patch_body(title, metadata)
        )

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
            ObservationEditResponse,
            "DELETE",
            _thread(thread_id, f"/observations/{line}"),
            idempotent=False,
            params=params,
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
        return await self._call(
            SearchResponse, "POST", _resource(resource_id, "/search"), idempotent=True, json=body
        )

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
        return await self._call(
            SearchResponse, "POST", _thread(thread_id, "/search"), idempotent=True, json=body
        )

    async def models(self) -> ModelList:
        """`OMClient.models`, awaited."""
        return await self._call(ModelList, "GET", "/v1/models")

    async def usage(self) -> KeyUsageResponse:
        """What this client's key spent on actor models through the proxy."""
        return await self._call(KeyUsageResponse, "GET", "/v1/usage")

    async def spend(self, *, days: int = 30, thread_id: str | None = None) -> SpendResponse:
        """What om's own models (Observer, Reflector, extractors) spent for this key's tenant, per UTC day
        and per thread per day, with the budget state (`thread_id`: that thread's only)."""
        params: dict[str, Any] = {"days": days}
        if thread_id is not None:
            params["thread"] = thread_id
        return await self._call(SpendResponse, "GET", "/v1/usage/spend", params=params)

    async def recall(self, thread_id: str, **params: Any) -> dict[str, Any]:
        """`OMClient.recall`, awaited."""
        answer: dict[str, Any] = await self._request(
            "POST", _thread(thread_id, "/recall"), idempotent=True, json=params
        )
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
        await self._request("DELETE", _thread(thread_id))

    async def delete_resource(self, resource_id: str) -> None:
        """Delete the resource with all its threads, its shared log and its config."""
        await self._request("DELETE", _resource(resource_id))

    async def export_thread(self, thread_id: str) -> AsyncIterator[dict[str, Any]]:
        """`OMClient.export_thread` as an async iterator."""
        async for line in self._export(_thread(thread_id, "/export")):
            yield line

    async def export_resource(self, resource_id: str) -> AsyncIterator[dict[str, Any]]:
        """`OMClient.export_resource` as an async iterator."""
        async for line in self._export(_resource(resource_id, "/export")):
            yield line

    async def _export(self, path: str) -> AsyncIterator[dict[str, Any]]:
        async with self._http.stream("GET", path) as response:
            if response.is_error:
                await response.aread()
                raise_for(response)
            async for line in response.aiter_lines():
                if line.strip():
                    yield json.loads(line)

    async def import_records(self, lines: Iterable[Mapping[str, Any] | str]) -> dict[str, Any]:
        """`OMClient.import_records`."""
        headers = {"Content-Type": "application/x-ndjson"}
        result: dict[str, Any] = await self._request(
            "POST", "/v1/import", content=_ndjson(lines), headers=headers, idempotent=True
        )
        return result

    async def events(
        self,
        thread_id: str,
        *,
        last_event_id: str | int | None = None,
        follow: bool = True,
        resume: bool = True,
    ) -> AsyncIterator[OMEvent]:
        """`OMClient.events` as an async iterator (the same resume after a dropped connection)."""
        state = _Resume(self.retry if resume else RetryPolicy.off(), last_event_id)
        params = {"follow": str(follow).lower()}
        timeout = _stream_timeout(self._http.timeout, follow)
        while True:
            try:
                async with self._http.stream(
                    "GET",
                    _thread(thread_id, "/events"),
                    headers=state.headers(),
                    params=params,
                    timeout=timeout,
                ) as response:
                    if response.status_code >= 400:
                        await response.aread()
                        raise_for(response)
                    parser = _SSEParser(state.cursor)
                    async for line in response.aiter_lines():
                        event = parser.feed(line)
                        state.server_retry_s = parser.retry_s or state.server_retry_s
                        if event is not None:
                            state.delivered(event)
                            yield event
                if not follow or not resume:
                    return
                raise _StreamEnded("the server ended a followed event stream")
            except (httpx.TransportError, OMAPIError) as error:
                await self._sleep(state.wait_after(error))

    # ----------------------------------------------------------------- resources, working memory

    async def list_resources(
        self, *, limit: int = 50, cursor: str | None = None, q: str | None = None
    ) -> Page[ResourceSummary]:
        """One page of this key's resources by id, with their totals; `q` keeps ids containing it."""
        params = _page_params(limit, cursor, q=q)
        return await self._call(Page[ResourceSummary], "GET", "/v1/resources", params=params)

    async def working_memory(self, thread_id: str) -> WorkingMemoryResponse:
        """The working memory the thread's turns see (its resource's in resource scope)."""
        return await self._call(WorkingMemoryResponse, "GET", _thread(thread_id, "/working-memory"))

    async def set_working_memory(
        self, thread_id: str, content: str | Mapping[str, Any], *, expected_version: int | None = None
    ) -> WorkingMemoryResponse:
        """Replace it whole; with `expected_version` (the version read) an `OMConflict` when it moved on.
        Retried only without `expected_version` (a retried write that had landed would be a conflict)."""
        body = working_memory_body(content, expected_version)
        return await self._call(
            WorkingMemoryResponse,
            "PUT",
            _thread(thread_id, "/working-memory"),
            idempotent=expected_version is None,
            json=body,
        )

    async def resource_working_memory(self, resource_id: str) -> WorkingMemoryResponse:
        """The resource's working memory (when its config keeps working memory per resource)."""
        return await self._call(WorkingMemoryResponse, "GET", _resource(resource_id, "/working-memory"))

    async def set_resource_working_memory(
        self, resource_id: str, content: str | Mapping[str, Any], *, expected_version: int | None = None
    ) -> WorkingMemoryResponse:
        """`set_working_memory` for a resource's working memory."""
        body = working_memory_body(content, expected_version)
        return await self._call(
            WorkingMemoryResponse,
            "PUT",
            _resource(resource_id, "/working-memory"),
            idempotent=expected_version is None,
            json=body,
        )

    async def generation_diff(self, thread_id: str, generation: int) -> GenerationDiffResponse:
        """What the reflection (or line edit) that made `generation` changed, line by line."""
        return await self._call(
            GenerationDiffResponse, "GET", _thread(thread_id, f"/generations/{int(generation)}/diff")
        )

    # ------------------------------------------------------------------------------- webhooks

    async def create_webhook(
        self, url: str, events: Iterable[str] = ("*",), *, description: str | None = None
    ) -> WebhookCreated:
        """Register an endpoint for this key's events; the answer's `secret` is shown only this once.
        Never retried (a second call would register a second endpoint)."""
        body = webhook_create_body(url, events, description)
        return await self._call(WebhookCreated, "POST", "/v1/webhooks", idempotent=False, json=body)

    async def list_webhooks(self, *, limit: int = 50, cursor: str | None = None) -> Page[WebhookInfo]:
        return await self._call(Page[WebhookInfo], "GET", "/v1/webhooks", params=_page_params(limit, cursor))

    async def webhook(self, endpoint_id: str) -> WebhookInfo:
        return await self._call(WebhookInfo, "GET", webhook_path(endpoint_id))

    async def update_webhook(
        self,
        endpoint_id: str,
        *,
        url: Any = UNSET,
        events: Any = UNSET,
        description: Any = UNSET,
        enabled: Any = UNSET,
        legacy_signature: Any = UNSET,
    ) -> WebhookInfo:
        """Change the fields given (`enabled=True` also revives a dead endpoint; `legacy_signature=False`
        stops the deprecated OM-Signature header)."""
        body = webhook_patch_body(
            UNSET,
            url=url,
            events=events,
            description=description,
            enabled=enabled,
            legacy_signature=legacy_signature,
        )
        return await self._call(WebhookInfo, "PATCH", webhook_path(endpoint_id), idempotent=True, json=body)

    async def delete_webhook(self, endpoint_id: str) -> None:
        await self._request("DELETE", webhook_path(endpoint_id))

    async def rotate_webhook_secret(
        self, endpoint_id: str, *, keep_previous_s: int = 86_400
    ) -> WebhookCreated:
        """A new signing secret (returned once, in `secret`); the previous one keeps signing beside it for
        `keep_previous_s` seconds, so receivers can switch without dropping a delivery."""
        body = {"keep_previous_s": keep_previous_s}
        path = webhook_path(endpoint_id, "/rotate-secret")
        return await self._call(WebhookCreated, "POST", path, json=body)

    async def end_webhook_rotation(self, endpoint_id: str) -> WebhookInfo:
        """Stop signing with the previous secret now (every receiver has the new one)."""
        return await self._call(
            WebhookInfo, "DELETE", webhook_path(endpoint_id, "/previous-secret"), idempotent=True
        )

    async def webhook_deliveries(
        self, endpoint_id: str, *, limit: int = 50, cursor: str | None = None
    ) -> WebhookDeliveries:
        """The endpoint's delivery state and its last attempts, newest first."""
        params = _page_params(limit, cursor)
        return await self._call(
            WebhookDeliveries, "GET", webhook_path(endpoint_id, "/deliveries"), params=params
        )

    # ------------------------------------------------------------------------ proxy, operator

    async def chat_completion(
        self,
        model: str,
        messages: Iterable[Mapping[str, Any]],
        *,
        thread_id: str | None = None,
        resource_id: str | None = None,
        **params: Any,
    ) -> ChatCompletionResponse:
        """One non-streamed call of the proxy (`POST /v1/chat/completions`) with the thread's memory;
        `params` are further chat-completions fields. Not retried: the proxy stores the turn."""
        body = chat_body(model, messages, thread_id, resource_id, params)
        return await self._call(ChatCompletionResponse, "POST", "/v1/chat/completions", json=body)

    async def whoami(self) -> WhoAmI:
        """Who this client's key is to the server (its tenant; `auth: none` without keys)."""
        return await self._call(WhoAmI, "GET", "/v1/whoami")

    async def fleet(self) -> FleetResponse:
        """Queues, workers, this tenant's recent failures and usage (what the dashboard shows)."""
        return await self._call(FleetResponse, "GET", "/v1/fleet")

    async def metrics(self, token: str) -> str:
        """The Prometheus text of `/metrics`, read with the operator's scrape token (OM_METRICS_TOKEN),
        not the client's key."""
        response = await self._http.get("/metrics", headers={"Authorization": f"Bearer {token}"})
        raise_for(response)
        record(response)
        return response.text

    async def health(self) -> HealthResponse:
        return await self._call(HealthResponse, "GET", "/healthz")

    async def ready(self) -> ReadinessResponse:
        response = await self._http.get("/readyz")
        if response.status_code not in (200, 503):
            raise_for(response)
        record(response)
        return ReadinessResponse.model_validate(response.json())
