"""When a thread's search documents are brought up to date, and the run that does it (`IndexThread`).

Indexing is asked for only for threads with `retrieval` on, at two moments:

- after an observation, buffering, resource batch or reflection committed something (new observation
  groups exist only then), by the engine's task handlers, for every thread the run covered;
- from a turn, at most once per `index_interval_s` per thread (a TTL'd marker in the shared coordination
  store, `Keys.index_throttle`), so raw messages become searchable without waiting for an observation;
- by the maintenance pass (beat), for a thread being indexed whose newest messages arrived after its
  last request and have been quiet for an interval (`index_stragglers`): the trailing edge of the turn
  throttle, so the end of a burst does not wait for the next turn; and for a thread whose documents hold
  vectors of another embedding model (the server's model changed, or its offline default did), so an idle
  thread is embedded again too. Once no such thread is left the pass stops looking for them for
  `MODEL_SETTLED_S` (a marker per model in the coordination store): the query reads every document.

Both only enqueue an `IndexThread` task (`om.index` queue); a failure to enqueue is logged and never fails
the turn or the cycle. A turn of a thread with retrieval off does none of this: its path is unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime, timedelta

from om_core.config.options import ResolvedConfig
from om_core.coordination import Keys
from om_core.engine.core import EngineCore
from om_core.engine.tasks import IndexThread, lookup_key, new_cycle_id
from om_core.search.index import (
    IndexResult,
    has_pending_work,
    index_thread,
    other_model_threads,
    stragglers,
    track,
)
from om_core.tenancy.scoped_ids import StoredId

log = logging.getLogger("om.engine.indexing")

#: How long a maintenance pass that found no vector of another model rests before looking again.
MODEL_SETTLED_S = 24 * 3600.0


def request_index(core: EngineCore, thread_ids: Iterable[StoredId]) -> None:
    """Enqueue indexing of each thread (fire and forget; never raises). A thread asked for the first time
    gets its index state now, so the lag counts it before its first run."""
    wanted = list(dict.fromkeys(thread_ids))
    try:
        track(core.db, wanted)
    except Exception:
        log.warning("could not record index state of %s", wanted, exc_info=True)
    for thread_id in wanted:
        try:
            core.executor.submit(IndexThread(thread_id, new_cycle_id("index")))
        except Exception:
            log.warning("could not enqueue indexing of %s", thread_id, exc_info=True)


def request_after_commit(core: EngineCore, thread_ids: Iterable[StoredId]) -> None:
    """After a run that committed: index the threads that have retrieval on."""
    wanted = []
    for thread_id in thread_ids:
        try:
            if core.thread_config(thread_id).retrieval:
                wanted.append(thread_id)
        except Exception:
            log.warning("could not read the config of %s to index it", thread_id, exc_info=True)
    request_index(core, wanted)


def request_from_turn(core: EngineCore, thread_id: StoredId, cfg: ResolvedConfig) -> None:
    """A turn of a thread with retrieval on: enqueue indexing unless one was asked for within the
    interval."""
    if not cfg.retrieval:
        return
    try:
        token = core.coordination.try_lock(
            Keys.index_throttle(lookup_key(thread_id)), core.settings.index_interval_s
        )
    except Exception:
        log.warning("could not throttle indexing of %s", thread_id, exc_info=True)
        return
    if token is not None:
        request_index(core, [thread_id])


def run(core: EngineCore, task: IndexThread) -> IndexResult | None:
    """Index the task's thread under its index lock. None when the thread has OM or retrieval off, or
    another run holds the lock (it will see everything this one would have)."""
    cfg = core.thread_config(task.thread_id)
    if not cfg.enabled or not cfg.retrieval:
        return None
    vector = cfg.retrieval_options is not None and cfg.retrieval_options.vector
    with core.holding(Keys.index_lock(lookup_key(task.thread_id))) as held:
        if not held:
            return None
        result = index_thread(
            core.db,
            task.thread_id,
            core.embedder if vector else None,
            batch_size=core.settings.embedding_batch_size,
        )
    # A request that arrived while the lock was held found it taken and did nothing; what it was for
    # committed before it was sent, so a check after the release sees it.
    if has_pending_work(core.db, task.thread_id):
        request_index(core, [task.thread_id])
    return result


def index_stragglers(core: EngineCore, *, now: datetime, limit: int) -> list[StoredId]:
    """Ask for indexing of threads with messages past their index cursor and no write for an interval,
    and of threads with vectors of another embedding model (at most once per interval each); returns
    their ids."""
    quiet_since = now - timedelta(seconds=core.settings.index_interval_s)
    asked = []
    found = stragglers(core.db, quiet_since=quiet_since, limit=limit)
    for thread_id in dict.fromkeys([*found, *_other_model(core, limit=limit)]):
        marker = Keys.index_swept(lookup_key(thread_id))
        if core.coordination.try_lock(marker, core.settings.index_interval_s) is not None:
            asked.append(thread_id)
    request_index(core, asked)
    return asked


def _other_model(core: EngineCore, *, limit: int) -> list[StoredId]:
    """Threads with vectors of another model than the server's, unless a recent pass found none."""
    model = core.embedder.model
    settled = Keys.index_model_settled(model)
    if core.coordination.get_int(settled) is not None:
        return []
    found = other_model_threads(core.db, model, limit=limit)
    if not found:
        core.coordination.set_int(settled, 1, ttl_s=MODEL_SETTLED_S)
    return found
