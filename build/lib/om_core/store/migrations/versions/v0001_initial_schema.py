"""Initial schema: threads, messages, parts, records, chunks, events, triggers.

Revision ID: 0001
Revises:
Create Date: 2026-11-30 05:07:13.988690
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy import Text
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "om_events",
        sa.Column(
            "id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False
        ),
        sa.Column("thread_id", sa.String(length=255), nullable=True),
        sa.Column("resource_id", sa.String(length=255), nullable=True),
        sa.Column("lookup_key", sa.String(length=300), nullable=False),
        sa.Column("record_id", sa.String(length=64), nullable=True),
        sa.Column("type", sa.String(length=64), nullable=False),
        sa.Column("cycle_id", sa.String(length=128), nullable=True),
        sa.Column(
            "payload",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("published", sa.Boolean(), server_default=sa.text("(false)"), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("om_events", schema=None) as batch_op:
        batch_op.create_index("ix_om_events_thread", ["thread_id", "id"], unique=False)
        batch_op.create_index(
            "uq_om_events_type_cycle",
            ["lookup_key", "type", "cycle_id"],
            unique=True,
            postgresql_where=sa.text("cycle_id IS NOT NULL"),
            sqlite_where=sa.text("cycle_id IS NOT NULL"),
        )

    op.create_table(
        "om_records",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("lookup_key", sa.String(length=300), nullable=False),
        sa.Column("scope", sa.String(length=16), nullable=False),
        sa.Column("thread_id", sa.String(length=255), nullable=True),
        sa.Column("resource_id", sa.String(length=255), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("origin_type", sa.String(length=16), nullable=False),
        sa.Column("generation_count", sa.Integer(), nullable=False),
        sa.Column("superseded_by", sa.String(length=64), nullable=True),
        sa.Column("active_observations", sa.Text(), server_default=sa.text("('')"), nullable=False),
        sa.Column("observation_token_count", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("last_observed_seq", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("last_observed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_buffered_seq", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("last_buffered_at_time", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_buffered_at_tokens", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("buffered_reflection", sa.Text(), nullable=True),
        sa.Column("buffered_reflection_tokens", sa.Integer(), nullable=True),
        sa.Column("buffered_reflection_input_tokens", sa.Integer(), nullable=True),
        sa.Column("reflected_observation_line_count", sa.Integer(), nullable=True),
        sa.Column("buffered_reflection_cycle_id", sa.String(length=128), nullable=True),
        sa.Column("pending_message_tokens", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("total_tokens_observed", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("is_observing", sa.Boolean(), server_default=sa.text("(false)"), nullable=False),
        sa.Column("is_reflecting", sa.Boolean(), server_default=sa.text("(false)"), nullable=False),
        sa.Column(
            "is_buffering_observation", sa.Boolean(), server_default=sa.text("(false)"), nullable=False
        ),
        sa.Column("is_buffering_reflection", sa.Boolean(), server_default=sa.text("(false)"), nullable=False),
        sa.Column(
            "config",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=Text()), "postgresql"),
            server_default=sa.text("'{}'"),
            nullable=False,
        ),
        sa.Column("observed_timezone", sa.String(length=64), server_default=sa.text("'UTC'"), nullable=False),
        sa.Column(
            "metadata",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=Text()), "postgresql"),
            server_default=sa.text("'{}'"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("om_records", schema=None) as batch_op:
        batch_op.create_index(
            "ix_om_records_lookup", ["lookup_key", "generation_count", "created_at", "id"], unique=False
        )
        batch_op.create_index(
            "uq_om_records_live",
            ["lookup_key"],
            unique=True,
            postgresql_where=sa.text("superseded_by IS NULL"),
            sqlite_where=sa.text("superseded_by IS NULL"),
        )

    op.create_table(
        "om_resources",
        sa.Column("id", sa.String(length=255), nullable=False),
        sa.Column("tenant_id", sa.String(length=255), nullable=True),
        sa.Column(
            "metadata",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=Text()), "postgresql"),
            server_default=sa.text("'{}'"),
            nullable=False,
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "om_threads",
        sa.Column("id", sa.String(length=255), nullable=False),
        sa.Column("resource_id", sa.String(length=255), nullable=False),
        sa.Column("tenant_id", sa.String(length=255), nullable=True),
        sa.Column("title", sa.Text(), nullable=True),
        sa.Column(
            "om_metadata",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=Text()), "postgresql"),
            server_default=sa.text("'{}'"),
            nullable=False,
        ),
        sa.Column(
            "config_overrides",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=Text()), "postgresql"),
            nullable=True,
        ),
        sa.Column("last_seq", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("last_actor_model", sa.String(length=255), nullable=True),
        sa.Column("last_activity_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("om_threads", schema=None) as batch_op:
        batch_op.create_index("ix_om_threads_resource", ["resource_id"], unique=False)

    op.create_table(
        "om_triggers",
        sa.Column("lookup_key", sa.String(length=300), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("thread_id", sa.String(length=255), nullable=True),
        sa.Column("resource_id", sa.String(length=255), nullable=True),
        sa.Column("due_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "payload",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=Text()), "postgresql"),
            server_default=sa.text("'{}'"),
            nullable=False,
        ),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("lookup_key", "kind"),
    )
    with op.batch_alter_table("om_triggers", schema=None) as batch_op:
        batch_op.create_index("ix_om_triggers_due", ["due_at"], unique=False)

    op.create_table(
        "om_chunks",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("lookup_key", sa.String(length=300), nullable=False),
        sa.Column("record_id", sa.String(length=64), nullable=False),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("cycle_id", sa.String(length=128), nullable=False),
        sa.Column("observations", sa.Text(), nullable=False),
        sa.Column("token_count", sa.Integer(), nullable=False),
        sa.Column(
            "message_ids",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("message_tokens", sa.Integer(), nullable=False),
        sa.Column("thread_id", sa.String(length=255), nullable=True),
        sa.Column("from_seq", sa.BigInteger(), nullable=False),
        sa.Column("to_seq", sa.BigInteger(), nullable=False),
        sa.Column("last_observed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("activated_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("current_task", sa.Text(), nullable=True),
        sa.Column("suggested_continuation", sa.Text(), nullable=True),
        sa.Column("thread_title", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["record_id"], ["om_records.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("lookup_key", "cycle_id", name="uq_om_chunks_cycle"),
    )
    with op.batch_alter_table("om_chunks", schema=None) as batch_op:
        batch_op.create_index("ix_om_chunks_record_state", ["record_id", "state", "position"], unique=False)

    op.create_table(
        "om_messages",
        sa.Column("thread_id", sa.String(length=255), nullable=False),
        sa.Column("id", sa.String(length=255), nullable=False),
        sa.Column("resource_id", sa.String(length=255), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column(
            "metadata",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=Text()), "postgresql"),
            server_default=sa.text("'{}'"),
            nullable=False,
        ),
        sa.Column("first_seq", sa.BigInteger(), nullable=False),
        sa.Column("part_count", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["thread_id"], ["om_threads.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("thread_id", "id"),
    )
    with op.batch_alter_table("om_messages", schema=None) as batch_op:
        batch_op.create_index("ix_om_messages_thread_seq", ["thread_id", "first_seq"], unique=False)

    op.create_table(
        "om_parts",
        sa.Column("thread_id", sa.String(length=255), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("message_id", sa.String(length=255), nullable=False),
        sa.Column("part_index", sa.Integer(), nullable=False),
        sa.Column("type", sa.String(length=64), nullable=False),
        sa.Column(
            "body", sa.JSON().with_variant(postgresql.JSONB(astext_type=Text()), "postgresql"), nullable=False
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("tokens", sa.Float(), server_default=sa.text("0"), nullable=False),
        sa.Column("overhead_delta", sa.Float(), server_default=sa.text("0"), nullable=False),
        sa.Column("extra_messages", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.ForeignKeyConstraint(["thread_id"], ["om_threads.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("thread_id", "seq"),
        sa.UniqueConstraint("thread_id", "message_id", "part_index", name="uq_om_parts_message_index"),
    )


def downgrade() -> None:
    op.drop_table("om_parts")
    with op.batch_alter_table("om_messages", schema=None) as batch_op:
        batch_op.drop_index("ix_om_messages_thread_seq")

    op.drop_table("om_messages")
    with op.batch_alter_table("om_chunks", schema=None) as batch_op:
        batch_op.drop_index("ix_om_chunks_record_state")

    op.drop_table("om_chunks")
    with op.batch_alter_table("om_triggers", schema=None) as batch_op:
        batch_op.drop_index("ix_om_triggers_due")

    op.drop_table("om_triggers")
    with op.batch_alter_table("om_threads", schema=None) as batch_op:
        batch_op.drop_index("ix_om_threads_resource")

    op.drop_table("om_threads")
    op.drop_table("om_resources")
    with op.batch_alter_table("om_records", schema=None) as batch_op:
        batch_op.drop_index(
            "uq_om_records_live",
            postgresql_where=sa.text("superseded_by IS NULL"),
            sqlite_where=sa.text("superseded_by IS NULL"),
        )
        batch_op.drop_index("ix_om_records_lookup")

    op.drop_table("om_records")
    with op.batch_alter_table("om_events", schema=None) as batch_op:
        batch_op.drop_index(
            "uq_om_events_type_cycle",
            postgresql_where=sa.text("cycle_id IS NOT NULL"),
            sqlite_where=sa.text("cycle_id IS NOT NULL"),
        )
        batch_op.drop_index("ix_om_events_thread")

    op.drop_table("om_events")
