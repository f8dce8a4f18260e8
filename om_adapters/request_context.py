"""Which request a log line or a task belongs to: the request id and the tenant, carried across processes.

The API picks the id at the door (`om_api.request_ids`): a caller's `X-Request-ID` when it is a short
token of safe characters, else the trace id of a valid `traceparent`, else a new one. It is kept in a
context variable for the request's lifetime, written into every log line (`om_adapters.logs`), into error
bodies, and into the headers of every Celery task the request sends (`CeleryExecutor`), where a worker
reads it back before the task runs, so the worker's log lines name the request that caused them.

An id is untrusted input that ends in log lines and headers: only `[A-Za-z0-9._:-]`, at most 128
characters. Anything else is replaced by a fresh id (never echoed, never logged), so a forged id cannot
inject a line into a log, a header into a response, or megabytes into every log line.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from contextvars import ContextVar

from om_core.tenancy.scoped_ids import MAX_TENANT_LENGTH

#: The request a line of work belongs to; None outside a request or a task.
REQUEST_ID: ContextVar[str | None] = ContextVar("om_request_id", default=None)
#: The caller's tenant, once authenticated (None: tenancy off, or not known yet).
TENANT: ContextVar[str | None] = ContextVar("om_request_tenant", default=None)

#: Celery message headers the request's id and tenant travel in (read back by the worker).
REQUEST_ID_HEADER = "om_request_id"
TENANT_HEADER = "om_tenant"
TASK_HEADERS = (REQUEST_ID_HEADER, TENANT_HEADER)

MAX_REQUEST_ID = 128
_SAFE = re.compile(r"[A-Za-z0-9._:\-]{1,128}")
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")


def valid_request_id(value: str | None) -> str | None:
    """`value` when it is an acceptable id, else None."""
    if value is None or len(value) > MAX_REQUEST_ID or not _SAFE.fullmatch(value):
        return None
    return value


def trace_id_of(traceparent: str | None) -> str | None:
    """The trace id of a valid W3C `traceparent` (version 00-fe, non-zero ids), else None."""
    if traceparent is None or len(traceparent) > 64:
        return None
    match = _TRACEPARENT.fullmatch(traceparent.strip())
    if match is None:
        return None
    version, trace_id, parent_id, _flags = match.groups()
    if version == "ff" or set(trace_id) == {"0"} or set(parent_id) == {"0"}:
        return None
    return trace_id


def new_request_id() -> str:
    return uuid.uuid4().hex


def choose_request_id(header: str | None, traceparent: str | None) -> str:
    """The id of an incoming request: its own valid `X-Request-ID`, else its trace's id, else a new one."""
    return valid_request_id(header) or trace_id_of(traceparent) or new_request_id()


def task_headers() -> dict[str, str]:
    """The headers that carry the current request into a task it sends (empty outside a request)."""
    headers: dict[str, str] = {}
    request_id = REQUEST_ID.get()
    if request_id is not None:
        headers[REQUEST_ID_HEADER] = request_id
    tenant = TENANT.get()
    if tenant is not None:
        headers[TENANT_HEADER] = tenant
    return headers


def adopt_task_headers(headers: Mapping[str, object]) -> None:
    """In a worker, before a task runs: take on the request id and tenant its message carries. A header
    is checked like an HTTP one (anyone who can write to the broker could have sent it)."""
    request_id = headers.get(REQUEST_ID_HEADER)
    tenant = headers.get(TENANT_HEADER)
    REQUEST_ID.set(valid_request_id(request_id) if isinstance(request_id, str) else None)
    TENANT.set(tenant if isinstance(tenant, str) and _plausible_tenant(tenant) else None)


def _plausible_tenant(tenant: str) -> bool:
    return 0 < len(tenant) <= MAX_TENANT_LENGTH and tenant.isprintable()


def clear() -> None:
    REQUEST_ID.set(None)
    TENANT.set(None)
