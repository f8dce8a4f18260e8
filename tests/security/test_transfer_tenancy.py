"""Export and import as the attacker: one ordinary tenant key against the real app (`OM_AUTH=keys`, SQLite).

A file is untrusted input: whatever ids it carries land in the caller's tenant (another tenant's thread of
the same id is untouched, a stored-id form is refused), another tenant's thread or resource cannot be
exported, a file over `OM_MAX_IMPORT_LINES` or a line over `OM_MAX_IMPORT_LINE_BYTES` is refused before
anything is written, and config overrides in a file pass the operator's policy like `PUT .../config`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, func, select
from starlette.testclient import TestClient

from om_api.app import create_app
from om_api.settings import ApiSettings
from om_core.config.settings import Settings
from om_core.store import schema
from om_core.store.db import make_engine
from om_core.store.migrate import upgrade
from om_core.tenancy import access
from om_core.tenancy.scoped_ids import scoped_id

VICTIM, ATTACKER = "victim", "attacker"
HEADER = {
    "kind": "header",
    "format": "om-memory",
    "version": 1,
    "scope": "thread",
    "exported_at": "2026-01-01T00:00:00Z",
}
NOW = "2026-01-01T00:00:00Z"


@dataclass
class Server:
    client: TestClient
    db: Engine
    keys: dict[str, str]

    def call(self, tenant: str, method: str, path: str, **kwargs: Any) -> Any:
        return self.client.request(
            method, path, headers={"Authorization": f"Bearer {self.keys[tenant]}"}, **kwargs
        )

    def import_lines(self, tenant: str, lines: list[dict[str, Any]]) -> Any:
        body = "\n".join(json.dumps(line) for line in lines).encode()
        return self.call(tenant, "POST", "/v1/import", content=body)

    def messages(self, stored_thread: str) -> int:
        with self.db.connect() as conn:
            return int(
                conn.execute(
                    select(func.count())
                    .select_from(schema.messages)
                    .where(schema.messages.c.thread_id == stored_thread)
                ).scalar_one()
            )


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    url = f"sqlite:///{tmp_path / 'om.db'}"
    db = make_engine(url)
    upgrade(db)
    keys = {tenant: access.create_key(db, tenant, tenant).secret for tenant in (VICTIM, ATTACKER)}
    floors = {
        name: Settings.model_fields[name].default
        for name in ("memory_min_tokens", "memory_min_buffer_tokens")
    }
    settings = ApiSettings(
        database_url=url,
        auth="keys",
        model="om-local/extractive",
        max_import_lines=50,
        max_import_line_bytes=4096,
        **floors,
    )
    with TestClient(create_app(settings)) as client:
        yield Server(client, db, keys)


def _thread(thread: str, resource: str = "r1", **extra: Any) -> dict[str, Any]:
    return {
        "kind": "thread",
        "id": thread,
        "resource_id": resource,
        "created_at": NOW,
        "updated_at": NOW,
        **extra,
    }


def _message(thread: str, message: str, seq: int, text: str = "hello") -> dict[str, Any]:
    return {
        "kind": "message",
        "thread_id": thread,
        "id": message,
        "role": "user",
        "created_at": NOW,
        "parts": [{"type": "text", "text": text, "seq": seq}],
    }


def _victim_thread(server: Server) -> None:
    turn = {"messages": [{"id": "v1", "role": "user", "text": "my secret is 42"}], "resource_id": "r1"}
    assert server.call(VICTIM, "POST", "/v1/threads/t1/turns", json=turn).status_code == 200


def test_an_import_naming_another_tenants_thread_lands_in_the_callers_tenant(server: Server) -> None:
    _victim_thread(server)
    response = server.import_lines(ATTACKER, [HEADER, _thread("t1"), _message("t1", "v1", 1, "overwritten")])
    assert response.status_code == 200, response.text
    assert response.json()["threads"] == 1, "a new thread of the attacker's own, not the victim's"
    assert server.messages(scoped_id(VICTIM, "t1")) == 1
    assert server.messages(scoped_id(ATTACKER, "t1")) == 1
    exported = server.call(VICTIM, "GET", "/v1/threads/t1/export").text
    assert "my secret is 42" in exported and "overwritten" not in exported
    assert "my secret is 42" not in server.call(ATTACKER, "GET", "/v1/threads/t1/export").text


def test_a_stored_id_form_is_refused(server: Server) -> None:
    _victim_thread(server)
    stored = scoped_id(VICTIM, "t1")
    response = server.import_lines(ATTACKER, [HEADER, _thread(stored), _message(stored, "x", 1)])
    assert response.status_code == 422
    assert "line 2" in response.json()["error"]["message"] and "id" in response.json()["error"]["message"]
    assert server.messages(stored) == 1


def test_another_tenants_thread_or_resource_cannot_be_exported(server: Server) -> None:
    _victim_thread(server)
    assert server.call(ATTACKER, "GET", "/v1/threads/t1/export").status_code == 404
    assert server.call(ATTACKER, "GET", "/v1/resources/r1/export").status_code == 404
    assert server.call(VICTIM, "GET", "/v1/resources/r1/export").status_code == 200


def test_too_many_lines_are_refused_before_anything_is_written(server: Server) -> None:
    lines = [HEADER, _thread("big")] + [_message("big", f"m{i}", i + 1) for i in range(60)]
    response = server.import_lines(ATTACKER, lines)
    assert response.status_code == 413
    assert "OM_MAX_IMPORT_LINES" in response.json()["error"]["message"]
    assert server.messages(scoped_id(ATTACKER, "big")) == 0


def test_a_line_over_the_byte_limit_is_refused(server: Server) -> None:
    response = server.import_lines(
        ATTACKER, [HEADER, _thread("long"), _message("long", "m", 1, "x" * 10_000)]
    )
    assert response.status_code == 413
    assert "OM_MAX_IMPORT_LINE_BYTES" in response.json()["error"]["message"]
    assert server.messages(scoped_id(ATTACKER, "long")) == 0


def test_config_in_a_file_passes_the_operators_policy(server: Server) -> None:
    low = {"observation": {"messageTokens": 30}}
    response = server.import_lines(
        ATTACKER, [HEADER, _thread("cfg", config_overrides=low), _message("cfg", "m", 1)]
    )
    assert response.status_code == 422, response.text
    assert "config_overrides" in response.json()["error"]["message"]
    assert server.messages(scoped_id(ATTACKER, "cfg")) == 0


def test_bad_lines_say_what_to_fix(server: Server) -> None:
    no_header = server.import_lines(ATTACKER, [_thread("t")])
    assert no_header.status_code == 422 and "header" in no_header.json()["error"]["message"]
    newer = server.import_lines(ATTACKER, [{**HEADER, "version": 2}])
    assert newer.status_code == 422 and "version" in newer.json()["error"]["message"]
    twice = server.import_lines(
        ATTACKER, [HEADER, _thread("d"), _message("d", "m", 1), _message("d", "n", 1)]
    )
    assert twice.status_code == 422 and "seq" in twice.json()["error"]["message"]
    stray = server.import_lines(ATTACKER, [HEADER, _thread("a"), _message("b", "m", 1)])
    assert stray.status_code == 422 and "line 3" in stray.json()["error"]["message"]


def test_a_sequence_number_past_the_columns_is_refused(server: Server) -> None:
    response = server.import_lines(ATTACKER, [HEADER, _thread("n"), _message("n", "m", 2**63 + 5)])
    assert response.status_code == 422 and "seq" in response.json()["error"]["message"]
    assert server.messages(scoped_id(ATTACKER, "n")) == 0
