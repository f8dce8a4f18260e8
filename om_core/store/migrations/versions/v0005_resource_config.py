"""Config overrides per resource (resource scope; merged under a thread's own overrides).

A column on the resource row rather than a table: a turn reads it in the statement that locks its thread
(a join), so resource overrides cost no extra round trip. Existing resources start with none.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 11:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy import Text
from sqlalchemy.dialects import postgresql

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("om_resources", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column(
                "config_overrides",
                sa.JSON().with_variant(postgresql.JSONB(astext_type=Text()), "postgresql"),
                nullable=True,
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("om_resources", schema=None) as batch_op:
        batch_op.drop_column("config_overrides")
