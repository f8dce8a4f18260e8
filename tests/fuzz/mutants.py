"""Known loss paths of the original, planted back into our storage layer, to prove the fuzz can see them.

A fuzz that never fails proves nothing until it is shown to fail on the bugs it is meant to catch. Each
mutant wraps one storage operation and re-creates a failure from behaviour §12.2 on top of the correct code
(wrapping, not copying, so the mutants follow the real implementation as it changes). `apply` installs a
mutant in this process and returns the function that removes it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from sqlalchemy import Connection, update

from om_core.store import records, schema
from om_core.store.types import ChunkInput, Record


def _p1_rollover_strands_chunks() -> Callable[[], None]:
    """P1: the new generation is built without the buffered chunks; they stay on the retired row."""
    original = records._roll_over

    def mutant(conn: Connection, stored: Record, *, text: str, token_count: int, successor_id: str) -> Record:
        head = original(conn, stored, text=text, token_count=token_count, successor_id=successor_id)
        conn.execute(
            update(schema.chunks)
            .where(schema.chunks.c.record_id == successor_id, schema.chunks.c.state == "buffered")
            .values(record_id=stored.id)
        )
        return replace(head, chunks=())

    records._roll_over = mutant
    return lambda: setattr(records, "_roll_over", original)


def _p2_late_chunk_jumps_the_list() -> Callable[[], None]:
    """P2/H8: a late chunk is appended wherever the list ends, whatever it started from (no stale rule)."""
    original = records.append_chunk

    def mutant(conn: Connection, record_id: str, chunk: ChunkInput, **kwargs: Any) -> Any:
        head, _ = records.lock_live(conn, record_id, redirect=True)
        if head is not None and chunk.to_seq > head.buffer_cursor and chunk.from_seq != head.buffer_cursor:
            chunk = replace(chunk, from_seq=head.buffer_cursor)
        return original(conn, record_id, chunk, **kwargs)

    records.append_chunk = mutant
    return lambda: setattr(records, "append_chunk", original)


MUTANTS: dict[str, Callable[[], Callable[[], None]]] = {
    "P1": _p1_rollover_strands_chunks,
    "P2": _p2_late_chunk_jumps_the_list,
}


def apply(name: str) -> Callable[[], None]:
    return MUTANTS[name]()
