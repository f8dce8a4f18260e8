"""Schema migrations (Alembic), run by `om migrate` and by the test fixtures.

The migration scripts live inside the package so an installed `om` can migrate without a checkout.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine

MIGRATIONS = Path(__file__).parent / "migrations"


def alembic_config(url: str | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    if url is not None:
        config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Bring the database behind `engine` to `revision` (idempotent)."""
    config = alembic_config()
    if engine.dialect.name == "sqlite":
        # SQLite's BEGIN IMMEDIATE hook is fine for DDL too; use a plain connection for alembic.
        pass
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, revision)


def current_revision(engine: Engine) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()
