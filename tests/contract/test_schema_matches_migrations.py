"""The schema is written twice, as table definitions (`store/schema.py`, what the code queries) and as
migrations (what a database really has): a database built by the migrations must be the one the table
definitions describe, column for column, type, length, nullability and index, on Postgres and SQLite.

Alembic's own comparison does the work (`compare_metadata`, as `alembic revision --autogenerate` would):
any difference it reports is a migration missing or a definition out of date.
"""

from __future__ import annotations

from typing import Any

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Engine, String

from om_core.store.schema import metadata


def _differences(db: Engine) -> list[Any]:
    with db.connect() as conn:
        context = MigrationContext.configure(
            conn, opts={"compare_type": True, "compare_server_default": False}
        )
        found = compare_metadata(context, metadata)
    return [d for d in found if not _sqlite_length_only(db, d) and not _runtime_table(d)]


#: Tables no table definition describes, by name: SQLite's FTS5 index of the search documents and its
#: shadow tables (migration 0006), and the vector tables search makes per embedding dimension at run time
#: (`om_core.search.vectors`, with sqlite-vec's shadow tables).
RUNTIME_TABLE_PREFIXES = ("om_search_fts", "om_vec_")


def _runtime_table(difference: Any) -> bool:
    if not isinstance(difference, tuple) or difference[0] != "remove_table":
        return False
    return str(difference[1].name).startswith(RUNTIME_TABLE_PREFIXES)


def _sqlite_length_only(db: Engine, difference: Any) -> bool:
    """SQLite stores a VARCHAR's length and never checks it: a length widened on Postgres only (migration
    0003) is not a difference there."""
    if db.dialect.name != "sqlite" or not isinstance(difference, list):
        return False
    return all(
        change[0] == "modify_type" and isinstance(change[5], String) and isinstance(change[6], String)
        for change in difference
    )


def test_a_migrated_database_is_what_the_table_definitions_say(engine: Engine) -> None:
    assert _differences(engine) == []
