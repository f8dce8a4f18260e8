"""The invariant checker: run over stored state after a scenario drains (behaviour §12.1, issue 6).

Coverage is traced through the sequence ranges each observation reports: the ranges of activated chunks
and of synchronous observations must tile (0, cursor] exactly, so every stored part reached the actor
exactly once, raw (after the cursor) or through exactly one observation (at or before it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import Engine, func, select

from om_core.store import records, schema
from om_core.store.outbox import list_events


@dataclass
class Report:
    violations: list[str] = field(default_factory=list)
    covered_ranges: list[tuple[int, int]] = field(default_factory=list)
    cursor: int = 0
    max_seq: int = 0
    generations: int = 0

    def check(self, ok: bool, message: str) -> None:
        if not ok:
            self.violations.append(message)


def check_thread(db: Engine, thread_id: str) -> Report:
    report = Report()
    key = f"thread:{thread_id}"
    head = records.get_head(db, key)
    report.check(records.live_heads(db, key) == 1, f"{key}: expected exactly one live head")
    if head is None:
        return report
    report.cursor = head.last_observed_seq
    report.generations = head.generation_count
    with db.connect() as conn:
        report.max_seq = int(
            conn.execute(
                select(func.coalesce(func.max(schema.parts.c.seq), 0)).where(
                    schema.parts.c.thread_id == thread_id
                )
            ).scalar()
            or 0
        )
        stranded = conn.execute(
            select(func.count())
            .select_from(schema.chunks.join(schema.records, schema.chunks.c.record_id == schema.records.c.id))
            .where(
                schema.chunks.c.lookup_key == key,
                schema.chunks.c.state == "buffered",
                schema.records.c.superseded_by.is_not(None),
            )
        ).scalar()
    report.check(stranded == 0, f"{stranded} buffered chunks left on retired generations")

    # Coverage: every observation's range, in commit order.
    ranges: list[tuple[int, int]] = []
    for event in list_events(db, thread_id=thread_id, after_id=0, limit=1_000_000):
        data = event.payload
        if data.get("operationType") != "observation" or "seqRange" not in data:
            continue
        if event.type in ("data-om-activation", "data-om-observation-end"):
            lo, hi = data["seqRange"]
            ranges.append((int(lo), int(hi)))
    report.covered_ranges = ranges
    expected = 0
    for lo, hi in ranges:
        report.check(
            lo == expected, f"coverage gap or overlap: next range starts at {lo}, expected {expected}"
        )
        report.check(hi > lo, f"empty or backward range ({lo}, {hi}]")
        expected = max(expected, hi)
    report.check(
        expected == head.last_observed_seq, f"ranges end at {expected}, cursor is {head.last_observed_seq}"
    )
    report.check(head.last_observed_seq <= report.max_seq, "cursor ahead of the stored parts")

    # Chunk list continuity on the head: it starts at the cursor and each chunk follows the previous one.
    position = head.last_observed_seq
    for chunk in head.chunks:
        report.check(
            chunk.from_seq == position, f"chunk {chunk.cycle_id} starts at {chunk.from_seq}, not {position}"
        )
        report.check(
            chunk.to_seq > head.last_observed_seq, f"chunk {chunk.cycle_id} is wholly covered by the cursor"
        )
        position = chunk.to_seq
    report.check(position <= report.max_seq, "buffered chunks reach past the stored parts")
    return report
