"""Temporal-gap reminders of a turn (behaviour §4.9, §10.1, §10.2): the marker message stored before a user
message that follows a pause, and the transient `data-system-reminder` event that tells clients about it.

The marker is stored like the turn's other messages, in its transaction, under an id derived from the
message it precedes, so a retried turn stores it (and reports it) once. The event is written to the
outbox in that same transaction (invariant 10: an event is written with the change it reports; the
outbox is what streams replay, so a client that reconnects still sees it) and published after the
commit. It is "transient" in the spec's sense: it is an event, never a message of its own in the chat
history. It changes no memory, so it does not make the turn re-read its head.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING

from sqlalchemy import Connection

from om_core.context.temporal import is_temporal_marker, reminder_event, temporal_marker_for
from om_core.engine import events as ev
from om_core.engine.core import EVENT_SINK, EngineCore
from om_core.messages import Message
from om_core.store import history
from om_core.store.outbox import write_events
from om_core.store.types import NewEvent, Record, StoredEvent
from om_core.tenancy.scoped_ids import StoredId

if TYPE_CHECKING:
    from om_core.engine.turn_reply import TurnResult

#: Namespace of marker ids: `uuid5(namespace, message id)`, one marker id per message it precedes.
_MARKER_NAMESPACE = uuid.UUID("6f1c1d52-3c4b-4d7e-9a55-0c1f6b0e7a11")


def with_markers(
    conn: Connection, thread: history.ThreadRow, incoming: Sequence[Message], tz: str
) -> list[Message]:
    """`incoming` with a marker before each new user message that follows a pause of ten minutes or
    more. A message already stored gets none (a retry, or a client re-sending its history), and a
    marker's id is derived from its message, so storing it twice is storing it once."""
    known = history.known_message_ids(conn, thread.id, [m.id for m in incoming])
    seen: list[Message] = list(history.last_messages(conn, thread.id, limit=1))
    out: list[Message] = []
    for message in incoming:
        if message.role == "user" and message.id not in known:
            marker_id = str(uuid.uuid5(_MARKER_NAMESPACE, message.id))
            marker = temporal_marker_for(message, seen, tz, new_id=marker_id)
            if marker is not None:
                out.append(marker)
        out.append(message)
        seen.append(message)
    return out


def write_reminders(
    conn: Connection, thread_id: StoredId, head: Record, fresh: Sequence[Message]
) -> list[StoredEvent]:
    """The `data-system-reminder` events of the markers this transaction stored, written to the outbox
    (one per marker: its id is the event's cycle id, so it is never written twice)."""
    events = [
        NewEvent(ev.SYSTEM_REMINDER.value, reminder_event(m), cycle_id=m.id)
        for m in fresh
        if is_temporal_marker(m)
    ]
    if not events:
        return []
    return write_events(
        conn,
        lookup_key=head.lookup_key,
        thread_id=thread_id,
        resource_id=head.resource_id,
        record_id=head.id,
        events=events,
    )


def announce(core: EngineCore, reminders: Sequence[StoredEvent]) -> None:
    """Publish the reminders outside the turn's event sink: the sink tells a turn that its head changed,
    and a reminder changes nothing there."""
    if not reminders:
        return
    token = EVENT_SINK.set(None)
    try:
        core.publish(reminders)
    finally:
        EVENT_SINK.reset(token)


def with_reminder_events(result: TurnResult, reminders: Sequence[StoredEvent]) -> TurnResult:
    """`result` with the turn's reminders first among its events."""
    if not reminders:
        return result
    return dataclasses.replace(result, events=[*reminders, *result.events])
