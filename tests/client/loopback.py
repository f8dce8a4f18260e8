"""A scripted loopback HTTP server for the client's retry tests: it answers each request with the next
scripted answer and records when each request arrived (the server's own monotonic clock), so a test reads
the client's waits from the server side (`wall`: the same moment on the wall clock, for `Retry-After`
dates)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Answer:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Seen:
    at: float
    wall: float
    method: str
    path: str
    body: Any


def unavailable(retry_after: str | None = None, code: str = "database_unavailable") -> Answer:
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    return Answer(503, {"error": {"code": code, "message": "down for a moment"}}, headers)


class ScriptedServer:
    """Answers requests in order from `script`; past its end, with the last answer again."""

    def __init__(self, script: list[Answer]) -> None:
        self.script = list(script)
        self.seen: list[Seen] = []
        self._guard = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                with outer._guard:
                    outer.seen.append(Seen(time.monotonic(), time.time(), self.command, self.path, body))
                    index = min(len(outer.seen), len(outer.script)) - 1
                    answer = outer.script[index]
                payload = json.dumps(answer.body).encode()
                self.send_response(answer.status)
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _answer

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def gaps(self) -> list[float]:
        """Seconds between consecutive requests, as the server saw them."""
        return [b.at - a.at for a, b in zip(self.seen, self.seen[1:], strict=False)]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@contextlib.contextmanager
def scripted(script: list[Answer]) -> Iterator[ScriptedServer]:
    server = ScriptedServer(script)
    try:
        yield server
    finally:
        server.close()
