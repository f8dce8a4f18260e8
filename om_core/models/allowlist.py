"""Which models a server may call for someone else: the operator's allow-lists of models and the
self-hosted providers nobody reaches unless the operator names them.

Two allow-lists follow this one rule: `OM_ACTOR_MODELS` (what the proxy may call for a key holder) and
`OM_MEMORY_MODELS` (what a tenant's configuration may choose for its Observer, Reflector and extractors).
Every such call is paid with the server's provider keys, so the patterns (comma-separated globs) bound
what a key holder can spend. Unset, any model of a hosted provider may be called.

A self-hosted provider (ollama, vLLM, LM Studio, llamafile, ...) is different: its endpoint is
`localhost` or an address only the server can reach, so allowing it by default would let any key holder
make the server call its own machine or internal network. Such a model is allowed only when a pattern
names its provider literally (`ollama/*`, `hosted_vllm/llama-3`); `*` does not. A provider counts as
self-hosted when it is in `SELF_HOSTED_PROVIDERS` or when litellm's provider resolution gives it a
loopback, private or link-local endpoint (so a provider a new litellm release adds with a local default
is caught too). The provider is the one litellm resolves for the model name, so aliases cannot dodge it.
"""

from __future__ import annotations

import fnmatch
import ipaddress
from collections.abc import Sequence
from urllib.parse import urlsplit

from om_core.models.routing import PROVIDERS

#: litellm providers whose endpoint is the operator's own machine or network (a localhost default, an
#: in-process engine, or a base URL only the operator configures), and litellm's own routers/agents that
#: forward to other endpoints.
SELF_HOSTED_PROVIDERS: frozenset[str] = frozenset(
    {
        "a2a",
        "a2a_agent",
        "aiohttp_openai",
        "auto_router",
        "custom",
        "custom_openai",
        "docker_model_runner",
        "hosted_vllm",
        "infinity",
        "langflow",
        "langgraph",
        "lemonade",
        "litellm_agent",
        "litellm_proxy",
        "llamafile",
        "lm_studio",
        "ollama",
        "ollama_chat",
        "oobabooga",
        "openai_like",
        "petals",
        "ragflow",
        "triton",
        "vllm",
        "xinference",
    }
)


#: Providers of om's routing table, as configs name them and as litellm does: hosted providers, and the
#: in-process offline model.
_HOSTED_PREFIXES: frozenset[str] = frozenset(
    name for entry in PROVIDERS.values() for name in (entry.provider, entry.litellm_prefix)
)


def _is_internal_host(host: str) -> bool:
    if host.lower() in ("localhost", "localhost.localdomain") or host.lower().endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False  # a DNS name: not resolved here (the static list covers the known self-hosted ones)
    return not address.is_global


def resolve_provider(model: str) -> tuple[str | None, str | None]:
    """(provider, default endpoint) as litellm resolves them for `model`; (None, None) when litellm cannot
    place the model (the call would fail the same way)."""
    import litellm

    try:
        _name, provider, _key, api_base = litellm.get_llm_provider(model=model)
    except Exception:
        return None, None
    return (str(provider) if provider else None), (str(api_base) if api_base else None)


def self_hosted_provider(model: str) -> str | None:
    """The model's provider when it is self-hosted (see the module doc), else None. A provider of om's
    routing table is hosted (or in-process) and is answered without importing litellm, which a process
    checking a configuration would otherwise pay for (seconds and ~100 MB)."""
    if model.partition("/")[0] in _HOSTED_PREFIXES:
        return None
    provider, api_base = resolve_provider(model)
    if provider is None:
        return None
    if provider in SELF_HOSTED_PROVIDERS:
        return provider
    host = urlsplit(api_base).hostname if api_base else None
    return provider if host and _is_internal_host(host) else None


def _names_provider(pattern: str, provider: str) -> bool:
    return pattern.split("/", 1)[0] == provider and "/" in pattern


def refusal(patterns: Sequence[str], model: str, *, setting: str = "OM_ACTOR_MODELS") -> str | None:
    """Why the server may not call `model` for a key holder (a message saying what to change), or None
    when it may. `setting` names the allow-list the patterns come from, for the message."""
    if patterns and not any(fnmatch.fnmatchcase(model, p) for p in patterns):
        return (
            f"model {model!r} is not one this server may call ({setting}={','.join(patterns)}): "
            "use a model these patterns match, or ask the operator to add it"
        )
    provider = self_hosted_provider(model)
    if provider is not None and not any(
        _names_provider(p, provider) and fnmatch.fnmatchcase(model, p) for p in patterns
    ):
        return (
            f"model {model!r} runs on a self-hosted provider ({provider}) that the server calls on its own "
            f"network; the operator must allow it by naming the provider in {setting} (e.g. "
            f"{provider}/*): use a hosted model meanwhile"
        )
    return None
