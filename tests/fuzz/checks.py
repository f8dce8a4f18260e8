"""Invariant checks for the fuzz, on top of `tests/support/invariants.check_thread` (§12.1, issue 6).

`check_thread` proves coverage by sequence ranges. The checks here prove it again by *content*: every part
carries a marker (`id[m<n>.<k>]`) that the fake models copy into observations and keep through
reflections, so we can read, from what the actor was actually shown and from the stored log, which parts
reached it and how often. Range bookkeeping and content have to agree; a bug in one cannot hide behind the
other.

Issue 6 numbering:
(1) coverage: every part exactly once, per turn and at the end (raw, or inside the observation log);
(2) no discarded work: every chunk row is activated, superseded by a sync observation covering it, or still
    buffered on the head; every activated observation is still in the log (our fake reflections keep it);
(3) chunk order: each stored chunk started where the buffered coverage ended when it was stored;
(4) no chunk left on a retired generation, (5) monotonic cursor, (8) one live head: `check_thread`;
(6) every stored part reached the actor's view at least once;
(7) no chunk stored that the cursor already covered.
Duplicates that never reached the actor (the same parts sent to the Observer twice, refused appends and
commits, redelivered tasks) are accepted by design; they are classified and counted, not failed.

Resource scope (`check_resource_scenario`): every thread's cursor chain gets the checks above, with the
resource's shared log standing in for the thread's own log, and a turn's view holds every part of the
resource (its own raw messages; the other threads' unobserved messages in the other-conversations block;
everything observed in the shared log), each once. The shared log carries each marker at most once (once
when its thread's cursor covers it), and a thread's markers sit in that thread's `<thread id>` sections;
a reflection may move lines out of the sections (the Reflector prompt allows stable facts outside them),
so after one only "never in another thread's section" holds.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine, select

from om_core.engine import TurnResult
from om_core.engine import events as ev
from om_core.engine.tasks import resource_key
from om_core.store import groups, history, records, schema
from om_core.store.outbox import list_events
from om_core.store.types import Record, StoredEvent
from tests.fuzz.fake_model import ModelCall, markers_by_section, markers_in
from tests.support.invariants import check_thread

#: At most this many messages per violation class, so one root cause does not flood the report.
MAX_PER_CLASS = 5
#: A section of the other-conversations block of the actor's context (resource scope).
OTHER_CONVERSATION_RE = re.compile(
    r'<other-conversation id="(?P<id>[^"\n]+)">\n(?P<body>.*?)\n</other-conversation>', re.DOTALL
)


@dataclass(frozen=True)
class View:
    """What one turn showed the actor, reduced to part markers."""

    label: str
    #: The highest stored sequence number before the turn started: all of those parts must be in view.
    stored_before: int
    #: Markers of the parts the turn itself sent.
    own: frozenset[str]
    raw: tuple[str, ...]
    observed: tuple[str, ...]
    #: Resource scope: the turn's thread ("" in thread scope, where every view is the one thread's) ...
    thread_id: str = ""
    #: ... the highest stored sequence number of each other thread of the resource before the turn ...
    others_before: tuple[tuple[str, int], ...] = ()
    #: ... and each marker of the other-conversations block with the section label it stood under.
    other_sections: tuple[tuple[str, str], ...] = ()


def view_of(
    result: TurnResult,
    label: str,
    stored_before: int,
    own: frozenset[str],
    *,
    thread_id: str = "",
    others_before: Mapping[str, int] | None = None,
) -> View:
    raw = tuple(m for message in result.messages for part in message.parts for m in markers_in(part.text))
    return view_from(label, stored_before, own, raw, result.system_messages, thread_id, others_before)


def view_from(
    label: str,
    stored_before: int,
    own: frozenset[str],
    raw: tuple[str, ...],
    system_messages: Sequence[str],
    thread_id: str = "",
    others_before: Mapping[str, int] | None = None,
) -> View:
    """A `View` from what a turn returned: the raw messages' markers and the system messages' text."""
    observed = tuple(m for text in system_messages for m in markers_in(text))
    sections = tuple(
        (match.group("id"), m)
        for text in system_messages
        for match in OTHER_CONVERSATION_RE.finditer(text)
        for m in markers_in(match.group("body"))
    )
    before = tuple(sorted((others_before or {}).items()))
    return View(label, stored_before, own, raw, observed, thread_id, before, sections)


@dataclass
class FuzzReport:
    violations: list[str] = field(default_factory=list)
    #: Accepted duplicates and wasted work, by class (never shown to the actor twice).
    duplicates: Counter[str] = field(default_factory=Counter)
    stats: Counter[str] = field(default_factory=Counter)
    #: Names the thread a message is about when a report covers several (resource scope).
    prefix: str = ""
    _per_class: Counter[str] = field(default_factory=Counter)

    def fail(self, kind: str, message: str) -> None:
        self._per_class[kind] += 1
        if self._per_class[kind] <= MAX_PER_CLASS:
            self.violations.append(f"[{kind}] {self.prefix}{message}")
        elif self._per_class[kind] == MAX_PER_CLASS + 1:
            self.violations.append(f"[{kind}] ... more of this class omitted")


@dataclass(frozen=True)
class ChunkRow:
    cycle_id: str
    record_id: str
    state: str
    from_seq: int
    to_seq: int
    observations: str


@dataclass(frozen=True)
class StoredState:
    """Everything the checks read, in one place."""

    thread_id: str
    parts: dict[str, int]  # marker -> seq
    head: Record
    live_ids: frozenset[str]
    chunks: list[ChunkRow]
    events: list[StoredEvent]
    #: The observation log the thread's observations land in: its head's, or its resource's (resource scope).
    log: str

    def in_range(self, lo: int, hi: int) -> set[str]:
        return {m for m, seq in self.parts.items() if lo < seq <= hi}


#: Every stored part of the scenario by marker: (its thread, its seq).
Owners = Mapping[str, tuple[str, int]]


def _owners(states: Iterable[StoredState]) -> dict[str, tuple[str, int]]:
    return {m: (state.thread_id, seq) for state in states for m, seq in state.parts.items()}


def check_scenario(
    db: Engine, thread_id: str, views: Sequence[View], final: View, calls: Sequence[ModelCall]
) -> FuzzReport:
    report = FuzzReport()
    base = check_thread(db, thread_id)
    for message in base.violations:
        report.fail("check_thread", message)
    state = _load(db, thread_id)
    if state is None:
        report.fail("no-head", "the thread has no live head after the scenario")
        return report
    owners = _owners([state])
    _check_views(report, state, owners, views)
    _check_final_view(report, state, owners, final)
    _check_reached(report, state, views)
    _check_log(report, state, Counter(markers_in(state.log)))
    _check_phantoms_in_log(report, state.log, owners)
    _check_chunks(report, state)
    _check_groups(report, db, state.thread_id, state.log, own_log=True)
    _check_event_order(report, state)
    _count_accepted_duplicates(report, state)
    _count_call_duplicates(report, calls)
    _count_stats(report, state, views)
    _count_call_stats(report, calls)
    return report


def check_resource_scenario(
    db: Engine,
    resource_id: str,
    labels: Mapping[str, str],
    views: Sequence[View],
    finals: Mapping[str, View],
    calls: Sequence[ModelCall],
) -> FuzzReport:
    """The checks of `check_scenario` for each thread of a resource (`labels`: thread id -> the label
    models and the log use for it; `finals`: each thread's quiet final turn), against the shared log, and
    the shared log's own rules (module docstring)."""
    report = FuzzReport()
    key = resource_key(resource_id)
    log = records.get_head(db, key)
    if records.live_heads(db, key) != 1:
        report.fail("live-heads", f"{key}: {records.live_heads(db, key)} live heads")
    text = log.active_observations if log is not None else ""
    in_log = Counter(markers_in(text))
    states: list[StoredState] = []
    for index, thread_id in enumerate(labels):
        report.prefix = f"thread {index}: "
        for message in check_thread(db, thread_id).violations:
            report.fail("check_thread", message)
        state = _load(db, thread_id, log=text)
        if state is None:
            report.fail("no-head", "the thread has no live head after the scenario")
        else:
            states.append(state)
    owners = _owners(states)
    for state in states:
        report.prefix = f"thread {list(labels).index(state.thread_id)}: "
        own_views = [v for v in views if v.thread_id == state.thread_id]
        _check_views(report, state, owners, own_views, labels)
        final = finals.get(state.thread_id)
        if final is None:
            report.fail("no-final-view", "the thread had no final turn")
        else:
            _check_final_view(report, state, owners, final, labels)
        _check_reached(report, state, own_views)
        _check_log(report, state, in_log)
        _check_chunks(report, state)
        _check_groups(report, db, state.thread_id, text, own_log=False)
        _check_event_order(report, state)
        _count_accepted_duplicates(report, state)
        _count_stats(report, state, own_views)
        _count_batches(report, state)
        report.stats["resource:chunks-activated"] += sum(1 for c in state.chunks if c.state == "activated")
    report.prefix = ""
    _check_phantoms_in_log(report, text, owners)
    reflected = log is not None and log.generation_count > 0
    _check_sections(report, text, owners, labels, reflected=reflected)
    _count_call_duplicates(report, calls)
    _count_call_stats(report, calls)
    report.stats["resource:threads"] += len(labels)
    report.stats["resource:log-generations"] += log.generation_count if log is not None else 0
    report.stats["resource:sections-in-log"] += sum(
        1 for line in text.split("\n") if line.startswith("<thread ")
    )
    return report


def _load(db: Engine, thread_id: str, *, log: str | None = None) -> StoredState | None:
    key = f"thread:{thread_id}"
    head = records.get_head(db, key)
    if head is None:
        return None
    with db.connect() as conn:
        parts = {
            m: p.seq
            for message in history.load_parts(conn, thread_id, after_seq=0)
            for p in message.parts
            if p.seq is not None
            for m in markers_in(p.text)
        }
        live = conn.execute(
            select(schema.records.c.id).where(
                schema.records.c.lookup_key == key, schema.records.c.superseded_by.is_(None)
            )
        ).scalars()
        live_ids = frozenset(str(x) for x in live)
        C = schema.chunks
        chunks = [
            ChunkRow(r["cycle_id"], r["record_id"], r["state"], r["from_seq"], r["to_seq"], r["observations"])
            for r in conn.execute(select(C).where(C.c.lookup_key == key).order_by(C.c.position)).mappings()
        ]
    events = list_events(db, thread_id=thread_id, after_id=0, limit=1_000_000)
    return StoredState(
        thread_id, parts, head, live_ids, chunks, events, head.active_observations if log is None else log
    )


# ------------------------------------------------------------------------------------------- (1)


def _check_views(
    report: FuzzReport,
    state: StoredState,
    owners: Owners,
    views: Sequence[View],
    labels: Mapping[str, str] | None = None,
) -> None:
    """Every turn: nothing shown twice, and nothing stored before the turn (or by it) missing."""
    for index, view in enumerate(views):
        if view.label == "final":
            continue  # checked exactly by _check_final_view
        label = f"turn {index} ({view.label})"
        _check_one_view(report, state, owners, view, label, exact=False, labels=labels)


def _check_one_view(
    report: FuzzReport,
    state: StoredState,
    owners: Owners,
    view: View,
    label: str,
    *,
    exact: bool,
    labels: Mapping[str, str] | None = None,
) -> None:
    """`state` is the turn's thread. In resource scope (`labels`) the view must also hold every part the
    other threads had stored before the turn (in the shared log or the other-conversations block), once."""
    raw, observed = Counter(view.raw), Counter(view.observed)
    for m in sorted(set(raw) & set(observed)):
        report.fail("shown-twice:raw+observed", f"{label}: {m} (seq {state.parts.get(m)}) raw and observed")
    for m, n in sorted(observed.items()):
        if n > 1:
            report.fail("shown-twice:observed", f"{label}: {m} appears {n} times in the observations")
    for m, n in sorted(raw.items()):
        if n > 1:
            report.fail("shown-twice:raw", f"{label}: {m} appears {n} times in the raw messages")
    seen = set(raw) | set(observed)
    if exact:
        due = set(state.parts)
    else:
        due = {m for m, seq in state.parts.items() if seq <= view.stored_before} | (
            view.own & set(state.parts)
        )
    for m in sorted(due - seen, key=lambda x: state.parts[x]):
        report.fail("missing-from-view", f"{label}: {m} (seq {state.parts[m]}) neither raw nor observed")
    for m in sorted(seen - set(owners)):
        report.fail("phantom", f"{label}: {m} is in the view but no stored part carries it")
    if labels is not None:
        _check_other_threads_in_view(report, state, owners, view, label, labels)


def _check_other_threads_in_view(
    report: FuzzReport, state: StoredState, owners: Owners, view: View, label: str, labels: Mapping[str, str]
) -> None:
    for m in sorted(set(view.raw) - set(state.parts)):
        if m in owners:
            report.fail("raw-from-other-thread", f"{label}: {m} of {owners[m][0]} is among the raw messages")
    before = dict(view.others_before)
    seen = set(view.raw) | set(view.observed)
    due = {
        m for m, (thread, seq) in owners.items() if thread != state.thread_id and seq <= before.get(thread, 0)
    }
    for m in sorted(due - seen, key=lambda x: owners[x]):
        thread, seq = owners[m]
        report.fail(
            "missing-from-view:other-thread", f"{label}: {m} ({thread} seq {seq}) is not in the context"
        )
    for section, m in view.other_sections:
        owner = owners.get(m)
        if owner is None:
            continue  # a phantom, reported above
        if owner[0] == state.thread_id or labels.get(owner[0]) != section:
            report.fail(
                "other-conversation:wrong-section",
                f"{label}: {m} of {owner[0]} shown under other-conversation {section!r}",
            )


def _check_final_view(
    report: FuzzReport,
    state: StoredState,
    owners: Owners,
    final: View,
    labels: Mapping[str, str] | None = None,
) -> None:
    """After draining and one quiet turn the view is exactly the stored conversation, once."""
    _check_one_view(report, state, owners, final, "final turn", exact=True, labels=labels)


# ------------------------------------------------------------------------------------------- (6)


def _check_reached(report: FuzzReport, state: StoredState, views: Sequence[View]) -> None:
    seen: set[str] = set()
    for view in views:
        seen.update(view.raw)
        seen.update(view.observed)
    for m in sorted(set(state.parts) - seen, key=lambda x: state.parts[x]):
        report.fail("never-reached-actor", f"{m} (seq {state.parts[m]}) was never in any turn's view")


# ------------------------------------------------------------------------------------------- (1)(2)


def _check_log(report: FuzzReport, state: StoredState, in_log: Counter[str]) -> None:
    """The stored log carries each observed part of the thread exactly once and nothing past its cursor."""
    cursor = state.head.last_observed_seq
    for m, seq in sorted(state.parts.items(), key=lambda item: item[1]):
        n = in_log.get(m, 0)
        if seq <= cursor and n == 0:
            report.fail(
                "observed-part-lost", f"{m} (seq {seq}) is behind the cursor {cursor} but not in the log"
            )
        elif seq <= cursor and n > 1:
            report.fail("log-duplicate", f"{m} (seq {seq}) appears {n} times in the log")
        elif seq > cursor and n > 0:
            report.fail("log-ahead-of-cursor", f"{m} (seq {seq}) is in the log but after the cursor {cursor}")


def _check_phantoms_in_log(report: FuzzReport, log: str, owners: Owners) -> None:
    for m in sorted(set(markers_in(log)) - set(owners)):
        report.fail("phantom", f"{m} is in the log but no stored part carries it")


def _check_sections(
    report: FuzzReport, log: str, owners: Owners, labels: Mapping[str, str], *, reflected: bool
) -> None:
    """Resource scope: a thread's markers sit in its own `<thread id>` sections of the shared log (after a
    reflection, outside every section is allowed too; inside another thread's, never)."""
    for section, m in markers_by_section(log):
        owner = owners.get(m)
        if owner is None:
            continue  # a phantom, reported by _check_phantoms_in_log
        expected = labels.get(owner[0])
        if section == expected or (section is None and reflected):
            continue
        where = f"section {section!r}" if section is not None else "no section"
        report.fail(
            "log-wrong-section",
            f"{m} of {owner[0]} (seq {owner[1]}) is in {where} of the shared log, expected {expected!r}"
            + ("" if reflected else " (no reflection has rewritten the log)"),
        )


def _check_groups(report: FuzzReport, db: Engine, thread_id: str, log: str, *, own_log: bool) -> None:
    """Retrieval mode: every group of the thread points at the raw messages its lines came from (each
    marker in an observation group's text belongs to a message of the thread inside the group's range),
    and every group wrapper of this thread in the log has its row with the same range (`own_log`: the log
    is the thread's own, so every wrapper in it is the thread's)."""
    with db.connect() as conn:
        messages = history.load_parts(conn, thread_id, after_seq=0)
        stored = groups.of_thread(conn, thread_id)
    if not stored:
        if own_log and _GROUP_OPEN.search(log):
            report.fail("group-row", "the log has group wrappers but the thread has no group rows")
        return
    order = {m.id: i for i, m in enumerate(messages)}
    marker_at = {mark: order[m.id] for m in messages for p in m.parts for mark in markers_in(p.text)}
    for group in stored:
        report.stats[f"groups:{group.kind}"] += 1
        if group.kind != "observation":
            continue
        start, _sep, end = group.ranges.partition(":")
        if start not in order or end not in order or order[start] > order[end]:
            report.fail("group-range", f"group {group.id} has range {group.ranges!r} outside the thread")
            continue
        outside = [
            m for m in markers_in(group.text) if not order[start] <= marker_at.get(m, -1) <= order[end]
        ]
        if outside:
            report.fail(
                "group-range", f"group {group.id} ({group.ranges}) carries {outside[:5]} outside its range"
            )
    rows = {g.id: g.ranges for g in stored}
    for group_id, ranges in _GROUP_OPEN.findall(log):
        if own_log and group_id not in rows:
            report.fail("group-row", f"group {group_id} is in the log but has no row")
        elif group_id in rows and rows[group_id] != ranges:
            report.fail(
                "group-row", f"group {group_id} reads {ranges!r} in the log, {rows[group_id]!r} stored"
            )


_GROUP_OPEN = re.compile(r'<observation-group id="([0-9a-f]+)" range="([^"]+)">')


def _coverage_events(state: StoredState) -> list[StoredEvent]:
    return [
        e
        for e in state.events
        if e.type in (ev.ACTIVATION, ev.OBSERVATION_END)
        and e.payload.get("operationType") == "observation"
        and "seqRange" in e.payload
    ]


def _check_chunks(report: FuzzReport, state: StoredState) -> None:
    """(2): each chunk row is accounted for, and its text matches the range it claims to cover."""
    log = set(markers_in(state.log))
    activations = {e.cycle_id: e for e in state.events if e.type == ev.ACTIVATION and "seqRange" in e.payload}
    sync_ranges = [
        (int(e.payload["seqRange"][0]), int(e.payload["seqRange"][1]))
        for e in state.events
        if e.type == ev.OBSERVATION_END and "seqRange" in e.payload
    ]
    for chunk in state.chunks:
        name = f"chunk {chunk.cycle_id} ({chunk.from_seq}, {chunk.to_seq}] {chunk.state}"
        _check_text_matches_range(report, state, name, chunk.observations, chunk.from_seq, chunk.to_seq)
        if chunk.state == "buffered":
            if chunk.record_id != state.head.id:
                report.fail("discarded:stranded", f"{name} waits on {chunk.record_id}, not on the head")
        elif chunk.state == "activated":
            event = activations.get(chunk.cycle_id)
            if event is None or list(event.payload["seqRange"]) != [chunk.from_seq, chunk.to_seq]:
                report.fail("discarded:activation-unreported", f"{name} has no matching activation event")
            lost = set(markers_in(chunk.observations)) - log
            if lost:
                report.fail(
                    "discarded:activated-text-lost", f"{name}: {sorted(lost)[:5]} no longer in the log"
                )
        elif chunk.state == "superseded":
            if not any(lo <= chunk.from_seq and chunk.to_seq <= hi for lo, hi in sync_ranges):
                report.fail("discarded:superseded-uncovered", f"{name} was retired without a covering commit")
        else:
            report.fail("discarded:unknown-state", name)
    for event in state.events:
        if event.type == ev.OBSERVATION_END and "seqRange" in event.payload:
            lo, hi = (int(x) for x in event.payload["seqRange"])
            text = str(event.payload.get("observations") or "")
            _check_text_matches_range(
                report, state, f"sync observation {event.cycle_id} ({lo}, {hi}]", text, lo, hi
            )
            lost = set(markers_in(text)) - log
            if lost:
                report.fail(
                    "discarded:observed-text-lost", f"{event.cycle_id}: {sorted(lost)[:5]} not in the log"
                )


def _check_text_matches_range(
    report: FuzzReport, state: StoredState, name: str, text: str, lo: int, hi: int
) -> None:
    carried = set(markers_in(text))
    expected = state.in_range(lo, hi)
    outside = carried - expected
    if outside:
        report.fail("range-mismatch:outside", f"{name} carries {sorted(outside)[:5]} outside its range")
    missing = expected - carried
    if missing:
        report.fail(
            "range-mismatch:empty-cover", f"{name} covers {sorted(missing)[:5]} without their content"
        )


# ----------------------------------------------------------------------------------------- (3)(5)(7)


def _check_event_order(report: FuzzReport, state: StoredState) -> None:
    """Replay the lifecycle in commit order (events are written in the transaction of their change).

    At the moment each chunk was stored the cursor must not cover it (7) and it must start where the
    buffered coverage ended (3); every sync observation must start at the cursor; the cursor never moves
    back (5).
    """
    chunks = {c.cycle_id: c for c in state.chunks}
    cursor = 0
    buffered_to = 0
    for event in state.events:
        data = event.payload
        if data.get("operationType") != "observation":
            continue
        if event.type == ev.BUFFERING_END:
            buffered_to = _check_stored_chunk(report, event, chunks, cursor, buffered_to)
        elif event.type in (ev.ACTIVATION, ev.OBSERVATION_END) and "seqRange" in data:
            lo, hi = (int(x) for x in data["seqRange"])
            if event.type == ev.OBSERVATION_END and lo != cursor:
                report.fail("sync-commit-order", f"{event.cycle_id} observed from {lo}, cursor was {cursor}")
            if hi < cursor:
                report.fail("cursor-backwards", f"{event.cycle_id} moves the cursor from {cursor} to {hi}")
            cursor = max(cursor, hi)
            if event.type == ev.OBSERVATION_END:
                buffered_to = max(buffered_to, hi)
    if cursor != state.head.last_observed_seq:
        report.fail(
            "cursor-replay", f"replayed cursor {cursor} != stored cursor {state.head.last_observed_seq}"
        )
    if len(state.live_ids) != 1:
        report.fail("live-heads", f"{len(state.live_ids)} live heads")


def _check_stored_chunk(
    report: FuzzReport, event: StoredEvent, chunks: Mapping[str, ChunkRow], cursor: int, buffered_to: int
) -> int:
    """(7) and (3) for the chunk a buffering-end event stored, as the replay stood then; returns how far
    the buffered coverage reaches after it."""
    chunk = chunks.get(event.cycle_id or "")
    if chunk is None:
        report.fail("discarded:chunk-row-missing", f"buffering-end {event.cycle_id} has no chunk row")
        return buffered_to
    if chunk.to_seq <= cursor:
        report.fail(
            "covered-chunk-stored",
            f"{event.cycle_id} ({chunk.from_seq}, {chunk.to_seq}] stored while the cursor was {cursor}",
        )
    if chunk.from_seq != max(cursor, buffered_to):
        report.fail(
            "chunk-order",
            f"{event.cycle_id} starts at {chunk.from_seq}, buffered coverage "
            f"ended at {max(cursor, buffered_to)}",
        )
    return max(buffered_to, chunk.to_seq)


# --------------------------------------------------------------------------------- accepted duplicates


def _count_call_duplicates(report: FuzzReport, calls: Sequence[ModelCall]) -> None:
    """Parts the Observer saw more than once (counted, not failed)."""
    answered = [c for c in calls if c.role == "observer" and c.outcome not in ("error", "degenerate")]
    per_part = Counter(m for c in answered for m in set(c.input_markers))
    report.duplicates["observer-input:parts-sent-again"] += sum(n - 1 for n in per_part.values() if n > 1)


def _count_accepted_duplicates(report: FuzzReport, state: StoredState) -> None:
    """Work done twice that the storage rules kept away from the actor (counted, not failed)."""
    started = _cycles(state.events, ev.BUFFERING_START, "observation")
    ended = _cycles(state.events, ev.BUFFERING_END, "observation")
    failed = _cycles(state.events, ev.BUFFERING_FAILED, "observation")
    report.duplicates["append:refused-or-empty"] += len(started - ended - failed)
    report.duplicates["sync-commit:refused"] += sum(
        1
        for e in state.events
        if e.type == ev.OBSERVATION_FAILED and "commit refused" in str(e.payload.get("error", ""))
    )
    report.duplicates["reflection:not-smaller"] += sum(
        1
        for e in state.events
        if e.type in (ev.OBSERVATION_FAILED, ev.BUFFERING_FAILED)
        and "not smaller" in str(e.payload.get("error", ""))
    )


def _cycles(events: Iterable[StoredEvent], kind: str, operation: str) -> set[str]:
    return {
        e.cycle_id or "" for e in events if e.type == kind and e.payload.get("operationType") == operation
    }


def _count_stats(report: FuzzReport, state: StoredState, views: Sequence[View]) -> None:
    report.stats["parts"] += len(state.parts)
    report.stats["turns"] += len(views)
    report.stats["generations"] += state.head.generation_count
    report.stats["cursor-at-end"] += state.head.last_observed_seq
    for chunk in state.chunks:
        report.stats[f"chunks:{chunk.state}"] += 1
    report.stats["sync-commits"] += sum(
        1
        for e in state.events
        if e.type == ev.OBSERVATION_END and e.payload.get("operationType") == "observation"
    )
    report.stats["reflections"] += sum(
        1
        for e in state.events
        if e.type == ev.OBSERVATION_END and e.payload.get("operationType") == "reflection"
    )
    report.stats["buffered-reflections-activated"] += sum(
        1 for e in state.events if e.type == ev.ACTIVATION and e.payload.get("operationType") == "reflection"
    )
    for event in state.events:
        if event.type == ev.ACTIVATION:
            data = event.payload
            report.stats[f"activated-by:{data.get('operationType')}:{data.get('triggeredBy')}"] += 1


def _count_call_stats(report: FuzzReport, calls: Sequence[ModelCall]) -> None:
    outcomes: Counter[Any] = Counter(f"model:{c.role}:{c.outcome}" for c in calls)
    report.stats.update(outcomes)


def _count_batches(report: FuzzReport, state: StoredState) -> None:
    """Resource scope: the thread's observations committed by a batch of several threads."""
    shared = {
        e.cycle_id
        for e in state.events
        if e.payload.get("operationType") == "observation" and len(e.payload.get("threadIds") or ()) > 1
    }
    report.stats["resource:multi-thread-commits"] += sum(
        1 for e in state.events if e.type == ev.OBSERVATION_END and e.cycle_id in shared
    )
