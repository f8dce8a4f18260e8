"""Python client of the om API: `OMClient` (sync) and `AsyncOMClient` (async), the API's wire models
(`om_client.models`, `om_client.messages`) and its errors (`om_client.errors`).

Install it alone with `pip install ./clients/python` (it needs only httpx and pydantic). The server
imports the wire models from here too; that is why the client names are loaded on first use: importing
`om_client.messages` or `om_client.models` does not import the HTTP client.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from om_client.client import UNSET as UNSET
    from om_client.client import AsyncOMClient as AsyncOMClient
    from om_client.client import MessageInput as MessageInput
    from om_client.client import OMClient as OMClient
    from om_client.client import line_sha256 as line_sha256
    from om_client.errors import OMAPIError as OMAPIError
    from om_client.errors import OMBadRequest as OMBadRequest
    from om_client.errors import OMConflict as OMConflict
    from om_client.errors import OMNotFound as OMNotFound
    from om_client.errors import OMPayloadTooLarge as OMPayloadTooLarge
    from om_client.errors import OMRateLimited as OMRateLimited
    from om_client.errors import OMRetriesExhausted as OMRetriesExhausted
    from om_client.errors import OMUnauthorized as OMUnauthorized
    from om_client.errors import OMUnavailable as OMUnavailable
    from om_client.raw import RawResponse as RawResponse
    from om_client.retry import RetryPolicy as RetryPolicy

_HOMES: dict[str, str] = {
    "UNSET": "om_client.client",
    "AsyncOMClient": "om_client.client",
    "MessageInput": "om_client.client",
    "OMClient": "om_client.client",
    "line_sha256": "om_client.client",
    "OMAPIError": "om_client.errors",
    "OMBadRequest": "om_client.errors",
    "OMConflict": "om_client.errors",
    "OMNotFound": "om_client.errors",
    "OMPayloadTooLarge": "om_client.errors",
    "OMRateLimited": "om_client.errors",
    "OMRetriesExhausted": "om_client.errors",
    "OMUnauthorized": "om_client.errors",
    "OMUnavailable": "om_client.errors",
    "RawResponse": "om_client.raw",
    "RetryPolicy": "om_client.retry",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'om_client' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
