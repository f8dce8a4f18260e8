"""After a load run: was anything acknowledged lost, and do the invariants hold on every thread?

Lost: a message the client got a 2xx for that is not stored with at least the parts it sent.

Invariants: the fuzz checker (`tests/fuzz/checks.check_scenario`, which runs
`tests/support/invariants.check_thread` first) on every thread, with the views of its turns. Each chat
thread has a single writer, so "everything stored before this turn" is exactly what the client had
acknowledged before it: a turn's `stored_before` is the highest sequence number among the parts of
earlier acknowledged calls, read back from storage once the run is over.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from sqlalchemy import Engine

from om_core.store import history
from om_core.tenancy.scoped_ids import scoped_id
from tests.fuzz.checks import View, check_scenario
from tests.fuzz.fake_model import markers_in
from tests.load.driver import Posted, ThreadLog

#: Violations kept per run in the results (the count is always exact).
KEEP_VIOLATIONS = 40


@dataclass
class Verdict:
    threads: int = 0
    acknowledged: int = 0
    lost: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    violation_count: int = 0
    #: What the stored state shows happened (activations, reflections, chunks...), summed over threads.
    stats: Counter[str] = field(default_factory=Counter)
    duplicates: Counter[str] = field(default_factory=Counter)
    failing_threads: int = 0


def verify(db: Engine, threads: Iterable[ThreadLog], tenant: str | None) -> Verdict:
    """`tenant`: the key's tenant, under which each thread is stored (`scoped_id`)."""
    verdict = Verdict()
    for thread in threads:
        verdict.threads += 1
        verdict.acknowledged += len(thread.acknowledged)
        problems = _check_one(db, thread, scoped_id(tenant, thread.thread_id), verdict)
        if problems:
            verdict.failing_threads += 1
            verdict.violation_count += len(problems)
            room = KEEP_VIOLATIONS - len(verdict.violations)
            verdict.violations.extend(f"{thread.thread_id}: {p}" for p in problems[: max(0, room)])
    return verdict


def _check_one(db: Engine, thread: ThreadLog, stored_id: str, verdict: Verdict) -> list[str]:
    with db.connect() as conn:
        stored = history.load_parts(conn, stored_id, after_seq=0)
    parts_stored = Counter({m.id: len(m.parts) for m in stored})
    lost = sorted(m for m, sent in thread.acknowledged.items() if parts_stored[m] < sent)
    verdict.lost.extend(f"{thread.thread_id}/{m}" for m in lost)
    problems = [f"[lost] acknowledged message {m} is not stored (whole)" for m in lost]
    if thread.final is None:
        problems.append("[final-turn] the final turn failed, so the thread cannot be checked exactly")
        return problems
    seq_of = {m: p.seq or 0 for message in stored for p in message.parts for m in markers_in(p.text)}
    views = _views(thread.posted, seq_of)
    final = _view(thread.final, _stored_before(thread.posted, seq_of))
    # The final view also belongs to the list: it is where the last parts reach the actor.
    report = check_scenario(db, stored_id, [*views, final], final, calls=[])
    verdict.stats.update(report.stats)
    verdict.duplicates.update(report.duplicates)
    return problems + report.violations


def _stored_before(posted: list[Posted], seq_of: dict[str, int]) -> int:
    return max((seq_of.get(m, 0) for p in posted if p.ok for m in p.own), default=0)


def _views(posted: list[Posted], seq_of: dict[str, int]) -> list[View]:
    views = []
    highest = 0
    for call in posted:
        if call.ok:
            views.append(_view(call, highest))
            highest = max([highest, *(seq_of.get(m, 0) for m in call.own)])
    return views


def _view(call: Posted, stored_before: int) -> View:
    return View(call.label, stored_before, call.own, call.raw, call.observed)
