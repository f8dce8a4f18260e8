"""Names and the call log of the traced fake model (`tests/support/traced_model.py`), without litellm.

The test process only needs to name a model and read what its calls did; importing the provider itself
would load litellm (seconds of start-up) in a process that never calls a model.
"""

from __future__ import annotations

import json

import redis

from tests.fuzz.fake_model import ModelCall

PROVIDER = "om-trace"


def model_id(key: str) -> str:
    """The router id whose calls are seeded by, and logged under, `key`."""
    return f"{PROVIDER}/{key}"


def calls_key(key: str) -> str:
    return f"om:trace:calls:{key}"


def read_calls(client: redis.Redis, key: str) -> list[ModelCall]:
    """The call log of `key`, in the order the calls were recorded."""
    calls = []
    for raw in client.lrange(calls_key(key), 0, -1):
        data = json.loads(raw)
        calls.append(ModelCall(data["role"], data["outcome"], tuple(data["input"]), tuple(data["output"])))
    return calls
