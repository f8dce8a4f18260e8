"""A per-request model and extractor choice on `POST /v1/threads/{id}/turns` (`memory_options`, issue 33):
the service's equivalent of the original's dynamic model function.

The choice applies to the Observer and Reflector calls of the background work the turn starts, also when
that work runs in another process (the task carries it); later turns without it use the thread's config.
It is a tenant key's input: a model must match the operator's `OM_REQUEST_MODELS` and pass
`OM_MEMORY_MODELS` (a self-hosted provider only when named), extractors need `OM_REQUEST_EXTRACTORS`, and
only models and extractors may be chosen; anything else is refused (422 naming the field) before anything
is stored. Engine cases run on SQLite with the fake model recording which model each call named; the API
cases through the real app (SQLite, keys auth, the offline model).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine
from starlette.testclient import TestClient

from om_api.app import create_app
from om_api.settings import ApiSettings
from om_client import OMAPIError, OMClient, RetryPolicy
from om_core.config.options import ObservationalMemoryConfig
from om_core.config.trust import MemoryPolicy
from om_core.engine import MemoryEngine
from om_core.engine.ports import EngineSettings
from om_core.engine.tasks import (
    REQUEST_CHOICE,
    BufferObservation,
    IndexThread,
    Task,
    task_from_dict,
    task_to_dict,
)
from om_core.errors import OMConfigError
from om_core.messages import Message, text_message
from om_core.store import history
from om_core.store.db import make_engine
from om_core.store.migrate import upgrade
from om_core.tenancy import access
from om_core.tenancy.scoped_ids import StoredId
from tests.support.fake_models import FakeModels

T0 = datetime(2026, 3, 3, 9, 0, tzinfo=UTC)


def config() -> ObservationalMemoryConfig:
    return ObservationalMemoryConfig.parse(
        {
            "model": "fake/base",
            "observation": {"messageTokens": 1000, "bufferTokens": 0.25},
            "reflection": {"observationTokens": 50_000},
        }
    )


def message(i: int) -> Message:
    words = " ".join(f"{w}{i}" for w in ("harbor", "lantern", "copper", "meadow", "signal") * 20)
    role = "assistant" if i % 2 else "user"
    return text_message(f"m{i}", role, f"Message {i}: {words}", T0 + timedelta(minutes=i))


def engine(db: Engine, fake: FakeModels, **policy: Any) -> MemoryEngine:
    settings = EngineSettings(memory_policy=MemoryPolicy(**policy))
    return MemoryEngine(db, models=fake, config=config(), settings=settings)  # type: ignore[arg-type]


def until_a_call(om: MemoryEngine, fake: FakeModels, thread: StoredId, start: int, **turn: Any) -> int:
    for i in range(start, start + 12):
        om.ingest_turn(thread, thread, [message(i)], **turn)
        if fake.models:
            return i + 1
    raise AssertionError("no Observer call")


def test_the_chosen_model_observes_for_that_turn_and_later_turns_use_the_threads(
    sqlite_engine: Engine,
) -> None:
    fake = FakeModels()
    om = engine(sqlite_engine, fake, request_models=("fake/chosen-*",))
    thread = StoredId(f"t-{uuid.uuid4().hex[:8]}")
    chosen = {"observation": {"model": "fake/chosen-observer"}}
    after = until_a_call(om, fake, thread, 0, memory_options=chosen)
    assert set(fake.models) == {"fake/chosen-observer"}
    fake.models.clear()
    until_a_call(om, fake, thread, after)
    assert set(fake.models) == {"fake/base"}, "the choice was this turn's, not the thread's"


class Queue:
    """An executor that only queues, as Celery would: the work runs later, outside the turn."""

    def __init__(self) -> None:
        self.payloads: list[dict[str, Any]] = []

    def submit(self, task: Task) -> None:
        self.payloads.append(task_to_dict(task))

    def run(self, task: Task, deadline_s: float) -> bool:
        self.submit(task)
        return False

    def run_all(self, tasks: Any, deadline_s: float) -> bool:
        for task in tasks:
            self.submit(task)
        return False


def test_queued_work_carries_the_choice_to_the_process_that_runs_it(sqlite_engine: Engine) -> None:
    fake = FakeModels()
    queue = Queue()
    settings = EngineSettings(memory_policy=MemoryPolicy(request_models=("fake/*",)))
    om = MemoryEngine(sqlite_engine, models=fake, config=config(), settings=settings, executor=queue)  # type: ignore[arg-type]
    thread = StoredId(f"t-{uuid.uuid4().hex[:8]}")
    for i in range(6):
        om.ingest_turn(thread, thread, [message(i)], memory_options={"model": "fake/queued"})
    buffering = [p for p in queue.payloads if p["kind"] == "BufferObservation"]
    assert buffering and all("fake/queued" in p["choice"] for p in buffering)
    assert fake.models == [], "nothing ran inside the turn"
    # The worker: the payload decoded and run with no turn around it.
    assert REQUEST_CHOICE.get() == ""
    om.run_task(task_from_dict(buffering[0]))
    assert set(fake.models) == {"fake/queued"}


def test_a_payload_without_a_choice_stays_as_before() -> None:
    task = BufferObservation(StoredId("acme/t"), "buffer-obs-1", 100)
    assert "choice" not in task_to_dict(task)
    token = REQUEST_CHOICE.set('{"observation":{"model":"a/b"}}')
    try:
        assert task_to_dict(task)["choice"] == '{"observation":{"model":"a/b"}}'
        assert "choice" not in task_to_dict(IndexThread(StoredId("acme/t"), "index-1")), "not a model call"
    finally:
        REQUEST_CHOICE.reset(token)


@pytest.mark.parametrize(
    ("options", "policy", "code", "field"),
    [
        (
            {"model": "fake/other"},
            {"request_models": ("fake/chosen-*",)},
            "MODEL_NOT_ALLOWED",
            "observation.model",
        ),
        ({"model": "fake/chosen-x"}, {}, "MODEL_NOT_ALLOWED", "observation.model"),
        ({"model": "ollama/llama3"}, {"request_models": ("*",)}, "MODEL_NOT_ALLOWED", "observation.model"),
        (
            {"reflection": {"model": "fake/chosen-x"}},
            {"request_models": ("fake/*",), "models": ("openai/*",)},
            "MODEL_NOT_ALLOWED",
            "reflection.model",
        ),
        (
            {"observation": {"messageTokens": 1}},
            {"request_models": ("*",)},
            "REQUEST_OPTION_NOT_ALLOWED",
            "observation.messageTokens",
        ),
        ({"enabled": False}, {"request_models": ("*",)}, "REQUEST_OPTION_NOT_ALLOWED", "enabled"),
        (
            {"observation": {"extract": [{"name": "mood", "instructions": "the mood"}]}},
            {"request_models": ("*",)},
            "REQUEST_EXTRACTORS_NOT_ALLOWED",
            "observation.extract",
        ),
        (
            {"model": [f"fake/m{i}" for i in range(20)]},
            {"request_models": ("*",)},
            "MODEL_CHAIN_TOO_LONG",
            "observation.model",
        ),
        ({"model": "x" * 20_000}, {"request_models": ("*",)}, "REQUEST_OPTIONS_TOO_LARGE", ""),
    ],
    ids=[
        "not-matched",
        "none-allowed",
        "self-hosted",
        "memory-allow-list",
        "threshold",
        "switch-off",
        "extractors-off",
        "long-chain",
        "huge",
    ],
)
def test_a_choice_the_operator_does_not_allow_is_refused_and_nothing_is_stored(
    sqlite_engine: Engine, options: dict[str, Any], policy: dict[str, Any], code: str, field: str
) -> None:
    fake = FakeModels()
    om = engine(sqlite_engine, fake, **policy)
    thread = StoredId(f"t-{uuid.uuid4().hex[:8]}")
    with pytest.raises(OMConfigError) as caught:
        om.ingest_turn(thread, thread, [message(0)], memory_options=options)
    assert caught.value.code == code
    assert caught.value.field == ("memory_options." + field).rstrip(".")
    assert history.get_thread(sqlite_engine, thread) is None, "nothing stored"
    assert fake.models == []


class SystemPrompts(FakeModels):
    """The fake Observer, keeping each call's system prompt (where inline extractor sections are asked)."""

    def __init__(self) -> None:
        super().__init__()
        self.systems: list[str] = []

    def complete(self, model: Any, *, system: str, user: Any, **rest: Any) -> Any:
        self.systems.append(system)
        return super().complete(model, system=system, user=user, **rest)


def test_chosen_extractors_run_when_the_operator_allows_them(sqlite_engine: Engine) -> None:
    fake = SystemPrompts()
    om = engine(sqlite_engine, fake, request_extractors=True)
    thread = StoredId(f"t-{uuid.uuid4().hex[:8]}")
    extract = [{"name": "mood", "instructions": "the user's mood, one word"}]
    after = until_a_call(om, fake, thread, 0, memory_options={"observation": {"extract": extract}})
    assert fake.systems and all("the user's mood, one word" in system for system in fake.systems)
    assert set(fake.models) == {"fake/base"}, "no model was chosen: the thread's"
    fake.systems.clear()
    fake.models.clear()
    until_a_call(om, fake, thread, after)
    assert not any("the user's mood" in system for system in fake.systems), "this turn's choice only"


# --------------------------------------------------------------------------------------------- the API


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[TestClient, dict[str, str]]]:
    url = f"sqlite:///{tmp_path / 'om.db'}"
    db = make_engine(url)
    upgrade(db)
    key = access.create_key(db, "acme", "request-models").secret
    settings = ApiSettings(
        database_url=url, auth="keys", model="om-local/extractive", request_models="om-local/*"
    )
    with TestClient(create_app(settings)) as client:
        yield client, {"Authorization": f"Bearer {key}"}


def test_the_turns_route_refuses_a_model_the_operator_does_not_allow(
    api: tuple[TestClient, dict[str, str]],
) -> None:
    client, headers = api
    body = {
        "messages": [{"id": "u1", "role": "user", "text": "hello"}],
        "memory_options": {"model": "anthropic/claude-opus-4"},
    }
    refused = client.post("/v1/threads/t-1/turns", json=body, headers=headers)
    assert refused.status_code == 422, refused.text
    error = refused.json()["error"]
    assert error["field"] == "memory_options.observation.model"
    assert "OM_REQUEST_MODELS" in error["message"]
    assert client.get("/v1/threads/t-1/messages", headers=headers).status_code == 404, "nothing stored"

    body["memory_options"] = {"model": "om-local/extractive"}
    accepted = client.post("/v1/threads/t-1/turns", json=body, headers=headers)
    assert accepted.status_code == 200, accepted.text


def test_the_python_client_sends_the_choice(api: tuple[TestClient, dict[str, str]]) -> None:
    client, headers = api
    key = headers["Authorization"].removeprefix("Bearer ")

    def forward(request: httpx.Request) -> httpx.Response:
        answer = client.request(
            request.method, request.url.raw_path.decode(), content=request.content, headers=request.headers
        )
        return httpx.Response(answer.status_code, headers=answer.headers, content=answer.content)

    om = OMClient("http://testserver", key, transport=httpx.MockTransport(forward), retry=RetryPolicy.off())
    with pytest.raises(OMAPIError) as caught:
        om.post_turn("t-2", [{"role": "user", "text": "hi"}], memory_options={"model": "openai/gpt-4o"})
    assert caught.value.status == 422
    assert caught.value.field == "memory_options.observation.model"
    turn = om.post_turn(
        "t-2", [{"role": "user", "text": "hi"}], memory_options={"model": "om-local/extractive"}
    )
    assert turn.thread_id == "t-2"
