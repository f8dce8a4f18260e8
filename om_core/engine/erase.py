"""Erasing a thread or a resource: its rows in one transaction (`store.erasure`), then its coordination
values, so a new thread or resource with the same id starts clean."""

from __future__ import annotations

from om_core.coordination import Keys
from om_core.engine.core import EngineCore
from om_core.store import erasure
from om_core.tenancy.scoped_ids import StoredId


def erase_thread(core: EngineCore, thread_id: StoredId) -> bool:
    """Erase a thread and everything OM keeps for it (every table with a thread, resource or key
    column). False if it did not exist.

    A worker still running on the thread finds its head gone and its commit fails as not-found, and the
    outbox writes no event of a thread that is gone, so nothing of the deleted memory is resurrected (ids
    are never reused). Coordination values (buffering boundaries, reflection suppression) are dropped too.
    """
    erased = erasure.erase_in_transaction(core.db, lambda conn: erasure.erase_thread(conn, thread_id))
    if erased is None:
        return False
    _forget(core, erased.lookup_keys)
    return True


def erase_resource(core: EngineCore, resource_id: StoredId) -> bool:
    """Erase a resource and everything OM keeps for it: every thread of it with its messages, records,
    chunks, events, triggers, observation groups and search entries, its shared log (resource scope) with
    all its generations, its overrides. False if it did not exist.

    The threads' rows are locked first, in id order, before any key lock is taken, so a turn that holds
    one of them never waits for this while it waits for that turn. A worker still running on one of the
    threads or on the log finds its record gone and its commit fails as not found."""
    erased = erasure.erase_in_transaction(core.db, lambda conn: erasure.erase_resource(conn, resource_id))
    if erased is None:
        return False
    _forget(core, erased.lookup_keys)
    return True


def _forget(core: EngineCore, keys: tuple[str, ...]) -> None:
    for key in keys:
        for name in (
            Keys.buffer_boundary(key),
            Keys.reflection_boundary(key),
            Keys.reflection_suppressed(key),
        ):
            core.coordination.set_int(name, None)
