"""Actor-model usage per API key (calls, tokens, cost through the proxy).

Counters on the key row rather than a usage table: the proxy bumps them with one `UPDATE ... SET x = x + n`
per call, and `om keys list` / `GET /v1/usage` read them with the key. Existing keys start at zero.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 09:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_COUNTERS = (
    ("actor_calls", sa.BigInteger()),
    ("actor_prompt_tokens", sa.BigInteger()),
    ("actor_completion_tokens", sa.BigInteger()),
    ("actor_cost_usd", sa.Float()),
)


def upgrade() -> None:
    with op.batch_alter_table("om_api_keys", schema=None) as batch_op:
        for name, kind in _COUNTERS:
            batch_op.add_column(sa.Column(name, kind, nullable=False, server_default=sa.text("0")))


def downgrade() -> None:
    with op.batch_alter_table("om_api_keys", schema=None) as batch_op:
        for name, _kind in reversed(_COUNTERS):
            batch_op.drop_column(name)
