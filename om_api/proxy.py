"""`POST /v1/chat/completions`: an OpenAI-compatible endpoint that adds long-term memory to any chat.

A chat backend that already speaks OpenAI changes its base URL and sends the thread id (header
`X-OM-Thread-Id` or `metadata.thread_id`; the resource from `X-OM-Resource-Id`, `metadata.resource_id`
or `user`). Each request is one turn, exactly like `/turns`:

1. the conversation's new messages are stored (ids come from a hash chain over the conversation, so the
   history a client sends again is not stored twice; see `om_api.openai_format`);
2. the model gets the caller's instructions, then the memory, then the unobserved messages (the observed
   ones are replaced by the observation log);
3. the actor model is called through litellm with the request's OpenAI parameters that are on the
   allow-list of `om_api.proxy_params` (every other field is refused with 422 before anything is stored:
   no request field can choose the host, key, headers, timeout or retries of the call), if the model is
   one `om_api.actor_models` allows;
4. the call's tokens and cost are counted for the caller's tenant (`/metrics`) and API key (`/v1/usage`);
5. the reply is stored as the turn's assistant message and returned in the standard shape (streamed when
   `stream` is true; a stream the client abandons is neither stored nor metered).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Header
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from om_api import actor_models
from om_api.actor_usage import meter, reported_cost, usage_of
from om_api.auth import Caller, Runtime
from om_api.errors import ApiError
from om_api.openai_format import from_openai, split_instructions, to_openai
from om_api.proxy_params import call_stream_options, client_wants_usage, forwarded_params
from om_api.routes.common import errors
from om_api.routes.threads import ingest
from om_api.runtime import ApiRuntime
from om_api.schemas import ID_PATTERN, ChatCompletionRequest, ChatCompletionResponse, find_unstorable
from om_core import Message, TurnResult

log = logging.getLogger("om.api.proxy")

router = APIRouter(tags=["proxy"])


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
    refused = actor_models.refusal(settings.actor_model_patterns(), body.model)
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
    """litellm's failures as API errors: the caller's mistakes 4xx, the provider's 502/429/504."""
    from litellm import exceptions as llm

    detail = str(exc).splitlines()[0][:500] if str(exc) else type(exc).__name__
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
    import litellm

    params = forwarded_params(body.model_extra or {})
    thread_id, resource_id = _ids(body, x_om_thread_id, x_om_resource_id)
    raw_messages = [m.model_dump(exclude_none=True) for m in body.messages]
    instructions, conversation = split_instructions(raw_messages)
    now = datetime.now(UTC)
    stored = from_openai(conversation, created_at=now)
    _check(body, runtime, stored)
    result, resource = await run_in_threadpool(
        ingest,
        runtime,
        caller.tenant_id,
        thread_id,
        resource_id,
        stored,
        actor_model=body.model,
        turn_end=False,
    )
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
    headers = _headers(result, thread_id)
    try:
        response = await litellm.acompletion(**call)
    except Exception as exc:
        raise _model_error(body.model, exc) from exc

    if not body.stream:
        payload = response.model_dump(exclude_none=False)
        payload["model"] = body.model
        await meter(
            runtime, caller, body.model, usage_of(body.model, payload.get("usage"), reported_cost(response))
        )
        await _store_reply(
            runtime, caller.tenant_id, thread_id, resource, conversation, _reply_of(response), body.model
        )
        return JSONResponse(payload, headers=headers)

    wants_usage = client_wants_usage(params.get("stream_options"))

    async def events() -> AsyncIterator[str]:
        content: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        usage: dict[str, Any] | None = None
        try:
            async for chunk in response:
                data = chunk.model_dump(exclude_none=True)
                data["model"] = body.model
                _collect(data, content, calls)
                usage = data.get("usage") or usage
                if not wants_usage and data.pop("usage", None) is not None and not data.get("choices"):
                    continue  # the usage chunk the server asked for to meter the call, not the caller
                yield f"data: {json.dumps(data, ensure_ascii=False)}\n\n"
        except Exception as exc:
            error = _model_error(body.model, exc)
            yield f"data: {json.dumps({'error': {'code': error.code, 'message': error.message}})}\n\n"
            yield "data: [DONE]\n\n"
            return
        reply: dict[str, Any] = {"role": "assistant", "content": "".join(content) or None}
        if calls:
            reply["tool_calls"] = [calls[i] for i in sorted(calls)]
        await meter(runtime, caller, body.model, usage_of(body.model, usage, None))
        await _store_reply(runtime, caller.tenant_id, thread_id, resource, conversation, reply, body.model)
        yield "data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream", headers=headers)


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
