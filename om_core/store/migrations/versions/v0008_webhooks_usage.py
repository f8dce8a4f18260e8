"""Webhook endpoints with their delivery state, their last attempts, and OM's model usage per thread and
per tenant (issue 16).

Revises 0006 on its branch; 0007 (working memory) is written alongside, and the merge re-points this one.

Revision ID: 0008
Revises: 0006
Create Date: 2026-12-01 15:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def _totals() -> list[sa.Column[object]]:
    return [
        sa.Column("input_tokens", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("cost_usd", sa.Float(), server_default=sa.text("0"), nullable=False),
        sa.Column("cycles", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    ]


def upgrade() -> None:
    op.create_table(
        "om_webhook_endpoints",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=255), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("events", _JSON, nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("secret", sa.String(length=128), nullable=False),
        sa.Column("enabled", sa.Boolean(), server_default=sa.text("true"), nullable=False),
        sa.Column("state", sa.String(length=16), server_default=sa.text("'active'"), nullable=False),
        sa.Column("cursor", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("failures", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("last_delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("delivered_total", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("failed_total", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_om_webhook_endpoints_tenant", "om_webhook_endpoints", ["tenant_id"])
    op.create_table(
        "om_webhook_attempts",
        sa.Column(
            "id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False
        ),
        sa.Column("endpoint_id", sa.String(length=64), nullable=False),
        sa.Column("event_id", sa.BigInteger(), nullable=False),
        sa.Column("event_type", sa.String(length=64), nullable=False),
        sa.Column("thread_id", sa.String(length=512), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("outcome", sa.String(length=16), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("duration_ms", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["endpoint_id"], ["om_webhook_endpoints.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_om_webhook_attempts_endpoint", "om_webhook_attempts", ["endpoint_id", "id"])
    op.create_table(
        "om_usage_threads",
        sa.Column("thread_id", sa.String(length=512), nullable=False),
        *_totals(),
        sa.PrimaryKeyConstraint("thread_id"),
    )
    op.create_table(
        "om_usage_tenants",
        sa.Column("tenant_id", sa.String(length=255), nullable=False),
        *_totals(),
        sa.PrimaryKeyConstraint("tenant_id"),
    )
    op.create_table(
        "om_usage_tenant_deltas",
        sa.Column(
            "id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False
        ),
        sa.Column("tenant_id", sa.String(length=255), nullable=False),
        sa.Column("input_tokens", sa.BigInteger(), nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cost_usd", sa.Float(), nullable=False),
        sa.Column("cycles", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )


def downgrade() -> None:
    op.drop_table("om_usage_tenant_deltas")
    op.drop_table("om_usage_tenants")
    op.drop_table("om_usage_threads")
    op.drop_index("ix_om_webhook_attempts_endpoint", table_name="om_webhook_attempts")
    op.drop_table("om_webhook_attempts")
    op.drop_index("ix_om_webhook_endpoints_tenant", table_name="om_webhook_endpoints")
    op.drop_table("om_webhook_endpoints")
