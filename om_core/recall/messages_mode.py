"""`mode: "messages"` (behaviour §9.4): a page of raw messages around a cursor or from either end of a thread,
one part in full (`partIndex`, sliced by `charOffset`), and the hints that point a model the right way
(a range passed as a cursor, a cursor that lives in another thread).

Pages count only messages with something to show under the call's filters, so messages holding nothing
but `data-*` parts (or no part of the asked `partType` / `toolName`) never take a page slot. Pages are
found from part descriptions; bodies are read for the messages on the page only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection

from om_core.recall.budget import (
    RESULT_BUDGET,
    Budgeted,
    budgeted,
    cut_to_tokens,
    expand_within,
    limit_result,
)
from om_core.recall.errors import RecallInvalid, RecallNotFound
from om_core.recall.params import RecallParams
from om_core.recall.render import header, part_kind, part_line, part_text
from om_core.recall.scope import RecallScope
from om_core.store.recall_reads import (
    MessageInfo,
    PartInfo,
    ThreadInfo,
    find_message,
    message_owner,
    messages_from,
    part_bodies,
)
from om_core.tenancy.scoped_ids import StoredId, public_id

__all__ = ["read_messages"]

#: Messages read per statement while looking for a page.
_BATCH_MIN, _BATCH_MAX = 32, 500


def read_messages(conn: Connection, scope: RecallScope, p: RecallParams) -> dict[str, Any]:
    thread = scope.thread(conn, p.thread_id)
    if p.cursor is None:
        return _page(conn, scope, p, thread, anchor=None)
    anchor = find_message(conn, thread.id, p.cursor)
    if anchor is None:
        return _unresolved(conn, scope, p, thread)
    if p.part_index is not None:
        return _one_part(conn, scope, p, thread, anchor)
    return _page(conn, scope, p, thread, anchor=anchor)


# ------------------------------------------------------------------------------------------- cursors


def range_ends(cursor: str) -> tuple[str, str] | None:
    """(first start, last end) when `cursor` is a range `a:b` or merged ranges `a:b,c:d`."""
    pieces = [piece.strip().split(":") for piece in cursor.split(",")]
    if not all(len(piece) == 2 and piece[0] and piece[1] for piece in pieces):
        return None
    return pieces[0][0], pieces[-1][1]


def _unresolved(conn: Connection, scope: RecallScope, p: RecallParams, thread: ThreadInfo) -> dict[str, Any]:
    cursor = p.cursor or ""
    ends = range_ends(cursor)
    if ends is not None:
        start, end = ends
        return _notice(
            p,
            f'"{cursor}" is a range of message ids, not one message id. Call recall with cursor="{start}" '
            f'to read from the start of the range, or cursor="{end}" to read from its end (use page=-1 '
            "there to read backwards).",
        )
    if scope.spans_resource and p.thread_id is None:
        owner = message_owner(
            conn, scope.active.resource_id, scope.active.tenant_id, cursor, exclude=thread.id
        )
        if owner is not None:
            other = public_id(owner)
            return _notice(
                p,
                f'Message "{cursor}" belongs to another conversation, thread "{other}". Call recall again '
                f'with threadId="{other}" and cursor="{cursor}" to read it.',
            )
    where = "this user's conversations" if scope.spans_resource else "this conversation"
    raise RecallNotFound(
        f'could not resolve cursor "{cursor}": no message with this id in {where}. Use a message id from '
        "an observation group's range or one shown in [brackets] by an earlier recall"
    )


def _notice(p: RecallParams, text: str) -> dict[str, Any]:
    """A guidance answer in the messages shape: no messages read (count 0), the text says what to do."""
    return {
        "messages": text,
        "count": 0,
        "cursor": p.cursor,
        "page": p.page_number,
        "limit": p.page_limit,
        "detail": p.detail,
        "hasNextPage": False,
        "hasPrevPage": False,
    }


# ------------------------------------------------------------------------------------------- paging


def _shown(message: MessageInfo, p: RecallParams) -> list[PartInfo]:
    return [
        part
        for part in message.parts
        if part.visible
        and (p.part_type is None or part.kind == p.part_type)
        and (p.tool_name is None or part.tool_name == p.tool_name)
    ]


def _walk(
    conn: Connection,
    thread_id: StoredId,
    anchor: MessageInfo | None,
    *,
    forward: bool,
    skip: int,
    take: int,
    keep: Callable[[MessageInfo], bool],
) -> tuple[list[MessageInfo], bool]:
    """`take` kept messages after skipping `skip`, walking from `anchor` (excluded) or the thread's end;
    and whether more kept messages lie beyond them."""
    need = skip + take + 1
    found: list[MessageInfo] = []
    position = anchor.position if anchor is not None else None
    while len(found) < need:
        size = min(max(need - len(found), _BATCH_MIN), _BATCH_MAX)
        batch = messages_from(conn, thread_id, position, forward=forward, limit=size)
        found.extend(message for message in batch if keep(message))
        if len(batch) < size:
            break
        position = batch[-1].position
    return found[skip : skip + take], len(found) > skip + take


def _page(
    conn: Connection, scope: RecallScope, p: RecallParams, thread: ThreadInfo, *, anchor: MessageInfo | None
) -> dict[str, Any]:
    page, limit = p.page_number, p.page_limit
    forward = page > 0 if anchor is not None else p.anchor == "start"
    depth = abs(page)
    found, more = _walk(
        conn,
        thread.id,
        anchor,
        forward=forward,
        skip=(depth - 1) * limit,
        take=limit,
        keep=lambda message: bool(_shown(message, p)),
    )
    chronological = found if forward else list(reversed(found))
    # Forward, "next" is further on and "prev" an earlier page index; backward it is mirrored (§9.4).
    further, earlier = more, depth > 1
    has_next, has_prev = (further, earlier) if forward else (earlier, further)
    result: dict[str, Any] = {
        "messages": "",
        "count": len(chronological),
        "cursor": anchor.id if anchor is not None else (chronological[0].id if chronological else None),
        "page": page if anchor is not None else depth,
        "limit": limit,
        "detail": p.detail,
        "hasNextPage": has_next,
        "hasPrevPage": has_prev,
    }
    if not chronological:
        result["messages"] = _empty_page_text(anchor, forward, depth)
        return result
    bodies = part_bodies(conn, thread.id, [message.id for message in chronological])
    hint_thread = "" if scope.is_active(thread) else f' threadId="{public_id(thread.id)}"'
    if p.detail == "high":
        return _high_detail(scope, p, result, chronological, bodies, hint_thread, further)
    text = _low_detail(scope, p, chronological, bodies, hint_thread)
    text, cut = limit_result(text, scope.count)
    result["messages"] = text
    if cut:
        result["truncated"], result["tokenOffset"] = True, cut
    return result


def _empty_page_text(anchor: MessageInfo | None, forward: bool, depth: int) -> str:
    if anchor is None:
        return "No messages found in this thread." if depth == 1 else f"No messages on page {depth}."
    side = "after" if forward else "before"
    return f'No messages {side} message "{anchor.id}" on this page.'


def _low_budget(kind: str, role: str) -> tuple[int, int, int]:
    """(first budget, most it may grow to, re-expansion priority) of a part at low detail (§9.4)."""
    if kind == "text" and role == "user":
        return 100, 200, 0
    if kind in ("text", "reasoning"):
        return 100, 200, 1
    if kind == "tool-result":
        return 20, 50, 2
    if kind == "tool-call":
        return 20, 50, 3
    return 30, 50, 4


def _low_detail(
    scope: RecallScope,
    p: RecallParams,
    messages: list[MessageInfo],
    bodies: dict[str, dict[int, Any]],
    hint_thread: str,
) -> str:
    count = scope.count
    layout: list[tuple[MessageInfo, list[tuple[int, Budgeted]]]] = []
    for message in messages:
        parts: list[tuple[int, Budgeted]] = []
        for info in _shown(message, p):
            body = bodies.get(message.id, {}).get(info.index)
            if body is None:
                continue
            first, expand_to, priority = _low_budget(info.kind, message.role)
            hint = (
                f'[recall cursor="{message.id}"{hint_thread} partIndex={info.index} detail="high" for more]'
            )
            full = part_text(body, high=False, count=count)
            parts.append((info.index, budgeted(full, first, expand_to, priority, hint, count)))
        layout.append((message, parts))

    def render() -> str:
        blocks = []
        for message, parts in layout:
            lines = [header(message.role, message.created_at, message.id)]
            lines += [part_line(index, item.text) for index, item in parts]
            blocks.append("\n".join(lines))
        return "\n\n".join(blocks)

    text = render()
    leftover = RESULT_BUDGET - count(text)
    if leftover > 0:
        expand_within([item for _, parts in layout for _, item in parts], leftover, count)
        text = render()
    return text


def _high_detail(
    scope: RecallScope,
    p: RecallParams,
    result: dict[str, Any],
    messages: list[MessageInfo],
    bodies: dict[str, dict[int, Any]],
    hint_thread: str,
    further: bool,
) -> dict[str, Any]:
    """High detail returns one part: the first shown part of the page's first message (behaviour §9.4)."""
    message = messages[0]
    shown = _shown(message, p)
    first = shown[0]
    body = bodies[message.id][first.index]
    text = (
        header(message.role, message.created_at, message.id)
        + "\n"
        + part_line(first.index, part_text(body, high=True, count=scope.count))
    )
    text, cut = limit_result(text, scope.count)
    if len(shown) > 1:
        step = f'next part: partIndex={shown[1].index} on cursor="{message.id}"{hint_thread}'
    elif len(messages) > 1:
        following = _shown(messages[1], p)[0].index
        step = f'next message: partIndex={following} on cursor="{messages[1].id}"{hint_thread}'
    elif further:
        step = f"next page: page={result['page'] + (1 if result['page'] > 0 else -1)}"
    else:
        step = ""
    tail = "High detail returns one part per call."
    if cut:
        tail += (
            f' This part was cut; read all of it with cursor="{message.id}"{hint_thread} '
            f"partIndex={first.index} (and charOffset, as its answer says)."
        )
    if step:
        tail += f" To continue, call recall with the {step}."
    result.update(
        messages=f"{text}\n\n{tail}",
        count=1,
        hasNextPage=bool(step),
    )
    if cut:
        result["truncated"], result["tokenOffset"] = True, cut
    return result


# ------------------------------------------------------------------------------------- one part


def _one_part(
    conn: Connection, scope: RecallScope, p: RecallParams, thread: ThreadInfo, message: MessageInfo
) -> dict[str, Any]:
    """One part in full (behaviour §9.3 `partIndex`), sliced from `charOffset` and cut to the result budget
    with `nextCharOffset` saying where the next slice starts."""
    index = p.part_index
    assert index is not None
    visible = [part for part in message.parts if part.visible]
    target = next((part for part in visible if part.index == index), None)
    note: str | None = None
    offset = p.char_offset
    available = ", ".join(f"p{part.index}" for part in visible) or "none"
    if target is None:
        beyond = not visible or index > max(part.index for part in visible)
        following: list[MessageInfo] = []
        if beyond:
            following, _ = _walk(
                conn,
                thread.id,
                message,
                forward=True,
                skip=0,
                take=1,
                keep=lambda m: any(part.visible for part in m.parts),
            )
        if not following:
            last = " It is the last message of the thread." if beyond else ""
            raise RecallInvalid(
                "partIndex",
                f'message "{message.id}" has no part {index}; its parts are: {available}.{last}',
            )
        note = (
            f'Message "{message.id}" has no part {index} (its parts: {available}); this is the first part '
            f'of the next message, "{following[0].id}".'
        )
        message, offset = following[0], 0
        target = next(part for part in message.parts if part.visible)
    body = part_bodies(conn, thread.id, [message.id])[message.id][target.index]
    full = part_text(body, high=True, count=scope.count)
    if offset > len(full):
        raise RecallInvalid(
            "charOffset", f"is past the end of part {target.index} ({len(full)} characters); start lower"
        )
    piece = full[offset:]
    cut = cut_to_tokens(piece, RESULT_BUDGET, scope.count)
    if cut == "":  # one character over the budget: still move on, or a caller would loop
        cut = piece[:1]
    out: dict[str, Any] = {
        "text": piece if cut is None else cut,
        "messageId": message.id,
        "partIndex": target.index,
        "role": message.role,
        "type": part_kind(body),
        "truncated": cut is not None,
    }
    if cut is not None:
        out["nextCharOffset"] = offset + len(cut)
    if note is not None:
        out["note"] = note
    return out
