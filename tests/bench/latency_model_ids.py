"""Names of the benchmarks' latency model (`tests/bench/fake_latency_model.py`), without litellm.

A section that only names the model for a thread or a worker (the model runs in the workers) must not
load litellm, which costs ~8 s of CPU per process on the benchmark machine.
"""

from __future__ import annotations

import os

PROVIDER = "om-bench"
LATENCY_ENV = "OM_BENCH_MODEL_LATENCY_S"
DEFAULT_LATENCY_S = 1.0
MODEL_PREFIX = "latency"


def model_for(latency_s: float) -> str:
    """The router id of the fake model that waits `latency_s` seconds per call."""
    return f"{PROVIDER}/{MODEL_PREFIX}-{latency_s:g}"


def latency_of(model: str) -> float:
    """Seconds to wait for `model` (`latency-<s>` in the id wins over the environment)."""
    model_id = model.split("/", 1)[-1]
    suffix = model_id.removeprefix(MODEL_PREFIX).lstrip("-")
    if suffix:
        return max(0.0, float(suffix))
    return max(0.0, float(os.environ.get(LATENCY_ENV, DEFAULT_LATENCY_S)))
