"""The search index (issue 15): one document per raw message and observation group, how far each thread is
indexed, and the lexical index of each database (a GIN index on Postgres, an FTS5 table on SQLite).

The FTS5 table holds no text of its own (`content='om_search_docs'`): triggers on the documents table keep it
in step, so deleting a document (or its thread, by the cascade) removes its lexical entry in the same
statement. Vector tables are made at run time per embedding dimension (`om_core.search.vectors`).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 14:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

#: The SQLite lexical index and the triggers that keep it in step with `om_search_docs`. unicode61 splits
#: at punctuation and folds case and diacritics, as Postgres's `simple` configuration does, so both
#: databases match the same words; no stemming, so a code or a number matches only itself.
SQLITE_FTS = (
    "CREATE VIRTUAL TABLE om_search_fts USING fts5("
    "text, content='om_search_docs', content_rowid='id', tokenize='unicode61 remove_diacritics 2')",
    "CREATE TRIGGER om_search_docs_fts_insert AFTER INSERT ON om_search_docs BEGIN "
    "INSERT INTO om_search_fts(rowid, text) VALUES (new.id, new.text); END",
    "CREATE TRIGGER om_search_docs_fts_delete AFTER DELETE ON om_search_docs BEGIN "
    "INSERT INTO om_search_fts(om_search_fts, rowid, text) VALUES ('delete', old.id, old.text); END",
    "CREATE TRIGGER om_search_docs_fts_update AFTER UPDATE OF text ON om_search_docs BEGIN "
    "INSERT INTO om_search_fts(om_search_fts, rowid, text) VALUES ('delete', old.id, old.text); "
    "INSERT INTO om_search_fts(rowid, text) VALUES (new.id, new.text); END",
)


def upgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    op.create_table(
        "om_search_docs",
        sa.Column(
            "id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False
        ),
        sa.Column("resource_id", sa.String(length=512), nullable=False),
        sa.Column("thread_id", sa.String(length=512), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("ref", sa.String(length=255), nullable=False),
        sa.Column("ranges", sa.Text(), nullable=True),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("indexed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("embedding_model", sa.String(length=255), nullable=True),
        sa.Column("tsv", sa.Text().with_variant(postgresql.TSVECTOR(), "postgresql"), nullable=True),
        sa.ForeignKeyConstraint(["thread_id"], ["om_threads.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("thread_id", "kind", "ref", name="uq_om_search_docs_ref"),
    )
    op.create_index("ix_om_search_docs_resource_at", "om_search_docs", ["resource_id", "at"])
    op.create_index(
        "ix_om_search_docs_unembedded",
        "om_search_docs",
        ["indexed_at"],
        sqlite_where=sa.text("embedding_model IS NULL"),
        postgresql_where=sa.text("embedding_model IS NULL"),
    )
    op.create_index(
        "ix_om_search_docs_tsv",
        "om_search_docs",
        ["tsv"],
        postgresql_using="gin",
        sqlite_where=sa.text("tsv IS NOT NULL"),
    )
    op.create_table(
        "om_index_state",
        sa.Column("thread_id", sa.String(length=512), nullable=False),
        sa.Column("resource_id", sa.String(length=512), nullable=False),
        sa.Column("message_seq", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("vector", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["thread_id"], ["om_threads.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("thread_id"),
    )
    if sqlite:
        for statement in SQLITE_FTS:
            op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for trigger in ("insert", "delete", "update"):
            op.execute(f"DROP TRIGGER IF EXISTS om_search_docs_fts_{trigger}")
        op.execute("DROP TABLE IF EXISTS om_search_fts")
    op.drop_table("om_index_state")
    op.drop_index("ix_om_search_docs_tsv", table_name="om_search_docs")
    op.drop_index("ix_om_search_docs_unembedded", table_name="om_search_docs")
    op.drop_index("ix_om_search_docs_resource_at", table_name="om_search_docs")
    op.drop_table("om_search_docs")
