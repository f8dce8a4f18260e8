"""Working memory (behaviour §8.7): one small Markdown or JSON document per resource or thread.

One row per memory, keyed like a record chain (`thread:<stored id>` or `resource:<stored id>`), so erasure
finds it by its key, its resource and (thread scope) its thread. `version` counts writes, for the API's
optimistic concurrency (`expectedVersion`).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 15:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "om_working_memory",
        sa.Column("lookup_key", sa.String(length=600), nullable=False),
        sa.Column("scope", sa.String(length=16), nullable=False),
        sa.Column("thread_id", sa.String(length=512), nullable=True),
        sa.Column("resource_id", sa.String(length=512), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("format", sa.String(length=16), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_by", sa.String(length=16), nullable=False),
        sa.ForeignKeyConstraint(["thread_id"], ["om_threads.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("lookup_key"),
    )
    with op.batch_alter_table("om_working_memory", schema=None) as batch_op:
        batch_op.create_index("ix_om_working_memory_resource", ["resource_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("om_working_memory", schema=None) as batch_op:
        batch_op.drop_index("ix_om_working_memory_resource")
    op.drop_table("om_working_memory")
