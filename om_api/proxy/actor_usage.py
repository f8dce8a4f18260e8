"""What a proxy call cost, and where it is counted: per tenant in `/metrics`, per API key in the database.

Every proxy call is paid with the server's provider keys, so the operator needs to see who spent what
(README: `OM_ACTOR_MODELS` is the spending guard, this is the bill). The numbers are litellm's: the usage
the provider reported (a streamed call always asks for it, see `om_api.proxy.params.call_stream_options`)
and the cost litellm computed, else the model's price of those tokens.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from starlette.concurrency import run_in_threadpool

from om_api.auth import Principal
from om_api.runtime import ApiRuntime
from om_core.tenancy import access


@dataclass(frozen=True)
class ActorUsage:
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float


def reported_cost(response: Any) -> float | None:
    """The cost litellm computed for a non-streamed response (None when it has no price for the model)."""
    hidden = getattr(response, "_hidden_params", None)
    value = hidden.get("response_cost") if isinstance(hidden, dict) else None
    return float(value) if isinstance(value, int | float) else None


def _count(usage: Mapping[str, Any], key: str) -> int:
    value = usage.get(key)
    return value if isinstance(value, int) and value > 0 else 0


def _priced(model: str, prompt_tokens: int, completion_tokens: int) -> float:
    """litellm's price of the tokens; 0 for a model it has no price for (the tokens are still counted)."""
    import litellm

    try:
        prompt_cost, completion_cost = litellm.cost_per_token(
            model=model, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
        )
    except Exception:
        return 0.0
    return float(prompt_cost) + float(completion_cost)


def usage_of(model: str, usage: Mapping[str, Any] | None, computed_cost: float | None) -> ActorUsage:
    """The call's usage from litellm's numbers: the cost litellm computed for the response (or put in the
    streamed usage chunk), else the model's price of the reported tokens."""
    usage = usage or {}
    prompt, completion = _count(usage, "prompt_tokens"), _count(usage, "completion_tokens")
    cost = computed_cost if computed_cost is not None else usage.get("cost")
    if not isinstance(cost, int | float):
        cost = _priced(model, prompt, completion) if prompt or completion else 0.0
    return ActorUsage(prompt, completion, max(float(cost), 0.0))


async def meter(runtime: ApiRuntime, caller: Principal, model: str, usage: ActorUsage) -> None:
    """Count the call for the tenant (`/metrics`) and, with auth on, on the caller's key (atomically)."""
    runtime.metrics.observe_actor_usage(
        caller.tenant_id, model, usage.prompt_tokens, usage.completion_tokens, usage.cost_usd
    )
    if caller.key_id is not None:
        await run_in_threadpool(
            access.record_key_usage,
            runtime.db,
            caller.key_id,
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            cost_usd=usage.cost_usd,
        )
