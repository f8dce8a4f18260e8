"""What a turn sees beyond its own record (resource scope, behaviour §4.12): the resource's shared log and the
other threads' unobserved messages, read consistently with the thread's own cursor, and the status and
threshold activation that count them.

In thread scope the view is the thread's own head and nothing else, and nothing here reads again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from sqlalchemy import Connection

from om_core.config.options import ResolvedConfig
from om_core.coordination import Peek
from om_core.engine import activation, resource
from om_core.engine.core import EngineCore
from om_core.engine.window import Window
from om_core.policy import decisions
from om_core.store import history, records
from om_core.store.types import Record


@dataclass(frozen=True)
class SharedView:
    """The memory a thread's turn sees beyond its own record: the log (the resource's in resource scope,
    else the thread's own head) and the other threads' unobserved messages, rendered as the actor's
    other-conversations block, with the tokens that block adds to pending (behaviour §4.12)."""

    log: Record
    others: str = ""
    others_tokens: int = 0
    windows: tuple[resource.ThreadWindow, ...] = ()


def status_with(
    core: EngineCore,
    head: Record,
    window: Window,
    cfg: ResolvedConfig,
    shared: SharedView,
    view: Peek | None = None,
) -> decisions.Status:
    """The thread's status with the view's log and other-conversations block counted."""
    return core.status_of(head, window, cfg, view, log=shared.log, others_tokens=shared.others_tokens)


def activate_other_threads(
    core: EngineCore,
    thread: history.ThreadRow,
    cfg: ResolvedConfig,
    head: Record,
    window: Window,
    shared: SharedView,
    status: decisions.Status,
) -> tuple[SharedView, decisions.Status]:
    """Resource scope at the threshold, after the thread's own chunks: the other threads' chunks, the
    largest backlog first, until the resource is under the threshold. Without this a thread whose turns
    happen to follow another's activation would never see its own chunks activated (its messages
    would stay raw in every thread's context)."""
    for other in sorted(shared.windows, key=lambda w: w.window.tokens, reverse=True):
        if not status.should_observe:
            break
        if not other.cursor.chunks:
            continue
        activated = activation.activate(
            core, other.thread.id, pending_tokens=status.pending, triggered_by="threshold"
        )
        if activated is None:
            continue
        with core.db.connect() as conn:
            shared = read_shared(core, conn, thread, head, cfg)
        status = status_with(core, head, window, cfg, shared)
    return shared, status


def refreshed(core: EngineCore, shared: SharedView) -> SharedView:
    """`shared` with its log read again when it is a resource's (an activation just grew it)."""
    if shared.log.scope != "resource":
        return shared
    log = records.get_head(core.db, shared.log.lookup_key)
    return replace(shared, log=log) if log is not None else shared


#: How often a turn reads again when a commit landed between the statements of its read (READ COMMITTED:
#: each statement sees the commits made before it); after that it goes on with the last read.
_READ_ATTEMPTS = 5


def read_shared(
    core: EngineCore, conn: Connection, thread: history.ThreadRow, head: Record, cfg: ResolvedConfig
) -> SharedView:
    """The shared log and the other threads' unobserved messages, as of one moment: a batch or an
    activation that commits between reading the log and reading the other threads' cursors moves its
    messages out of the other-conversations block into a log already read, so the log is read again
    after the cursors and the read repeated until it did not change meanwhile."""
    if not cfg.enabled or not resource.scope_for(cfg).shared:
        return SharedView(head)
    log = resource.read_log(conn, core, thread.resource_id)
    for _attempt in range(_READ_ATTEMPTS):
        others = resource.thread_windows(conn, core, thread.resource_id, exclude=thread.id)
        again = records.read_head(conn, log.lookup_key)
        if again is None or _same_log(again, log):
            break
        log = again
    if not others:
        return SharedView(log)
    block = resource.render_other_conversations(
        others, core.settings.timezone, obscure=cfg.obscure_thread_ids
    )
    return SharedView(log, block, core.counter.count_string(block) if block else 0, tuple(others))


def _same_log(a: Record, b: Record) -> bool:
    return a.id == b.id and a.active_observations == b.active_observations


def read_consistent(
    core: EngineCore,
    conn: Connection,
    thread: history.ThreadRow,
    head: Record,
    cfg: ResolvedConfig,
    read_own: Callable[[Record], history.Unobserved],
) -> tuple[Record, history.Unobserved, SharedView]:
    """The thread's unobserved messages after `head`'s cursor and the shared memory, consistent with
    each other: in resource scope the thread's cursor can move (a batch or another thread's turn
    activating its chunks) after it was read and before the shared log is, which would show the
    messages it covered twice; the cursor is read again after the log and the read repeated then."""
    for _attempt in range(_READ_ATTEMPTS):
        unobserved = read_own(head)
        shared = read_shared(core, conn, thread, head, cfg)
        if shared.log is head:
            break  # thread scope: one row holds the cursor and the log
        again = records.read_head(conn, head.lookup_key)
        if again is None or (again.id, again.last_observed_seq) == (head.id, head.last_observed_seq):
            break
        head = again
    return head, unobserved, shared
