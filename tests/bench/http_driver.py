"""Posting turns over HTTP with as little client overhead inside the timed span as possible.

Request bodies are serialised before the clock starts and responses are decoded after it stops, so a
figure is the server's time plus the loopback round trip, which is what a chat backend on the same host
would see. One `httpx.AsyncClient` with a connection per simulated thread keeps connection setup out of
the timings (a backend keeps its connections alive too).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx


@dataclass
class Call:
    """One `/turns` call: how long it took and what it answered."""

    elapsed_ms: float
    status_code: int
    body: bytes

    def json(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.body)
        return data

    def check(self) -> Call:
        if self.status_code != 200:
            raise RuntimeError(f"/turns answered {self.status_code}: {self.body[:500]!r}")
        return self


#: What the documented client asks for on each call of an exchange (docs/guide/backend.md, "A turn",
#: and the quickstart): the context as chat-completions messages with the user message, none with the reply.
USER_CONTEXT = "openai"
REPLY_CONTEXT = "none"


def turn_payload(
    messages: Sequence[Mapping[str, Any]], resource_id: str, context: str | None = None
) -> bytes:
    body: dict[str, Any] = {"messages": list(messages), "resource_id": resource_id}
    if context is not None:
        body["context"] = context
    return json.dumps(body).encode()


class TurnPoster:
    def __init__(self, base_url: str, api_key: str, *, connections: int = 64, timeout_s: float = 120) -> None:
        self.http = httpx.AsyncClient(
            base_url=base_url,
            headers={"Authorization": f"Bearer {api_key}", "content-type": "application/json"},
            timeout=timeout_s,
            # uvicorn closes a keep-alive connection idle for 5 s; dropping ours first avoids reusing one the
            # server is closing (a ReadError on the next request).
            limits=httpx.Limits(
                max_connections=connections, max_keepalive_connections=connections, keepalive_expiry=3.0
            ),
        )

    async def __aenter__(self) -> TurnPoster:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.http.aclose()

    async def post(self, thread_id: str, payload: bytes) -> Call:
        path = f"/v1/threads/{quote(thread_id, safe='')}/turns"
        started = time.perf_counter()
        response = await self.http.post(path, content=payload)
        body = await response.aread()
        elapsed = (time.perf_counter() - started) * 1000
        return Call(elapsed, response.status_code, body).check()

    async def set_config(self, thread_id: str, overrides: Mapping[str, Any], resource_id: str) -> None:
        path = f"/v1/threads/{quote(thread_id, safe='')}/config"
        response = await self.http.put(path, json={"overrides": dict(overrides), "resource_id": resource_id})
        if response.status_code != 200:
            raise RuntimeError(f"PUT /config answered {response.status_code}: {response.text[:500]}")
