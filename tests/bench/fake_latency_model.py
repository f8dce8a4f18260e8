"""`om-bench/latency`: a memory model that answers like the offline local model, after a set delay.

The benchmarks need a model whose cost is *waiting*, as a hosted model's is, so that what they measure is
how om overlaps and schedules model calls (blocked turns, observer throughput at worker concurrency N),
not how fast a heuristic runs. The answer is the offline model's real Observer/Reflector output
(`local_reply`), so the engine parses and stores genuine observations.

Identical prompts get the remembered answer and token usage instead of a second run of the heuristic and
the tokenizer (a bounded memo): the offline model spends real CPU on every answer, a hosted model's answer
and usage cost the caller almost none, and the throughput benchmark must measure om's work around a call,
not the stand-in's.

The delay comes from the model id or the environment:

- `om-bench/latency-2.5` waits 2.5 s (lets one deployment serve threads configured with different delays);
- `om-bench/latency` waits `OM_BENCH_MODEL_LATENCY_S` seconds (default 1.0).

It is registered with litellm as a custom provider when imported. Processes load it through their
existing plugin hooks: `OM_PLUGINS=tests.bench.fake_latency_model` for the API,
`OM_WORKER_IMPORTS=tests.bench.fake_latency_model` for workers. The wait is `time.sleep`, which releases
the GIL, like a socket read: a threads pool overlaps the calls exactly as it would overlap real HTTP calls.
"""

from __future__ import annotations

import hashlib
import threading
import time
import uuid
from collections import OrderedDict
from typing import Any

import litellm
from litellm.llms.custom_llm import CustomLLM
from litellm.types.utils import Choices, Message, ModelResponse, Usage

from om_local.extractive import local_reply
from om_local.reflector import count_tokens
from tests.bench.latency_model_ids import MODEL_PREFIX, PROVIDER, latency_of

_priced: set[str] = set()
_price_lock = threading.Lock()
_MEMO_SIZE = 512
_memo: OrderedDict[str, tuple[str, int, int]] = OrderedDict()
_memo_lock = threading.Lock()


def _reply(system: str, user: str) -> tuple[str, int, int]:
    """The answer, prompt tokens and completion tokens."""
    key = hashlib.sha256(f"{system}\x00{user}".encode("utf-8", "surrogatepass")).hexdigest()
    with _memo_lock:
        if key in _memo:
            _memo.move_to_end(key)
            return _memo[key]
    reply = local_reply(system, user)
    answer = (reply, count_tokens(system) + count_tokens(user), count_tokens(reply))
    with _memo_lock:
        _memo[key] = answer
        while len(_memo) > _MEMO_SIZE:
            _memo.popitem(last=False)
    return answer


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def _register_price(model: str) -> None:
    """A zero price, so litellm's cost lookup finds the model instead of logging a miss on every call."""
    name = f"{PROVIDER}/{model.split('/', 1)[-1]}"
    with _price_lock:
        if name in _priced:
            return
        litellm.register_model(
            {
                name: {
                    "input_cost_per_token": 0.0,
                    "output_cost_per_token": 0.0,
                    "cache_creation_input_token_cost": 0.0,
                    "cache_read_input_token_cost": 0.0,
                    "litellm_provider": PROVIDER,
                    "mode": "chat",
                    "max_input_tokens": 1_000_000,
                    "max_output_tokens": 1_000_000,
                    "max_tokens": 1_000_000,
                }
            }
        )
        _priced.add(name)


class LatencyLLM(CustomLLM):
    def completion(self, model: str, messages: list[Any], *args: Any, **kwargs: Any) -> ModelResponse:
        started = time.monotonic()
        system = "\n".join(_text(m.get("content")) for m in messages if m.get("role") == "system")
        user = "\n".join(_text(m.get("content")) for m in messages if m.get("role") == "user")
        reply, prompt_tokens, completion_tokens = _reply(system, user)
        # The delay counts from the start of the call: the model's own work is part of its latency.
        remaining = latency_of(model) - (time.monotonic() - started)
        if remaining > 0:
            time.sleep(remaining)
        _register_price(model)
        response = kwargs.get("model_response")
        if not isinstance(response, ModelResponse):
            response = ModelResponse()
        response.id = f"om-bench-{uuid.uuid4().hex}"
        response.created = int(time.time())
        response.model = f"{PROVIDER}/{model.split('/', 1)[-1]}"
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
        # Only the proxy calls models asynchronously, and never this one; a thread keeps the loop free.
        import asyncio

        return await asyncio.to_thread(self.completion, model, messages, *args, **kwargs)


def register() -> None:
    """Register the provider with litellm (idempotent; importing the module calls it)."""
    if any(entry.get("provider") == PROVIDER for entry in litellm.custom_provider_map):
        return
    litellm.custom_provider_map = [
        *litellm.custom_provider_map,
        {"provider": PROVIDER, "custom_handler": LatencyLLM()},
    ]
    _register_price(f"{PROVIDER}/{MODEL_PREFIX}")


register()
