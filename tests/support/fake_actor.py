"""`om-actor/echo`: a fake chat (actor) model behind litellm, for the proxy tests.

Imported inside the API server process through `OM_PLUGINS=tests.support.fake_actor`, it registers a
litellm custom provider, so the proxy's real call path (litellm.acompletion, streaming, usage) runs with
no network. Each call appends the messages it received to the JSON-lines file named by
`OM_FAKE_ACTOR_LOG`, so a test can see exactly what context the actor got. The reply names the latest user
message and what the context held, in a fixed shape a test can parse.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import litellm
from litellm.llms.custom_llm import CustomLLM
from litellm.types.utils import Choices, GenericStreamingChunk, Message, ModelResponse, Usage

PROVIDER = "om-actor"
_lock = threading.Lock()


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def reply_for(messages: list[dict[str, Any]]) -> str:
    users = [
        m for m in messages if m.get("role") == "user" and "<system-reminder>" not in _text(m.get("content"))
    ]
    last = _text(users[-1].get("content")) if users else ""
    memory = any("<observations>" in _text(m.get("content")) for m in messages if m.get("role") == "system")
    chat = sum(1 for m in messages if m.get("role") != "system")
    return f"Noted: {' '.join(last.split()[:12])} [memory={'yes' if memory else 'no'} chat={chat}]"


def _record(messages: list[dict[str, Any]]) -> None:
    path = os.environ.get("OM_FAKE_ACTOR_LOG")
    if not path:
        return
    with _lock, open(path, "a", encoding="utf-8") as log:
        log.write(json.dumps({"messages": messages}, default=str) + "\n")


def _answer(messages: list[Any]) -> tuple[str, int, int]:
    plain = [dict(m) for m in messages]
    _record(plain)
    reply = reply_for(plain)
    prompt_tokens = sum(len(_text(m.get("content")).split()) for m in plain)
    return reply, prompt_tokens, len(reply.split())


class FakeEcho(CustomLLM):
    def completion(self, model: str, messages: list[Any], *args: Any, **kwargs: Any) -> ModelResponse:
        reply, prompt_tokens, completion_tokens = _answer(messages)
        response = kwargs.get("model_response")
        if not isinstance(response, ModelResponse):
            response = ModelResponse()
        response.id = f"fake-{uuid.uuid4().hex}"
        response.created = int(time.time())
        response.model = f"{PROVIDER}/{model}"
        response.choices = [
            Choices(finish_reason="stop", index=0, message=Message(content=reply, role="assistant"))
        ]
        response.usage = Usage(  # type: ignore[attr-defined]
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            total_tokens=prompt_tokens + completion_tokens,
        )
        return response

    async def acompletion(self, model: str, messages: list[Any], *args: Any, **kwargs: Any) -> ModelResponse:
        return self.completion(model, messages, *args, **kwargs)

    def _chunks(self, messages: list[Any]) -> list[GenericStreamingChunk]:
        reply, prompt_tokens, completion_tokens = _answer(messages)
        words = reply.split(" ")
        pieces = [w + (" " if i < len(words) - 1 else "") for i, w in enumerate(words)]
        chunks: list[GenericStreamingChunk] = []
        for i, piece in enumerate(pieces):
            last = i == len(pieces) - 1
            chunks.append(
                GenericStreamingChunk(
                    text=piece,
                    is_finished=last,
                    finish_reason="stop" if last else "",
                    usage={
                        "prompt_tokens": prompt_tokens,
                        "completion_tokens": completion_tokens,
                        "total_tokens": prompt_tokens + completion_tokens,
                    }
                    if last
                    else None,
                    index=0,
                    tool_use=None,
                )
            )
        return chunks

    def streaming(
        self, model: str, messages: list[Any], *args: Any, **kwargs: Any
    ) -> Iterator[GenericStreamingChunk]:
        yield from self._chunks(messages)

    async def astreaming(  # type: ignore[override]
        self, model: str, messages: list[Any], *args: Any, **kwargs: Any
    ) -> AsyncIterator[GenericStreamingChunk]:
        for chunk in self._chunks(messages):
            yield chunk


def register() -> None:
    if any(entry.get("provider") == PROVIDER for entry in litellm.custom_provider_map):
        return
    litellm.custom_provider_map = [
        *litellm.custom_provider_map,
        {"provider": PROVIDER, "custom_handler": FakeEcho()},
    ]
    litellm.register_model(
        {
            f"{PROVIDER}/echo": {
                "input_cost_per_token": 0.000001,
                "output_cost_per_token": 0.000002,
                "litellm_provider": PROVIDER,
                "mode": "chat",
                "max_input_tokens": 1_000_000,
                "max_output_tokens": 100_000,
                "max_tokens": 100_000,
            }
        }
    )


register()
