"""How the API, the workers and beat write their logs: plain text for a terminal, or one JSON object a line.

`OM_LOG_FORMAT=json` makes every line a JSON object a log pipeline indexes without a parser of its own:
`time` (UTC, ISO 8601 with milliseconds), `level`, `logger`, `message`, `trace_id` and `span_id` (the
current OpenTelemetry span's, null when tracing is off), `request_id` and `tenant` (the request the line
belongs to, in the API and in the worker running a task that request sent; `om_adapters.request_context`),
and `exception` when one is logged. Plain text (the default) is the format om always had, with
`request_id=…` appended when the line belongs to a request.

The fields come from context variables, stamped on each record by a filter on the handler, so a line
logged by any library (uvicorn's access log, Celery's task lines) carries them too.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Literal

from opentelemetry import trace

from om_adapters.request_context import REQUEST_ID, TENANT

LogFormat = Literal["text", "json"]

#: The plain-text format (what om always wrote): timestamps let a slow turn be matched with its task.
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class ContextFilter(logging.Filter):
    """Stamps the request id, tenant and trace ids on every record the handler writes."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = REQUEST_ID.get()
        record.tenant = TENANT.get()
        context = trace.get_current_span().get_span_context()
        record.trace_id = format(context.trace_id, "032x") if context.is_valid else None
        record.span_id = format(context.span_id, "016x") if context.is_valid else None
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (newlines in a message are escaped by the encoding)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "trace_id": getattr(record, "trace_id", None),
            "span_id": getattr(record, "span_id", None),
            "request_id": getattr(record, "request_id", None),
            "tenant": getattr(record, "tenant", None),
            "process": record.process,
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        return json.dumps(line, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """The plain format, with the request's id appended to lines that belong to one."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        request_id = getattr(record, "request_id", None)
        return f"{text} request_id={request_id}" if request_id else text


def handler(log_format: LogFormat, stream: object = None) -> logging.Handler:
    """A stream handler (stderr by default) writing `log_format`, with the context filter."""
    out = logging.StreamHandler(stream if stream is not None else sys.stderr)  # type: ignore[arg-type]
    out.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    out.addFilter(ContextFilter())
    return out


def configure_logging(log_format: LogFormat, level: str | int = "INFO") -> None:
    """The root logger of this process writes `log_format` to stderr (replacing its handlers, as
    the plain stream handlers `logging.basicConfig` would have added). Every other logger propagates to it."""
    root = logging.getLogger()
    for old in list(root.handlers):
        if type(old) is logging.StreamHandler:  # a test's capturing handler stays
            root.removeHandler(old)
    root.addHandler(handler(log_format))
    root.setLevel(level.upper() if isinstance(level, str) else level)
