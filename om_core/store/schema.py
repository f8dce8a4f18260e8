"""Table definitions shared by Postgres and SQLite (the embedded mode).

Design notes (why the schema looks like this):

- Every stored message part has `seq`, a per-thread sequence handed out by the database (a counter on the
  thread row, bumped under that row's lock). Cursors are sequence numbers, never client clocks, so clock
  skew between writers cannot make a message look observed (behaviour §4.10, §12.2 smaller notes).
- Parts are append-only rows; a message that grows gets new rows with new sequence numbers.
- Records are one row per (lookup key, generation); `superseded_by IS NULL` marks the live head.
- Chunks are rows, never a JSON list rewritten by read-modify-write: a unique `(lookup_key, cycle_id)` makes
  a redelivered append impossible to store twice, even across generations and after activation (activated
  chunks keep their row with `state = 'activated'`).
- Events are an outbox written in the same transaction as the change they report.
- `lookup_key`, `scope` and `resource_id` columns everywhere leave room for resource scope and recall.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Date,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    TypeDecorator,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB, TSVECTOR
from sqlalchemy.engine import Dialect

metadata = MetaData()

#: Thread and resource ids as stored: `<tenant>/<id>` (`om_core.tenancy.scoped_ids`), a 255-character tenant
#: and a 255-character public id at most.
ID_LENGTH = 512
#: Lookup keys: `thread:` or `resource:` and a stored id.
KEY_LENGTH = 600

#: JSONB on Postgres, JSON text on SQLite.
Json = JSON().with_variant(JSONB(), "postgresql")


class UtcDateTime(TypeDecorator[datetime]):
    """timestamptz on Postgres; on SQLite (no time zones) UTC stored naive and read back aware.

    Never a naive datetime in our code: the reference lost messages across DST with bare timestamps (F1).
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to storage; use an aware (UTC) datetime")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


Timestamp = UtcDateTime()

resources = Table(
    "om_resources",
    metadata,
    Column("id", String(ID_LENGTH), primary_key=True),
    Column("tenant_id", String(255), nullable=True),
    # `configOverrides`: config overrides for every thread of the resource (a thread's own are merged
    # over them), kept here so that a turn reads them in the statement that locks its thread.
    Column("metadata", Json, nullable=False, server_default=text("'{}'")),
    Column("created_at", Timestamp, nullable=False),
)

threads = Table(
    "om_threads",
    metadata,
    Column("id", String(ID_LENGTH), primary_key=True),
    Column("resource_id", String(ID_LENGTH), nullable=False),
    Column("tenant_id", String(255), nullable=True),
    Column("title", Text, nullable=True),
    # OM's per-thread metadata: currentTask, suggestedResponse, threadTitle, extracted, cursors (§3.3).
    Column("om_metadata", Json, nullable=False, server_default=text("'{}'")),
    Column("config_overrides", Json, nullable=True),
    # The last sequence number handed out in this thread. Bumped under the thread row lock.
    Column("last_seq", BigInteger, nullable=False, server_default=text("0")),
    Column("last_actor_model", String(255), nullable=True),
    Column("last_activity_at", Timestamp, nullable=True),
    Column("created_at", Timestamp, nullable=False),
    Column("updated_at", Timestamp, nullable=False),
    Index("ix_om_threads_resource", "resource_id"),
)

messages = Table(
    "om_messages",
    metadata,
    Column("thread_id", String(ID_LENGTH), ForeignKey("om_threads.id", ondelete="CASCADE"), primary_key=True),
    Column("id", String(255), primary_key=True),
    Column("resource_id", String(ID_LENGTH), nullable=False),
    Column("role", String(16), nullable=False),
    Column("created_at", Timestamp, nullable=False),
    Column("metadata", Json, nullable=False, server_default=text("'{}'")),
    Column("first_seq", BigInteger, nullable=False),
    Column("part_count", Integer, nullable=False),
    Index("ix_om_messages_thread_seq", "thread_id", "first_seq"),
)

parts = Table(
    "om_parts",
    metadata,
    Column("thread_id", String(ID_LENGTH), ForeignKey("om_threads.id", ondelete="CASCADE"), primary_key=True),
    Column("seq", BigInteger, primary_key=True),
    Column("message_id", String(255), nullable=False),
    Column("part_index", Integer, nullable=False),
    Column("type", String(64), nullable=False),
    Column("body", Json, nullable=False),
    Column("created_at", Timestamp, nullable=True),
    # Token contribution of this part (behaviour §7.2), computed once at insert: counting never repeats.
    Column("tokens", Float, nullable=False, server_default=text("0")),
    Column("overhead_delta", Float, nullable=False, server_default=text("0")),
    Column("extra_messages", Integer, nullable=False, server_default=text("0")),
    UniqueConstraint("thread_id", "message_id", "part_index", name="uq_om_parts_message_index"),
)

records = Table(
    "om_records",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("lookup_key", String(KEY_LENGTH), nullable=False),
    Column("scope", String(16), nullable=False),
    Column("thread_id", String(ID_LENGTH), nullable=True),
    Column("resource_id", String(ID_LENGTH), nullable=False),
    Column("created_at", Timestamp, nullable=False),
    Column("updated_at", Timestamp, nullable=False),
    Column("origin_type", String(16), nullable=False),
    Column("generation_count", Integer, nullable=False),
    Column("superseded_by", String(64), nullable=True),
    Column("active_observations", Text, nullable=False, server_default=text("''")),
    Column("observation_token_count", Integer, nullable=False, server_default=text("0")),
    # The cursor: parts with seq <= last_observed_seq are observed. last_observed_at is for display.
    Column("last_observed_seq", BigInteger, nullable=False, server_default=text("0")),
    Column("last_observed_at", Timestamp, nullable=True),
    # The buffer cursor: how far buffered chunks reach.
    Column("last_buffered_seq", BigInteger, nullable=False, server_default=text("0")),
    Column("last_buffered_at_time", Timestamp, nullable=True),
    Column("last_buffered_at_tokens", Integer, nullable=False, server_default=text("0")),
    Column("buffered_reflection", Text, nullable=True),
    Column("buffered_reflection_tokens", Integer, nullable=True),
    Column("buffered_reflection_input_tokens", Integer, nullable=True),
    Column("reflected_observation_line_count", Integer, nullable=True),
    Column("buffered_reflection_cycle_id", String(128), nullable=True),
    Column("pending_message_tokens", Integer, nullable=False, server_default=text("0")),
    Column("total_tokens_observed", BigInteger, nullable=False, server_default=text("0")),
    Column("is_observing", Boolean, nullable=False, server_default=text("false")),
    Column("is_reflecting", Boolean, nullable=False, server_default=text("false")),
    Column("is_buffering_observation", Boolean, nullable=False, server_default=text("false")),
    Column("is_buffering_reflection", Boolean, nullable=False, server_default=text("false")),
    Column("config", Json, nullable=False, server_default=text("'{}'")),
    Column("observed_timezone", String(64), nullable=False, server_default=text("'UTC'")),
    Column("metadata", Json, nullable=False, server_default=text("'{}'")),
    Index("ix_om_records_lookup", "lookup_key", "generation_count", "created_at", "id"),
    # At most one live head per key, enforced by the database (invariant 5).
    Index(
        "uq_om_records_live",
        "lookup_key",
        unique=True,
        postgresql_where=text("superseded_by IS NULL"),
        sqlite_where=text("superseded_by IS NULL"),
    ),
)

chunks = Table(
    "om_chunks",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("lookup_key", String(KEY_LENGTH), nullable=False),
    Column("record_id", String(64), ForeignKey("om_records.id", ondelete="CASCADE"), nullable=False),
    # Order inside the list; assigned at append from a counter, never reused.
    Column("position", BigInteger, nullable=False),
    Column("state", String(16), nullable=False),  # buffered | activated | superseded
    Column("cycle_id", String(128), nullable=False),
    Column("observations", Text, nullable=False),
    Column("token_count", Integer, nullable=False),
    Column("message_ids", Json, nullable=False),
    Column("message_tokens", Integer, nullable=False),
    # Covered parts: thread_id's parts with from_seq < seq <= to_seq.
    Column("thread_id", String(ID_LENGTH), nullable=True),
    Column("from_seq", BigInteger, nullable=False),
    Column("to_seq", BigInteger, nullable=False),
    Column("last_observed_at", Timestamp, nullable=True),
    Column("created_at", Timestamp, nullable=False),
    Column("activated_at", Timestamp, nullable=True),
    Column("current_task", Text, nullable=True),
    Column("suggested_continuation", Text, nullable=True),
    Column("thread_title", Text, nullable=True),
    UniqueConstraint("lookup_key", "cycle_id", name="uq_om_chunks_cycle"),
    Index("ix_om_chunks_record_state", "record_id", "state", "position"),
)

events = Table(
    "om_events",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("thread_id", String(ID_LENGTH), nullable=True),
    Column("resource_id", String(ID_LENGTH), nullable=True),
    Column("lookup_key", String(KEY_LENGTH), nullable=False),
    Column("record_id", String(64), nullable=True),
    Column("type", String(64), nullable=False),
    Column("cycle_id", String(128), nullable=True),
    Column("payload", Json, nullable=False),
    Column("created_at", Timestamp, nullable=False),
    Column("published", Boolean, nullable=False, server_default=text("false")),
    Index("ix_om_events_thread", "thread_id", "id"),
    Index(
        "uq_om_events_type_cycle",
        "lookup_key",
        "type",
        "cycle_id",
        unique=True,
        postgresql_where=text("cycle_id IS NOT NULL"),
        sqlite_where=text("cycle_id IS NOT NULL"),
    ),
)

#: Observation groups (retrieval mode, §9.1): every group committed, with the raw-message range it came
#: from. The log carries the same wrapper, but reflection rewrites the log; this row stays, so a range is
#: found across generations and search can index the group's text. A cycle applied twice (a buffered
#: reflection redelivered after its first result was activated) stores two groups, each with the text and
#: range it was written with, so every id a log ever carried has its row.
observation_groups = Table(
    "om_observation_groups",
    metadata,
    Column("id", String(32), primary_key=True),
    # No foreign key, as `usage_threads`: a cycle writes its groups after locking its record, and the check
    # would then lock the thread's row, the opposite order of a resource batch's commit. Erased with the
    # thread (`erasure`); written only by a commit that applied.
    Column("thread_id", String(ID_LENGTH), nullable=False),
    Column("resource_id", String(ID_LENGTH), nullable=False),
    Column("lookup_key", String(KEY_LENGTH), nullable=False),
    Column("cycle_id", String(128), nullable=False),
    Column("kind", String(16), nullable=False),  # observation | reflection
    Column("ranges", Text, nullable=False),
    Column("text", Text, nullable=False),
    Column("observed_at", Timestamp, nullable=False),
    Column("created_at", Timestamp, nullable=False),
    Index("ix_om_groups_thread", "thread_id", "created_at"),
    Index("ix_om_groups_resource", "resource_id", "created_at"),
    Index("ix_om_groups_cycle", "lookup_key", "cycle_id"),
)

#: The search index (`om_core.search`): one document per raw message and per observation group, the text
#: search matches and embeds. `ref` is the group id or the public message id. `tsv` is Postgres's lexical
#: index of `text` (written by the indexer with the `simple` configuration, see `om_core.search.lexical`),
#: NULL on SQLite, where the FTS5 table `om_search_fts` (migration 0006, kept in step by triggers) indexes
#: the same rows. `embedding_model` names the model whose vector the document has (NULL: none yet); the
#: vector itself lives in a per-dimension table `om_vec_<dims>` made at run time (`om_core.search.vectors`),
#: removed with the row (a foreign key on Postgres, a trigger on SQLite).
search_docs = Table(
    "om_search_docs",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("resource_id", String(ID_LENGTH), nullable=False),
    Column("thread_id", String(ID_LENGTH), ForeignKey("om_threads.id", ondelete="CASCADE"), nullable=False),
    Column("kind", String(16), nullable=False),  # group | message
    Column("ref", String(255), nullable=False),
    Column("ranges", Text, nullable=True),
    Column("text", Text, nullable=False),
    # When the message was written or the group observed: what search's date filters read.
    Column("at", Timestamp, nullable=False),
    Column("indexed_at", Timestamp, nullable=False),
    Column("embedding_model", String(255), nullable=True),
    Column("tsv", Text().with_variant(TSVECTOR(), "postgresql"), nullable=True),
    UniqueConstraint("thread_id", "kind", "ref", name="uq_om_search_docs_ref"),
    Index("ix_om_search_docs_resource_at", "resource_id", "at"),
    Index(
        "ix_om_search_docs_unembedded",
        "indexed_at",
        sqlite_where=text("embedding_model IS NULL"),
        postgresql_where=text("embedding_model IS NULL"),
    ),
    Index(
        "ix_om_search_docs_tsv",
        "tsv",
        postgresql_using="gin",
        sqlite_where=text("tsv IS NOT NULL"),
    ),
)

#: How far a thread is indexed: its parts up to `message_seq` are in `om_search_docs` (groups are found by
#: the documents they lack, so none is missed whatever order they commit in). `vector` says whether the
#: thread's last index run wanted vectors, so the lag counts its unembedded documents only then.
index_state = Table(
    "om_index_state",
    metadata,
    Column("thread_id", String(ID_LENGTH), ForeignKey("om_threads.id", ondelete="CASCADE"), primary_key=True),
    Column("resource_id", String(ID_LENGTH), nullable=False),
    Column("message_seq", BigInteger, nullable=False, server_default=text("0")),
    Column("vector", Boolean, nullable=False, server_default=text("false")),
    Column("updated_at", Timestamp, nullable=False),
)

#: Conditions celery-beat evaluates (idle TTL, provider change, stale work). One row per key and kind.
triggers = Table(
    "om_triggers",
    metadata,
    Column("lookup_key", String(KEY_LENGTH), primary_key=True),
    Column("kind", String(32), primary_key=True),
    Column("thread_id", String(ID_LENGTH), nullable=True),
    Column("resource_id", String(ID_LENGTH), nullable=True),
    Column("due_at", Timestamp, nullable=True),
    Column("payload", Json, nullable=False, server_default=text("'{}'")),
    Column("updated_at", Timestamp, nullable=False),
    Index("ix_om_triggers_due", "due_at"),
)

#: Working memory (§8.7): one document per resource or thread (`lookup_key` as a record chain's), its
#: text as given (Markdown, or JSON text in schema mode), and `version`, bumped by every write, which the
#: API's `expectedVersion` compares against. `updated_by`: api | observer | actor.
working_memory = Table(
    "om_working_memory",
    metadata,
    Column("lookup_key", String(KEY_LENGTH), primary_key=True),
    Column("scope", String(16), nullable=False),  # thread | resource
    Column("thread_id", String(ID_LENGTH), ForeignKey("om_threads.id", ondelete="CASCADE"), nullable=True),
    Column("resource_id", String(ID_LENGTH), nullable=False),
    Column("content", Text, nullable=False),
    Column("format", String(16), nullable=False),  # markdown | json
    Column("version", Integer, nullable=False),
    Column("updated_at", Timestamp, nullable=False),
    Column("updated_by", String(16), nullable=False),
    Index("ix_om_working_memory_resource", "resource_id"),
)


#: Webhook endpoints a tenant registered (`om_core.webhooks`). The delivery state lives on the row: `cursor`
#: is the id of the last outbox event handled (delivered, or skipped as not subscribed), only ever moved
#: forward after a 2xx; `failures` counts consecutive failed attempts of the event after it, which set
#: `next_attempt_at` (backoff) and the state (`active`, `failing`, `dead`). The totals are what `/metrics`
#: reports. The secret is kept as given: the worker needs it to sign every body.
webhook_endpoints = Table(
    "om_webhook_endpoints",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("tenant_id", String(255), nullable=False),
    Column("url", Text, nullable=False),
    Column("events", Json, nullable=False),
    Column("description", Text, nullable=True),
    Column("secret", String(128), nullable=False),
    Column("enabled", Boolean, nullable=False, server_default=text("true")),
    Column("state", String(16), nullable=False, server_default=text("'active'")),
    Column("cursor", BigInteger, nullable=False, server_default=text("0")),
    Column("failures", Integer, nullable=False, server_default=text("0")),
    Column("next_attempt_at", Timestamp, nullable=True),
    Column("last_error", Text, nullable=True),
    Column("last_delivered_at", Timestamp, nullable=True),
    Column("delivered_total", BigInteger, nullable=False, server_default=text("0")),
    Column("failed_total", BigInteger, nullable=False, server_default=text("0")),
    Column("created_at", Timestamp, nullable=False),
    Column("updated_at", Timestamp, nullable=False),
    # Secret rotation (migration 0010): the rotated-out secret signs too until dropped or expired.
    Column("previous_secret", String(128), nullable=True),
    Column("previous_secret_expires_at", Timestamp, nullable=True),
    # Send the deprecated `OM-Signature` header too (on for endpoints registered before 0010).
    Column("legacy_signature", Boolean, nullable=False, server_default=text("false")),
    Index("ix_om_webhook_endpoints_tenant", "tenant_id"),
)

#: The last attempts of each endpoint (bounded: `webhooks.store.KEEP_ATTEMPTS` per endpoint), for
#: `GET /v1/webhooks/{id}/deliveries`. `thread_id` ties an attempt to the thread whose event it carried, so
#: erasing the thread erases its attempts too (`store.erasure`).
webhook_attempts = Table(
    "om_webhook_attempts",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column(
        "endpoint_id",
        String(64),
        ForeignKey("om_webhook_endpoints.id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("event_id", BigInteger, nullable=False),
    Column("event_type", String(64), nullable=False),
    Column("thread_id", String(ID_LENGTH), nullable=True),
    Column("attempt", Integer, nullable=False),
    Column("outcome", String(16), nullable=False),
    Column("status_code", Integer, nullable=True),
    Column("error", Text, nullable=True),
    Column("duration_ms", Integer, nullable=False),
    Column("created_at", Timestamp, nullable=False),
    Index("ix_om_webhook_attempts_endpoint", "endpoint_id", "id"),
)

#: OM's own model usage (Observer and Reflector calls) per thread, bumped in the transaction of each end or
#: failed event that carries usage (`store.usage`), so a read is one row. Erased with the thread (`erasure`).
#: No foreign key: its check would lock the thread's row after the cycle locked its record, the opposite
#: order of a turn's, and deadlock the two; the event it counts was written only if the thread exists.
usage_threads = Table(
    "om_usage_threads",
    metadata,
    Column("thread_id", String(ID_LENGTH), primary_key=True),
    Column("input_tokens", BigInteger, nullable=False, server_default=text("0")),
    Column("output_tokens", BigInteger, nullable=False, server_default=text("0")),
    Column("cost_usd", Float, nullable=False, server_default=text("0")),
    Column("cycles", BigInteger, nullable=False, server_default=text("0")),
    Column("updated_at", Timestamp, nullable=False),
)

#: The same totals per tenant (`''` without tenancy): what `/metrics` reports, one label per tenant. An
#: erased thread's spend stays here: it was spent, and the row names no thread. Only the maintenance pass
#: writes it, folding `usage_tenant_deltas` in: a cycle's commit never waits on a tenant-wide row.
usage_tenants = Table(
    "om_usage_tenants",
    metadata,
    Column("tenant_id", String(255), primary_key=True),
    Column("input_tokens", BigInteger, nullable=False, server_default=text("0")),
    Column("output_tokens", BigInteger, nullable=False, server_default=text("0")),
    Column("cost_usd", Float, nullable=False, server_default=text("0")),
    Column("cycles", BigInteger, nullable=False, server_default=text("0")),
    Column("updated_at", Timestamp, nullable=False),
)

#: Usage not yet folded into `usage_tenants`: one row per event that reported usage, appended in that
#: event's transaction (an insert waits on nothing), folded and deleted by the maintenance pass.
usage_tenant_deltas = Table(
    "om_usage_tenant_deltas",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("tenant_id", String(255), nullable=False),
    Column("input_tokens", BigInteger, nullable=False),
    Column("output_tokens", BigInteger, nullable=False),
    Column("cost_usd", Float, nullable=False),
    Column("cycles", BigInteger, nullable=False),
    # The UTC day of the event (`om_core.tenancy.spend` reads a tenant's spend per day); NULL for deltas
    # written before migration 0009, which count in the tenant's totals but in no day.
    Column("day", Date, nullable=True),
)

#: A tenant's usage per UTC day, folded from `usage_tenant_deltas` by the same maintenance pass: what a
#: daily spend budget (`om_core.tenancy.spend`) is checked against, plus the deltas of that day not folded
#: yet.
usage_tenant_days = Table(
    "om_usage_tenant_days",
    metadata,
    Column("tenant_id", String(255), primary_key=True),
    Column("day", Date, primary_key=True),
    Column("input_tokens", BigInteger, nullable=False, server_default=text("0")),
    Column("output_tokens", BigInteger, nullable=False, server_default=text("0")),
    Column("cost_usd", Float, nullable=False, server_default=text("0")),
    Column("cycles", BigInteger, nullable=False, server_default=text("0")),
    Column("updated_at", Timestamp, nullable=False),
)

#: A thread's usage per UTC day (migration 0010), bumped with `usage_threads` in the same transaction: the
#: spend view's per-thread series. `tenant_id` (`''` without tenancy) lets a tenant's days be read by index.
#: Erased with the thread (`erasure` sweeps every table with a `thread_id`).
usage_thread_days = Table(
    "om_usage_thread_days",
    metadata,
    Column("thread_id", String(ID_LENGTH), primary_key=True),
    Column("day", Date, primary_key=True),
    Column("tenant_id", String(255), nullable=False),
    Column("input_tokens", BigInteger, nullable=False, server_default=text("0")),
    Column("output_tokens", BigInteger, nullable=False, server_default=text("0")),
    Column("cost_usd", Float, nullable=False, server_default=text("0")),
    Column("cycles", BigInteger, nullable=False, server_default=text("0")),
    Column("updated_at", Timestamp, nullable=False),
    Index("ix_om_usage_thread_days_tenant_day", "tenant_id", "day"),
)

#: Limits the operator set for one tenant (`om tenants limits`), over the server-wide settings; a NULL
#: column means "the setting's value". Tenants exist only through their keys, so this is the only
#: per-tenant row; read by every API process (cached) and by the budget check of the background cycle.
tenant_limits = Table(
    "om_tenant_limits",
    metadata,
    Column("tenant_id", String(255), primary_key=True),
    Column("requests_per_s", Float, nullable=True),
    Column("burst", Integer, nullable=True),
    Column("daily_budget_usd", Float, nullable=True),
    Column("updated_at", Timestamp, nullable=False),
)


__all__ = [
    "Integer",
    "chunks",
    "events",
    "index_state",
    "messages",
    "metadata",
    "observation_groups",
    "parts",
    "records",
    "resources",
    "search_docs",
    "tenant_limits",
    "threads",
    "triggers",
    "usage_tenant_days",
    "usage_tenant_deltas",
    "usage_tenants",
    "usage_thread_days",
    "usage_threads",
    "webhook_attempts",
    "webhook_endpoints",
    "working_memory",
]

#: API keys of the HTTP service: only a SHA-256 of each key's secret is kept, found by the key's public id.
api_keys = Table(
    "om_api_keys",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("tenant_id", String(255), nullable=False),
    Column("name", String(255), nullable=False),
    Column("secret_sha256", String(64), nullable=False),
    Column("created_at", Timestamp, nullable=False),
    Column("revoked_at", Timestamp, nullable=True),
    # What the key spent on actor models through the proxy; only ever bumped by `UPDATE ... SET x = x + n`.
    Column("actor_calls", BigInteger, nullable=False, server_default=text("0")),
    Column("actor_prompt_tokens", BigInteger, nullable=False, server_default=text("0")),
    Column("actor_completion_tokens", BigInteger, nullable=False, server_default=text("0")),
    Column("actor_cost_usd", Float, nullable=False, server_default=text("0")),
    Index("ix_om_api_keys_tenant", "tenant_id"),
)
