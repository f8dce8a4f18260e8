"""A loopback OpenAI-compatible chat endpoint whose every reply a test scripts, for fault injection.

The mock boundary is HTTP: worker processes call `openai/<namespace>` through litellm, the OpenAI SDK and
httpx exactly as they would call a hosted model (the thread's config points `api_base` here), so timeouts,
HTTP 500s and odd bodies travel the real client path, litellm's error mapping and our retry layer.

Each namespace has a script of actions (then a default, then "ok"); every call is recorded before it is
answered, so a test can see a call start. Actions:

- `ok`: answer like the offline local model (real Observer/Reflector output);
- `hold`: wait until the test calls `release(namespace)`, then answer like `ok`;
- `timeout`: answer nothing until long after the client gave up (the client's timeout fires);
- `error500`: HTTP 500 with an OpenAI-style error body;
- `error429`: HTTP 429, the provider's "rate limit exceeded", with an OpenAI-style error body;
- `empty`: a normal reply with empty content;
- `garbage`: control characters, NULs, unpaired surrogates and mojibake, some lines shaped like
  observation bullets (so it reaches the storage boundary instead of stopping at the parser);
- `overbudget`: far more text than `max_tokens` allows, cut at the budget with finish reason "length",
  as a hosted provider does when a reply runs past the output limit.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from om_local.extractive import local_reply
from om_local.reflector import count_tokens, is_reflector_prompt

#: How long a `timeout` or `hold` call keeps its connection before giving up on its own.
STALL_S = 60.0
#: The client timeout the thread config asks litellm for by default: generous, so a loaded machine never
#: times out a real answer.
CLIENT_TIMEOUT_S = 60.0
#: The client timeout while a model is meant to time out (short: a failing call waits for it twice).
SHORT_TIMEOUT_S = 0.5

GARBAGE = "\n".join(
    [
        "\x00\x1b[31m\u00c3\u00a9\u00e2\u0080\u0099 \ufffd\ufffd",
        "* \x00 (09:00) \udcff\ud800 \x07\x08 \u202e\u2066 ÿþ\x00\x00 <observat",
        "- \x1f\x00\x00 }}{{ %s%n%x \\u0000 </observations",
        "* (25:99) \x00\x00\x00",
    ]
)


@dataclass(frozen=True)
class Call:
    namespace: str
    action: str
    kind: str  # "observer" | "reflector"
    max_tokens: int | None
    at: float


@dataclass
class _Namespace:
    script: deque[str] = field(default_factory=deque)
    default: str = "ok"
    calls: list[Call] = field(default_factory=list)
    gate: threading.Event = field(default_factory=threading.Event)


#: The operator setting under which processes accept `ModelServer.thread_config` from a tenant config.
PASSTHROUGH_ENV = {"OM_MEMORY_TENANT_PASSTHROUGH": "true"}


class ModelServer:
    """`with ModelServer() as server:` a running endpoint at `server.api_base`."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._namespaces: dict[str, _Namespace] = defaultdict(_Namespace)
        self._closing = threading.Event()
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._http.daemon_threads = True
        self._thread = threading.Thread(target=self._http.serve_forever, name="model-server", daemon=True)

    @property
    def api_base(self) -> str:
        host, port = self._http.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def __enter__(self) -> ModelServer:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._closing.set()
        self._http.shutdown()
        self._http.server_close()

    # ------------------------------------------------------------------------------------- scripting

    def script(self, namespace: str, *actions: str, default: str | None = None) -> None:
        with self._guard:
            entry = self._namespaces[namespace]
            entry.script.extend(actions)
            if default is not None:
                entry.default = default

    def release(self, namespace: str) -> None:
        """Let every `hold` call of `namespace` (current and future) answer."""
        with self._guard:
            gate = self._namespaces[namespace].gate
        gate.set()

    def calls(self, namespace: str) -> list[Call]:
        with self._guard:
            return list(self._namespaces[namespace].calls)

    def thread_config(
        self, namespace: str, *, timeout_s: float = CLIENT_TIMEOUT_S, **options: Any
    ) -> dict[str, Any]:
        """OM config overrides that send a thread's Observer and Reflector calls here, with a client
        timeout of `timeout_s`; `observation` / `reflection` options are merged in. They use the litellm
        passthrough, which the processes reading them allow only with `PASSTHROUGH_ENV` (the operator's
        opt-in, `om_core.config.trust`)."""
        phases = {}
        for phase in ("observation", "reflection"):
            passthrough = {"litellm": {"api_base": self.api_base, "timeout": timeout_s}}
            phases[phase] = {"providerOptions": passthrough, **options.pop(phase, {})}
        return {"model": f"openai/{namespace}", **phases, **options}

    # ------------------------------------------------------------------------------------- answering

    def _next(self, namespace: str, kind: str, max_tokens: int | None) -> tuple[str, threading.Event]:
        with self._guard:
            entry = self._namespaces[namespace]
            action = entry.script.popleft() if entry.script else entry.default
            entry.calls.append(Call(namespace, action, kind, max_tokens, time.time()))
            return action, entry.gate

    def answer(self, request: dict[str, Any]) -> tuple[int, dict[str, Any] | None]:
        """(HTTP status, JSON body) for one chat completion request; None: drop the connection."""
        namespace = str(request.get("model", "")).split("/")[-1]
        messages = request.get("messages") or []
        system = "\n".join(_text(m.get("content")) for m in messages if m.get("role") == "system")
        user = "\n".join(_text(m.get("content")) for m in messages if m.get("role") == "user")
        max_tokens = request.get("max_tokens") or request.get("max_completion_tokens")
        kind = "reflector" if is_reflector_prompt(user) else "observer"
        action, gate = self._next(namespace, kind, int(max_tokens) if max_tokens else None)
        if action == "timeout":
            self._closing.wait(STALL_S)
            return 0, None
        if action == "hold":
            gate.wait(STALL_S)
        if action == "error500":
            error = {"message": "fake upstream failure", "type": "server_error", "code": "internal_error"}
            return 500, {"error": error}
        if action == "error429":
            error = {"message": "fake rate limit", "type": "rate_limit_error", "code": "rate_limit_exceeded"}
            return 429, {"error": error}
        finish = "stop"
        if action == "empty":
            reply = ""
        elif action == "garbage":
            reply = GARBAGE
        elif action == "overbudget":
            reply, finish = _over_budget(int(max_tokens) if max_tokens else None), "length"
        else:
            reply = local_reply(system, user)
        prompt_tokens, completion_tokens = count_tokens(system) + count_tokens(user), count_tokens(reply)
        return 200, {
            "id": f"chatcmpl-{namespace}-{time.monotonic_ns()}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": namespace,
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": finish}
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def _over_budget(max_tokens: int | None) -> str:
    """Distinct observation lines (no repetition loop) for three times the budget, cut at the budget in
    the middle of a line, where a provider stops generating."""
    budget = max_tokens or 2_000
    lines, used, n = ["<observations>", "Date: Mar 3, 2026"], 0, 0
    kept = 0
    while used < budget * 3:
        n += 1
        line = f"* 🟡 (09:{n % 60:02d}) runaway detail number {n} about item {n * 7919 % 10007}"
        used += count_tokens(line) + 1
        lines.append(line)
        if used <= budget:
            kept = len(lines)
    cut = "\n".join(lines[: max(kept, 3)])
    return cut + "\n" + lines[min(kept, len(lines) - 1)][:20]


def _handler_for(server: ModelServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            request = json.loads(self.rfile.read(length) or b"{}")
            status, body = server.answer(request)
            if body is None:
                self.close_connection = True
                return
            payload = json.dumps(body).encode()
            with contextlib.suppress(OSError):
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            return

    return Handler
