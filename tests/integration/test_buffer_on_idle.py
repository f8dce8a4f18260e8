"""`observation.bufferOnIdle` (issue 33; behaviour §2.2, the guide's "buffer on idle"): a turn that ends
(the last message is the assistant's, or `turn_end`) buffers its short window in the background, without
waiting for the next `bufferTokens` interval; with async buffering off it cannot act, and the config says
so in its warnings (`GET /v1/threads/{id}/config`).

Engine cases run through `MemoryEngine` on SQLite with the inline executor and the fake Observer; the
warning is read through the real app (SQLite, keys auth).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine
from starlette.testclient import TestClient

from om_api.app import create_app
from om_api.settings import ApiSettings
from om_core.config.options import ObservationalMemoryConfig
from om_core.engine import MemoryEngine, lookup_key
from om_core.engine import events as ev
from om_core.messages import text_message
from om_core.store import records
from om_core.store.db import make_engine
from om_core.store.migrate import upgrade
from om_core.tenancy import access
from om_core.tenancy.scoped_ids import StoredId
from tests.support.fake_models import FakeModels

T0 = datetime(2026, 3, 3, 9, 0, tzinfo=UTC)
IGNORED = "observation.bufferOnIdle=True is ignored because async buffering is disabled"


def config(**observation: Any) -> ObservationalMemoryConfig:
    return ObservationalMemoryConfig.parse(
        {
            "model": "fake/observer",
            "observation": {"messageTokens": 6000, "bufferTokens": 0.2, **observation},
            "reflection": {"observationTokens": 50_000},
        }
    )


def exchange(om: MemoryEngine, thread: StoredId, *, turn_end: bool | None = None) -> list[str]:
    """One short question and its answer (far below the 1,200-token buffering interval); event types."""
    question = text_message("u0", "user", "Where did I park? Level 3, spot 12, near the lift.", T0)
    answer = text_message("a0", "assistant", "You parked on level 3, spot 12.", T0 + timedelta(seconds=5))
    om.ingest_turn(thread, thread, [question])
    result = om.ingest_turn(thread, thread, [answer], turn_end=turn_end)
    return [e.type for e in result.events]


def test_a_short_turn_that_ends_is_buffered_at_once(sqlite_engine: Engine) -> None:
    fake = FakeModels()
    om = MemoryEngine(sqlite_engine, models=fake, config=config(bufferOnIdle=True))  # type: ignore[arg-type]
    thread = StoredId(f"t-{uuid.uuid4().hex[:8]}")
    types = exchange(om, thread)
    assert ev.BUFFERING_END.value in types
    head = records.get_head(sqlite_engine, lookup_key(thread))
    assert head is not None and len(head.chunks) == 1
    assert "Level" in head.chunks[0].observations or "level" in head.chunks[0].observations
    assert head.active_observations == "", "buffered, not activated: messageTokens is far away"


def test_without_it_the_same_turn_waits_for_the_interval(sqlite_engine: Engine) -> None:
    fake = FakeModels()
    om = MemoryEngine(sqlite_engine, models=fake, config=config())  # type: ignore[arg-type]
    thread = StoredId(f"t-{uuid.uuid4().hex[:8]}")
    assert ev.BUFFERING_START.value not in exchange(om, thread)
    assert fake.calls == []


def test_a_turn_that_does_not_end_is_not_buffered(sqlite_engine: Engine) -> None:
    fake = FakeModels()
    om = MemoryEngine(sqlite_engine, models=fake, config=config(bufferOnIdle=True))  # type: ignore[arg-type]
    thread = StoredId(f"t-{uuid.uuid4().hex[:8]}")
    assert ev.BUFFERING_START.value not in exchange(om, thread, turn_end=False)
    assert fake.calls == []


def test_with_buffering_off_it_does_nothing_and_the_config_warns(sqlite_engine: Engine) -> None:
    cfg = config(bufferOnIdle=True, bufferTokens=False)
    assert any(IGNORED in warning for warning in cfg.resolve().warnings)
    assert not any("bufferOnIdle" in w for w in config(bufferOnIdle=True).resolve().warnings)
    fake = FakeModels()
    om = MemoryEngine(sqlite_engine, models=fake, config=cfg)  # type: ignore[arg-type]
    thread = StoredId(f"t-{uuid.uuid4().hex[:8]}")
    assert ev.BUFFERING_START.value not in exchange(om, thread)
    assert fake.calls == []


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[TestClient, dict[str, str]]]:
    url = f"sqlite:///{tmp_path / 'om.db'}"
    db = make_engine(url)
    upgrade(db)
    key = access.create_key(db, "acme", "idle").secret
    settings = ApiSettings(database_url=url, auth="keys", model="om-local/extractive")
    with TestClient(create_app(settings)) as client:
        yield client, {"Authorization": f"Bearer {key}"}


def test_the_thread_config_lists_the_warning(api: tuple[TestClient, dict[str, str]]) -> None:
    client, headers = api
    body = {"resource_id": "u-1", "overrides": {"observation": {"bufferOnIdle": True, "bufferTokens": False}}}
    put = client.put("/v1/threads/t-idle/config", json=body, headers=headers)
    assert put.status_code == 200, put.text
    assert any(IGNORED in warning for warning in put.json()["warnings"])
    got = client.get("/v1/threads/t-idle/config", headers=headers)
    assert any(IGNORED in warning for warning in got.json()["warnings"])
    # The same answer names the models the config resolves to (what the dashboard shows by the bars).
    assert got.json()["models"] == {"observer": "om-local/extractive", "reflector": "om-local/extractive"}
    # Buffering on again: the option acts, and nothing is reported.
    body["overrides"] = {"observation": {"bufferOnIdle": True}}
    again = client.put("/v1/threads/t-idle/config", json=body, headers=headers)
    assert again.status_code == 200 and again.json()["warnings"] == []
