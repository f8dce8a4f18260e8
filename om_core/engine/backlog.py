"""Lazy migration: a thread whose unobserved history is larger than one Observer call (imported in one
request, or posted while OM was off) is observed in capped batches without the turn waiting for all of them.

Past `blockAfter` a turn normally waits for the blocking observation of everything but the newest
messages. For a backlog that is many Observer calls (each at most `observer_input_cap_tokens`), so the
turn waits for the oldest batch only and hands the rest to a background observation (its own task on
the observe queue, batch after batch, each committed on its own). Until those batches commit, the turn
shows the actor the observation log, the newest messages within the message threshold (never splitting
a tool exchange), and a note saying how much earlier history is still being observed: sending the whole
backlog raw is what memory exists to avoid, and an actor model would refuse or truncate it anyway. The
parts left out reach the actor through the observations as their batches commit; nothing is dropped.

An executor that runs background work in the calling thread (`InlineExecutor`) observes the whole
backlog in the turn, and the turn then shows the normal context. Thread scope only: in resource scope the
turn's blocking work is already the resource's batches, sent together and run in parallel
(`engine.resource`).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from om_core.config.options import ResolvedConfig
from om_core.context.tool_exchanges import safe_cut_backward
from om_core.engine.core import EngineCore
from om_core.engine.tasks import Observe, lookup_key, new_cycle_id
from om_core.engine.tool_pairs import spans_after
from om_core.engine.window import Window, start_of_recent
from om_core.messages import Message, Part
from om_core.store import records
from om_core.tenancy.scoped_ids import StoredId

if TYPE_CHECKING:
    from om_core.engine.turn_reply import TurnResult

#: Id of the note that stands in for the history still being observed (never stored).
NOTE_ID = "__om_backlog"


def is_backlog(core: EngineCore, window: Window) -> bool:
    """More unobserved history than one Observer call takes."""
    return window.tokens > core.settings.observer_input_cap_tokens


def observe_blocking(core: EngineCore, thread_id: StoredId) -> str | None:
    """The turn's blocking observation of a backlog: the oldest batch now, the rest by a background run.
    Returns the reason the turn is degraded, if the batch failed or missed its deadline."""
    reason = core.run_blocking(Observe(thread_id, new_cycle_id("observe"), batches=1), thread_id)
    core.executor.submit(Observe(thread_id, new_cycle_id("observe"), trigger="backlog"))
    return reason


def bounded_view(
    core: EngineCore, cfg: ResolvedConfig, thread_id: StoredId, result: TurnResult
) -> TurnResult:
    """`result` with the messages a backlog still holds left out: the newest within the threshold stay,
    after a note naming what is left out. Unchanged when the rest already fits under `blockAfter`."""
    messages = result.status["windows"]["active"]["messages"]
    threshold = int(messages["threshold"])
    ceiling = cfg.observation.block_after_at(threshold) or threshold
    if int(messages["tokens"]) < ceiling:
        return result
    head = records.get_head(core.db, lookup_key(thread_id))
    if head is None:
        return result
    window = core.window(thread_id, head.last_observed_seq)
    start = start_of_recent(window, threshold)
    if start is None:
        return result
    start = safe_cut_backward(start, spans_after(core, thread_id, head.last_observed_seq, window))
    if start <= head.last_observed_seq:
        return result
    kept = _parts_after(result.messages, start)
    left_out = [m for m in window.messages if m.last_seq <= start]
    note = _note(len(left_out), window.tokens_upto(start))
    return dataclasses.replace(result, messages=[note, *kept])


def _parts_after(messages: list[Message], start: int) -> list[Message]:
    out: list[Message] = []
    for message in messages:
        parts = [p for p in message.parts if p.seq is None or p.seq > start]
        if parts and any(p.is_visible for p in parts):
            out.append(message if len(parts) == len(message.parts) else message.with_parts(parts))
    return out


def _note(count: int, tokens: int) -> Message:
    text = (
        '<system-reminder type="history-backlog">'
        f"{count} earlier messages (about {tokens} tokens) are still being added to memory and are left "
        "out of this context until they are; the conversation continues below.</system-reminder>"
    )
    return Message(
        id=NOTE_ID,
        role="user",
        parts=[Part(type="text", text=text)],
        metadata={"omBacklog": {"messages": count, "tokens": tokens}},
    )
