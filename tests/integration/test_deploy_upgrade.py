"""Several API pods starting at once each run `om migrate` (their init container): the schema ends at head
with every data migration applied exactly once, and no pod fails on the way.

deploy/k8s/30-api.yaml runs `om migrate` before every API pod, so an upgrade (or a first install with two
replicas, or the autoscaler adding pods during a rollout) starts several migrations against one database
at the same time. `om migrate` runs the whole upgrade in one Postgres transaction that first takes an
advisory lock (`store.migrate.MIGRATION_LOCK_ID`): the others wait for the first one's commit, then read
head and do nothing. This test does exactly that with real `om migrate` processes, on a database at 0002
holding a tenant's thread: 0003 rewrites every id of it to `<tenant>/<id>`, a statement that would corrupt
the ids if two runs both applied it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Connection, Engine, create_engine, func, select, text
from sqlalchemy.engine import make_url

from om_core.engine import EngineSettings, MemoryEngine
from om_core.messages import text_message
from om_core.store import schema
from om_core.store.db import make_engine
from om_core.store.migrate import upgrade
from om_core.store.revision import SCHEMA_HEAD
from om_core.tenancy.scoped_ids import scoped_id
from tests.support.fake_models import FakeModels
from tests.support.invariants import check_thread
from tests.support.workers import wait_until

OM = os.path.join(os.path.dirname(sys.executable), "om")
TENANT = "acme"
PODS = 3
T0 = datetime(2026, 3, 3, 9, 0, tzinfo=UTC)
#: Created by later migrations but written by today's engine: present while the 0002 database is filled,
#: dropped before the upgrade (as tests/contract/test_migration_scoped_ids.py does).
LATER_TABLES = [schema.usage_threads, schema.usage_tenant_deltas, schema.usage_thread_days]


@pytest.fixture
def database_at_0002(postgres_url: str) -> Iterator[tuple[str, Engine]]:
    server = make_url(postgres_url)
    name = f"om_upgrade_{uuid.uuid4().hex[:12]}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = server.set(database=name).render_as_string(hide_password=False)
    engine = make_engine(url)
    try:
        upgrade(engine, "0002")
        schema.metadata.create_all(engine, tables=LATER_TABLES)
        yield url, engine
    finally:
        engine.dispose()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
        admin.dispose()


def _fill(db: Engine) -> None:
    om = MemoryEngine(db, models=FakeModels(), settings=EngineSettings())
    for i in range(6):
        message = text_message(
            f"m{i}", "user" if i % 2 == 0 else "assistant", f"fact {i}", T0 + timedelta(minutes=i)
        )
        om.ingest_turn("t1", "user-1", [message], tenant_id=TENANT)


def _start(url: str) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OM_")}
    env["OM_DATABASE_URL"] = url
    return subprocess.Popen([OM, "migrate"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _waiting_on_locks(conn: Connection) -> int:
    conn.rollback()  # pg_stat_activity is a snapshot per transaction: a new one for each look
    return int(
        conn.execute(
            text(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
            )
        ).scalar_one()
    )


def test_concurrent_migrations_apply_each_revision_once(database_at_0002: tuple[str, Engine]) -> None:
    url, db = database_at_0002
    _fill(db)
    schema.metadata.drop_all(db, tables=LATER_TABLES)
    db.dispose()

    # All pods at the same point: the test holds the version table while they start, so the first blocks
    # on reading the revision and the others on the migration lock; then they are released together.
    holder = make_engine(url)
    with holder.connect() as hold, holder.connect() as watch:
        hold.execute(text("LOCK TABLE alembic_version IN ACCESS EXCLUSIVE MODE"))
        pods = [_start(url) for _ in range(PODS)]
        wait_until(
            lambda: _waiting_on_locks(watch) == PODS, deadline_s=120, what=f"{PODS} migrations waiting"
        )
        hold.rollback()
    holder.dispose()
    outputs = []
    for process in pods:
        output, _ = process.communicate(timeout=300)
        outputs.append((process.returncode, output.decode(errors="replace")[-400:]))
    assert [code for code, _ in outputs] == [0] * PODS, f"every migration succeeds at once: {outputs}"

    stored = scoped_id(TENANT, "t1")
    with db.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar_one() == SCHEMA_HEAD
        ids = conn.execute(select(schema.threads.c.id)).scalars().all()
        messages = conn.execute(
            select(func.count()).select_from(schema.messages).where(schema.messages.c.thread_id == stored)
        ).scalar_one()
    assert ids == [stored], "each id moved to <tenant>/<id> exactly once"
    assert messages == 6
    assert check_thread(db, stored).violations == []
