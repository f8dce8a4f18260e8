"""Which schema revision the code needs and which one a database holds, without importing Alembic.

Serving processes check the schema on every readiness probe; Alembic (about 11 MB resident) is only needed
to migrate, so `om migrate` and the tests load it and the API does not. `tests/unit/test_schema_revision.py`
holds `SCHEMA_HEAD` equal to the newest migration script.
"""

from __future__ import annotations

from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError

#: The newest migration under `om_core/store/migrations/versions/`.
SCHEMA_HEAD = "0010"


def stored_revision(engine: Engine) -> str | None:
    """The revision Alembic recorded in the database; None before the first migration."""
    with engine.connect() as conn:
        if not engine.dialect.has_table(conn, "alembic_version"):
            return None
        try:
            rows = conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
        except DBAPIError:
            return None
    return str(rows[0]) if len(rows) == 1 else None
