"""Import from the original: a LibSQL database the original itself wrote (tests/fixtures/mastra/README.md)
is read and imported into om on Postgres; the message counts match, and the first turn's context holds the
original's active observations. The same rows read from a Postgres copy of the original's tables give the
same lines, and `om import --from-mastra` reports its progress as JSON.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, func, select, text
from starlette.testclient import TestClient

from om_api.app import create_app
from om_api.settings import ApiSettings
from om_core.store import schema
from om_core.tenancy import access
from om_core.tenancy.scoped_ids import scoped_id
from om_core.transfer import mastra
from om_core.transfer.records import dump_line
from om_core.transfer.sqlite_jsonb import decode

pytestmark = [pytest.mark.postgres]

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "mastra" / "thread-30-turns.db"
TABLES = ("mastra_threads", "mastra_messages", "mastra_resources", "mastra_observational_memory")


def _original() -> dict[str, Any]:
    """What the original stored, read with nothing of om."""
    with sqlite3.connect(f"file:{FIXTURE}?mode=ro", uri=True) as conn:
        conn.row_factory = sqlite3.Row
        record = conn.execute("SELECT * FROM mastra_observational_memory").fetchone()
        return {
            "messages": conn.execute("SELECT count(*) FROM mastra_messages").fetchone()[0],
            "observations": record["activeObservations"],
            "thread": conn.execute("SELECT id, resourceId FROM mastra_threads").fetchone(),
        }


def _lines(db: Engine) -> list[str]:
    return [dump_line(line) for line in mastra.read_mastra(db)]


@pytest.fixture
def api(pg_engine: Engine) -> Iterator[tuple[TestClient, str, str]]:
    tenant = f"mastra-{uuid.uuid4().hex[:8]}"
    key = access.create_key(pg_engine, tenant, "import").secret
    settings = ApiSettings(
        database_url=pg_engine.url.render_as_string(hide_password=False),
        auth="keys",
        executor="inline",
        model="om-local/extractive",
    )
    with TestClient(create_app(settings)) as client:
        yield client, tenant, key


def test_the_originals_memory_shows_in_the_first_turns_context(
    api: tuple[TestClient, str, str], pg_engine: Engine
) -> None:
    client, tenant, key = api
    original = _original()
    headers = {"Authorization": f"Bearer {key}"}
    body = "".join(_lines(mastra.open_source(str(FIXTURE)))).encode()

    report = client.post("/v1/import", content=body, headers=headers).json()
    assert report["source"] == "mastra" and report["threads"] == 1 and report["records"] == 1
    assert report["messages"] == original["messages"] == 60
    thread_id, resource_id = original["thread"]
    with pg_engine.connect() as conn:
        stored = conn.execute(
            select(func.count())
            .select_from(schema.messages)
            .where(schema.messages.c.thread_id == scoped_id(tenant, thread_id))
        ).scalar_one()
        chunks = conn.execute(
            select(func.count())
            .select_from(schema.chunks)
            .where(schema.chunks.c.state == "buffered")
            .where(schema.chunks.c.lookup_key == f"thread:{scoped_id(tenant, thread_id)}")
        ).scalar_one()
    assert stored == original["messages"]
    assert chunks == 4, "the original's four buffered chunks continue from its cursor"

    turn = client.post(
        f"/v1/threads/{thread_id}/turns",
        json={
            "messages": [{"id": "after-import", "role": "user", "text": "What did I say about risotto?"}],
            "resource_id": resource_id,
            "context": "full",
        },
        headers=headers,
    ).json()
    memory = "\n".join(turn["context"]["system_messages"])
    lines = [line for line in original["observations"].splitlines() if line.startswith("* ")]
    assert len(lines) > 40
    # The actor is shown the log without the 🟡 and 🟢 priority marks (only 🔴 is kept), as the original
    # shows it too; every line is there otherwise, word for word.
    missing = [line for line in lines if line.replace("🟡 ", "").replace("🟢 ", "") not in memory]
    assert not missing, f"{len(missing)} of the original's observations are not in the context: {missing[:2]}"
    shown = {m["id"] for m in turn["context"]["messages"]}
    assert "after-import" in shown and len(shown) < original["messages"], "observed messages are not raw"


def test_a_postgres_copy_of_the_tables_reads_the_same(pg_engine: Engine, postgres_url: str) -> None:
    schema_name = f"mastra_{uuid.uuid4().hex[:8]}"
    with sqlite3.connect(f"file:{FIXTURE}?mode=ro", uri=True) as source, pg_engine.begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema_name}"))
        for table in TABLES:
            columns = [row[1] for row in source.execute(f"PRAGMA table_info({table})")]
            quoted = ", ".join(f'"{c}" text' for c in columns)
            conn.execute(text(f"CREATE TABLE {schema_name}.{table} ({quoted})"))
            for row in source.execute(f"SELECT * FROM {table}"):
                values = {
                    f"c{i}": (
                        json.dumps(decode(v)) if isinstance(v, bytes) else (None if v is None else str(v))
                    )
                    for i, v in enumerate(row)
                }
                names = ", ".join(f'"{c}"' for c in columns)
                params = ", ".join(f":c{i}" for i in range(len(columns)))
                conn.execute(text(f"INSERT INTO {schema_name}.{table} ({names}) VALUES ({params})"), values)
    try:
        url = postgres_url.replace("postgresql+psycopg2://", "postgresql://")
        separator = "&" if "?" in url else "?"
        from_pg = _lines(mastra.open_source(f"{url}{separator}options=-csearch_path%3D{schema_name}"))
        from_file = _lines(mastra.open_source(str(FIXTURE)))
        assert [json.loads(x) for x in from_pg[1:]] == [json.loads(x) for x in from_file[1:]]
    finally:
        with pg_engine.begin() as conn:
            conn.execute(text(f"DROP SCHEMA {schema_name} CASCADE"))


def test_the_cli_imports_with_json_progress(tmp_path: Path, sqlite_template: Path) -> None:
    database = tmp_path / "om.db"
    database.write_bytes(sqlite_template.read_bytes())
    env = {**os.environ, "OM_DATABASE_URL": f"sqlite:///{database}", "OM_AUTH": "none"}
    command = [sys.executable, "-m", "om_app.cli", "import", "--from-mastra", str(FIXTURE), "--json"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    reports = [json.loads(line) for line in done.stdout.splitlines()]
    assert reports[-1]["done"] is True and reports[-1]["messages"] == 60
    assert any(not r["done"] for r in reports), "progress lines come before the result"
    again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert json.loads(again.stdout.splitlines()[-1])["messages_skipped"] == 60
