"""A turn's store-and-read half: lock the thread, store the new messages, read what the turn decides on.

The common turn writes once here and reads the head, the unobserved window with its messages and the
shared memory consistently with each other; on SQLite the read happens after the commit, so the one
database write lock is held only for the writes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection

from om_core.config.options import ResolvedConfig, message_threshold_max
from om_core.context.temporal import is_temporal_marker
from om_core.engine import reminders, resource, shared_view
from om_core.engine.core import EngineCore
from om_core.engine.tasks import lookup_key
from om_core.engine.window import Window, build_window, start_of_recent
from om_core.messages import Message, Part
from om_core.policy.early_activation import last_actor_model
from om_core.store import history, records
from om_core.store.db import is_postgres, read_only
from om_core.store.types import Record, StoredEvent
from om_core.tenancy import access
from om_core.tenancy.scoped_ids import StoredId

#: Parts read per page when looking for the start of the recent history (OM off); a page is ~30 KB of rows.
_RECENT_PAGE = 512


@dataclass(frozen=True)
class TurnInput:
    """One call of `ingest_turn`, as the caller gave it."""

    thread_id: StoredId
    resource_id: StoredId | None
    messages: list[Message]
    actor_model: str | None = None
    step_number: int = 0
    turn_end: bool | None = None
    tenant_id: str | None = None
    #: The actor call's provider options (`"auto"` idle TTL, behaviour §4.7).
    provider_options: dict[str, Any] | None = None
    #: False when the caller does not want the actor's context back (the reply call of an exchange): the
    #: turn then neither builds it nor reads the message bodies it would show.
    with_context: bool = True
    #: The turn's memory-model choice (`memory_options`, as `request_choice.normalize` gives it): applied
    #: to the background work this turn starts.
    choice: dict[str, dict[str, Any]] | None = None


@dataclass(frozen=True)
class Stored:
    """What the store transaction of a turn read: the thread before and after locking it, the head, the
    unobserved window and its messages, and the shared memory."""

    before: history.ThreadRow | None
    thread: history.ThreadRow
    head: Record
    window: Window
    messages: list[Message]
    shared: shared_view.SharedView
    reminders: list[StoredEvent] = field(default_factory=list)


def recorded_actor_model(turn: TurnInput) -> str | None:
    """The thread's latest actor model after `turn`: the one the caller says runs next (`actor_model`),
    else the newest one an assistant message of the turn names (a `step-start` part's `model`, or
    `provider`/`modelId` in its metadata), so a caller that only stores its replies still records which
    model wrote them (behaviour §4.7, `activateOnProviderChange`)."""
    return turn.actor_model or last_actor_model(turn.messages)


def previous_actor_model(turn: TurnInput, before: history.ThreadRow | None) -> str | None:
    """The model behind the newest assistant step, which the next step's `actor_model` is compared with:
    named by an assistant message of this turn when one does, else the thread's recorded model."""
    return last_actor_model(turn.messages) or (before.last_actor_model if before is not None else None)


def store_and_read(core: EngineCore, turn: TurnInput) -> Stored:
    """Lock the thread (creating it for the tenant if new), check access, store the messages (temporal
    markers first, when configured), read (or create) the head, then read the unobserved window with its
    messages, bodies coming from the part cache where it has them.

    On Postgres everything is one transaction: it locks rows only. SQLite has one write lock for the whole
    database, held from `BEGIN IMMEDIATE` to commit, so there the head and the window are read after the
    commit, in a reader that neither takes nor waits for that lock, and the parts are counted before the
    transaction: every other writer (the worker's cycles, the other turns) waits only for the writes. The
    reader sees this turn's commit or later, as one snapshot, and takes the head as it finds it (work that
    moved the cursor meanwhile is then already shown)."""
    thread_id, incoming = turn.thread_id, turn.messages
    key = lookup_key(thread_id)
    count_part = _precounted(incoming, _count_part(core, turn.actor_model))  # outside the write lock
    with core.db.begin() as conn:
        before = history.lock_thread(conn, thread_id)
        thread = before or access.create_thread_for(
            conn, turn.tenant_id, thread_id, turn.resource_id or thread_id
        )
        access.check_turn_access(thread, turn.tenant_id, turn.resource_id)
        cfg = core.config_for(thread.effective_overrides)
        if cfg.temporal_markers:  # never with OM off: markers are OM's own messages
            incoming = reminders.with_markers(conn, thread, incoming, core.settings.timezone)
        fresh = history.append_to_locked(
            conn, thread, incoming, count_part=count_part, actor_model=recorded_actor_model(turn)
        )
        postgres = is_postgres(conn)
        # SQLite holds its one write lock until the commit: there the head is read after it, unless this
        # transaction must write it (a new thread's first generation) or write under it (reminders).
        head: Record | None = None
        if postgres or before is None or any(is_temporal_marker(m) for m in fresh):
            head = _head_or_first(core, conn, thread)
        reminder_events = reminders.write_reminders(conn, thread_id, head, fresh) if head else []
        if cfg.enabled and resource.scope_for(cfg).shared:
            resource.read_log(conn, core, thread.resource_id)  # created by the writer, read below
        fresh_parts = {part.seq: part for message in fresh for part in message.parts}
        read = _WindowRead(core, thread, cfg, fresh_parts, turn.with_context)
        seen = read(conn, head) if postgres and head is not None else None
    if seen is None:
        with read_only(core.db) as conn:
            current = records.read_head(conn, key) or head
            seen = read(conn, current) if current is not None else None
    if seen is None:  # a thread stored before its first turn (its config written first) has no head yet
        with core.db.begin() as conn:
            head = _head_or_first(core, conn, thread)
        with read_only(core.db) as conn:
            seen = read(conn, records.read_head(conn, key) or head)
    head, unobserved, shared = seen
    core.remember_parts(thread, unobserved, fresh_parts)
    window = build_window(unobserved.rows, core.counter)
    return Stored(before, thread, head, window, unobserved.messages, shared, reminder_events)


@dataclass(frozen=True)
class _WindowRead:
    """The read half of `store_and_read`: the unobserved window after `head`'s cursor and the shared
    memory, consistent with each other (`shared_view.read_consistent`)."""

    core: EngineCore
    thread: history.ThreadRow
    cfg: ResolvedConfig
    fresh_parts: dict[int | None, Part]
    bodies: bool

    def __call__(
        self, conn: Connection, head: Record
    ) -> tuple[Record, history.Unobserved, shared_view.SharedView]:
        return shared_view.read_consistent(
            self.core, conn, self.thread, head, self.cfg, lambda current: self._unobserved(conn, current)
        )

    def _unobserved(self, conn: Connection, head: Record) -> history.Unobserved:
        core, thread = self.core, self.thread
        start = _context_start(core, conn, thread, head, self.cfg)
        return history.read_unobserved(
            conn,
            thread.id,
            start,
            known=lambda seq: self.fresh_parts.get(seq) or core.cached_part(thread, seq),
            bodies=self.bodies,
            held=core.held_window(thread, start),
        )


def _context_start(
    core: EngineCore, conn: Connection, thread: history.ThreadRow, head: Record, cfg: ResolvedConfig
) -> int:
    """Where the actor's raw messages start: after the cursor while OM is on.

    With OM off (`enabled: false`) nothing is compressed, so the raw history is all the actor has:
    the newest messages within the thread's message budget (`observation.messageTokens`, the most
    raw history OM itself shows before compressing), wherever a cursor left by an earlier enabled
    period stands. Bounded so that neither the context nor the turn's reads grow with the thread."""
    if cfg.enabled:
        return head.last_observed_seq
    budget = message_threshold_max(cfg)
    rows: list[history.PartTokens] = []
    while True:
        page = history.part_tokens_newest_first(
            conn, thread.id, before_seq=rows[-1].seq if rows else None, limit=_RECENT_PAGE
        )
        rows.extend(page)
        start = start_of_recent(build_window(rows, core.counter), budget)
        if start is not None:
            return start
        if len(page) < _RECENT_PAGE:
            return 0


def _head_or_first(core: EngineCore, conn: Connection, thread: history.ThreadRow) -> Record:
    """The thread's head, created (generation 0) when it has none yet."""
    key = lookup_key(thread.id)
    return records.read_head(conn, key) or records.initialize(
        conn,
        lookup_key=key,
        scope="thread",
        thread_id=thread.id,
        resource_id=thread.resource_id,
        config=core.base_config.to_public_dict(),
        observed_timezone=core.settings.timezone,
    )


def _precounted(messages: Sequence[Message], count: history.PartCounter) -> history.PartCounter:
    """`count` with the incoming parts counted now, before the write transaction that stores them, so the
    tokenizer does not run under SQLite's write lock; parts added inside it (temporal markers) are
    counted there."""
    counted = {id(part): count(part) for message in messages for part in message.parts}
    return lambda part: counted.get(id(part)) or count(part)


def _count_part(core: EngineCore, actor_model: str | None) -> Callable[[Any], tuple[float, float, int]]:
    def count(part: Any) -> tuple[float, float, int]:
        counted = core.counter.count_part(part, actor_model)
        return (counted.tokens, counted.overhead_delta, counted.extra_messages)

    return count
