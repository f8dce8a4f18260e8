"""Observation groups (retrieval mode, behaviour §9.1): each group's message range, kept across generations.

A group's wrapper lives in the observation log, which reflection rewrites; this table keeps every group ever
committed with its range and text, so a range stays findable after the log moved on, and search can index it.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 13:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "om_observation_groups",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("thread_id", sa.String(length=512), nullable=False),
        sa.Column("resource_id", sa.String(length=512), nullable=False),
        sa.Column("lookup_key", sa.String(length=600), nullable=False),
        sa.Column("cycle_id", sa.String(length=128), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("ranges", sa.Text(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("observed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("om_observation_groups", schema=None) as batch_op:
        batch_op.create_index("ix_om_groups_thread", ["thread_id", "created_at"], unique=False)
        batch_op.create_index("ix_om_groups_resource", ["resource_id", "created_at"], unique=False)
        batch_op.create_index("ix_om_groups_cycle", ["lookup_key", "cycle_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("om_observation_groups", schema=None) as batch_op:
        batch_op.drop_index("ix_om_groups_cycle")
        batch_op.drop_index("ix_om_groups_resource")
        batch_op.drop_index("ix_om_groups_thread")
    op.drop_table("om_observation_groups")
