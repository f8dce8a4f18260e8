"""The proxy's allow-list as a function: what passes as data, what is refused and which field is named."""

from __future__ import annotations

from typing import Any

import pytest

from om_api.errors import ApiError
from om_api.proxy.params import (
    CALL_KWARGS,
    FORWARDED_FIELDS,
    OWN_FIELDS,
    call_stream_options,
    client_wants_usage,
    forwarded_params,
)


def _refused(extra: dict[str, Any]) -> ApiError:
    with pytest.raises(ApiError) as refused:
        forwarded_params(extra)
    assert refused.value.status == 422
    return refused.value


def test_forwarded_values_pass_unchanged() -> None:
    extra = {
        "temperature": 0.3,
        "tools": [
            {"type": "function", "function": {"name": "f", "parameters": {"api_base": "just a schema"}}},
            {"type": "custom", "custom": {"name": "grammar"}},
            {"function": {"name": "untyped"}},
        ],
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}},
        "stream_options": {"include_usage": False, "include_obfuscation": True},
    }
    assert forwarded_params(extra) == extra


def test_the_first_unknown_field_in_request_order_is_named() -> None:
    error = _refused({"temperature": 1, "litellm_trace_id": "x", "api_base": "http://h"})
    assert error.field == "litellm_trace_id"
    assert "remove it" in error.message and "temperature" in error.message


@pytest.mark.parametrize("name", sorted(OWN_FIELDS))
def test_oms_own_fields_are_not_forwarded_as_extra_fields(name: str) -> None:
    assert name not in FORWARDED_FIELDS
    assert _refused({name: "x"}).field == name


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"tools": {"type": "function"}}, "tools"),
        ({"tools": [{"type": "mcp", "server_url": "litellm_proxy"}]}, "tools[0].type"),
        ({"tools": [{"type": "function"}, "not-a-tool"]}, "tools[1].type"),
        ({"functions": "f"}, "functions"),
        ({"response_format": "json"}, "response_format.type"),
        ({"response_format": {"type": "grammar"}}, "response_format.type"),
        ({"stream_options": True}, "stream_options"),
        ({"stream_options": {"include_usage": "yes"}}, "stream_options.include_usage"),
        ({"stream_options": {"api_base": "http://h"}}, "stream_options.api_base"),
    ],
)
def test_nested_values_must_be_plain_data(extra: dict[str, Any], field: str) -> None:
    assert _refused(extra).field == field


def test_a_stream_always_asks_for_usage_but_passes_it_on_only_when_asked() -> None:
    assert call_stream_options(None) == {"include_usage": True}
    assert call_stream_options({"include_usage": False, "include_obfuscation": False}) == {
        "include_usage": True,
        "include_obfuscation": False,
    }
    assert not client_wants_usage(None)
    assert not client_wants_usage({"include_usage": False})
    assert client_wants_usage({"include_usage": True})


def test_the_call_keywords_are_the_allow_list_plus_the_servers() -> None:
    assert FORWARDED_FIELDS | {"model", "messages", "timeout"} == CALL_KWARGS
