"""`mode: "search"` (behaviour §9.4): ranked observation groups and raw messages of the user's conversations.

The search itself is injected (`Searcher`, built by `om_core.search`): recall only shapes the request,
keeps what this call may read, and formats the hits. Without a searcher, or with `retrieval.vector`
off, the answer says search is not configured and what to use instead (count 0), rather than failing.

Hits are checked again here whatever the searcher did: only the active resource's hits, only the allowed
threads (thread scope: the current one; a `threadId`: that one), only inside `before` / `after`. When
such a filter applies, more hits are asked for than are shown (`max(3k, k + 10)`, at most 20) so that
filtering still leaves `k`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection

from om_core.recall.budget import limit_result
from om_core.recall.params import MAX_LIMIT, RecallParams
from om_core.recall.render import stamp
from om_core.recall.scope import RecallScope
from om_core.search.errors import VectorSearchUnavailable
from om_core.search.types import SearchHit, SearchRequest
from om_core.store.recall_reads import ThreadInfo, threads_by_id
from om_core.tenancy.scoped_ids import StoredId, public_id

__all__ = ["NOT_CONFIGURED", "NO_MATCHES", "Searcher", "fetch_size", "search"]

#: What recall calls to search: a request in, hits best first out.
Searcher = Callable[[SearchRequest], list[SearchHit]]

NOT_CONFIGURED = (
    "Search is not configured for this conversation: it needs retrieval: {vector: true} in the memory "
    'config and a search index on the server. Use mode "threads" to find a conversation and mode '
    '"messages" to read it instead.'
)
NO_MATCHES = "No matching messages found."


def fetch_size(k: int, filtering: bool) -> int:
    """How many hits to ask for to show `k` after filtering (behaviour §9.4 over-fetch)."""
    return min(max(3 * k, k + 10), MAX_LIMIT) if filtering else k


def search(
    conn: Connection, scope: RecallScope, p: RecallParams, searcher: Searcher | None
) -> dict[str, Any]:
    if searcher is None:
        return {"results": NOT_CONFIGURED, "count": 0}
    k = min(max(p.page_limit, 1), MAX_LIMIT)
    allowed: tuple[StoredId, ...] | None = None
    if not scope.spans_resource:
        allowed = (scope.active.id,)
    elif p.thread_id is not None:
        allowed = (scope.thread(conn, p.thread_id).id,)
    filtering = allowed is not None or p.after is not None or p.before is not None
    request = SearchRequest(
        resource_id=scope.active.resource_id,
        query=(p.query or "").strip(),
        limit=fetch_size(k, filtering),
        thread_ids=allowed,
        after=p.after,
        before=p.before,
    )
    try:
        found = searcher(request)
    except VectorSearchUnavailable as exc:
        # Said, not hidden: the operator turned vectors on where the database cannot store them.
        return {"results": f"Search is unavailable on this server: {exc}", "count": 0}
    hits = [
        hit
        for hit in found
        if hit.resource_id == scope.active.resource_id
        and (allowed is None or hit.thread_id in allowed)
        and (p.after is None or hit.at > p.after)
        and (p.before is None or hit.at < p.before)
    ][:k]
    if not hits:
        return {"results": NO_MATCHES, "count": 0}
    threads = threads_by_id(conn, [hit.thread_id for hit in hits])
    hits = [hit for hit in hits if hit.thread_id in threads]  # a thread deleted since it was indexed
    text, cut = limit_result(format_hits(scope, hits, threads), scope.count)
    result: dict[str, Any] = {"results": text, "count": len(hits)}
    if cut:
        result["truncated"], result["tokenOffset"] = True, cut
    return result


def _fence(text: str) -> str:
    fence = "```"
    while fence in text:
        fence += "`"
    return f"{fence}\n{text.strip()}\n{fence}"


def _range(ranges: str | None) -> tuple[str, str] | None:
    if not ranges:
        return None
    pieces = [piece.strip().split(":") for piece in ranges.split(",") if piece.strip()]
    if not pieces or not all(len(piece) == 2 and piece[0] and piece[1] for piece in pieces):
        return None
    return pieces[0][0], pieces[-1][1]


def format_hits(scope: RecallScope, hits: list[SearchHit], threads: dict[str, ThreadInfo]) -> str:
    """Hits grouped by thread (threads by their best hit, hits by score), each saying where it comes
    from and how to read the raw messages behind it."""
    order: dict[StoredId, list[SearchHit]] = {}
    for hit in sorted(hits, key=lambda h: -h.score):
        order.setdefault(hit.thread_id, []).append(hit)
    blocks: list[str] = []
    for thread_id, group in order.items():
        thread = threads[thread_id]
        current = thread_id == scope.active.id
        public = public_id(thread_id)
        title = (thread.title or "").strip() or "untitled"
        for hit in group:
            lines = [_heading(hit, current), f"thread: {public} ({title})"]
            browse = "" if current else f' threadId="{public}"'
            if hit.kind == "group":
                ends = _range(hit.ranges)
                if ends is None:
                    lines.append("source: range unavailable")
                else:
                    lines.append(f"source: raw messages from ID {ends[0]} through ID {ends[1]}")
                    browse = f'recall cursor="{ends[0]}"{browse}'
            else:
                lines.append(f"source: raw message {hit.ref} (the message itself, not an observation)")
                browse = f'recall cursor="{hit.ref}"{browse}'
            lines.append(f"thread updated: {stamp(thread.updated_at)}")
            if hit.kind == "group":
                lines.append(f"observation group: {hit.ref}")
            lines.append(f"score: {hit.score:.2f}")
            if browse.startswith("recall"):
                lines.append(f"read the raw messages: {browse}")
            lines.append(_fence(hit.text))
            blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def _heading(hit: SearchHit, current: bool) -> str:
    if hit.kind == "message":
        where = "this conversation" if current else "another conversation"
        return f"### Raw message from {where}"
    if current:
        return "### Observation from this conversation"
    return "### Older memory from another conversation"
