"""`om-trace/<key>`: the fuzz's traceable Observer/Reflector (`tests/fuzz/fake_model.py`) behind litellm.

The in-process fuzz hands `SeededModels` to the engine directly. Across processes the engine lives in
Celery workers, so the same fake is registered with litellm as a custom provider instead: the workers,
`ModelClient` and its retry layer run unchanged, and every Observer reply still carries the markers
(`id[m<n>.<k>]`) of the parts it covered, so the invariant checker can trace each stored part to the
observation that holds it.

The model id's `<key>` (one per conversation, set in the thread's config) seeds the behaviour and names
the Redis list `om:trace:calls:<key>` to which every call appends what it saw and answered (role, outcome,
markers in and out), so the test process gets the call log of a thread whose calls ran in other processes.

Behaviour knobs come from the environment of the process making the call (the workers):

- `OM_TRACE_LATENCY_S`: `"lo-hi"` seconds, drawn per call from a seed made of the key, the input and the
  call's number in this process (default `"0-0.05"`);
- `OM_TRACE_FAULTS`: `"on"` (the fuzz's `FaultRates`: errors, empty, garbage, repetition loops, bloated
  reflections) or `"off"` (default `"on"`);
- `OM_TRACE_RECORD`: `"on"` (default) or `"off"` (skip the Redis call log);
- `OM_TRACE_WARM`: `"on"` makes one call through `ModelClient` and litellm when the module is imported. A
  Celery worker imports it before forking its pool, so every pool child starts with litellm's lazily
  imported modules already loaded instead of spending seconds on its first call.

Workers load it through `OM_WORKER_IMPORTS=tests.support.traced_model`; an API process that calls models
itself (inline executor) would load it through `OM_PLUGINS`. Names and the call log are in
`tests/support/traced_calls.py`, which does not import litellm.
"""

from __future__ import annotations

import os

# litellm must use the price table it ships with (no network here); set before it is first imported.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import contextlib
import hashlib
import json
import random
import threading
import time
from collections import OrderedDict
from typing import Any

import litellm
import redis
from litellm.llms.custom_llm import CustomLLM
from litellm.types.utils import Choices, Message, ModelResponse, Usage

from tests.fuzz.fake_model import FaultRates, ModelCall, SeededModels
from tests.support.traced_calls import PROVIDER, calls_key, model_id

WARM_UP_KEY = "warm-up"
CALLS_TTL_S = 6 * 3600
NO_FAULTS = FaultRates(error=0, empty=0, garbage=0, degenerate=0, bloated=0, partial=0)


def latency_range(text: str | None) -> tuple[float, float]:
    """`"0.5-2"` -> (0.5, 2.0); a single number is a fixed latency."""
    low, _, high = (text or "0-0.05").partition("-")
    lo = float(low)
    return lo, float(high) if high else lo


def _stable_int(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


class RecordingModels(SeededModels):
    """`SeededModels` whose call log goes to Redis instead of a list in this process."""

    key: str = ""
    client: redis.Redis | None = None

    def _record(self, call: ModelCall) -> None:
        if self.client is None:
            return
        entry = {
            "role": call.role,
            "outcome": call.outcome,
            "input": list(call.input_markers),
            "output": list(call.output_markers),
        }
        pipe = self.client.pipeline()
        pipe.rpush(calls_key(self.key), json.dumps(entry))
        pipe.expire(calls_key(self.key), CALLS_TTL_S)
        pipe.execute()


class _Models:
    """One `RecordingModels` per key in this process (bounded), so attempt counts carry across calls."""

    def __init__(self, size: int = 256) -> None:
        self._by_key: OrderedDict[str, RecordingModels] = OrderedDict()
        self._guard = threading.Lock()
        self._size = size
        self._client: redis.Redis | None = None

    def _redis(self, key: str) -> redis.Redis | None:
        if os.environ.get("OM_TRACE_RECORD", "on") == "off" or key == WARM_UP_KEY:
            return None
        if self._client is None:
            url = os.environ.get("OM_REDIS_URL") or os.environ.get("OM_TEST_REDIS_URL")
            self._client = redis.Redis.from_url(url) if url else None
        return self._client

    def get(self, key: str) -> RecordingModels:
        with self._guard:
            models = self._by_key.get(key)
            if models is None:
                faults = os.environ.get("OM_TRACE_FAULTS", "on") != "off"
                models = RecordingModels(
                    _stable_int(key), rates=FaultRates() if faults else NO_FAULTS, max_latency_s=0.0
                )
                models.key = key
                models.client = self._redis(key)
                self._by_key[key] = models
                while len(self._by_key) > self._size:
                    self._by_key.popitem(last=False)
            else:
                self._by_key.move_to_end(key)
            return models


_MODELS = _Models()
_calls_made = 0
_calls_guard = threading.Lock()


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def _pause(key: str, user: str) -> None:
    """The call's latency: seeded by the key and input, varied per call so retries differ."""
    global _calls_made
    low, high = latency_range(os.environ.get("OM_TRACE_LATENCY_S"))
    if high <= 0 or key == WARM_UP_KEY:
        return
    with _calls_guard:
        _calls_made += 1
        nth = _calls_made
    digest = hashlib.blake2b(user.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()
    rng = random.Random(f"{key}|{digest}|{os.getpid()}|{nth}")
    time.sleep(rng.uniform(low, high))


_priced: set[str] = set()


def _register_price(name: str) -> None:
    """A zero price, so litellm's cost lookup finds the model instead of logging a miss per call."""
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


class TracedLLM(CustomLLM):
    def completion(self, model: str, messages: list[Any], *args: Any, **kwargs: Any) -> ModelResponse:
        key = model.split("/", 1)[-1] if model.startswith(f"{PROVIDER}/") else model
        system = "\n".join(_text(m.get("content")) for m in messages if m.get("role") == "system")
        user = "\n".join(_text(m.get("content")) for m in messages if m.get("role") == "user")
        _pause(key, user)
        answer = _MODELS.get(key).complete(model, system=system, user=user)  # raises injected errors
        name = f"{PROVIDER}/{key}"
        _register_price(name)
        response = kwargs.get("model_response")
        if not isinstance(response, ModelResponse):
            response = ModelResponse()
        response.model = name
        response.choices = [
            Choices(finish_reason="stop", index=0, message=Message(content=answer.text, role="assistant"))
        ]
        response.usage = Usage(  # type: ignore[attr-defined]
            prompt_tokens=answer.input_tokens,
            completion_tokens=answer.output_tokens,
            total_tokens=answer.input_tokens + answer.output_tokens,
        )
        return response


def register() -> None:
    """Register the provider with litellm (idempotent; importing the module calls it)."""
    if not any(entry.get("provider") == PROVIDER for entry in litellm.custom_provider_map):
        litellm.custom_provider_map = [
            *litellm.custom_provider_map,
            {"provider": PROVIDER, "custom_handler": TracedLLM()},
        ]


def warm_up() -> None:
    """One call down the whole path (our client, litellm, this provider), recorded nowhere."""
    from om_core.models.client import ModelClient

    with contextlib.suppress(Exception):  # an injected fault is as warm as an answer
        ModelClient().complete(model_id(WARM_UP_KEY), system="warm up", user="warm up")


register()
if os.environ.get("OM_TRACE_WARM") == "on":
    warm_up()
