"""Extractor definitions through the HTTP API (SQLite, no key): a definition that breaks a rule of §8.2 is
a 422 naming the entry and the rule's code, and is not stored; a thread shows its extracted values."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Engine
from starlette.testclient import TestClient

from om_api.app import create_app
from om_api.settings import ApiSettings


def test_a_bad_extractor_is_a_422_naming_the_entry_and_a_good_one_is_stored(
    tmp_path: Path, sqlite_engine: Engine
) -> None:
    # `sqlite_engine` migrated the database at this path.
    settings = ApiSettings(database_url=f"sqlite:///{tmp_path / 'om.db'}", auth="none")
    with TestClient(create_app(settings), base_url="http://localhost") as client:
        bad = {
            "observation": {
                "extract": [{"name": "ok", "instructions": "x"}, {"name": "Tool", "instructions": "x"}]
            }
        }
        answer = client.put("/v1/threads/t1/config", json={"overrides": bad, "resource_id": "u1"})
        assert answer.status_code == 422, answer.text
        body = answer.json()
        assert "EXTRACTOR_RESERVED_SLUG" in str(body) and "observation.extract[1].name" in str(body)
        assert "Tool" not in client.get("/v1/threads/t1/config").text, "a refused config is not stored"

        good = {"observation": {"extract": [{"name": "Mood", "instructions": "The user's mood."}]}}
        stored = client.put("/v1/threads/t1/config", json={"overrides": good, "resource_id": "u1"})
        assert stored.status_code == 200, stored.text
        thread = client.get("/v1/threads/t1")
        assert thread.status_code == 200 and thread.json()["extracted"] == {}
