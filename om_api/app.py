"""The FastAPI application: `create_app(settings)` wires the runtime, middleware, errors and routes.

`om serve` builds it in-process; the uvicorn factory is `om_api.asgi:create_app_from_env`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from typing import Any

from anyio import to_thread
from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from om_adapters import telemetry
from om_api import errors, request_ids, ui
from om_api.errors import error_body
from om_api.loopback import LoopbackOnly
from om_api.mcp import endpoint as mcp_endpoint
from om_api.metrics import Metrics, MetricsListener
from om_api.proxy import chat_completions
from om_api.routes import (
    dashboard,
    events,
    health,
    manage,
    recall,
    resources,
    search,
    spend,
    threads,
    transfer,
    usage,
    webhooks,
    working_memory,
)
from om_api.runtime import build_runtime
from om_api.settings import ApiSettings
from om_api.sse import ThreadFeeds, listen_redis
from om_api.stream_slots import StreamSlots
from om_api.tenant_rate_limit import TenantRateLimit
from om_api.tracing import instrument_api
from om_core import Settings

log = logging.getLogger("om.api")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

DESCRIPTION = """Observational Memory for chat backends.

Post each turn to `/v1/threads/{thread_id}/turns` and send the returned context to your model, or point an
OpenAI client at `/v1/chat/completions`. Authenticate with `Authorization: Bearer <key>`.
"""


class BodyLimit:
    """Refuses request bodies over `limit` bytes with 413, before they are read into memory."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    def _message(self) -> str:
        return f"the request body is over {self.limit} bytes (OM_MAX_REQUEST_BYTES): send less per request"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            body = json.dumps(error_body("payload_too_large", self._message(), limit=self.limit)).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 413,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        received = 0

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    raise HTTPException(413, self._message())
            return message

        await self.app(scope, limited, send)


class RequestMetrics:
    """Counts requests and their time to the first response byte, per route template."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        recorded = False

        def record(status: int) -> None:
            nonlocal recorded
            if recorded:
                return
            recorded = True
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            self.metrics.observe_request(
                scope.get("method", "GET"), template, status, time.perf_counter() - started
            )

        async def send_and_record(message: Message) -> None:
            if message["type"] == "http.response.start":
                record(int(message["status"]))
            await send(message)

        try:
            await self.app(scope, receive, send_and_record)
        finally:
            record(500)


def create_app(settings: Settings | None = None) -> FastAPI:
    """The API app. Plain `Settings` work too: the API-only settings are then read from the environment."""
    api_settings = ApiSettings.from_base(settings) if settings is not None else ApiSettings()
    telemetry.setup_tracing("om-api")  # before the runtime: its clients are then instrumented
    runtime = build_runtime(api_settings)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if api_settings.auth == "none":
            log.warning(
                "AUTHENTICATION IS OFF (OM_AUTH=none): every caller can read and change every thread. "
                "Use this only for the embedded, single-user mode. Only requests naming a loopback host "
                "(localhost, 127.0.0.1, [::1]) from no other web origin are answered."
            )
        log.info("om api: executor=%s database=%s", api_settings.executor, runtime.db.url.render_as_string())
        to_thread.current_default_thread_limiter().total_tokens = api_settings.api_threads
        listener = (
            MetricsListener(runtime.metrics.registry, api_settings.metrics_host, api_settings.metrics_port)
            if api_settings.metrics_port
            else None
        )
        _app.state.metrics_listener = listener
        if listener is not None:
            listener.start()
        stop = asyncio.Event()
        fanout = (
            asyncio.create_task(listen_redis(api_settings.redis_url, runtime.fanout, stop))
            if runtime.distributed
            else None
        )
        try:
            yield
        finally:
            stop.set()
            if fanout is not None:
                fanout.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await fanout
            if listener is not None:
                listener.stop()
            await run_in_threadpool(runtime.close)

    app = FastAPI(title="om", version="0.1.0", description=DESCRIPTION, lifespan=lifespan)
    app.state.runtime = runtime
    app.state.stream_slots = StreamSlots(
        per_key=api_settings.sse_max_streams_per_key, total=api_settings.sse_max_streams
    )
    app.state.thread_feeds = ThreadFeeds(runtime.fanout, api_settings.sse_poll_s)
    errors.install(app)
    app.add_middleware(BodyLimit, limit=api_settings.max_request_bytes)
    app.add_middleware(TenantRateLimit, runtime=runtime)
    app.add_middleware(RequestMetrics, metrics=runtime.metrics)
    if api_settings.auth == "none":  # last added runs first: a refused request reaches nothing else
        app.add_middleware(LoopbackOnly)
    for router in (
        threads.router,
        recall.router,
        events.router,
        resources.router,
        search.router,
        manage.router,
        working_memory.threads_router,
        working_memory.resources_router,
        chat_completions.router,
        usage.router,
        spend.router,
        webhooks.router,
        transfer.router,
        dashboard.router,
        health.router,
    ):
        app.include_router(router)
    # MCP (issue 31): the same key and tenant rate limit; the SDK loads on the first /mcp request.
    app.router.routes.append(mcp_endpoint.route(runtime, api_settings.max_request_bytes))
    # The dashboard (issue 17): static files only, which call the routes above with the user's key.
    ui.mount(app)
    instrument_api(app, runtime.db)
    request_ids.install(app)  # last: outside the whole stack, the tracing middleware included
    return app
