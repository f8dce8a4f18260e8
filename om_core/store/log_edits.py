"""A caller's correction of one line of an observation log: a new generation, fenced like a reflection.

A line is addressed by its 0-based index in the active log's text split on `\\n`, and the caller names
the SHA-256 of the line as it read it. Under the key's lock and the head's row lock (the order every
rollover takes, `records.create_reflection_generation`), the stored line must still have that digest; if
the log changed since the caller read it (a line added before it, a reflection, another edit) the edit is
refused as "changed" and nothing is written, so a concurrent change can never make it edit the wrong
line. The edit then rolls the key over to a new generation (`origin_type = 'edit'`): everything that
committed against the old head keeps working the way it does across a reflection (chunks move to the
successor, appends and sync commits redirect to it, an activation re-reads it, a reflection or buffered
reflection computed from the old text is refused or dropped because its row is retired).

Deleting a line is a "forget": the line is also removed, as a whole line, from every other place the
memory holds observation text of this log (every copy: a line repeated in the log goes with it): its
retired generations, its chunks (buffered ones too, so an activation cannot bring it back), its
observation groups, the search index's documents of those groups (indexed again from the scrubbed text)
and the `observations` of its events. The conversation's messages are not touched (erasing them is
erasing the thread or the resource).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, delete, or_, select, update

from om_core.store import records, schema
from om_core.store.db import key_lock
from om_core.store.outbox import write_events
from om_core.store.types import NewEvent, Record, StoredEvent
from om_core.tenancy.scoped_ids import StoredId

__all__ = ["LineEdit", "edit_line", "line_digest", "without_line"]


def line_digest(line: str) -> str:
    """The precondition a caller sends for a line: SHA-256 of its UTF-8 text, hex."""
    return hashlib.sha256(line.encode()).hexdigest()


@dataclass(frozen=True)
class LineEdit:
    """What an edit did. `reason` is None when it applied, else "not-found" (no log), "changed" (the
    line is not what the caller read, or no longer exists)."""

    reason: str | None
    record: Record | None = None
    previous_record_id: str | None = None
    line_count: int = 0


#: Events of the edit, for the new head and the old one's id; written in the edit's transaction, each for
#: (lookup key, thread id) of a stream that reports it.
EditEvents = Callable[[Record, str], Sequence[tuple[str, StoredId | None, NewEvent]]]


def without_line(text: str, line: str) -> str:
    """`text` with every line equal to `line` (ignoring surrounding spaces) removed."""
    target = line.strip()
    if not target or target not in text:
        return text
    return "\n".join(kept for kept in text.split("\n") if kept.strip() != target)


def _scrub(value: Any, line: str) -> Any:
    if isinstance(value, str):
        return without_line(value, line)
    if isinstance(value, dict):
        return {k: _scrub(v, line) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub(v, line) for v in value]
    return value


def _forget(conn: Connection, lookup_key: str, thread_ids: Sequence[StoredId], line: str) -> None:
    """Remove `line` from every other copy of this log's observation text (see the module's doc)."""
    R, C, G, E = schema.records, schema.chunks, schema.observation_groups, schema.events
    thread_keys = [f"thread:{t}" for t in thread_ids]
    keys = sorted({lookup_key, *thread_keys})
    # Every read is fetched whole before its rows are updated (SQLite cannot update under an open cursor).
    generations = conn.execute(
        select(R.c.id, R.c.active_observations, R.c.buffered_reflection).where(
            R.c.lookup_key == lookup_key, R.c.superseded_by.is_not(None)
        )
    ).all()
    for row in generations:
        active, buffered = without_line(row[1] or "", line), row[2] and without_line(row[2], line)
        if active != (row[1] or "") or buffered != row[2]:
            conn.execute(
                update(R)
                .where(R.c.id == row[0])
                .values(active_observations=active, buffered_reflection=buffered)
            )
    chunks = conn.execute(select(C.c.id, C.c.observations).where(C.c.lookup_key.in_(keys))).all()
    for chunk_id, observations in chunks:
        text = without_line(observations, line)
        if text != observations:
            conn.execute(update(C).where(C.c.id == chunk_id).values(observations=text))
    owner = or_(G.c.lookup_key == lookup_key, G.c.thread_id.in_(list(thread_ids)))
    for group_id, group_text in conn.execute(select(G.c.id, G.c.text).where(owner)).all():
        text = without_line(group_text, line)
        if text != group_text:
            conn.execute(update(G).where(G.c.id == group_id).values(text=text))
    _forget_search_documents(conn, thread_ids, line)
    target = line.strip()
    events = or_(E.c.lookup_key.in_(keys), E.c.thread_id.in_(list(thread_ids)))
    for event_id, stored_payload in conn.execute(select(E.c.id, E.c.payload).where(events)).all():
        payload = dict(stored_payload or {})
        if any(target in v for v in _strings(payload)):
            conn.execute(update(E).where(E.c.id == event_id).values(payload=_scrub(payload, line)))


#: The search index's documents (`om_search_docs`, when the search part is installed): a group's document
#: whose text held the line is deleted (its full-text entry and vector go with it), and the indexer, which
#: finds groups by the documents they lack, indexes the group again from its scrubbed text.
SEARCH_DOCUMENTS = "om_search_docs"


def _forget_search_documents(conn: Connection, thread_ids: Sequence[StoredId], line: str) -> None:
    docs = schema.metadata.tables.get(SEARCH_DOCUMENTS)
    if docs is None or not thread_ids or not {"thread_id", "kind", "text"} <= set(docs.c.keys()):
        return
    target = line.strip()
    if not target:
        return
    conn.execute(
        delete(docs).where(
            docs.c.thread_id.in_(list(thread_ids)),
            docs.c.kind == "group",
            docs.c.text.contains(target, autoescape=True),
        )
    )


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def edit_line(
    conn: Connection,
    lookup_key: str,
    *,
    index: int,
    expected_sha256: str,
    replacement: str | None,
    count_tokens: Callable[[str], int],
    thread_ids: Sequence[StoredId],
    events: EditEvents | None = None,
) -> tuple[LineEdit, list[StoredEvent]]:
    """Replace line `index` of the key's active log with `replacement`, or delete it (None), as a new
    generation, if the stored line still has `expected_sha256`. `thread_ids` are the threads whose
    memory this log is (one thread, or a resource's threads): a delete forgets the line in their copies
    too."""
    key_lock(conn, lookup_key)
    head = records.read_head(conn, lookup_key, for_update=True)
    if head is None:
        return LineEdit("not-found"), []
    lines = head.active_observations.split("\n")
    if index >= len(lines) or line_digest(lines[index]) != expected_sha256:
        return LineEdit("changed", head, line_count=len(lines)), []
    old = lines[index]
    if replacement is not None:
        lines[index] = replacement
    elif old.strip():
        lines = [kept for kept in lines if kept.strip() != old.strip()]  # every copy of the line is forgotten
    else:
        del lines[index]
    text = "\n".join(lines)
    successor = records.roll_over_locked(
        conn, head, text=text, token_count=count_tokens(text), origin_type="edit"
    )
    if replacement is None:
        _forget(conn, lookup_key, thread_ids, old)
    stored: list[StoredEvent] = []
    for key, thread_id, draft in events(successor, head.id) if events is not None else ():
        stored.extend(
            write_events(
                conn,
                lookup_key=key,
                thread_id=thread_id,
                resource_id=successor.resource_id,
                record_id=successor.id,
                events=[draft],
            )
        )
    return LineEdit(None, successor, head.id, len(lines)), stored
