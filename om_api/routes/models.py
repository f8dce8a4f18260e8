"""`GET /v1/models`: the actor models the proxy may call, in OpenAI's list shape, for chat front-ends that
ask for the model list of the base URL they are given.

The list is the operator's allow-list (`OM_ACTOR_MODELS`, `om_core.models.allowlist`), the same for every key:
it holds no tenant data. A pattern without wildcards is listed as written; a pattern with wildcards (and,
with no allow-list, every hosted model) is expanded against the chat models in litellm's registry, as
`provider/model`. A pattern written out passes the proxy's own check (`allowlist.refusal`) to be
listed; an expanded model is listed when its registry provider passes the static half of that check (a
provider of `allowlist.SELF_HOSTED_PROVIDERS` only when a pattern names it, as the proxy requires).
Expanded names are not resolved through litellm one by one: for some providers that resolution reaches
out to the network, and a registry holds thousands of models. The proxy still checks each call in full.
"""

from __future__ import annotations

import fnmatch
from functools import lru_cache

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool

from om_api.auth import Caller, Runtime
from om_api.routes.common import errors
from om_api.schemas import ModelCard, ModelList
from om_core.models import allowlist

router = APIRouter(tags=["proxy"])

_WILDCARDS = frozenset("*?[")


def _registry_chat_models() -> list[tuple[str, str]]:
    """litellm's chat models as (`provider/model`, provider); its keys come with or without the prefix."""
    import litellm

    found: dict[str, str] = {}
    for key, info in litellm.model_cost.items():
        if not isinstance(info, dict) or info.get("mode") != "chat":
            continue
        provider = str(info.get("litellm_provider") or "")
        if not provider or " " in provider:
            continue
        found[key if key.startswith(f"{provider}/") else f"{provider}/{key}"] = provider
    return sorted(found.items())


def _provider_allowed(provider: str, model: str, patterns: tuple[str, ...]) -> bool:
    if provider not in allowlist.SELF_HOSTED_PROVIDERS:
        return True
    return any(
        p.split("/", 1)[0] == provider and "/" in p and fnmatch.fnmatchcase(model, p) for p in patterns
    )


@lru_cache(maxsize=16)
def allowed_models(patterns: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """(model, owner) of every model `patterns` allow (see the module doc), sorted by model; computed
    once per allow-list."""
    listed: dict[str, str] = {}
    for pattern in patterns:
        if not _WILDCARDS & set(pattern) and allowlist.refusal(list(patterns), pattern) is None:
            provider, _api_base = allowlist.resolve_provider(pattern)
            listed[pattern] = pattern.split("/", 1)[0] if "/" in pattern else (provider or "unknown")
    globs = [p for p in patterns if _WILDCARDS & set(p)] if patterns else ["*"]
    if globs:
        for model, provider in _registry_chat_models():
            matched = any(fnmatch.fnmatchcase(model, g) for g in globs)
            if matched and _provider_allowed(provider, model, patterns):
                listed.setdefault(model, provider)
    return tuple(sorted(listed.items()))


@router.get(
    "/v1/models",
    response_model=ModelList,
    responses=errors(401, 503),
    summary="The actor models the proxy may call (OpenAI's model list)",
)
async def list_models(runtime: Runtime, caller: Caller) -> ModelList:
    del caller  # authenticated like the proxy's other routes; the list is the operator's, not the tenant's
    patterns = tuple(runtime.settings.actor_model_patterns())
    models = await run_in_threadpool(allowed_models, patterns)
    return ModelList(data=[ModelCard(id=model, created=0, owned_by=owner) for model, owner in models])
