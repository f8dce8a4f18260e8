"""A provider's error text never reaches a tenant: failed events, the events API, extraction failures, the
turn's answer and the proxy's errors carry om's public form of the error (`om_core.errors.public_text`).

Issue 28, item 10 (and the read-back half of item 1): with a tenant-chosen endpoint, an internal service's
error body came back in `data-om-observation-failed`. Here the endpoint is the operator's own (an
OpenAI-compatible server on loopback, reached through `OPENAI_BASE_URL`, as an operator may point a model
at a gateway): it answers 500 with a body holding a canary. The tenant, holding one ordinary key, reads
everything it can about its thread and its proxy call; the canary appears nowhere, while the server's log
keeps it (the positive control: the text was there to leak). The real app on the test Postgres, inline
executor, keys auth; the model boundary is HTTP (litellm, the OpenAI SDK and httpx run for real).
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from sqlalchemy import Engine
from starlette.testclient import TestClient

from om_api.app import create_app
from om_api.settings import ApiSettings
from om_core.errors import OMError, public_text
from om_core.models.client import ModelCallFailed
from om_core.tenancy import access
from om_local.extractive import local_reply

pytestmark = [pytest.mark.postgres]

CANARY = f"CANARY-{uuid.uuid4().hex}"
MODEL = "openai/gpt-4o-mini"
#: What an internal service's error body might hold: the canary, an address, a header.
LEAKY_BODY = {
    "error": {
        "message": f"upstream exploded: {CANARY} at http://10.1.2.3:8500/v1/kv/secret (Authorization: x)",
        "type": "server_error",
        "code": "internal_error",
    }
}
#: Operator config: observe on every turn of a few hundred tokens, in the turn (a failure is reported
#: synchronously), with a structured extractor (its own model call after the observation commits).
OPERATOR_CONFIG = {
    "observation": {
        "messageTokens": 40,
        "bufferTokens": False,
        "extract": [
            {
                "name": "profile",
                "instructions": "The user's name.",
                "schema": {"type": "object", "properties": {"name": {"type": "string"}}},
            }
        ],
    },
}


class LeakyProvider:
    """An OpenAI-compatible endpoint on loopback: 500 with `LEAKY_BODY`, except that with `observer_ok`
    it answers Observer calls like the offline model (so the structured extraction call is the one that
    fails)."""

    def __init__(self) -> None:
        self.observer_ok = False
        self.calls: list[str] = []
        self._guard = threading.Lock()
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._http.daemon_threads = True
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._http.server_address[1]}/v1"

    def _answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        structured = "response_format" in body
        with self._guard:
            self.calls.append("structured" if structured else "plain")
        messages = body.get("messages") or []
        if not self.observer_ok or structured or len(messages) < 2:
            return 500, LEAKY_BODY
        reply = local_reply(str(messages[0].get("content") or ""), str(messages[-1].get("content") or ""))
        return 200, {
            "id": "chatcmpl-leaky",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": "gpt-4o-mini",
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                status, payload = provider._answer(json.loads(raw or b"{}"))
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                return

        return Handler

    def __enter__(self) -> LeakyProvider:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._http.shutdown()
        self._http.server_close()


@pytest.fixture
def provider(monkeypatch: pytest.MonkeyPatch) -> Iterator[LeakyProvider]:
    """The operator's endpoint for every `openai/` model of this process (environment, as deployed)."""
    with LeakyProvider() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-operator-key-for-the-test")
        yield server


@pytest.fixture
def client(postgres_url: str, provider: LeakyProvider) -> Iterator[TestClient]:
    settings = ApiSettings(
        database_url=postgres_url,
        auth="keys",
        executor="inline",
        model=MODEL,
        config=json.dumps(OPERATOR_CONFIG),
        failure_policy="bypass",
        model_retry_max_retries=0,
        actor_models="openai/*",
    )
    with TestClient(create_app(settings)) as app_client:
        yield app_client


@pytest.fixture
def key(pg_engine: Engine) -> str:
    return access.create_key(pg_engine, f"leak-{uuid.uuid4().hex[:8]}", "attacker").secret


def _headers(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _turn(client: TestClient, key: str, thread: str) -> str:
    text = "My name is Ada and I keep a small orchard by the harbor where I grow pears. " * 6
    response = client.post(
        f"/v1/threads/{thread}/turns",
        json={"messages": [{"id": "m0", "role": "user", "text": text}], "resource_id": thread},
        headers=_headers(key),
    )
    assert response.status_code == 200, response.text
    return response.text


def _events(client: TestClient, key: str, thread: str) -> tuple[str, list[dict[str, Any]]]:
    """The thread's events as the tenant reads them (the events API, replay only)."""
    response = client.get(f"/v1/threads/{thread}/events", params={"follow": "false"}, headers=_headers(key))
    assert response.status_code == 200, response.text
    parsed = [
        json.loads(line.removeprefix("data: "))
        for line in response.text.splitlines()
        if line.startswith("data: {")
    ]
    return response.text, parsed


def _wait_for(client: TestClient, key: str, thread: str, kind: str) -> tuple[str, list[dict[str, Any]]]:
    deadline = time.monotonic() + 60
    while True:
        raw, events = _events(client, key, thread)
        if any(e["type"] == kind for e in events):
            return raw, events
        assert time.monotonic() < deadline, f"no {kind} within 60 s: {[e['type'] for e in events]}"
        time.sleep(0.1)  # polling the events API; the deadline bounds it


def test_a_failed_observation_shows_the_tenant_no_provider_text(
    client: TestClient, provider: LeakyProvider, key: str, caplog: pytest.LogCaptureFixture
) -> None:
    thread = f"leak-{uuid.uuid4().hex[:10]}"
    with caplog.at_level(logging.WARNING):
        answer = _turn(client, key, thread)
    assert provider.calls, "the observation called the operator's endpoint"
    raw, events = _wait_for(client, key, thread, "data-om-observation-failed")
    failed = next(e for e in events if e["type"] == "data-om-observation-failed")
    for what, text in {"the turn's answer": answer, "the events API": raw}.items():
        assert CANARY not in text and "10.1.2.3" not in text, what
    error = failed["data"]["error"]
    assert error.startswith(f"model {MODEL} failed: InternalServerError (HTTP 500)"), error
    assert CANARY in caplog.text, "the server's log keeps the provider's words"


def test_a_failed_extraction_shows_the_tenant_no_provider_text(
    client: TestClient, provider: LeakyProvider, key: str
) -> None:
    provider.observer_ok = True
    thread = f"leak-{uuid.uuid4().hex[:10]}"
    answer = _turn(client, key, thread)
    # The structured call is made in the observation's cycle: its failure is reported in
    # `extractionFailures` of the observation's own end event.
    raw, events = _wait_for(client, key, thread, "data-om-observation-end")
    assert "structured" in provider.calls, "the extraction called the operator's endpoint"
    failures = [f for e in events for f in e["data"].get("extractionFailures") or []]
    assert failures, "the failed structured call is reported"
    assert all(CANARY not in json.dumps(f) for f in failures), "extractionFailures"
    assert CANARY not in answer and CANARY not in raw and "10.1.2.3" not in raw
    assert all("InternalServerError (HTTP 500)" in f["error"] for f in failures), failures


@pytest.mark.parametrize("stream", [False, True])
def test_a_failed_proxy_call_shows_the_caller_no_provider_text(
    client: TestClient, provider: LeakyProvider, key: str, stream: bool
) -> None:
    response = client.post(
        "/v1/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "stream": stream},
        headers={**_headers(key), "X-OM-Thread-Id": f"leak-{uuid.uuid4().hex[:10]}"},
    )
    assert provider.calls, "the proxy called the operator's endpoint"
    assert CANARY not in response.text and "10.1.2.3" not in response.text, response.text
    assert "InternalServerError (HTTP 500)" in response.text, response.text


# --------------------------------------------------------------------------------- the public form itself


class _ProviderError(Exception):
    """Stands in for a library's error that carries an HTTP status and the provider's body."""

    status_code = 503


@pytest.mark.parametrize(
    ("error", "shown"),
    [
        (OMError("SOME_CODE", "om wrote this"), "om wrote this"),
        (RuntimeError("commit refused: the record moved"), "commit refused: the record moved"),
        (_ProviderError(f"body: {CANARY}"), "_ProviderError (HTTP 503)"),
        (FileNotFoundError(2, "No such file", f"/srv/{CANARY}.json"), "FileNotFoundError"),
        (ConnectionRefusedError(f"10.1.2.3:8500 {CANARY}"), "ConnectionRefusedError"),
        (ModelCallFailed(MODEL, "APIConnectionError"), f"model {MODEL} failed: APIConnectionError; "),
    ],
)
def test_public_text_keeps_om_words_and_drops_everyone_elses(error: BaseException, shown: str) -> None:
    text = public_text(error)
    assert text.startswith(shown) and CANARY not in text


def test_public_text_is_short() -> None:
    assert len(public_text(RuntimeError("x" * 10_000))) <= 500
