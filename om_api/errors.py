"""Every error is JSON `{"error": {code, message, field?, limit?, errors?}}` with a message that says what
to fix. Handlers map the few failure kinds the shell can meet to one status each:

- a malformed body or an invalid config value: 422 naming the field;
- a message or body over a limit: 413 naming the limit;
- an unknown thread (or another tenant's): 404;
- a message id reused with another role: 409;
- the database or the broker unreachable: 503. A turn cut by an outage may already have committed its
  messages (the turn path is several short transactions), so the 503 never claims that nothing was
  stored; retrying is safe because a message with an id is stored once however often it is sent.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DataError, DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from om_adapters.request_context import REQUEST_ID
from om_core import OMConfigError
from om_core.store.history import MessageConflict

log = logging.getLogger("om.api")

_STATUS_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "invalid_request",
    429: "rate_limited",
    503: "unavailable",
}


class ApiError(Exception):
    """An error the API answers on purpose."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        field: str | None = None,
        limit: int | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.limit = limit
        self.headers = dict(headers or {})


def thread_not_found(thread_id: str) -> ApiError:
    return ApiError(
        404,
        "thread_not_found",
        f"thread {thread_id!r} does not exist for this API key; post a turn to create it",
    )


def error_body(
    code: str,
    message: str,
    *,
    field: str | None = None,
    limit: int | None = None,
    errors: Sequence[Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    detail: dict[str, Any] = {"code": code, "message": message}
    request_id = REQUEST_ID.get()
    if request_id is not None:
        # The id the response's X-Request-ID header carries too: what a user quotes to an operator.
        detail["request_id"] = request_id
    if field is not None:
        detail["field"] = field
    if limit is not None:
        detail["limit"] = limit
    if errors:
        detail["errors"] = list(errors)
    return {"error": detail}


def field_path(loc: Sequence[int | str], *, skip_source: bool = True) -> str:
    """`("body", "messages", 0, "role")` → `messages[0].role` (the request part is implied)."""
    parts = list(loc)
    if skip_source and parts and parts[0] in ("body", "query", "path", "header", "cookie"):
        source, parts = parts[0], parts[1:]
        if not parts:
            return str(source)
        if source != "body":
            parts = [f"{source}.{parts[0]}", *parts[1:]]
    out = ""
    for item in parts:
        if isinstance(item, int):
            out += f"[{item}]"
        else:
            out += f".{item}" if out else str(item)
    return out or "body"


def _validation_errors(errors: Sequence[Any]) -> list[dict[str, str]]:
    items = []
    for error in errors:
        loc = [part for part in error.get("loc", ()) if not _is_union_tag(part)]
        items.append({"field": field_path(loc), "message": str(error.get("msg", "invalid value"))})
    return items


def _is_union_tag(part: object) -> bool:
    # pydantic adds the union member's type name ("str", "list[Part]", "function-after[...]") to locs.
    return isinstance(part, str) and ("[" in part or part in ("str", "int", "float", "bool", "list", "dict"))


def _json(status: int, body: dict[str, Any], headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse(status_code=status, content=body, headers=dict(headers or {}))


async def _api_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return _json(exc.status, error_body(exc.code, exc.message, field=exc.field, limit=exc.limit), exc.headers)


#: The methods a 405 may name: the ones the routes declare (HEAD and OPTIONS are not served).
_METHODS = ("DELETE", "GET", "PATCH", "POST", "PUT")


def _allowed_methods(request: Request) -> str:
    """Every method some route serves at the request's path. Starlette's own 405 names only the methods
    of the first route of the path, so a path served by two routes (GET and PUT) seemed to lack one; each
    method is probed against the whole routing table instead."""
    routes = request.app.router.routes
    allowed = [
        method
        for method in _METHODS
        if any(route.matches({**request.scope, "method": method})[0] == Match.FULL for route in routes)
    ]
    return ", ".join(allowed)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 400 and exc.detail == "There was an error parsing the body":
        # FastAPI's answer to a body that is not UTF-8 JSON; every malformed body is a 422 here.
        return _json(
            422,
            error_body(
                "invalid_request", "body: not valid JSON text (UTF-8); send a JSON object", field="body"
            ),
        )
    code = _STATUS_CODES.get(exc.status_code, "error")
    message = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
    headers = dict(getattr(exc, "headers", None) or {})
    if exc.status_code == 405:
        allowed = _allowed_methods(request)
        if allowed:
            headers["Allow"] = allowed
    return _json(exc.status_code, error_body(code, message), headers)


async def _request_validation(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    items = _validation_errors(exc.errors())
    first = items[0] if items else {"field": "body", "message": "invalid request"}
    message = f"{first['field']}: {first['message']}"
    if len(items) > 1:
        message += f" (and {len(items) - 1} more problem{'s' if len(items) > 2 else ''}, see errors)"
    return _json(422, error_body("invalid_request", message, field=first["field"], errors=items))


async def _config_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, OMConfigError)
    field = exc.field or "overrides"
    return _json(422, error_body("invalid_config", f"{exc} (fix the option {field})", field=field))


async def _message_conflict(_request: Request, exc: Exception) -> JSONResponse:
    return _json(409, error_body("message_conflict", f"{exc}; send the message with a new id"))


async def _data_error(_request: Request, exc: Exception) -> JSONResponse:
    log.info("refused a value the database cannot store: %s", exc)
    return _json(
        422,
        error_body(
            "unstorable_value",
            "the request holds a value the database cannot store (a NUL character, an unpaired surrogate "
            "or a number out of range); remove it and retry",
        ),
    )


async def _database_down(_request: Request, exc: Exception) -> JSONResponse:
    log.warning("database unavailable: %s", exc)
    return _json(
        503,
        error_body(
            "database_unavailable",
            "the database is unreachable; retry later (the request may have been cut part-way: a turn "
            "stores each message once however often it is retried, as long as the messages carry an id)",
        ),
        {"Retry-After": "5"},
    )


async def _broker_down(_request: Request, exc: Exception) -> JSONResponse:
    log.warning("broker unavailable: %s", exc)
    return _json(
        503,
        error_body("broker_unavailable", "the task broker (Redis) is unreachable; retry later"),
        {"Retry-After": "5"},
    )


async def _unexpected(_request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error", exc_info=exc)
    return _json(500, error_body("internal_error", "the server failed unexpectedly; the error is logged"))


def _is_connection_problem(exc: DBAPIError) -> bool:
    return isinstance(exc, OperationalError) or bool(exc.connection_invalidated)


async def _dbapi_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, DBAPIError)
    if isinstance(exc, DataError):
        return await _data_error(request, exc)
    if _is_connection_problem(exc):
        return await _database_down(request, exc)
    return await _unexpected(request, exc)


async def _unicode_error(request: Request, exc: Exception) -> JSONResponse:
    return await _data_error(request, exc)


def install(app: FastAPI) -> None:
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _request_validation)
    app.add_exception_handler(OMConfigError, _config_error)
    app.add_exception_handler(MessageConflict, _message_conflict)
    app.add_exception_handler(DBAPIError, _dbapi_error)
    app.add_exception_handler(PoolTimeout, _database_down)
    app.add_exception_handler(UnicodeEncodeError, _unicode_error)
    try:
        from redis.exceptions import ConnectionError as RedisConnectionError
        from redis.exceptions import TimeoutError as RedisTimeout

        app.add_exception_handler(RedisConnectionError, _broker_down)
        app.add_exception_handler(RedisTimeout, _broker_down)
    except ImportError:  # pragma: no cover - redis is a dependency
        pass
    try:
        from kombu.exceptions import OperationalError as KombuOperationalError

        app.add_exception_handler(KombuOperationalError, _broker_down)
    except ImportError:  # pragma: no cover - kombu is a dependency
        pass
    app.add_exception_handler(Exception, _unexpected)
