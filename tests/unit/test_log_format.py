"""`OM_LOG_FORMAT`: one JSON object a line with the request's ids and the current trace, or plain text with
the request id appended; and the request id and tenant a task carries from the API to the worker."""

from __future__ import annotations

import io
import json
import logging

from om_adapters import request_context
from om_adapters.logs import handler
from om_core import tracing
from tests.support.spans import recording


def _line(log_format: str, message: str = "stored %d messages", *args: object) -> str:
    stream = io.StringIO()
    out = handler(log_format, stream)  # type: ignore[arg-type]
    out.handle(logging.LogRecord("om.api", logging.INFO, __file__, 1, message, args or (3,), None))
    return stream.getvalue()


def test_a_json_line_carries_the_request_the_tenant_and_the_trace() -> None:
    request = request_context.REQUEST_ID.set("req-1")
    tenant = request_context.TENANT.set("acme")
    try:
        with recording(), tracing.operation("om.turn"):
            trace_id = tracing.current_trace_id()
            text = _line("json")
    finally:
        request_context.TENANT.reset(tenant)
        request_context.REQUEST_ID.reset(request)
    assert text.endswith("\n") and text.count("\n") == 1
    line = json.loads(text)
    assert line["message"] == "stored 3 messages"
    assert (line["level"], line["logger"]) == ("INFO", "om.api")
    assert (line["request_id"], line["tenant"]) == ("req-1", "acme")
    assert trace_id is not None and line["trace_id"] == trace_id
    assert line["time"].endswith("+00:00")


def test_outside_a_request_the_fields_are_null_and_text_is_the_old_format() -> None:
    line = json.loads(_line("json"))
    assert line["request_id"] is None and line["tenant"] is None and line["trace_id"] is None
    assert _line("text").rstrip().endswith("om.api: stored 3 messages")
    token = request_context.REQUEST_ID.set("req-2")
    try:
        assert _line("text").rstrip().endswith("om.api: stored 3 messages request_id=req-2")
    finally:
        request_context.REQUEST_ID.reset(token)


def test_an_exception_is_one_field_of_one_line() -> None:
    stream = io.StringIO()
    out = handler("json", stream)
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord(
            "om", logging.ERROR, __file__, 1, "failed", (), __import__("sys").exc_info()
        )
    out.handle(record)
    assert stream.getvalue().count("\n") == 1
    assert "ValueError: boom" in json.loads(stream.getvalue())["exception"]


def test_a_task_carries_the_request_id_and_tenant_to_the_worker() -> None:
    request = request_context.REQUEST_ID.set("req-3")
    tenant = request_context.TENANT.set("acme")
    try:
        headers = request_context.task_headers()
    finally:
        request_context.TENANT.reset(tenant)
        request_context.REQUEST_ID.reset(request)
    assert headers == {"om_request_id": "req-3", "om_tenant": "acme"}
    assert request_context.task_headers() == {}
    request_context.adopt_task_headers(headers)
    try:
        assert request_context.REQUEST_ID.get() == "req-3" and request_context.TENANT.get() == "acme"
    finally:
        request_context.clear()
    assert request_context.REQUEST_ID.get() is None
