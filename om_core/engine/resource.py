"""Thread scope and resource scope (behaviour §4.12) as two strategies, and what resource scope adds: what
of the other threads a turn shows and counts, and how a resource's unobserved messages are split into
Observer batches.

In resource scope every thread keeps its own record chain (`thread:<id>`) for its cursor, exactly as in
thread scope, so each thread's messages are covered by the same storage rules; the observation log those
cursors feed is one record chain per resource (`resource:<id>`), shared by all its threads. `scope_for`
picks the strategy once from a thread's config; the engine asks it what differs (which key holds the
log, which log a thread's observations join, how an observation is planned) instead of testing the
scope where it needs an answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Literal, Protocol

from sqlalchemy import Connection, Engine

from om_core.config.options import ResolvedConfig
from om_core.engine.tasks import Observe, ObserveBatch, Trigger, lookup_key, resource_key
from om_core.engine.window import Window, build_window
from om_core.messages import Message
from om_core.observations.resource_log import thread_label
from om_core.observer.transcript import render_transcript
from om_core.store import history, records
from om_core.store.types import Record
from om_core.tenancy.scoped_ids import StoredId

if TYPE_CHECKING:  # the engine's core reads its log key through the scope
    from om_core.engine.core import EngineCore

#: Characters of each part shown in the other-conversations block (§4.11).
OTHER_PART_CHARS = 500


class Scope(Protocol):
    """What differs between thread scope and resource scope, asked where it matters."""

    name: Literal["thread", "resource"]
    #: Whether a thread's observations join a log its resource's other threads share.
    shared: bool

    def log_key(self, thread_id: StoredId, resource_id: StoredId) -> str:
        """The record chain holding the thread's observation log."""
        ...

    def log_key_of(self, db: Engine, thread_id: StoredId) -> str:
        """`log_key` for a thread known by id only (the resource's is read when it matters)."""
        ...

    def joined_log(self, conn: Connection, resource_id: StoredId, head: Record) -> Record:
        """The log a thread's observations join, as it stands (`head`, the thread's own record, when
        that log does not exist yet or is the thread's own)."""
        ...

    def batches(self, core: EngineCore, task: Observe, cfg: ResolvedConfig) -> list[ObserveBatch] | None:
        """The Observer batches `task` runs as (none when its thread is gone), or None where the thread
        observes its own tail."""
        ...


class ThreadScope:
    """Each thread's chain holds its cursor and its log; an observation is the thread's own."""

    name: Literal["thread", "resource"] = "thread"
    shared = False

    def log_key(self, thread_id: StoredId, resource_id: StoredId) -> str:
        return lookup_key(thread_id)

    def log_key_of(self, db: Engine, thread_id: StoredId) -> str:
        return lookup_key(thread_id)

    def joined_log(self, conn: Connection, resource_id: StoredId, head: Record) -> Record:
        return head

    def batches(self, core: EngineCore, task: Observe, cfg: ResolvedConfig) -> list[ObserveBatch] | None:
        return None


class ResourceScope:
    """The resource's chain holds the log its threads share; an observation is planned across them."""

    name: Literal["thread", "resource"] = "resource"
    shared = True

    def log_key(self, thread_id: StoredId, resource_id: StoredId) -> str:
        return resource_key(resource_id)

    def log_key_of(self, db: Engine, thread_id: StoredId) -> str:
        thread = history.get_thread(db, thread_id)
        return resource_key(thread.resource_id) if thread is not None else lookup_key(thread_id)

    def joined_log(self, conn: Connection, resource_id: StoredId, head: Record) -> Record:
        return records.read_head(conn, resource_key(resource_id)) or head

    def batches(self, core: EngineCore, task: Observe, cfg: ResolvedConfig) -> list[ObserveBatch] | None:
        thread = history.get_thread(core.db, task.thread_id)
        if thread is None:
            return []
        return plan_for(core, thread, cfg, cycle_id=task.cycle_id, trigger=task.trigger)


THREAD: Scope = ThreadScope()
RESOURCE: Scope = ResourceScope()


def scope_for(cfg: ResolvedConfig) -> Scope:
    """The strategy of a thread's config, chosen once where the config is read."""
    return RESOURCE if cfg.scope == "resource" else THREAD


def log_key(cfg: ResolvedConfig, thread: history.ThreadRow) -> str:
    """The record chain holding the thread's observation log."""
    return scope_for(cfg).log_key(thread.id, thread.resource_id)


def read_log(conn: Connection, core: EngineCore, resource_id: StoredId) -> Record:
    """The resource's shared log, created (generation 0) on first use."""
    key = resource_key(resource_id)
    return records.read_head(conn, key) or records.initialize(
        conn,
        lookup_key=key,
        scope="resource",
        thread_id=None,
        resource_id=resource_id,
        config=core.base_config.to_public_dict(),
        observed_timezone=core.settings.timezone,
    )


@dataclass(frozen=True)
class ThreadWindow:
    """One thread of a resource as a turn or a batch plan sees it: its cursor and what lies after it."""

    thread: history.ThreadRow
    cursor: Record
    window: Window
    messages: list[Message]

    @property
    def oldest(self) -> datetime:
        return min(m.created_at for m in self.messages)


def thread_windows(
    conn: Connection, core: EngineCore, resource_id: StoredId, *, exclude: str | None = None
) -> list[ThreadWindow]:
    """The resource's threads in resource scope (OM on) that have unobserved visible messages."""
    out: list[ThreadWindow] = []
    for thread in history.list_threads(conn, resource_id):
        if thread.id == exclude:
            continue
        cfg = core.config_for(thread.effective_overrides)
        if not cfg.enabled or not scope_for(cfg).shared:
            continue
        cursor = records.read_head(conn, lookup_key(thread.id))
        if cursor is None or thread.last_seq <= cursor.last_observed_seq:
            continue
        unobserved = history.read_unobserved(
            conn,
            thread.id,
            cursor.last_observed_seq,
            known=lambda seq, row=thread: core.cached_part(row, seq),  # type: ignore[misc]
        )
        window = build_window(unobserved.rows, core.counter)
        visible = [m for m in unobserved.messages if m.has_visible_content]
        if window.messages and visible:
            out.append(ThreadWindow(thread, cursor, window, visible))
    return out


def render_other_conversations(others: Sequence[ThreadWindow], tz: str, *, obscure: bool) -> str:
    """The `<other-conversation>` sections of the actor's context (§4.11 item 2): each other thread's
    unobserved messages in the Observer's transcript format, parts cut to `OTHER_PART_CHARS`."""
    sections: list[str] = []
    for other in others:
        text = render_transcript(other.messages, tz, part_char_cap=OTHER_PART_CHARS).text.strip()
        if text:
            label = thread_label(other.thread.id, obscure=obscure)
            sections.append(f'<other-conversation id="{label}">\n{text}\n</other-conversation>')
    return "\n\n".join(sections)


def plan_batches(
    requester: StoredId,
    windows: Sequence[ThreadWindow],
    cfg: ResolvedConfig,
    *,
    cycle_id: str,
    trigger: Trigger,
    threshold: int | None,
) -> list[ObserveBatch]:
    """The Observer batches of one observation of a resource (behaviour §4.12).

    The largest threads are taken first until their tokens reach `threshold` (all of them without one);
    the chosen threads are ordered by their oldest unobserved message and packed into batches of at most
    `maxTokensPerBatch` (a larger thread is a batch of its own). The requester's newest message stays
    raw: it is the prompt being answered.
    """
    chosen: list[ThreadWindow] = []
    total = 0
    for item in sorted(windows, key=lambda w: w.window.tokens, reverse=True):
        if threshold is not None and total >= threshold:
            break
        chosen.append(item)
        total += item.window.tokens
    chosen.sort(key=lambda w: (w.oldest, w.thread.id))
    limit = cfg.observation.max_tokens_per_batch
    batches: list[list[ThreadWindow]] = []
    size = 0
    for item in chosen:
        if batches and size + item.window.tokens <= limit:
            batches[-1].append(item)
            size += item.window.tokens
        else:
            batches.append([item])
            size = item.window.tokens
    return [
        ObserveBatch(
            thread_id=requester,
            cycle_id=f"{cycle_id}-b{index}",
            thread_ids=tuple(w.thread.id for w in batch),
            keep_tail=requester if any(w.thread.id == requester for w in batch) else "",
            trigger=trigger,
        )
        for index, batch in enumerate(batches)
    ]


def plan_for(
    core: EngineCore, thread: history.ThreadRow, cfg: ResolvedConfig, *, cycle_id: str, trigger: Trigger
) -> list[ObserveBatch]:
    """Batches for an observation the thread's turn (at the threshold) or a manual request (everything
    unobserved) asks for."""
    with core.db.connect() as conn:
        windows = thread_windows(conn, core, thread.resource_id)
    threshold = None if trigger == "manual" else _max_tokens(cfg)
    return plan_batches(thread.id, windows, cfg, cycle_id=cycle_id, trigger=trigger, threshold=threshold)


def _max_tokens(cfg: ResolvedConfig) -> int:
    value = cfg.observation.message_tokens
    return value if isinstance(value, int) else value.max
