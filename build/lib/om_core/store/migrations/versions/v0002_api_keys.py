"""API keys of the HTTP service (stored hashed, bound to a tenant).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 09:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "om_api_keys",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=255), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("secret_sha256", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("om_api_keys", schema=None) as batch_op:
        batch_op.create_index("ix_om_api_keys_tenant", ["tenant_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("om_api_keys", schema=None) as batch_op:
        batch_op.drop_index("ix_om_api_keys_tenant")
    op.drop_table("om_api_keys")
