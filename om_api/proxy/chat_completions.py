"""`POST /v1/chat/completions`: an OpenAI-compatible endpoint that adds long-term memory to any chat.

A chat backend that already speaks OpenAI changes its base URL and sends the thread id (header
`X-OM-Thread-Id` or `metadata.thread_id`; the resource from `X-OM-Resource-Id`, `metadata.resource_id`
or `user`). Each request is one turn, exactly like `/turns`:

1. the conversation's new messages are stored (ids come from a hash chain over the conversation, so the
   history a client sends again is not stored twice; see `om_api.openai_format`);
2. the model gets the caller's instructions, then the memory, then the unobserved messages (the observed
   ones are replaced by the observation log);
3. the actor model is called through litellm with the request's OpenAI parameters that are on the
   allow-list of `om_api.proxy.params` (every other field is refused with 422 before anything is stored:
   no request field can choose the host, key, headers, timeout or retries of the call), if the model is
   one `om_core.models.allowlist` allows;
4. the call's tokens and cost are counted for the caller's tenant (`/metrics`) and API key (`/v1/usage`);
5. the reply is stored as the turn's assistant message and returned in the standard shape (streamed when
   `stream` is true; a stream the client abandons is neither stored nor metered).

When the thread's config turns `retrieval` on (or a working memory its actor manages), step 3 is a loop:
the model is offered the `recall` tool (and `updateWorkingMemory`; `om_api.proxy.tools`), the proxy
answers the model's calls of them and calls it again, at most `OM_PROXY_TOOL_ROUNDS` rounds, and step 4
counts every call (`_Loop` states the rules).
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Header
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from om_api.auth import Caller, Principal, Runtime
from om_api.errors import ApiError
from om_api.openai_format import SPEAKER_ROLES, from_openai, split_instructions, to_openai
from om_api.proxy.actor_usage import meter, reported_cost, usage_of
from om_api.proxy.params import call_stream_options, client_wants_usage, forwarded_params
from om_api.proxy.tools import InternalTools, answered_round, memory_tools_for, round_call, summed_usage
from om_api.routes import models
from om_api.routes.common import errors
from om_api.routes.threads import ingest
from om_api.runtime import ApiRuntime
from om_api.schemas import ID_PATTERN, ChatCompletionRequest, ChatCompletionResponse, find_unstorable
from om_core import Message, TurnResult
from om_core.errors import public_text
from om_core.messages import speaker_name_problem
from om_core.models import allowlist
from om_core.tenancy.scoped_ids import PublicId, scoped_id

log = logging.getLogger("om.api.proxy")

router = APIRouter(tags=["proxy"])
# GET /v1/models, the model list OpenAI-compatible front-ends ask the base URL for, is served with the proxy.
router.include_router(models.router)


def _ids(
    body: ChatCompletionRequest, thread_header: str | None, resource_header: str | None
) -> tuple[str, str | None]:
    metadata = body.metadata or {}
    thread_id = thread_header or metadata.get("thread_id") or metadata.get("threadId")
    resource_id = resource_header or metadata.get("resource_id") or metadata.get("resourceId")
    if resource_id is None and body.user and re.match(ID_PATTERN, body.user):
        resource_id = body.user  # OpenAI's end-user id names the resource when nothing else does
    if not isinstance(thread_id, str) or not thread_id:
        raise ApiError(
            422,
            "thread_id_required",
            "say which conversation this is: send the header X-OM-Thread-Id or metadata.thread_id",
            field="metadata.thread_id",
        )
    for name, value in (("metadata.thread_id", thread_id), ("metadata.resource_id", resource_id)):
        if value is not None and (not isinstance(value, str) or not re.match(ID_PATTERN, value)):
            raise ApiError(
                422,
                "invalid_id",
                f"{name} must be 1-255 characters of letters, digits and ._:@+=~-",
                field=name,
            )
    return thread_id, resource_id if isinstance(resource_id, str) else None


def _check(body: ChatCompletionRequest, runtime: ApiRuntime, conversation: list[Message]) -> None:
    settings = runtime.settings
    refused = allowlist.refusal(settings.actor_model_patterns(), body.model)
    if refused is not None:
        raise ApiError(422, "model_not_allowed", refused, field="model")
    for index, message in enumerate(body.messages):
        where = find_unstorable(message.model_dump(exclude_none=True))
        if where is not None:
            raise ApiError(
                422,
                "unstorable_value",
                f"messages[{index}].{where} holds a NUL or an unpaired surrogate",
                field=f"messages[{index}]",
            )
        problem = speaker_name_problem(message.name) if message.role in SPEAKER_ROLES else None
        if message.name is not None and problem is not None:
            raise ApiError(
                422,
                "invalid_speaker_name",
                f"messages[{index}].name (who wrote the message) {problem}",
                field=f"messages[{index}].name",
            )
    for stored in conversation:
        size = len(stored.model_dump_json(exclude_none=True).encode())
        if size > settings.max_message_bytes:
            raise ApiError(
                413,
                "message_too_large",
                f"a message is {size} bytes; the limit is {settings.max_message_bytes} bytes "
                "(OM_MAX_MESSAGE_BYTES)",
                field="messages",
                limit=settings.max_message_bytes,
            )


def _model_error(model: str, exc: Exception) -> ApiError:
    """litellm's failures as API errors: the caller's mistakes 4xx, the provider's 502/429/504. The message
    names the error's class and HTTP status (`public_text`), never the provider's words: its body, the URL
    it was called at; those go to the server's log."""
    from litellm import exceptions as llm

    detail = public_text(exc, context=f"proxy call to {model}")
    if isinstance(exc, llm.RateLimitError):
        return ApiError(429, "actor_rate_limited", f"model {model} is rate limited: {detail}")
    if isinstance(exc, llm.Timeout):
        return ApiError(504, "actor_timeout", f"model {model} did not answer in time: {detail}")
    if isinstance(exc, llm.AuthenticationError | llm.PermissionDeniedError):
        return ApiError(502, "actor_unavailable", f"the server cannot call {model}: {detail}")
    if isinstance(exc, llm.BadRequestError | llm.NotFoundError | llm.UnprocessableEntityError):
        return ApiError(400, "actor_request_refused", f"model {model} refused the request: {detail}")
    return ApiError(502, "actor_failed", f"model {model} failed: {type(exc).__name__}: {detail}")


def _headers(result: TurnResult, thread_id: str) -> dict[str, str]:
    return {
        "X-OM-Thread-Id": thread_id,
        "X-OM-Record-Id": result.record_id,
        "X-OM-Blocked": str(result.blocked).lower(),
        "X-OM-Degraded": str(result.degraded).lower(),
    }


def _reply_message(
    conversation: list[dict[str, Any]], reply: Mapping[str, Any], now: datetime
) -> Message | None:
    """The assistant reply as a stored message whose id continues the conversation's hash chain, so the
    client sending it back next time maps to the same message."""
    stored = from_openai([*conversation, dict(reply)], created_at=now)
    last = stored[-1] if stored else None
    return last if last is not None and last.role == "assistant" else None


async def _store_reply(
    runtime: ApiRuntime,
    caller_tenant: str | None,
    thread_id: str,
    resource_id: str | None,
    conversation: list[dict[str, Any]],
    reply: Mapping[str, Any],
    model: str,
) -> None:
    message = _reply_message(conversation, reply, datetime.now(UTC))
    if message is None:
        return
    await run_in_threadpool(
        ingest, runtime, caller_tenant, thread_id, resource_id, [message], actor_model=model, turn_end=True
    )


def _reply_of(response: Any) -> dict[str, Any]:
    choice = (getattr(response, "choices", None) or [None])[0]
    message = getattr(choice, "message", None)
    reply: dict[str, Any] = {"role": "assistant", "content": getattr(message, "content", None)}
    calls = getattr(message, "tool_calls", None)
    if calls:
        reply["tool_calls"] = [c.model_dump() if hasattr(c, "model_dump") else dict(c) for c in calls]
    return reply


def _ingest_turn(
    runtime: ApiRuntime,
    tenant_id: str | None,
    thread_id: str,
    resource_id: str | None,
    stored: list[Message],
    model: str,
    may_offer: bool,
) -> tuple[TurnResult, str, InternalTools | None]:
    """The turn (as `/turns` stores it), then the proxy's own tools for the thread: its config is read
    after the turn, which creates the thread (with its resource's config) when it is new."""
    result, resource = ingest(
        runtime, tenant_id, thread_id, resource_id, stored, actor_model=model, turn_end=False
    )
    if not may_offer:
        return result, resource, None
    stored_id = scoped_id(tenant_id, PublicId(thread_id))
    tools = memory_tools_for(runtime.engine, stored_id, runtime.engine.thread_config(stored_id))
    return result, resource, tools


def _may_offer(params: Mapping[str, Any], rounds: int) -> bool:
    """Whether the loop can run at all: it follows one conversation (`n` of 1) in the `tools` API (the
    deprecated `functions` cannot be mixed with `tools`), and `OM_PROXY_TOOL_ROUNDS` allows a round."""
    return rounds > 0 and params.get("n") in (None, 1) and params.get("functions") is None


def _check_conflict(params: Mapping[str, Any], tools: InternalTools) -> None:
    found = tools.conflict(params.get("tools") or [])
    if found is not None:
        index, name = found
        raise ApiError(
            400,
            "tool_name_reserved",
            f"tools[{index}] is named {name!r}, the memory tool this proxy answers itself for this thread "
            "(retrieval, or a working memory the actor manages, is on): rename your tool, or turn that "
            "option off in the thread's config",
            field=f"tools[{index}]",
        )


@router.post(
    "/v1/chat/completions",
    response_model=ChatCompletionResponse,
    responses={
        200: {"content": {"text/event-stream": {"schema": {"type": "string"}}}},
        **errors(400, 401, 404, 409, 413, 422, 429, 502, 503, 504),
    },
    summary="OpenAI-compatible chat completions with memory",
)
async def chat_completions(
    body: ChatCompletionRequest,
    runtime: Runtime,
    caller: Caller,
    x_om_thread_id: Annotated[
        str | None, Header(alias="X-OM-Thread-Id", pattern=ID_PATTERN, max_length=255)
    ] = None,
    x_om_resource_id: Annotated[
        str | None, Header(alias="X-OM-Resource-Id", pattern=ID_PATTERN, max_length=255)
    ] = None,
) -> Any:
    params = forwarded_params(body.model_extra or {})
    thread_id, resource_id = _ids(body, x_om_thread_id, x_om_resource_id)
    raw_messages = [m.model_dump(exclude_none=True) for m in body.messages]
    instructions, conversation = split_instructions(raw_messages)
    now = datetime.now(UTC)
    stored = from_openai(conversation, created_at=now)
    _check(body, runtime, stored)
    result, resource, tools = await run_in_threadpool(
        _ingest_turn,
        runtime,
        caller.tenant_id,
        thread_id,
        resource_id,
        stored,
        body.model,
        _may_offer(params, runtime.settings.proxy_tool_rounds),
    )
    if tools is not None:
        _check_conflict(params, tools)
    messages = result.context.to_openai_messages(instructions + to_openai(result.messages))
    call: dict[str, Any] = {
        **params,
        "model": body.model,
        "messages": messages,
        "timeout": runtime.settings.proxy_timeout_s,
        "stream": body.stream,
    }
    if body.user is not None:
        call["user"] = body.user
    if body.stream:
        call["stream_options"] = call_stream_options(params.get("stream_options"))
    loop = _Loop(
        runtime,
        caller,
        body.model,
        call,
        tools,
        runtime.settings.proxy_tool_rounds,
        client_wants_usage(params.get("stream_options")),
    )
    headers = _headers(result, thread_id)

    async def store(reply: Mapping[str, Any]) -> None:
        await _store_reply(runtime, caller.tenant_id, thread_id, resource, conversation, reply, body.model)

    if not body.stream:
        payload, reply = await loop.complete()
        await store(reply)
        return JSONResponse(payload, headers=headers)
    first = await loop.open_stream()
    return StreamingResponse(loop.events(first, store), media_type="text/event-stream", headers=headers)


def _sse(data: Mapping[str, Any]) -> str:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"


def _error_event(model: str, exc: Exception) -> str:
    error = _model_error(model, exc)
    return _sse({"error": {"code": error.code, "message": error.message}})


class _Loop:
    """The actor calls of one proxy request: one call when the thread has no internal tools (the reply
    passes through as the model gave it), else the recall tool loop.

    The loop's rules (README, "The recall tool loop"):

    - a reply whose tool calls are all ours (`recall`) is answered by the proxy: the assistant message and
      one tool message per call are appended and the model is called again, at most `limit` rounds; the
      call after the last round offers no recall (see `proxy_tools.round_call`), so the model answers;
    - a reply with any caller tool call goes back to the caller with our calls removed: the caller must
      answer every call of the assistant message it gets, and it cannot answer ours. The model may call
      recall again on the next request, after the caller's results;
    - the caller gets the text of every round (rounds joined by a blank line; streamed as it comes) and
      the last reply's caller tool calls; `usage` is the sum over the rounds, and each call is metered
      when it answers (the provider bills every round).

    What is stored is exactly what the caller got: its messages and this final reply. The recall rounds
    (our calls and their results) are not stored: the results are the thread's own past messages, already
    in memory, so storing them would keep a second copy the Observer would then record again as if it
    were said today (wrong dates for old facts), and can be large; and a stored reply that differed from
    the one the caller sends back next time would not hash to the same message id and be stored twice.
    """

    def __init__(
        self,
        runtime: ApiRuntime,
        caller: Principal,
        model: str,
        call: dict[str, Any],
        tools: InternalTools | None,
        limit: int,
        wants_usage: bool,
    ) -> None:
        self.runtime = runtime
        self.caller = caller
        self.model = model
        self.call = call
        self.tools = tools
        self.limit = limit
        self.wants_usage = wants_usage
        self.messages: list[dict[str, Any]] = list(call["messages"])
        self.rounds = 0
        self.usages: list[Mapping[str, Any] | None] = []

    @property
    def offer(self) -> bool:
        """Whether the next call offers our tools: rounds remain."""
        return self.tools is not None and self.rounds < self.limit

    async def _acompletion(self) -> Any:
        import litellm

        try:
            return await litellm.acompletion(
                **round_call(self.call, self.messages, self.tools, offer=self.offer)
            )
        except Exception as exc:
            raise _model_error(self.model, exc) from exc

    async def _meter(self, usage: Mapping[str, Any] | None, cost: float | None) -> None:
        self.usages.append(usage)
        await meter(self.runtime, self.caller, self.model, usage_of(self.model, usage, cost))

    def _recall_round(self, calls: list[dict[str, Any]]) -> bool:
        """Whether this reply is a round the proxy answers (then its calls are run next)."""
        if self.tools is None or not self.offer or not calls:
            return False
        ours, theirs = self.tools.split(calls)
        return bool(ours) and not theirs

    async def _answer(self, content: str | None, calls: list[dict[str, Any]]) -> None:
        """Run our calls (each blocking, on a worker thread) and append the round to the conversation."""
        assert self.tools is not None
        ours, _theirs = self.tools.split(calls)
        results = [
            await run_in_threadpool(
                self.tools.call, _function(call).get("name") or "", _function(call).get("arguments") or ""
            )
            for call in ours
        ]
        self.messages.extend(answered_round(content, ours, results))
        self.rounds += 1

    # ------------------------------------------------------------------------------------ not streamed

    async def complete(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """(the response body, the reply to store)."""
        texts: list[str] = []
        while True:
            response = await self._acompletion()
            payload: dict[str, Any] = response.model_dump(exclude_none=False)
            payload["model"] = self.model
            await self._meter(payload.get("usage"), reported_cost(response))
            reply = _reply_of(response)
            if self.tools is None:
                return payload, reply
            calls = list(reply.get("tool_calls") or [])
            if isinstance(reply.get("content"), str) and reply["content"]:
                texts.append(reply["content"])
            if self._recall_round(calls):
                await self._answer(reply.get("content"), calls)
                continue
            _ours, theirs = self.tools.split(calls)
            return self._final(payload, "\n\n".join(texts) or None, theirs)

    def _final(
        self, payload: dict[str, Any], content: str | None, calls: list[dict[str, Any]]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        reply: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            reply["tool_calls"] = calls
        choices = payload.get("choices") or []
        if choices:
            message = dict(choices[0].get("message") or {})
            message.update(role="assistant", content=content, tool_calls=calls or None)
            choices[0]["message"] = message
            if not calls and choices[0].get("finish_reason") == "tool_calls":
                choices[0]["finish_reason"] = "stop"
        if len(self.usages) > 1:
            payload["usage"] = summed_usage(self.usages)
        return payload, reply

    # ---------------------------------------------------------------------------------------- streamed

    async def open_stream(self) -> Any:
        """The first call, made before the response starts, so its failure is an HTTP error."""
        return await self._acompletion()

    async def events(
        self, stream: Any, store: Callable[[Mapping[str, Any]], Awaitable[None]]
    ) -> AsyncIterator[str]:
        if self.tools is None:
            async for event in self._passthrough(stream, store):
                yield event
            return
        shown = _Shown()
        while True:
            content: list[str] = []
            calls: dict[int, dict[str, Any]] = {}
            usage: dict[str, Any] | None = None
            finish: str | None = None
            shown.new_round()
            try:
                async for chunk in stream:
                    data = chunk.model_dump(exclude_none=True)
                    data["model"] = self.model
                    _collect(data, content, calls)
                    usage = data.get("usage") or usage
                    finish = _finish_reason(data) or finish
                    live = shown.live(data)
                    if live is not None:
                        yield _sse(live)
            except Exception as exc:
                yield _error_event(self.model, exc)
                yield "data: [DONE]\n\n"
                return
            await self._meter(usage, None)
            text = "".join(content) or None
            round_calls = [calls[i] for i in sorted(calls)]
            if self._recall_round(round_calls):
                await self._answer(text, round_calls)
                try:
                    stream = await self._acompletion()
                except ApiError as error:
                    yield _sse({"error": {"code": error.code, "message": error.message}})
                    yield "data: [DONE]\n\n"
                    return
                continue
            _ours, theirs = self.tools.split(round_calls)
            total = summed_usage(self.usages) if self.wants_usage else None
            for tail_chunk in shown.tail(theirs, finish, total):
                yield _sse(tail_chunk)
            reply: dict[str, Any] = {"role": "assistant", "content": shown.text() or None}
            if theirs:
                reply["tool_calls"] = theirs
            await store(reply)
            yield "data: [DONE]\n\n"
            return

    async def _passthrough(
        self, stream: Any, store: Callable[[Mapping[str, Any]], Awaitable[None]]
    ) -> AsyncIterator[str]:
        """One call, its chunks passed on as the model sent them (the usage chunk only when asked for)."""
        content: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        usage: dict[str, Any] | None = None
        try:
            async for chunk in stream:
                data = chunk.model_dump(exclude_none=True)
                data["model"] = self.model
                _collect(data, content, calls)
                usage = data.get("usage") or usage
                if not self.wants_usage and data.pop("usage", None) is not None and not data.get("choices"):
                    continue  # the usage chunk the server asked for to meter the call, not the caller
                yield _sse(data)
        except Exception as exc:
            yield _error_event(self.model, exc)
            yield "data: [DONE]\n\n"
            return
        reply: dict[str, Any] = {"role": "assistant", "content": "".join(content) or None}
        if calls:
            reply["tool_calls"] = [calls[i] for i in sorted(calls)]
        await self._meter(usage, None)
        await store(reply)
        yield "data: [DONE]\n\n"


class _Shown:
    """What the caller of a streamed tool loop has been sent: every round's text as it comes (a blank line
    before a later round's first text), under the first chunk's id and timestamp; tool-call fragments,
    finish reasons and usage are held back to the end (`tail`), where the caller's calls, the final
    finish reason and the summed usage are sent complete."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.id: str | None = None
        self.created: int | None = None
        self.role_sent = False
        self.separate = False
        self.base: dict[str, Any] = {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
        }

    def new_round(self) -> None:
        self.separate = bool(self.sent)

    def text(self) -> str:
        return "".join(self.sent)

    def _choice(self, raw: Mapping[str, Any]) -> dict[str, Any] | None:
        choice = {k: v for k, v in raw.items() if k != "finish_reason"}
        delta = {k: v for k, v in (raw.get("delta") or {}).items() if k != "tool_calls"}
        if self.role_sent:
            delta.pop("role", None)
        text = delta.get("content")
        if isinstance(text, str) and text:
            if self.separate:
                text, self.separate = "\n\n" + text, False
            delta["content"] = text
            self.sent.append(text)
        elif "role" not in delta:
            delta.pop("content", None)
        if not delta and not choice.get("logprobs"):
            return None
        self.role_sent = self.role_sent or "role" in delta
        choice["delta"] = delta
        return choice

    def live(self, data: Mapping[str, Any]) -> dict[str, Any] | None:
        """The chunk to send now for one chunk of the model, or None when nothing of it is for now."""
        if self.id is None and data.get("id"):
            self.id, self.created = str(data["id"]), data.get("created")
            self.base = {
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": data.get("model"),
            }
        choices = [c for c in (self._choice(raw) for raw in data.get("choices") or []) if c is not None]
        if not choices:
            return None
        out = {k: v for k, v in data.items() if k != "usage"}
        out.update(self.base, choices=choices)
        return out

    def tail(
        self, calls: list[dict[str, Any]], finish: str | None, usage: dict[str, int] | None
    ) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        if calls:
            entries = [{"index": i, **call} for i, call in enumerate(calls)]
            delta: dict[str, Any] = {"tool_calls": entries}
            if not self.role_sent:
                delta["role"] = "assistant"
                self.role_sent = True
            events.append({**self.base, "choices": [{"index": 0, "delta": delta}]})
        if finish is None or (finish == "tool_calls" and not calls):
            finish = "tool_calls" if calls else "stop"
        events.append({**self.base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        if usage is not None:
            events.append({**self.base, "choices": [], "usage": usage})
        return events


def _function(call: Mapping[str, Any]) -> dict[str, Any]:
    function = call.get("function")
    return dict(function) if isinstance(function, Mapping) else {}


def _finish_reason(chunk: Mapping[str, Any]) -> str | None:
    for choice in chunk.get("choices") or []:
        if choice.get("finish_reason"):
            return str(choice["finish_reason"])
    return None


def _collect(chunk: Mapping[str, Any], content: list[str], calls: dict[int, dict[str, Any]]) -> None:
    """Accumulate a streamed reply (text and tool-call fragments) to store it once the stream ends."""
    for choice in chunk.get("choices") or []:
        delta = choice.get("delta") or {}
        if isinstance(delta.get("content"), str):
            content.append(delta["content"])
        for fragment in delta.get("tool_calls") or []:
            index = int(fragment.get("index") or 0)
            call = calls.setdefault(
                index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
            )
            if fragment.get("id"):
                call["id"] = fragment["id"]
            function = fragment.get("function") or {}
            if function.get("name"):
                call["function"]["name"] = function["name"]
            if function.get("arguments"):
                call["function"]["arguments"] += function["arguments"]
