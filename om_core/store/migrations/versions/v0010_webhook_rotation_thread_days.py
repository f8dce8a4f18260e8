"""Standard Webhooks secret rotation, the deprecated signature kept for existing endpoints, and OM's model
usage per thread per UTC day (issue 32).

`om_webhook_endpoints` gains `previous_secret` and `previous_secret_expires_at` (a rotated-out secret still
signs deliveries until it is dropped or expires) and `legacy_signature` (send the deprecated `OM-Signature`
header too): every endpoint registered before this migration gets it on, so no receiver breaks; new ones
get it off. `om_usage_thread_days` holds each thread's usage per day from now on, for the spend view
(usage recorded before has no thread and day: it stays in the thread's and the tenant's totals).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03 02:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("om_webhook_endpoints", schema=None) as batch_op:
        batch_op.add_column(sa.Column("previous_secret", sa.String(length=128), nullable=True))
        batch_op.add_column(
            sa.Column("previous_secret_expires_at", sa.DateTime(timezone=True), nullable=True)
        )
        batch_op.add_column(
            sa.Column("legacy_signature", sa.Boolean(), server_default=sa.text("false"), nullable=False)
        )
    # Existing receivers verify the om scheme: keep sending it to them (a documented deprecation).
    op.execute(sa.text("UPDATE om_webhook_endpoints SET legacy_signature = true"))
    op.create_table(
        "om_usage_thread_days",
        sa.Column("thread_id", sa.String(length=512), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("tenant_id", sa.String(length=255), nullable=False),
        sa.Column("input_tokens", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("cost_usd", sa.Float(), server_default=sa.text("0"), nullable=False),
        sa.Column("cycles", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("thread_id", "day"),
    )
    op.create_index("ix_om_usage_thread_days_tenant_day", "om_usage_thread_days", ["tenant_id", "day"])


def downgrade() -> None:
    op.drop_index("ix_om_usage_thread_days_tenant_day", table_name="om_usage_thread_days")
    op.drop_table("om_usage_thread_days")
    with op.batch_alter_table("om_webhook_endpoints", schema=None) as batch_op:
        batch_op.drop_column("legacy_signature")
        batch_op.drop_column("previous_secret_expires_at")
        batch_op.drop_column("previous_secret")
