"""A caller's `X-Request-ID` and `traceparent` end in response headers, error bodies, log lines and task
headers, so they are untrusted input: a forged id (a newline that would start a log line of its own, a
header injection, megabytes meant for every log line) is replaced by a fresh id and never echoed.

The app runs in-process on SQLite with auth on, so the 401 every unauthenticated request gets is an error
body that must carry the id the response header carries.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from om_adapters.logs import handler
from om_adapters.request_context import MAX_REQUEST_ID, choose_request_id, valid_request_id
from om_api.app import create_app
from om_api.settings import ApiSettings
from om_core.store.db import make_engine
from om_core.store.migrate import upgrade

FRESH = re.compile(r"[0-9a-f]{32}")
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"

FORGED = [
    "abc\r\nX-Injected: 1",
    "line\nINFO om.api: forged log line",
    "a" * (MAX_REQUEST_ID + 1),
    "a" * 100_000,
    "<script>alert(1)</script>",
    "id with spaces",
    "ünïcode",
    "",
    "tab\tseparated",
    '{"request_id": "x"}',
]


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    url = f"sqlite:///{tmp_path_factory.mktemp('ids') / 'om.db'}"
    engine = make_engine(url)
    upgrade(engine)
    engine.dispose()
    settings = ApiSettings(database_url=url, auth="keys", model="om-local/extractive")
    with TestClient(create_app(settings), base_url="http://localhost") as running:
        yield running


def _unauthorized(client: TestClient, headers: dict[str, str]) -> tuple[str, dict[str, object]]:
    """A request every caller without a key may make: its 401 body is an error body."""
    response = client.get("/v1/threads/t/status", headers=headers)
    assert response.status_code == 401, response.text
    error = response.json()["error"]
    assert isinstance(error, dict)
    return response.headers["x-request-id"], error


@pytest.mark.parametrize("forged", FORGED, ids=lambda value: repr(value[:24]))
def test_a_forged_request_id_is_replaced_and_never_echoed(client: TestClient, forged: str) -> None:
    # Raw bytes: what a hostile client can put on the wire, UTF-8 and control characters included.
    echoed, error = _unauthorized(client, {"X-Request-ID": forged.encode()})  # type: ignore[dict-item]
    assert FRESH.fullmatch(echoed), echoed
    assert error["request_id"] == echoed
    assert not forged or forged not in str(error)


def test_a_well_formed_request_id_is_honoured_in_header_and_error_body(client: TestClient) -> None:
    echoed, error = _unauthorized(client, {"X-Request-ID": "req-2026.12:03_a"})
    assert echoed == "req-2026.12:03_a"
    assert error["request_id"] == echoed


def test_without_an_id_a_traceparent_names_the_request_else_a_fresh_one(client: TestClient) -> None:
    echoed, error = _unauthorized(client, {"traceparent": TRACEPARENT})
    assert echoed == TRACE_ID and error["request_id"] == TRACE_ID
    first, _ = _unauthorized(client, {})
    second, _ = _unauthorized(client, {})
    assert FRESH.fullmatch(first) and FRESH.fullmatch(second) and first != second


@pytest.mark.parametrize(
    "traceparent",
    [
        f"00-{'0' * 32}-00f067aa0ba902b7-01",  # all-zero trace id: invalid by the W3C rules
        f"00-{TRACE_ID}-{'0' * 16}-01",
        f"ff-{TRACE_ID}-00f067aa0ba902b7-01",
        f"00-{TRACE_ID.upper()}-00f067aa0ba902b7-01",
        f"00-{TRACE_ID}-00f067aa0ba902b7-01" + "x" * 10_000,
        "00-\n-x",
    ],
)
def test_a_malformed_traceparent_does_not_name_the_request(client: TestClient, traceparent: str) -> None:
    echoed, _ = _unauthorized(client, {"traceparent": traceparent})
    assert echoed != TRACE_ID and FRESH.fullmatch(echoed)


def test_a_caller_cannot_send_two_ids_to_confuse_the_echo(client: TestClient) -> None:
    response = client.get(
        "/v1/threads/t/status", headers=[("X-Request-ID", "first-id"), ("X-Request-ID", "second-id")]
    )
    assert response.headers.get_list("x-request-id") == [response.json()["error"]["request_id"]]


def test_an_id_refused_at_the_door_is_refused_in_a_task_header_too() -> None:
    """A worker reads the id back from the broker message with the same rule (`adopt_task_headers`)."""
    from om_adapters import request_context

    request_context.adopt_task_headers({"om_request_id": "x\nforged", "om_tenant": "t\n"})
    try:
        assert request_context.REQUEST_ID.get() is None and request_context.TENANT.get() is None
    finally:
        request_context.clear()
    assert valid_request_id("a" * MAX_REQUEST_ID) is not None
    assert choose_request_id("a" * (MAX_REQUEST_ID + 1), None) != "a" * (MAX_REQUEST_ID + 1)


def test_a_message_with_a_newline_stays_one_json_log_line() -> None:
    """JSON lines escape what they carry: a caller's text in a logged message cannot add a line."""
    import io

    stream = io.StringIO()
    out = handler("json", stream)
    record = logging.LogRecord("om.api", logging.WARNING, __file__, 1, "got %s", ("a\nINFO forged",), None)
    out.handle(record)
    assert stream.getvalue().count("\n") == 1


def test_the_python_clients_error_carries_the_request_id(client: TestClient) -> None:
    from om_client.errors import OMUnauthorized, error_for

    response = client.get("/v1/threads/t/status", headers={"X-Request-ID": "support-ticket-7"})
    error = error_for(response)
    assert isinstance(error, OMUnauthorized) and error.request_id == "support-ticket-7"
