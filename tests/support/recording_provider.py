"""`om-rec/<model>`: an in-process litellm provider that records what litellm hands it, for engine tests.

The mock boundary is litellm itself: the engine, `ModelClient` and litellm's message handling run
unchanged, and the provider keeps each call's messages, so a test sees exactly which content parts reached
a model call. It answers like the offline local model (real Observer and Reflector output).

Two models carry capability data the way an operator describes a model litellm lacks
(`litellm.register_model`): `om-rec/sighted` takes images, `om-rec/blind` does not. Any other `om-rec/...`
name has no entry, i.e. litellm knows nothing about it.
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import threading
from collections import defaultdict
from typing import Any

import litellm
from litellm.llms.custom_llm import CustomLLM
from litellm.types.utils import Choices, Message, ModelResponse, Usage

from om_local.extractive import local_reply

PROVIDER = "om-rec"
SIGHTED = f"{PROVIDER}/sighted"
BLIND = f"{PROVIDER}/blind"

_lock = threading.Lock()
_calls: dict[str, list[list[dict[str, Any]]]] = defaultdict(list)


def calls(model: str) -> list[list[dict[str, Any]]]:
    """The message lists of every call made to `model` (`om-rec/<name>`) so far, oldest first."""
    with _lock:
        return list(_calls[model.split("/", 1)[1]])


def user_content(messages: list[dict[str, Any]]) -> Any:
    """The content of the call's user message (a string or a list of content parts)."""
    return next(m["content"] for m in messages if m.get("role") == "user")


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")


class RecordingLLM(CustomLLM):
    def completion(self, model: str, messages: list[Any], *args: Any, **kwargs: Any) -> ModelResponse:
        with _lock:
            _calls[model.split("/")[-1]].append([dict(m) for m in messages])
        system = "\n".join(_text(m.get("content")) for m in messages if m.get("role") == "system")
        user = "\n".join(_text(m.get("content")) for m in messages if m.get("role") == "user")
        reply = local_reply(system, user)
        response = kwargs.get("model_response")
        if not isinstance(response, ModelResponse):
            response = ModelResponse()
        response.model = model
        response.choices = [
            Choices(finish_reason="stop", index=0, message=Message(content=reply, role="assistant"))
        ]
        response.usage = Usage(  # type: ignore[attr-defined]
            prompt_tokens=len(user) // 4, completion_tokens=len(reply) // 4, total_tokens=0
        )
        return response


def register() -> None:
    if any(entry.get("provider") == PROVIDER for entry in litellm.custom_provider_map):
        return
    litellm.custom_provider_map = [
        *litellm.custom_provider_map,
        {"provider": PROVIDER, "custom_handler": RecordingLLM()},
    ]
    common = {
        "litellm_provider": PROVIDER,
        "mode": "chat",
        "input_cost_per_token": 0.0,
        "output_cost_per_token": 0.0,
        "cache_creation_input_token_cost": 0.0,
        "cache_read_input_token_cost": 0.0,
        "max_tokens": 100_000,
    }
    litellm.register_model(
        {SIGHTED: {**common, "supports_vision": True}, BLIND: {**common, "supports_vision": False}}
    )


register()
