"""What of a chat-completions request the proxy hands to litellm: an explicit allow-list, nothing else.

litellm's `acompletion` takes, next to the OpenAI request fields, keywords that decide where and how the
provider is called (`api_base`, `api_key`, `headers`, `extra_body`, `num_retries`, `mock_response`, the
`litellm_*` family, several hundred in all). Passing a caller's extra fields through would let any holder
of an om key send the server's provider keys to a host of their choosing, reach internal hosts, or change
the server's retries and timeouts. So the proxy forwards only the OpenAI fields listed here, refuses every
other field with a 422 naming it, and checks the nested values that litellm reads as instructions rather
than as data (a tool of type `mcp` makes litellm call an MCP gateway).

The security model (ARCHITECTURE.md, "What the proxy forwards"): a provider key configured on the server
is used only for the hosts litellm's provider resolution chooses for an allowed model; no request field
can change the host, the key, the headers or the retries of a model call.
`tests/security/test_proxy_kwargs.py` sends every keyword litellm knows and proves none outside these sets
reaches `litellm.acompletion`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from om_api.errors import ApiError

#: The OpenAI chat-completions request fields the proxy forwards to litellm as the caller gave them. Each
#: shapes what the model generates; none names a host, a key, a header, a timeout or a retry.
FORWARDED_FIELDS: frozenset[str] = frozenset(
    {
        # sampling
        "temperature",
        "top_p",
        "n",
        "seed",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        "logprobs",
        "top_logprobs",
        # length and stopping
        "max_tokens",
        "max_completion_tokens",
        "stop",
        # tools (function tools only, see `_check_tools`)
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "functions",
        "function_call",
        # output shape
        "response_format",
        "reasoning_effort",
        "verbosity",
        "modalities",
        "audio",
        "prediction",
        "web_search_options",
        # streaming (the server adds `include_usage` to meter the call, see `call_stream_options`)
        "stream",
        "stream_options",
        # end-user identity and prompt-cache routing, as the provider defines them
        "user",
        "safety_identifier",
        "prompt_cache_key",
    }
)

#: Fields om reads itself. `model` is checked against OM_ACTOR_MODELS and passed on; `messages` is replaced
#: by the memory context; `metadata` carries the thread and resource ids and never reaches litellm (which
#: reads `metadata` for its own callbacks).
OWN_FIELDS: frozenset[str] = frozenset({"model", "messages", "metadata"})

#: Keywords the server sets on every call from its settings, whatever the request says.
SERVER_SET_KWARGS: frozenset[str] = frozenset({"timeout"})

#: Every keyword `litellm.acompletion` can receive from the proxy.
CALL_KWARGS: frozenset[str] = FORWARDED_FIELDS | SERVER_SET_KWARGS | {"model", "messages"}

_TOOL_TYPES = ("function", "custom")
_RESPONSE_FORMATS = ("text", "json_object", "json_schema")
_STREAM_OPTIONS = ("include_usage", "include_obfuscation")


def _refused(field: str, message: str) -> ApiError:
    return ApiError(422, "field_not_forwarded", message, field=field)


def _unknown_field(name: str) -> ApiError:
    return _refused(
        name,
        f"{name!r} is not a field this proxy forwards to the model: remove it. Where and how the provider is "
        "called (host, key, headers, timeout, retries) is the server's decision; the forwarded fields are "
        f"model, messages, metadata and {', '.join(sorted(FORWARDED_FIELDS))}",
    )


def _check_tools(name: str, tools: Any) -> None:
    """Function tools are data for the model; other tool types (litellm's `mcp`) make the server act."""
    if not isinstance(tools, list):
        raise _refused(name, f"{name} must be a list of tools")
    for index, tool in enumerate(tools):
        kind = tool.get("type", "function") if isinstance(tool, dict) else None
        if kind not in _TOOL_TYPES:
            raise _refused(
                f"{name}[{index}].type",
                f"{name}[{index}] must be an object of type {' or '.join(_TOOL_TYPES)}: other tool types "
                "(e.g. mcp) make the server call other services, which this proxy does not do",
            )


def _check_functions(functions: Any) -> None:
    if not isinstance(functions, list) or not all(isinstance(f, dict) for f in functions):
        raise _refused("functions", "functions must be a list of function definitions (objects)")


def _check_response_format(value: Any) -> None:
    if not isinstance(value, dict) or value.get("type") not in _RESPONSE_FORMATS:
        raise _refused(
            "response_format.type",
            f"response_format must be an object whose type is one of {', '.join(_RESPONSE_FORMATS)}",
        )


def _check_stream_options(value: Any) -> None:
    if not isinstance(value, dict):
        raise _refused("stream_options", 'stream_options must be an object, e.g. {"include_usage": true}')
    for key, option in value.items():
        if key not in _STREAM_OPTIONS or not isinstance(option, bool):
            raise _refused(
                f"stream_options.{key}",
                f"stream_options holds only {' and '.join(_STREAM_OPTIONS)} (true or false): remove {key!r}",
            )


def _check_values(params: Mapping[str, Any]) -> None:
    """The nested values litellm could read as instructions are plain data of the OpenAI shape."""
    if params.get("tools") is not None:
        _check_tools("tools", params["tools"])
    if params.get("functions") is not None:
        _check_functions(params["functions"])
    if params.get("response_format") is not None:
        _check_response_format(params["response_format"])
    if params.get("stream_options") is not None:
        _check_stream_options(params["stream_options"])


def forwarded_params(extra: Mapping[str, Any]) -> dict[str, Any]:
    """The request's fields beyond `OWN_FIELDS` as call keywords; the first field not on the allow-list (in
    request order) is refused with a 422 naming it, before anything is stored or called."""
    for name in extra:
        if name not in FORWARDED_FIELDS:
            raise _unknown_field(name)
    params = dict(extra)
    _check_values(params)
    return params


def call_stream_options(given: Mapping[str, Any] | None) -> dict[str, Any]:
    """The stream options of a streamed call: the caller's, with usage always on so the call is metered
    (the usage chunk is passed on only when the caller asked for it, see `client_wants_usage`)."""
    return {**(given or {}), "include_usage": True}


def client_wants_usage(given: Mapping[str, Any] | None) -> bool:
    return bool((given or {}).get("include_usage"))
