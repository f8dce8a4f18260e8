"""A loopback HTTP listener that plays an OpenAI-compatible provider and records every request it gets.

The security tests name it where an attacker would (an `api_base` in a proxy request) and assert it
received nothing; the positive controls point a real call at it and assert it received the request, the
server's key included, so those tests can fail.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

REPLY = "answer from the loopback listener"


@dataclass(frozen=True)
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers.items() if k.lower() == name.lower()), None)


def _completion(stream: bool) -> tuple[str, bytes]:
    base = {"id": "chatcmpl-listener", "created": 1, "model": "gpt-4o"}
    if not stream:
        body = {
            **base,
            "object": "chat.completion",
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": REPLY}, "finish_reason": "stop"}
            ],
            "usage": {"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12},
        }
        return "application/json", json.dumps(body).encode()
    chunk = {
        **base,
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": REPLY}, "finish_reason": "stop"}],
    }
    return "text/event-stream", f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode()


class Listener:
    """Records requests under a lock; `url` is `http://127.0.0.1:<port>`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._received: list[Received] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def received(self) -> list[Received]:
        with self._lock:
            return list(self._received)

    def _record(self, request: Received) -> None:
        with self._lock:
            self._received.append(request)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        listener = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                listener._record(Received(self.command, self.path, dict(self.headers.items()), body))
                try:
                    stream = bool(json.loads(body or b"{}").get("stream"))
                except (ValueError, AttributeError):
                    stream = False
                content_type, payload = _completion(stream)
                self.send_response(200)
                self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_POST = do_GET = do_PUT = _answer

            def log_message(self, format: str, *args: Any) -> None:
                return

        return Handler

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@contextmanager
def listening() -> Iterator[Listener]:
    listener = Listener()
    listener.start()
    try:
        yield listener
    finally:
        listener.close()
