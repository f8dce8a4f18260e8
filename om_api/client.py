"""The Python client, kept importable from its old home: it lives in the standalone package `om_client`
(clients/python/, `pip install ./clients/python`), which this module re-exports."""

from __future__ import annotations

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
from om_client.retry import RetryPolicy as RetryPolicy

__all__ = [
    "UNSET",
    "AsyncOMClient",
    "MessageInput",
    "OMAPIError",
    "OMBadRequest",
    "OMClient",
    "OMConflict",
    "OMNotFound",
    "OMPayloadTooLarge",
    "OMRateLimited",
    "OMRetriesExhausted",
    "OMUnauthorized",
    "OMUnavailable",
    "RetryPolicy",
    "line_sha256",
]
