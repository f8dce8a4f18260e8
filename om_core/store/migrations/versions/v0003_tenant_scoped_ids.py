"""Thread and resource ids belong to their tenant: stored as `<tenant>/<id>` (see `om_core.tenancy.scoped_ids`).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 04:00:00

The id columns widen to hold a tenant and an id (Postgres only: SQLite does not enforce lengths), then
every row of a tenant's thread moves to the stored id: the thread (copied under its new id, its messages
and parts moved onto the copy, the old row deleted, so foreign keys hold at every statement on both
databases), its records, chunks, events and triggers (lookup keys included) and its resource. Rows stored
without a tenant (the embedded mode without auth) keep their ids.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

ID_LENGTH = 512
KEY_LENGTH = 600

WIDENED: list[tuple[str, str, int, int]] = [
    ("om_resources", "id", 255, ID_LENGTH),
    ("om_threads", "id", 255, ID_LENGTH),
    ("om_threads", "resource_id", 255, ID_LENGTH),
    ("om_messages", "thread_id", 255, ID_LENGTH),
    ("om_messages", "resource_id", 255, ID_LENGTH),
    ("om_parts", "thread_id", 255, ID_LENGTH),
    ("om_records", "lookup_key", 300, KEY_LENGTH),
    ("om_records", "thread_id", 255, ID_LENGTH),
    ("om_records", "resource_id", 255, ID_LENGTH),
    ("om_chunks", "lookup_key", 300, KEY_LENGTH),
    ("om_chunks", "thread_id", 255, ID_LENGTH),
    ("om_events", "thread_id", 255, ID_LENGTH),
    ("om_events", "resource_id", 255, ID_LENGTH),
    ("om_events", "lookup_key", 300, KEY_LENGTH),
    ("om_triggers", "lookup_key", 300, KEY_LENGTH),
    ("om_triggers", "thread_id", 255, ID_LENGTH),
    ("om_triggers", "resource_id", 255, ID_LENGTH),
]

MAP = "om_migration_0003_ids"

#: The moved thread of a row, found by the row's old thread id (`{col}`) or lookup key.
NEW_ID = f"(SELECT m.new_id FROM {MAP} m WHERE m.old_id = {{table}}.{{col}})"
NEW_RESOURCE = f"(SELECT m.new_resource FROM {MAP} m WHERE m.old_id = {{table}}.{{col}})"
NEW_KEY = f"(SELECT 'thread:' || m.new_id FROM {MAP} m WHERE 'thread:' || m.old_id = {{table}}.lookup_key)"
MOVED = f"{{col}} IN (SELECT old_id FROM {MAP})"
MOVED_KEY = f"lookup_key IN (SELECT 'thread:' || old_id FROM {MAP})"

THREAD_COLUMNS = (
    "title, om_metadata, config_overrides, last_seq, last_actor_model, last_activity_at, created_at, "
    "updated_at"
)


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        for table, column, old, new in WIDENED:
            op.alter_column(table, column, type_=sa.String(new), existing_type=sa.String(old))
    _scope_tenant_rows()


def _scope_tenant_rows() -> None:
    run = op.execute
    run(
        f"CREATE TABLE {MAP} (old_id VARCHAR({ID_LENGTH}) PRIMARY KEY, new_id VARCHAR({ID_LENGTH}) NOT NULL, "
        f"new_resource VARCHAR({ID_LENGTH}) NOT NULL, tenant_id VARCHAR(255) NOT NULL)"
    )
    run(
        f"INSERT INTO {MAP} (old_id, new_id, new_resource, tenant_id) "
        "SELECT id, tenant_id || '/' || id, tenant_id || '/' || resource_id, tenant_id "
        "FROM om_threads WHERE tenant_id IS NOT NULL"
    )
    run("UPDATE om_resources SET id = tenant_id || '/' || id WHERE tenant_id IS NOT NULL")
    run(  # a tenant's thread whose resource row had no owner gets the tenant's own resource row
        f"INSERT INTO om_resources (id, tenant_id, created_at) "
        f"SELECT m.new_resource, MIN(m.tenant_id), MIN(t.created_at) FROM {MAP} m "
        "JOIN om_threads t ON t.id = m.old_id "
        "WHERE m.new_resource NOT IN (SELECT id FROM om_resources) GROUP BY m.new_resource"
    )
    run(
        f"INSERT INTO om_threads (id, resource_id, tenant_id, {THREAD_COLUMNS}) "
        f"SELECT m.new_id, m.new_resource, m.tenant_id, {THREAD_COLUMNS} "
        f"FROM om_threads JOIN {MAP} m ON m.old_id = om_threads.id"
    )
    for table, has_resource in (("om_messages", True), ("om_parts", False)):
        _move_thread_column(table, has_resource)
    for table in ("om_records", "om_events", "om_triggers"):
        _move_thread_column(table, True)
    _move_thread_column("om_chunks", False)
    for table in ("om_records", "om_chunks", "om_events", "om_triggers"):
        run(f"UPDATE {table} SET lookup_key = {NEW_KEY.format(table=table)} WHERE {MOVED_KEY}")
    run(f"DELETE FROM om_threads WHERE id IN (SELECT old_id FROM {MAP})")
    run(f"DROP TABLE {MAP}")


def _move_thread_column(table: str, has_resource: bool) -> None:
    """Point `table`'s rows of a moved thread at its new id (and its resource's, where it has one). The
    resource is set first: it is found through the old thread id, which the second statement changes."""
    moved = MOVED.format(col="thread_id")
    if has_resource:
        op.execute(
            f"UPDATE {table} SET resource_id = {NEW_RESOURCE.format(table=table, col='thread_id')} "
            f"WHERE {moved}"
        )
    op.execute(f"UPDATE {table} SET thread_id = {NEW_ID.format(table=table, col='thread_id')} WHERE {moved}")


def downgrade() -> None:
    raise NotImplementedError(
        "ids stored per tenant cannot be made global again (two tenants may now share an id): restore the "
        "backup taken before `om migrate` instead"
    )
