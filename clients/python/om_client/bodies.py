"""Paths and request bodies of the routes beyond the turn path (webhooks, working memory, the proxy),
built once for the sync and the async client so the two cannot drift apart."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote

__all__ = [
    "DEFAULT_BASE_URL",
    "api_key_from_env",
    "base_url_from_env",
    "chat_body",
    "webhook_create_body",
    "webhook_patch_body",
    "webhook_path",
    "working_memory_body",
]

#: Where `om serve` and `om up` listen by default.
DEFAULT_BASE_URL = "http://127.0.0.1:8088"


def base_url_from_env(base_url: str | None) -> str:
    """The base URL given, else `OM_BASE_URL`, else the local default."""
    return base_url or os.environ.get("OM_BASE_URL") or DEFAULT_BASE_URL


def api_key_from_env(api_key: str | None) -> str | None:
    """The key given (`""`: send none), else `OM_API_KEY`, else none."""
    return api_key if api_key is not None else os.environ.get("OM_API_KEY") or None


def webhook_path(endpoint_id: str, tail: str = "") -> str:
    return f"/v1/webhooks/{quote(endpoint_id, safe='')}{tail}"


def working_memory_body(content: str | Mapping[str, Any], expected_version: int | None) -> dict[str, Any]:
    body: dict[str, Any] = {"content": content if isinstance(content, str) else dict(content)}
    if expected_version is not None:
        body["expectedVersion"] = expected_version
    return body


def webhook_create_body(url: str, events: Iterable[str], description: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {"url": url, "events": list(events)}
    if description is not None:
        body["description"] = description
    return body


def webhook_patch_body(unset: object, **fields: Any) -> dict[str, Any]:
    """The fields given (not `unset`); `events` as a list."""
    body = {name: value for name, value in fields.items() if value is not unset}
    if "events" in body:
        body["events"] = list(body["events"])
    return body


def chat_body(
    model: str,
    messages: Iterable[Mapping[str, Any]],
    thread_id: str | None,
    resource_id: str | None,
    params: Mapping[str, Any],
) -> dict[str, Any]:
    """A non-streamed chat-completions request; the thread and resource go in `metadata`."""
    if params.get("stream"):
        raise ValueError(
            "chat_completion does not stream: point the OpenAI SDK at <base_url>/v1 for a streamed reply"
        )
    body: dict[str, Any] = {"model": model, "messages": [dict(m) for m in messages], **params}
    metadata = dict(body.get("metadata") or {})
    if thread_id is not None:
        metadata["thread_id"] = thread_id
    if resource_id is not None:
        metadata["resource_id"] = resource_id
    if metadata:
        body["metadata"] = metadata
    return body
