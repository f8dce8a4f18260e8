"""One recall call, from parameters to the answer (behaviour §9.3–§9.4): validate, check the thread has
retrieval on, then hand over to the mode. `MemoryEngine.recall` is the way in; this module holds no state.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Engine

from om_core.config.options import ResolvedRetrieval
from om_core.recall.budget import Count
from om_core.recall.errors import RecallNotFound, RetrievalDisabled
from om_core.recall.messages_mode import read_messages
from om_core.recall.params import RecallParams, parse_params
from om_core.recall.scope import RecallScope
from om_core.recall.search_mode import Searcher, search
from om_core.recall.threads_mode import list_threads
from om_core.store.recall_reads import thread_info
from om_core.tenancy.scoped_ids import StoredId, public_id

__all__ = ["run_recall"]


def run_recall(
    db: Engine,
    thread_id: StoredId,
    options: ResolvedRetrieval | None,
    params: Mapping[str, Any] | RecallParams,
    *,
    count: Count,
    searcher: Searcher | None = None,
) -> dict[str, Any]:
    """Answer one call on the active thread `thread_id` (a stored id) with its retrieval settings
    (`options`, None when retrieval is off). Raises a `RecallError` with a message a model can act on."""
    if options is None:
        raise RetrievalDisabled(public_id(thread_id))
    p = parse_params(params)
    with db.connect() as conn:
        active = thread_info(conn, thread_id)
        if active is None:
            raise RecallNotFound(f"thread {public_id(thread_id)!r} does not exist; post a turn first")
        scope = RecallScope(active, options.scope, count)
        if p.mode == "threads":
            return list_threads(conn, scope, p)
        if p.mode == "search":
            return search(conn, scope, p, searcher if options.vector else None)
        return read_messages(conn, scope, p)
