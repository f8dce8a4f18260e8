"""Migration 0003 carries a database of global ids to ids stored per tenant, on Postgres and SQLite.

A database at 0002 is filled by the engine the way 0002 stored a tenant's thread (the public id as the
stored id, the tenant in a column): a conversation long enough to observe, buffer and reflect. After the
upgrade, the same thread read under its stored id `<tenant>/<id>` gives back every message, the active log,
the generations, chunks, events and triggers, and a thread stored without a tenant keeps its id.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, func, select, text
from sqlalchemy.engine import make_url

from om_core import queries
from om_core.config.options import ObservationalMemoryConfig
from om_core.engine import EngineSettings, MemoryEngine, lookup_key
from om_core.messages import text_message
from om_core.store import history, records, schema
from om_core.store.db import make_engine
from om_core.store.migrate import upgrade
from om_core.store.outbox import list_events
from om_core.store.revision import SCHEMA_HEAD
from om_core.tenancy.scoped_ids import scoped_id
from tests.support.fake_models import FakeModels
from tests.support.invariants import check_thread

T0 = datetime(2026, 3, 3, 9, 0, tzinfo=UTC)
TENANT = "acme/eu"  # a separator inside the tenant's own name must not confuse the split
#: Tables a later migration adds that today's engine writes on every cycle (OM usage totals): they exist
#: while the test fills the 0002 database with today's engine and are dropped before the upgrade, which
#: creates them again.
LATER_TABLES = [schema.usage_threads, schema.usage_tenant_deltas, schema.usage_thread_days]


@pytest.fixture(params=[pytest.param("postgres", marks=pytest.mark.postgres), "sqlite"])
def db_at_0002(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    if request.param == "sqlite":
        engine = make_engine(f"sqlite:///{tmp_path / 'om.db'}")
        upgrade(engine, "0002")
        schema.metadata.create_all(engine, tables=LATER_TABLES)
        yield engine
        engine.dispose()
        return
    server = make_url(request.getfixturevalue("postgres_url"))
    name = f"om_migration_{uuid.uuid4().hex[:12]}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    engine = make_engine(server.set(database=name).render_as_string(hide_password=False))
    try:
        upgrade(engine, "0002")
        schema.metadata.create_all(engine, tables=LATER_TABLES)
        yield engine
    finally:
        engine.dispose()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE "{name}"'))
        admin.dispose()


def _engine(db: Engine) -> MemoryEngine:
    config = ObservationalMemoryConfig.parse(
        {
            "observation": {"messageTokens": 1500, "activateAfterIdle": "1h"},
            "reflection": {"observationTokens": 600},
        }
    )
    return MemoryEngine(db, models=FakeModels(), config=config, settings=EngineSettings())  # type: ignore[arg-type]


def _play(om: MemoryEngine, thread_id: str, resource_id: str, tenant_id: str | None, turns: range) -> None:
    for i in turns:
        words = " ".join(f"fact{i}-{k} about the harbor lantern" for k in range(25))
        message = text_message(
            f"m{i}", "user" if i % 2 == 0 else "assistant", words, T0 + timedelta(minutes=i)
        )
        om.ingest_turn(thread_id, resource_id, [message], tenant_id=tenant_id)


def _snapshot(db: Engine, om: MemoryEngine, thread_id: str) -> dict[str, Any]:
    thread = history.get_thread(db, thread_id)
    assert thread is not None
    view = queries.observations_view(db, thread)
    head = records.get_head(db, lookup_key(thread_id))
    assert head is not None
    with db.connect() as conn:
        triggers = conn.execute(
            select(func.count()).where(schema.triggers.c.lookup_key == lookup_key(thread_id))
        ).scalar_one()
    return {
        "messages": [
            (m.id, [p.model_dump() for p in m.parts])
            for m in queries.messages_page(db, thread_id, before_seq=None, limit=500).messages
        ],
        "active": view.active,
        "generations": [(g.record_id, g.observations) for g in view.generations],
        "chunks": [(c.cycle_id, c.from_seq, c.to_seq) for c in head.chunks],
        "events": [(e.id, e.type, e.payload) for e in list_events(db, thread_id=thread_id, limit=10_000)],
        "cursor": head.last_observed_seq,
        "status": om.status(thread_id),
        "triggers": triggers,
    }


def test_a_tenants_rows_move_to_its_stored_ids_and_the_rest_stays(db_at_0002: Engine) -> None:
    db = db_at_0002
    om = _engine(db)
    _play(om, "t1", "user-1", TENANT, range(40))
    _play(om, "free", "free", None, range(6))
    before = _snapshot(db, om, "t1")
    free_before = _snapshot(db, om, "free")
    assert before["generations"], "the conversation must be long enough to reflect"
    assert before["events"] and before["triggers"]

    schema.metadata.drop_all(db, tables=LATER_TABLES)
    upgrade(db)

    with db.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar_one() == SCHEMA_HEAD
        leftover = conn.execute(select(schema.threads.c.id).where(schema.threads.c.id == "t1")).first()
    assert leftover is None, "the thread's old row is gone"
    stored = scoped_id(TENANT, "t1")
    om = _engine(db)
    after = _snapshot(db, om, stored)
    assert after == before
    thread = history.get_thread(db, stored)
    assert thread is not None and thread.resource_id == scoped_id(TENANT, "user-1")
    assert [t.id for t in queries.threads_of_resource(db, scoped_id(TENANT, "user-1"), TENANT)] == [stored]
    assert _snapshot(db, om, "free") == free_before
    assert check_thread(db, stored).violations == []

    _play(om, stored, scoped_id(TENANT, "user-1"), TENANT, range(40, 60))  # it goes on where it was
    assert len(_snapshot(db, om, stored)["messages"]) == 60
    assert check_thread(db, stored).violations == []
