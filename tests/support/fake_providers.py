"""A scriptable fake model provider registered with litellm (`om-fake/<namespace>`), for worker tests.

The mock boundary is litellm itself: the engine, `ModelClient`, its retry policy and the workers run
unchanged, and litellm dispatches `om-fake/...` to this handler like any custom provider. Worker
processes load it through `OM_WORKER_IMPORTS=tests.support.fake_providers`.

A test scripts the behaviour per namespace in Redis (`OM_REDIS_URL`): each call pops the next action from
`om:fake:<ns>:script` (falling back to `om:fake:<ns>:default`, then "ok") and appends a record of itself
(pid, time, action) to `om:fake:<ns>:calls` *before* acting, so a test can see a call start and, say,
kill or stop the process making it. Actions:

- `ok`: answer like the offline local model (real Observer/Reflector output);
- `sleep:<s>`: wait `s` seconds, then answer;
- `ratelimit`: raise litellm's `RateLimitError` (HTTP 429);
- `degenerate`: a repetition loop, which the Observer parser rejects;
- `junk`: text without any of the expected sections;
- `kill`: SIGKILL the calling process (a poison task).
"""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any

import litellm
import redis
from litellm.exceptions import RateLimitError
from litellm.llms.custom_llm import CustomLLM
from litellm.types.utils import Choices, Message, ModelResponse, Usage

from om_local.extractive import local_reply
from om_local.reflector import count_tokens

PROVIDER = "om-fake"
#: Prices registered for every fake model, so cost accounting shows up on events.
INPUT_COST_PER_TOKEN = 1e-6
OUTPUT_COST_PER_TOKEN = 2e-6


def script_key(namespace: str) -> str:
    return f"om:fake:{namespace}:script"


def default_key(namespace: str) -> str:
    return f"om:fake:{namespace}:default"


def calls_key(namespace: str) -> str:
    return f"om:fake:{namespace}:calls"


def _redis() -> redis.Redis:
    return redis.Redis.from_url(os.environ.get("OM_REDIS_URL") or os.environ["OM_TEST_REDIS_URL"])


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def _next_action(client: redis.Redis, namespace: str) -> str:
    raw = client.lpop(script_key(namespace)) or client.get(default_key(namespace)) or b"ok"
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def _register_price(model: str) -> None:
    name = f"{PROVIDER}/{model}"
    if name in litellm.model_cost:
        return
    litellm.register_model(
        {
            name: {
                "input_cost_per_token": INPUT_COST_PER_TOKEN,
                "output_cost_per_token": OUTPUT_COST_PER_TOKEN,
                "litellm_provider": PROVIDER,
                "mode": "chat",
                "max_input_tokens": 1_000_000,
                "max_output_tokens": 1_000_000,
                "max_tokens": 1_000_000,
            }
        }
    )


class ScriptedLLM(CustomLLM):
    def completion(self, model: str, messages: list[Any], *args: Any, **kwargs: Any) -> ModelResponse:
        namespace = model.split("/")[-1]
        client = _redis()
        action = _next_action(client, namespace)
        client.rpush(
            calls_key(namespace), json.dumps({"pid": os.getpid(), "at": time.time(), "action": action})
        )
        system = "\n".join(_text(m.get("content")) for m in messages if m.get("role") == "system")
        user = "\n".join(_text(m.get("content")) for m in messages if m.get("role") == "user")
        if action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if action.startswith("sleep:"):
            time.sleep(float(action.split(":", 1)[1]))
        if action == "ratelimit":
            raise RateLimitError(
                message="fake provider: too many requests", llm_provider=PROVIDER, model=model
            )
        if action == "degenerate":
            reply = "<observations>\n" + "\n".join(["* 🔴 (09:00) the loop goes on and on"] * 400)
        elif action == "junk":
            reply = "qwx zzv !!! ### ~~~ (no sections at all)"
        else:
            reply = local_reply(system, user)
        _register_price(model)
        response = kwargs.get("model_response")
        if not isinstance(response, ModelResponse):
            response = ModelResponse()
        response.model = f"{PROVIDER}/{model}"
        response.choices = [
            Choices(finish_reason="stop", index=0, message=Message(content=reply, role="assistant"))
        ]
        prompt_tokens, completion_tokens = count_tokens(system) + count_tokens(user), count_tokens(reply)
        response.usage = Usage(  # type: ignore[attr-defined]
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            total_tokens=prompt_tokens + completion_tokens,
        )
        return response


def register() -> None:
    if not any(entry.get("provider") == PROVIDER for entry in litellm.custom_provider_map):
        litellm.custom_provider_map = [
            *litellm.custom_provider_map,
            {"provider": PROVIDER, "custom_handler": ScriptedLLM()},
        ]


register()
