"""Migration 0010 on Postgres and SQLite: endpoints registered before it keep the deprecated signature,
gain the rotation columns empty, and the per-thread day usage table appears; new endpoints start without
the deprecated header; the downgrade removes it all again.

A database at 0009 gets an endpoint row the way 0009 stored one (a `whsec_<hex>` secret); after the
upgrade, a delivery signed for it carries both schemes and both verify with that same secret.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import Engine, create_engine, inspect, text
from sqlalchemy.engine import make_url
from standardwebhooks import Webhook

from om_core.store.db import make_engine
from om_core.store.migrate import alembic_config, upgrade
from om_core.store.revision import SCHEMA_HEAD, stored_revision
from om_core.store.types import StoredEvent
from om_core.webhooks import store
from om_core.webhooks.delivery import body_of, signed_headers
from om_core.webhooks.signing import SIGNATURE_HEADER, verify

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
OLD_SECRET = "whsec_" + "0123456789abcdef" * 3


@pytest.fixture(params=[pytest.param("postgres", marks=pytest.mark.postgres), "sqlite"])
def db_at_0009(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    if request.param == "sqlite":
        engine = make_engine(f"sqlite:///{tmp_path / 'om.db'}")
        upgrade(engine, "0009")
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
        upgrade(engine, "0009")
        yield engine
    finally:
        engine.dispose()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def _insert_0009_endpoint(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO om_webhook_endpoints (id, tenant_id, url, events, secret, enabled, state, "
                "cursor, failures, delivered_total, failed_total, created_at, updated_at) VALUES "
                "('wh_old', 'acme', 'https://hooks.example.com/om', :events, :secret, true, 'active', "
                "0, 0, 0, 0, :t, :t)"
            ),
            {"events": '["*"]', "secret": OLD_SECRET, "t": T0},
        )


def test_existing_endpoints_keep_the_deprecated_signature_and_new_ones_do_not(db_at_0009: Engine) -> None:
    _insert_0009_endpoint(db_at_0009)
    upgrade(db_at_0009)
    assert stored_revision(db_at_0009) == SCHEMA_HEAD == "0010"

    old = store.get(db_at_0009, "wh_old", tenant_id="acme")
    assert old is not None and old.secret == OLD_SECRET
    assert old.legacy_signature is True, "a receiver registered before 0010 must not break"
    assert old.previous_secret is None and old.previous_secret_expires_at is None
    new = store.create(
        db_at_0009,
        tenant_id="acme",
        url="https://hooks.example.com/new",
        events=["*"],
        description=None,
        now=T0,
    )
    assert new.legacy_signature is False

    event = StoredEvent(
        id=1, type="data-om-status", thread_id="acme/t", lookup_key="thread:acme/t", record_id=None,
        cycle_id=None, payload={"x": 1}, created_at=T0,
    )  # fmt: skip
    body = body_of(event)
    headers = signed_headers(old, event, body, now=datetime.now(UTC).timestamp())
    assert verify(OLD_SECRET, headers[SIGNATURE_HEADER], body)
    Webhook(OLD_SECRET).verify(body, headers)  # raises when it does not verify
    assert SIGNATURE_HEADER not in signed_headers(new, event, body, now=datetime.now(UTC).timestamp())

    tables = set(inspect(db_at_0009).get_table_names())
    assert "om_usage_thread_days" in tables
    indexes = {i["name"] for i in inspect(db_at_0009).get_indexes("om_usage_thread_days")}
    assert "ix_om_usage_thread_days_tenant_day" in indexes


def test_the_downgrade_removes_what_0010_added(db_at_0009: Engine) -> None:
    _insert_0009_endpoint(db_at_0009)
    upgrade(db_at_0009)
    config = alembic_config()
    with db_at_0009.begin() as conn:
        config.attributes["connection"] = conn
        command.downgrade(config, "0009")
    assert stored_revision(db_at_0009) == "0009"
    inspector = inspect(db_at_0009)
    assert "om_usage_thread_days" not in inspector.get_table_names()
    columns = {c["name"] for c in inspector.get_columns("om_webhook_endpoints")}
    assert not columns & {"previous_secret", "previous_secret_expires_at", "legacy_signature"}
    with db_at_0009.connect() as conn:
        assert conn.execute(text("SELECT secret FROM om_webhook_endpoints")).scalar_one() == OLD_SECRET
