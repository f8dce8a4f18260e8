"""Schema migrations (Alembic), run by `om migrate` and by the test fixtures.

The migration scripts live inside the package so an installed `om` can migrate without a checkout.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, text

MIGRATIONS = Path(__file__).parent / "migrations"


def alembic_config(url: str | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    if url is not None:
        config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


#: The Postgres advisory lock every upgrade holds (any fixed number; "om-migrate" in ASCII).
MIGRATION_LOCK_ID = 0x6F6D2D6D696772


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Bring the database behind `engine` to `revision` (idempotent).

    The whole upgrade is one transaction. On Postgres it first takes an advisory lock held to its commit,
    so upgrades started together (every API pod's init container runs `om migrate`) run one after the
    other: the next one reads the revision the first committed and has nothing left to do, instead of
    failing on the first one's changes and waiting for a restart. SQLite's `BEGIN IMMEDIATE` already
    serialises them."""
    config = alembic_config()
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": MIGRATION_LOCK_ID})
        config.attributes["connection"] = conn
        command.upgrade(config, revision)


def current_revision(engine: Engine) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()
