"""Storage: SQLAlchemy 2 on Postgres (production) or SQLite (embedded), with Alembic migrations.

`records` holds the lifecycle contract of behaviour §3.5, `history` the append-only message parts, `outbox`
the event rows. Every write is one short transaction; no model call ever runs inside one.
"""
