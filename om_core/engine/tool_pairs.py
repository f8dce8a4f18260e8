"""The engine's reads for tool exchanges (`om_core.context.tool_exchanges`): the spans a cut must not split,
and the observed calls the actor is shown again beside results that arrived after them.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection

from om_core.context.tool_exchanges import Span, ToolPart, exchange_spans, orphan_result_ids, with_companions
from om_core.engine.core import EngineCore
from om_core.engine.window import Window
from om_core.messages import Message
from om_core.store import history
from om_core.tenancy.scoped_ids import StoredId


def spans_after(core: EngineCore, thread_id: StoredId, after_seq: int, window: Window) -> list[Span]:
    """The exchanges among the parts after `after_seq`, read from the parts' call ids and states only."""
    with core.db.connect() as conn:
        return spans_read(conn, thread_id, after_seq, window)


def spans_read(conn: Connection, thread_id: StoredId, after_seq: int, window: Window) -> list[Span]:
    """`spans_after` on a connection the caller holds."""
    rows = history.tool_parts_after(conn, thread_id, after_seq)
    parts = [ToolPart(row.seq, row.call_id, row.state, row.has_result) for row in rows]
    return exchange_spans(parts, window.user_seqs)


def with_observed_calls(
    core: EngineCore, thread_id: StoredId, cursor: int, messages: Sequence[Message]
) -> list[Message]:
    """`messages` with the observed call of every result among them that lacks its call.

    The cuts keep exchanges together, so this happens only when a result arrives after its call was
    observed (a call the conversation had moved past, then answered). The call is then shown again, raw,
    next to its result: a chat API refuses a result that answers no call, and the result means little
    without its arguments. One read, only on a turn that holds such a result."""
    orphans = orphan_result_ids(messages)
    if not orphans:
        return list(messages)
    with core.db.connect() as conn:
        calls = history.call_parts(conn, thread_id, orphans, upto_seq=cursor)
    return with_companions(messages, calls)
