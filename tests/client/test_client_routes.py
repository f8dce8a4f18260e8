"""Every route of the API has a method in both Python clients, and that method calls that route.

`ROUTES` is the explicit map (route → method and the arguments of a sample call). The first tests walk
the server's OpenAPI document and fail on a route the map lacks (add a client method, then the route here)
or a mapped route the API no longer has; then every sample call is made, sync and async, through a
transport that records the request and answers 418, and the request's method and path must be the
route's. The tests after those call the methods added for the routes beyond the turn path against a real
`om serve` (tests/client/conftest.py), each checking what the server did and, for a tenant's data, that
another tenant's key is refused."""

from __future__ import annotations

import asyncio
import inspect
import os
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine

from om_client import AsyncOMClient, OMClient, RetryPolicy
from om_client.errors import OMAPIError, OMBadRequest, OMConflict, OMNotFound
from om_client.raw import RawResponse
from om_core.tenancy import access
from tests.support.api_server import METRICS_TOKEN, ApiServer, new_id

Call = tuple[str, tuple[Any, ...], dict[str, Any]]

#: Route (`METHOD /path` as the OpenAPI document spells it) → client method and a sample call's arguments.
ROUTES: dict[str, Call] = {
    "POST /v1/threads/{thread_id}/turns": ("post_turn", ("t1", [{"role": "user", "text": "hi"}]), {}),
    "GET /v1/threads/{thread_id}/status": ("status", ("t1",), {}),
    "GET /v1/threads/{thread_id}/observations": ("observations", ("t1",), {}),
    "GET /v1/threads/{thread_id}/messages": ("messages", ("t1",), {}),
    "POST /v1/threads/{thread_id}/observe": ("observe", ("t1",), {}),
    "POST /v1/threads/{thread_id}/reflect": ("reflect", ("t1",), {}),
    "GET /v1/threads/{thread_id}/config": ("get_config", ("t1",), {}),
    "PUT /v1/threads/{thread_id}/config": ("set_config", ("t1", {"retrieval": True}), {}),
    "DELETE /v1/threads/{thread_id}": ("delete_thread", ("t1",), {}),
    "GET /v1/threads/{thread_id}": ("thread", ("t1",), {}),
    "PATCH /v1/threads/{thread_id}": ("update_thread", ("t1",), {"title": "x"}),
    "POST /v1/threads/{thread_id}/recall": ("recall", ("t1",), {"mode": "messages"}),
    "GET /v1/threads/{thread_id}/events": ("events", ("t1",), {"follow": False}),
    "GET /v1/resources": ("list_resources", (), {}),
    "GET /v1/resources/{resource_id}/threads": ("threads", ("r1",), {}),
    "GET /v1/resources/{resource_id}/config": ("get_resource_config", ("r1",), {}),
    "PUT /v1/resources/{resource_id}/config": ("set_resource_config", ("r1", None), {}),
    "DELETE /v1/resources/{resource_id}": ("delete_resource", ("r1",), {}),
    "POST /v1/resources/{resource_id}/search": ("search", ("r1", "q"), {}),
    "POST /v1/threads/{thread_id}/search": ("search_thread", ("t1", "q"), {}),
    "GET /v1/threads": ("list_threads", (), {}),
    "PATCH /v1/threads/{thread_id}/observations/{line}": (
        "edit_observation",
        ("t1", 0, "new"),
        {"expected": "o"},
    ),
    "DELETE /v1/threads/{thread_id}/observations/{line}": (
        "delete_observation",
        ("t1", 0),
        {"expected": "o"},
    ),
    "GET /v1/threads/{thread_id}/working-memory": ("working_memory", ("t1",), {}),
    "PUT /v1/threads/{thread_id}/working-memory": ("set_working_memory", ("t1", "# Notes"), {}),
    "GET /v1/resources/{resource_id}/working-memory": ("resource_working_memory", ("r1",), {}),
    "PUT /v1/resources/{resource_id}/working-memory": ("set_resource_working_memory", ("r1", "# N"), {}),
    "GET /v1/models": ("models", (), {}),
    "POST /v1/chat/completions": (
        "chat_completion",
        ("om-actor/echo", [{"role": "user", "content": "x"}]),
        {},
    ),
    "GET /v1/usage": ("usage", (), {}),
    "POST /v1/webhooks": ("create_webhook", ("https://1.1.1.1/hook",), {}),
    "GET /v1/webhooks": ("list_webhooks", (), {}),
    "GET /v1/webhooks/{endpoint_id}": ("webhook", ("wh_1",), {}),
    "PATCH /v1/webhooks/{endpoint_id}": ("update_webhook", ("wh_1",), {"enabled": True}),
    "DELETE /v1/webhooks/{endpoint_id}": ("delete_webhook", ("wh_1",), {}),
    "GET /v1/webhooks/{endpoint_id}/deliveries": ("webhook_deliveries", ("wh_1",), {}),
    "POST /v1/webhooks/{endpoint_id}/rotate-secret": ("rotate_webhook_secret", ("wh_1",), {}),
    "DELETE /v1/webhooks/{endpoint_id}/previous-secret": ("end_webhook_rotation", ("wh_1",), {}),
    "GET /v1/usage/spend": ("spend", (), {"thread_id": "t1"}),
    "GET /v1/whoami": ("whoami", (), {}),
    "GET /v1/fleet": ("fleet", (), {}),
    "GET /v1/threads/{thread_id}/generations/{generation}/diff": ("generation_diff", ("t1", 1), {}),
    "GET /v1/threads/{thread_id}/export": ("export_thread", ("t1",), {}),
    "GET /v1/resources/{resource_id}/export": ("export_resource", ("r1",), {}),
    "POST /v1/import": ("import_records", ([{"kind": "header"}],), {}),
    "GET /healthz": ("health", (), {}),
    "GET /readyz": ("ready", (), {}),
    "GET /metrics": ("metrics", ("scrape-token",), {}),
}

METHODS = ("get", "post", "put", "patch", "delete")


@pytest.fixture(scope="module")
def api_routes() -> set[str]:
    """`METHOD /path` of every operation in the server's OpenAPI document (built without serving)."""
    from om_api.app import create_app
    from om_api.settings import ApiSettings

    saved = {name: os.environ.pop(name) for name in list(os.environ) if name.startswith("OM_")}
    try:
        document = create_app(ApiSettings(auth="keys", _env_file=None)).openapi()
    finally:
        os.environ.update(saved)
    return {
        f"{method.upper()} {path}"
        for path, operations in document["paths"].items()
        for method in operations
        if method in METHODS
    }


def test_every_route_of_the_api_has_a_client_method(api_routes: set[str]) -> None:
    missing = sorted(api_routes - ROUTES.keys())
    assert missing == [], (
        f"routes without a client method: {missing}. Add the method to OMClient and AsyncOMClient "
        "(clients/python/om_client/client.py) and the route to ROUTES here"
    )
    stale = sorted(ROUTES.keys() - api_routes)
    assert stale == [], f"ROUTES names routes the API does not have: {stale}"
    assert len(api_routes) >= 42, "the OpenAPI document lost routes: is the app built as the server's?"


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_both_clients_have_the_method(route: str) -> None:
    name = ROUTES[route][0]
    sync, asynchronous = getattr(OMClient, name, None), getattr(AsyncOMClient, name, None)
    assert callable(sync) and callable(asynchronous), f"{route}: {name} missing from a client"
    assert inspect.iscoroutinefunction(asynchronous) or inspect.isasyncgenfunction(asynchronous), name
    same = inspect.signature(sync).parameters == inspect.signature(asynchronous).parameters
    assert same, f"{name}: the two clients take different arguments"


def _pattern(route: str) -> tuple[str, re.Pattern[str]]:
    method, path = route.split(" ", 1)
    return method, re.compile("^" + re.sub(r"\\\{[a-z_]+\\\}", "[^/]+", re.escape(path)) + "$")


class _Recorder:
    """A transport that keeps every request and answers each with a 418 (no server: only where the
    client sends the call is checked here)."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return httpx.Response(418, json={"error": {"code": "teapot", "message": "recorded"}})


def _sent(recorder: _Recorder, route: str) -> None:
    assert recorder.requests, f"{route}: the method sent nothing"
    method, path = _pattern(route)
    request = recorder.requests[-1]
    assert request.method == method and path.match(request.url.path), (
        f"{route}: the client sent {request.method} {request.url.path}"
    )


def test_every_method_calls_its_route() -> None:
    for route, (name, args, kwargs) in ROUTES.items():
        recorder = _Recorder()
        transport = httpx.MockTransport(recorder)
        client = OMClient("http://om.test", "k", transport=transport, retry=RetryPolicy.off())
        with client as om, pytest.raises(OMAPIError):
            result = getattr(om, name)(*args, **kwargs)
            if inspect.isgenerator(result):
                next(result)
        _sent(recorder, route)


def test_every_async_method_calls_its_route() -> None:
    async def main() -> None:
        for route, (name, args, kwargs) in ROUTES.items():
            recorder = _Recorder()
            transport = httpx.MockTransport(recorder)
            async with AsyncOMClient(
                "http://om.test", "k", transport=transport, retry=RetryPolicy.off()
            ) as om:
                with pytest.raises(OMAPIError):
                    result = getattr(om, name)(*args, **kwargs)
                    if inspect.isasyncgen(result):
                        await result.__anext__()
                    else:
                        await result
            _sent(recorder, route)

    asyncio.run(main())


def test_the_base_url_and_key_default_to_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = _Recorder()
    transport = httpx.MockTransport(recorder)
    monkeypatch.delenv("OM_BASE_URL", raising=False)
    monkeypatch.delenv("OM_API_KEY", raising=False)
    with OMClient(transport=transport, retry=RetryPolicy.off()) as om, pytest.raises(OMAPIError):
        om.whoami()
    assert str(recorder.requests[-1].url) == "http://127.0.0.1:8088/v1/whoami"
    assert "authorization" not in recorder.requests[-1].headers
    monkeypatch.setenv("OM_BASE_URL", "http://om.example:9000")
    monkeypatch.setenv("OM_API_KEY", "omk_from_env")
    with OMClient(transport=transport, retry=RetryPolicy.off()) as om, pytest.raises(OMAPIError):
        om.whoami()
    assert str(recorder.requests[-1].url) == "http://om.example:9000/v1/whoami"
    assert recorder.requests[-1].headers["authorization"] == "Bearer omk_from_env"
    with OMClient(api_key="", transport=transport, retry=RetryPolicy.off()) as om, pytest.raises(OMAPIError):
        om.whoami()
    assert "authorization" not in recorder.requests[-1].headers, '"" sends no key'


def test_raw_response_is_refused_for_streams_and_private_names() -> None:
    with OMClient("http://om.test") as om:
        for name in ("events", "iter_threads", "_request", "close"):
            with pytest.raises(AttributeError, match="one request"):
                getattr(om.with_raw_response, name)


def test_a_streamed_chat_completion_is_refused_before_sending() -> None:
    recorder = _Recorder()
    client = OMClient("http://om.test", transport=httpx.MockTransport(recorder))
    with client as om, pytest.raises(ValueError, match="OpenAI SDK"):
        om.chat_completion("om-actor/echo", [{"role": "user", "content": "x"}], stream=True)
    assert recorder.requests == []


# ------------------------------------------------------------------------------------- a real server


@pytest.fixture
def om(stack: ApiServer, key: str) -> Iterator[OMClient]:
    with OMClient(stack.base_url, key, timeout=60) as client:
        yield client


@pytest.fixture
def other(stack: ApiServer, pg_engine: Engine) -> Iterator[OMClient]:
    """A client of another tenant: what it may not see."""
    secret = access.create_key(pg_engine, new_id("tenant"), "other").secret
    with OMClient(stack.base_url, secret, timeout=60) as client:
        yield client


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.timeout(120)
def test_working_memory_read_write_conflict_and_other_tenant(om: OMClient, other: OMClient) -> None:
    thread, resource = new_id("t"), new_id("r")
    om.post_turn(thread, [{"role": "user", "text": "I'm Dana"}], resource_id=resource)
    om.set_config(thread, {"workingMemory": {"enabled": True, "scope": "thread"}})
    first = om.working_memory(thread)
    assert first.version == 0 and first.scope == "thread"
    written = om.set_working_memory(thread, "# Notes\n- name: Dana", expected_version=0)
    assert written.version == 1 and written.content == "# Notes\n- name: Dana"
    assert om.working_memory(thread).content == "# Notes\n- name: Dana"
    with pytest.raises(OMConflict) as conflict:
        om.set_working_memory(thread, "# stale", expected_version=0)
    assert conflict.value.code == "version_conflict"
    with pytest.raises(OMNotFound):
        other.working_memory(thread)
    with pytest.raises(OMNotFound):
        other.set_working_memory(thread, "# taken over")
    assert om.working_memory(thread).version == 1, "the other tenant's write changed nothing"


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.timeout(120)
def test_resource_working_memory(om: OMClient) -> None:
    thread, resource = new_id("t"), new_id("r")
    om.post_turn(thread, [{"role": "user", "text": "hello"}], resource_id=resource)
    om.set_resource_config(resource, {"workingMemory": {"enabled": True, "scope": "resource"}})
    written = om.set_resource_working_memory(resource, "# Profile\n- likes: tea")
    assert written.scope == "resource" and written.resource_id == resource and written.version == 1
    assert om.resource_working_memory(resource).content == "# Profile\n- likes: tea"
    assert om.working_memory(thread).content == "# Profile\n- likes: tea", "the thread sees its resource's"


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.timeout(120)
def test_webhooks_lifecycle_raw_response_and_other_tenant(om: OMClient, other: OMClient) -> None:
    with pytest.raises(OMBadRequest) as refused:
        om.create_webhook("http://127.0.0.1:9/hook", ["*"])
    assert refused.value.code == "webhook_target_refused"
    raw = om.with_raw_response.create_webhook("https://1.1.1.1/hook", ["data-om-status"], description="d")
    assert isinstance(raw, RawResponse) and raw.status_code == 201
    assert raw.headers["content-type"].startswith("application/json")
    created = raw.parse()
    assert created.secret and created.events == ["data-om-status"] and raw.json()["id"] == created.id
    try:
        assert [w.id for w in om.list_webhooks().items] == [created.id]
        assert om.webhook(created.id).url == "https://1.1.1.1/hook"
        updated = om.update_webhook(created.id, enabled=False, events=["*"])
        assert updated.enabled is False and updated.events == ["*"]
        deliveries = om.webhook_deliveries(created.id)
        assert deliveries.endpoint_id == created.id and deliveries.items == []
        rotated = om.rotate_webhook_secret(created.id, keep_previous_s=60)
        assert rotated.secret.startswith("whsec_") and rotated.secret != created.secret
        assert rotated.previous_secret_expires_at is not None
        assert om.end_webhook_rotation(created.id).previous_secret_expires_at is None
        assert om.update_webhook(created.id, legacy_signature=False).legacy_signature is False
        assert other.list_webhooks().items == []
        for attempt in (
            other.webhook,
            other.delete_webhook,
            other.webhook_deliveries,
            other.rotate_webhook_secret,
            other.end_webhook_rotation,
        ):
            with pytest.raises(OMNotFound):
                attempt(created.id)
    finally:
        deleted = om.with_raw_response.delete_webhook(created.id)
    assert deleted.status_code == 204 and deleted.parse() is None and deleted.json() is None
    with pytest.raises(OMNotFound):
        om.webhook(created.id)
    with pytest.raises((OMNotFound, OMBadRequest)):  # an id is one path segment: it cannot reach a route
        om.webhook("../../v1/whoami")


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.timeout(120)
def test_resources_whoami_fleet_diff_and_metrics(
    om: OMClient, other: OMClient, tenant: str, stack: ApiServer
) -> None:
    resource = new_id("r")
    thread = new_id("t")
    om.post_turn(thread, [{"role": "user", "text": "hello"}], resource_id=resource)
    listed = om.list_resources(q=resource)
    assert [(r.id, r.threads, r.messages) for r in listed.items] == [(resource, 1, 1)]
    assert other.list_resources(q=resource).items == []
    me = om.whoami()
    assert me.auth == "key" and me.tenant_id == tenant
    assert om.fleet().executor == "inline"
    with pytest.raises(OMNotFound) as missing:
        om.generation_diff(thread, 3)
    assert missing.value.code == "generation_not_found"
    assert "om_" in om.metrics(METRICS_TOKEN)
    spent = om.spend(days=7, thread_id=thread)
    assert spent.thread_id == thread and spent.threads == [] and spent.first_day <= spent.last_day
    assert om.spend(days=1).last_day == spent.last_day
    with pytest.raises(OMAPIError) as scrape:
        om.metrics("not-the-token")
    assert scrape.value.status == 401


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.timeout(120)
def test_chat_completion_stores_the_turn(om: OMClient) -> None:
    thread = new_id("t")
    reply = om.chat_completion(
        "om-actor/echo", [{"role": "user", "content": "remember the blue door"}], thread_id=thread
    )
    assert reply.choices and reply.model
    texts = [m.parts[0].text for m in om.messages(thread).items if m.parts]
    assert any("blue door" in (t or "") for t in texts), texts


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.timeout(120)
def test_the_async_client_reaches_the_new_routes(stack: ApiServer, key: str) -> None:
    async def main() -> None:
        async with AsyncOMClient(stack.base_url, key, timeout=60) as om:
            thread = new_id("t")
            await om.post_turn(thread, [{"role": "user", "text": "hi"}], resource_id=new_id("r"))
            await om.set_config(thread, {"workingMemory": {"enabled": True, "scope": "thread"}})
            raw = await om.with_raw_response.set_working_memory(thread, "# A")
            assert raw.status_code == 200 and raw.parse().version == 1
            created = await om.create_webhook("https://1.1.1.1/hook")
            assert [w.id for w in (await om.list_webhooks()).items] == [created.id]
            await om.delete_webhook(created.id)
            assert (await om.whoami()).auth == "key"

    asyncio.run(main())
