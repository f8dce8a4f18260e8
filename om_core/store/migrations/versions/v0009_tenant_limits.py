"""Per-tenant limits set by the operator, and OM's model usage per tenant per UTC day (issue 28).

`om_tenant_limits` holds `om tenants limits` overrides of the request rate and the daily spend budget.
`om_usage_tenant_deltas.day` dates each usage delta, and `om_usage_tenant_days` keeps the folded totals per
day, so a tenant's spend today is one row plus its unfolded deltas. Deltas already stored have no day:
they count in the tenant's totals, not in any day's.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02 08:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "om_tenant_limits",
        sa.Column("tenant_id", sa.String(length=255), nullable=False),
        sa.Column("requests_per_s", sa.Float(), nullable=True),
        sa.Column("burst", sa.Integer(), nullable=True),
        sa.Column("daily_budget_usd", sa.Float(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id"),
    )
    op.create_table(
        "om_usage_tenant_days",
        sa.Column("tenant_id", sa.String(length=255), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("input_tokens", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("cost_usd", sa.Float(), server_default=sa.text("0"), nullable=False),
        sa.Column("cycles", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "day"),
    )
    with op.batch_alter_table("om_usage_tenant_deltas", schema=None) as batch_op:
        batch_op.add_column(sa.Column("day", sa.Date(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("om_usage_tenant_deltas", schema=None) as batch_op:
        batch_op.drop_column("day")
    op.drop_table("om_usage_tenant_days")
    op.drop_table("om_tenant_limits")
