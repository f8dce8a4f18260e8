"""`mode: "threads"` (behaviour §9.4): the conversations recall can read, so a model can pick a `threadId`.

Resource scope lists the resource's threads, most recently updated first, a page at a time (`page` is
0-based, `limit` clamped to [1, 50]); `before` / `after` bound their creation time (filtered in the
database, so pages stay exact). Thread scope shows the current thread only.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from om_core.recall.budget import limit_result
from om_core.recall.params import RecallParams
from om_core.recall.render import stamp
from om_core.recall.scope import RecallScope
from om_core.store.recall_reads import ThreadInfo, resource_threads
from om_core.tenancy.scoped_ids import public_id

__all__ = ["NO_THREADS", "list_threads"]

NO_THREADS = "No threads found matching the criteria."


def _entry(thread: ThreadInfo, current: bool) -> str:
    title = (thread.title or "").strip() or "(untitled)"
    mark = " ← current" if current else ""
    return (
        f"- **{title}**{mark}\n"
        f"  id: {public_id(thread.id)}\n"
        f"  updated: {stamp(thread.updated_at)} | created: {stamp(thread.created_at)}"
    )


def list_threads(conn: Connection, scope: RecallScope, p: RecallParams) -> dict[str, Any]:
    if not scope.spans_resource:
        threads, page, has_more = [scope.active], 0, False
    else:
        page, limit = p.page_number, p.page_limit
        found = resource_threads(
            conn,
            scope.active.resource_id,
            scope.active.tenant_id,
            offset=page * limit,
            limit=limit + 1,
            after=p.after,
            before=p.before,
        )
        threads, has_more = found[:limit], len(found) > limit
    text = "\n".join(_entry(t, scope.is_active(t)) for t in threads) if threads else NO_THREADS
    text, cut = limit_result(text, scope.count)
    result: dict[str, Any] = {"threads": text, "count": len(threads), "page": page, "hasMore": has_more}
    if cut:
        result["truncated"], result["tokenOffset"] = True, cut
    return result
