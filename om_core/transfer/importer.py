"""Write transfer lines (`records`) into one tenant's memory: idempotent, bounded, and tenant-scoped.

- **Tenant-scoped.** A file carries public ids only; every id is stored under the importing tenant
  (`scoped_id`), so no line can name, create or change a row of another tenant, whatever it holds.
- **Idempotent.** A message already stored (by its id, in its thread) is not stored again; a thread that
  already exists gets only its new messages, appended after its own; an observation log is written only
  into a thread created by this import (or a resource log that has no record yet), so its cursors count
  in the sequence numbers the file carries; a group or a working memory that exists is left alone.
  Importing the same file twice changes nothing the second time.
- **Bounded.** At most `ImportLimits.max_lines` lines of at most `max_line_bytes` each; each thread is
  written in one transaction, so memory holds one thread's lines at a time. A refusal (`ImportRefused`)
  names the line and what to fix; the threads before it stay imported, and a second run of the fixed
  file completes the rest.
- **Nothing chosen by the file that the server decides.** Token counts are counted again
  (`count_part`); config overrides pass the same checks as `PUT .../config` (`check_config`); record
  and chunk ids are derived from the stored key and the file's id (a file cannot pick a row another key
  owns); the run flags (observing, reflecting, buffering) start cleared.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import ValidationError
from sqlalchemy import Connection, Engine, select
from sqlalchemy.exc import DataError, IntegrityError

from om_core.messages import Message, Part
from om_core.store import history, schema
from om_core.tenancy.scoped_ids import PublicId, StoredId, scoped_id
from om_core.transfer.records import (
    GroupLine,
    HeaderLine,
    Line,
    MessageLine,
    RecordLine,
    ResourceLine,
    ThreadLine,
    WorkingMemoryLine,
    parse_line,
)

__all__ = [
    "ConfigCheck",
    "ImportLimits",
    "ImportRefused",
    "ImportReport",
    "PartCounter",
    "import_lines",
]

T, R, M, P = schema.threads, schema.resources, schema.messages, schema.parts
REC, CH, G, WM = schema.records, schema.chunks, schema.observation_groups, schema.working_memory

#: The largest sequence number a file may give a part (the records' counts have the same bound).
_MAX_SEQ = 2**53
PartCounter = Callable[[Part], tuple[float, float, int]]
#: Checks a thread's overrides (None for a resource's own) merged over its resource's, for the tenant;
#: raises `OMConfigError` or pydantic's `ValidationError` when they would be refused by `PUT .../config`.
ConfigCheck = Callable[[dict[str, Any] | None, dict[str, Any] | None, str | None], None]
Reason = Literal["too_large", "invalid", "conflict"]


@dataclass(frozen=True)
class ImportLimits:
    """The operator's bounds on one import (`OM_MAX_IMPORT_LINES`, `OM_MAX_IMPORT_LINE_BYTES`)."""

    max_lines: int
    max_line_bytes: int


class ImportRefused(ValueError):
    """The file cannot be imported as it is. `reason`: `too_large` (413), `invalid` (422) or `conflict`
    (409); `line` is the 1-based line number at fault, when one is."""

    def __init__(self, reason: Reason, message: str, line: int | None = None) -> None:
        self.reason = reason
        self.line = line
        super().__init__(f"line {line}: {message}" if line is not None else message)


@dataclass
class ImportReport:
    """What an import wrote and what it found already there (the progress counts, and the final ones)."""

    lines: int = 0
    resources: int = 0
    threads: int = 0
    threads_existing: int = 0
    messages: int = 0
    messages_skipped: int = 0
    records: int = 0
    records_skipped: int = 0
    groups: int = 0
    groups_skipped: int = 0
    working_memory: int = 0
    working_memory_skipped: int = 0
    source: str = "om"
    done: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Unit:
    """One resource or one thread with the lines that follow it, written in one transaction."""

    head: ResourceLine | ThreadLine
    first_line: int
    messages: list[tuple[int, MessageLine]] = field(default_factory=list)
    records: list[tuple[int, RecordLine]] = field(default_factory=list)
    groups: list[tuple[int, GroupLine]] = field(default_factory=list)
    memory: list[tuple[int, WorkingMemoryLine]] = field(default_factory=list)


def _now() -> datetime:
    return datetime.now(UTC)


def _numbered(lines: Iterable[bytes | str], limits: ImportLimits) -> Iterator[tuple[int, Line]]:
    """Non-blank lines parsed, numbered from 1, refused past the limits before anything is parsed."""
    count = 0
    for number, raw in enumerate(lines, start=1):
        data = raw.encode() if isinstance(raw, str) else raw
        if len(data) > limits.max_line_bytes:
            raise ImportRefused(
                "too_large",
                f"the line is {len(data)} bytes, over the limit of {limits.max_line_bytes} "
                "(OM_MAX_IMPORT_LINE_BYTES)",
                number,
            )
        if not data.strip():
            continue
        count += 1
        if count > limits.max_lines:
            raise ImportRefused(
                "too_large",
                f"more than {limits.max_lines} lines (OM_MAX_IMPORT_LINES): split the file, by resource or "
                "by thread, and import each part",
                number,
            )
        try:
            yield number, parse_line(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "the line"
            raise ImportRefused("invalid", f"{where}: {first['msg']}", number) from None


def import_lines(
    db: Engine,
    lines: Iterable[bytes | str],
    *,
    tenant_id: str | None,
    count_part: PartCounter,
    check_config: ConfigCheck,
    limits: ImportLimits,
    on_progress: Callable[[ImportReport], None] | None = None,
) -> ImportReport:
    """Import a file's lines into `tenant_id`'s memory; returns the counts. Raises `ImportRefused`."""
    report = ImportReport()
    writer = _Writer(tenant_id, count_part, check_config, report)
    unit: _Unit | None = None
    header_seen = False
    for number, line in _numbered(lines, limits):
        report.lines = number
        if not header_seen:
            if not isinstance(line, HeaderLine):
                raise ImportRefused("invalid", "the first line must be the header (kind: header)", number)
            header_seen = True
            report.source = line.source
            continue
        if isinstance(line, HeaderLine):
            raise ImportRefused("invalid", "a second header: import one file at a time", number)
        if isinstance(line, ResourceLine | ThreadLine):
            if unit is not None:
                _commit(db, writer, unit, on_progress)
            unit = _Unit(line, number)
            continue
        if unit is None:
            raise ImportRefused("invalid", f"a {line.kind} line before any resource or thread line", number)
        _attach(unit, number, line)
    if not header_seen:
        raise ImportRefused("invalid", "the file is empty: it needs at least the header line")
    if unit is not None:
        _commit(db, writer, unit, on_progress)
    report.done = True
    return report


def _attach(unit: _Unit, number: int, line: Line) -> None:
    """Put a line in the unit it belongs to, refusing one that names another thread or resource."""
    head = unit.head
    in_thread = isinstance(head, ThreadLine)
    owner = f"{'thread' if in_thread else 'resource'} {head.id!r} (line {unit.first_line})"
    if isinstance(line, MessageLine):
        if not in_thread or line.thread_id != head.id:
            raise ImportRefused("invalid", f"a message of thread {line.thread_id!r} inside {owner}", number)
        unit.messages.append((number, line))
    elif isinstance(line, RecordLine):
        _check_owner(line.scope, line.thread_id, line.resource_id, unit, owner, number)
        unit.records.append((number, line))
    elif isinstance(line, GroupLine):
        if not in_thread or line.thread_id != head.id:
            raise ImportRefused("invalid", f"a group of thread {line.thread_id!r} inside {owner}", number)
        unit.groups.append((number, line))
    elif isinstance(line, WorkingMemoryLine):
        _check_owner(line.scope, line.thread_id, line.resource_id, unit, owner, number)
        unit.memory.append((number, line))


def _check_owner(
    scope: str, thread_id: str | None, resource_id: str, unit: _Unit, owner: str, number: int
) -> None:
    head = unit.head
    if isinstance(head, ThreadLine):
        ok = scope == "thread" and thread_id == head.id and resource_id == head.resource_id
    else:
        ok = scope == "resource" and resource_id == head.id
    if not ok:
        raise ImportRefused(
            "invalid",
            f"a {scope}-scope line of thread {thread_id!r}, resource {resource_id!r} inside {owner}",
            number,
        )


def _commit(
    db: Engine, writer: _Writer, unit: _Unit, on_progress: Callable[[ImportReport], None] | None
) -> None:
    try:
        with db.begin() as conn:
            if isinstance(unit.head, ResourceLine):
                writer.resource(conn, unit, unit.head)
            else:
                writer.thread(conn, unit, unit.head)
    except ImportRefused:
        raise
    except IntegrityError as exc:
        raise ImportRefused(
            "conflict",
            f"the {unit.head.kind} {unit.head.id!r} conflicts with what is stored "
            f"({type(exc.orig).__name__}); nothing of it was written",
            unit.first_line,
        ) from None
    except (DataError, ValueError) as exc:
        # A value the database cannot store (a number past its columns, a NUL character in text on
        # Postgres): the file's fault, said without the driver's text.
        raise ImportRefused(
            "invalid",
            f"the {unit.head.kind} {unit.head.id!r} holds a value the database cannot store "
            f"({type(exc).__name__}: a number too large, or a NUL character in text); nothing of it was "
            "written",
            unit.first_line,
        ) from None
    if on_progress is not None:
        on_progress(writer.report)


def _derived_id(key: str, kind: str, original: str) -> str:
    """A row id for an imported record or chunk: stable for the same key and file id (a second import
    finds the same id), and never one another key's rows use."""
    return "omimp-" + hashlib.sha256(f"{key}\0{kind}\0{original}".encode()).hexdigest()[:40]


class _Writer:
    def __init__(
        self, tenant_id: str | None, count_part: PartCounter, check_config: ConfigCheck, report: ImportReport
    ) -> None:
        self.tenant_id = tenant_id
        self.count_part = count_part
        self.check_config = check_config
        self.report = report

    def stored(self, public: str) -> StoredId:
        return scoped_id(self.tenant_id, PublicId(public))

    def _check(self, overrides: dict[str, Any] | None, base: dict[str, Any] | None, number: int) -> None:
        try:
            self.check_config(overrides, base, self.tenant_id)
        except (ValidationError, ValueError) as exc:
            raise ImportRefused("invalid", f"config_overrides: {exc}", number) from None

    # --------------------------------------------------------------------------------------- resource

    def _ensure_resource(self, conn: Connection, line: ResourceLine | None, public: str, number: int) -> bool:
        """Create the resource if it is new (with the line's overrides, checked); True when it was."""
        stored = self.stored(public)
        if conn.execute(select(R.c.id).where(R.c.id == stored)).first() is not None:
            return False
        overrides = line.config_overrides if line is not None else None
        if overrides:
            self._check(None, overrides, number)
        conn.execute(
            R.insert().values(
                id=stored,
                tenant_id=self.tenant_id,
                metadata={"configOverrides": overrides} if overrides else {},
                created_at=line.created_at if line is not None else _now(),
            )
        )
        self.report.resources += 1
        return True

    def resource(self, conn: Connection, unit: _Unit, line: ResourceLine) -> None:
        self._ensure_resource(conn, line, line.id, unit.first_line)
        key = f"resource:{self.stored(line.id)}"
        self._records(
            conn, key, unit.records, thread_id=None, resource_id=self.stored(line.id), last_seq=None
        )
        self._memory(conn, unit.memory)

    # ----------------------------------------------------------------------------------------- thread

    def thread(self, conn: Connection, unit: _Unit, line: ThreadLine) -> None:
        stored, resource = self.stored(line.id), self.stored(line.resource_id)
        self._ensure_resource(conn, None, line.resource_id, unit.first_line)
        existing = history.lock_thread(conn, stored)
        if existing is not None:
            if existing.resource_id != resource:
                raise ImportRefused(
                    "conflict",
                    f"thread {line.id!r} already exists under another resource; import it with its own "
                    "resource id, or erase the thread first",
                    unit.first_line,
                )
            self.report.threads_existing += 1
            self._append_new_messages(conn, existing, unit.messages)
            self.report.records_skipped += len(unit.records)
        else:
            base = history.resource_overrides(
                conn.execute(select(R.c.metadata).where(R.c.id == resource)).scalar()
            )
            self._check(line.config_overrides, base, unit.first_line)
            last_seq = self._insert_thread(conn, line, stored, resource, unit.messages)
            self.report.threads += 1
            self._records(
                conn,
                f"thread:{stored}",
                unit.records,
                thread_id=stored,
                resource_id=resource,
                last_seq=last_seq,
            )
        self._groups(conn, unit.groups)
        self._memory(conn, unit.memory)

    def _insert_thread(
        self,
        conn: Connection,
        line: ThreadLine,
        stored: str,
        resource: str,
        messages: list[tuple[int, MessageLine]],
    ) -> int:
        """A new thread with its messages at the sequence numbers the file gives (checked: each used once,
        a message's parts in increasing order). The thread's created_at is the import's time: per-process
        caches key a thread's parts by (id, created_at), so a thread erased and imported again must not
        share a key with the copy it replaced."""
        seen_seqs: set[int] = set()
        seen_ids: set[str] = set()
        message_rows: list[dict[str, Any]] = []
        part_rows: list[dict[str, Any]] = []
        top = 0
        for number, message in messages:
            if message.id in seen_ids:
                raise ImportRefused(
                    "invalid", f"message id {message.id!r} appears twice in the thread", number
                )
            seen_ids.add(message.id)
            previous = 0
            for index, part in enumerate(message.parts):
                seq = part.seq
                if seq is None or not 1 <= seq <= _MAX_SEQ:
                    raise ImportRefused(
                        "invalid", f"parts.{index}.seq: every part needs its seq (1 to {_MAX_SEQ})", number
                    )
                if seq in seen_seqs or seq <= previous:
                    raise ImportRefused(
                        "invalid",
                        f"parts.{index}.seq: {seq} is used twice or out of order; a thread's parts each "
                        "have their own increasing seq",
                        number,
                    )
                seen_seqs.add(seq)
                previous = seq
                tokens, overhead, extra = self.count_part(part)
                body = part.model_dump(mode="json", exclude_none=True, by_alias=True)
                part_rows.append(
                    {
                        "thread_id": stored,
                        "seq": seq,
                        "message_id": message.id,
                        "part_index": index,
                        "type": part.type,
                        "body": body,
                        "created_at": part.created_at,
                        "tokens": float(tokens),
                        "overhead_delta": float(overhead),
                        "extra_messages": int(extra),
                    }
                )
            first = message.parts[0].seq if message.parts else top + 1
            top = max(top, previous)
            message_rows.append(
                {
                    "thread_id": stored,
                    "id": message.id,
                    "resource_id": resource,
                    "role": message.role,
                    "created_at": message.created_at,
                    "metadata": message.metadata,
                    "first_seq": first,
                    "part_count": len(message.parts),
                }
            )
        last_seq = max(line.last_seq, top)
        now = _now()
        conn.execute(
            T.insert().values(
                id=stored,
                resource_id=resource,
                tenant_id=self.tenant_id,
                title=line.title,
                om_metadata=line.metadata,
                config_overrides=line.config_overrides,
                last_seq=last_seq,
                last_actor_model=line.last_actor_model,
                last_activity_at=line.last_activity_at,
                created_at=now,
                updated_at=now,
            )
        )
        if message_rows:
            conn.execute(M.insert(), message_rows)
        if part_rows:
            conn.execute(P.insert(), part_rows)
        self.report.messages += len(message_rows)
        return last_seq

    def _append_new_messages(
        self, conn: Connection, thread: history.ThreadRow, messages: list[tuple[int, MessageLine]]
    ) -> None:
        """An existing thread gets the messages it lacks, numbered after its own parts (its own order
        wins); a stored message id is skipped, whatever the file says of it."""
        known = history.known_message_ids(conn, thread.id, [m.id for _, m in messages])
        fresh = [
            Message(
                id=m.id,
                role=m.role,
                created_at=m.created_at,
                metadata=m.metadata,
                parts=[p.model_copy(update={"seq": None}) for p in m.parts],
            )
            for _, m in messages
            if m.id not in known
        ]
        self.report.messages_skipped += len(messages) - len(fresh)
        if fresh:
            try:
                history.append_to_locked(conn, thread, fresh, count_part=self.count_part)
            except history.MessageConflict as exc:
                raise ImportRefused("conflict", str(exc)) from None
            self.report.messages += len(fresh)

    # ---------------------------------------------------------------------------------------- records

    def _records(
        self,
        conn: Connection,
        key: str,
        lines: list[tuple[int, RecordLine]],
        *,
        thread_id: str | None,
        resource_id: str,
        last_seq: int | None,
    ) -> None:
        """Every generation of one log, when the key has none yet: exactly one live (not superseded),
        every `superseded_by` naming a generation of the file, cursors within the thread's parts."""
        if not lines:
            return
        if conn.execute(select(REC.c.id).where(REC.c.lookup_key == key).limit(1)).first() is not None:
            self.report.records_skipped += len(lines)
            return
        ids = {line.id for _, line in lines}
        live = [number for number, line in lines if line.superseded_by is None]
        if len(live) != 1:
            raise ImportRefused(
                "invalid",
                f"the log has {len(live)} live generations (superseded_by null); it needs exactly one",
                (live[1] if len(live) > 1 else lines[0][0]),
            )
        cycles: set[str] = set()
        for number, line in lines:
            if len(ids) != len(lines):
                raise ImportRefused("invalid", f"record id {line.id!r} appears twice", number)
            if line.superseded_by is not None and line.superseded_by not in ids:
                raise ImportRefused(
                    "invalid", f"superseded_by: {line.superseded_by!r} is no record of this file", number
                )
            if last_seq is not None and max(line.last_observed_seq, line.last_buffered_seq) > last_seq:
                raise ImportRefused(
                    "invalid",
                    f"last_observed_seq / last_buffered_seq past the thread's last part ({last_seq})",
                    number,
                )
            self._insert_record(conn, key, line, thread_id, resource_id, cycles, number)
            self.report.records += 1

    def _insert_record(
        self,
        conn: Connection,
        key: str,
        line: RecordLine,
        thread_id: str | None,
        resource_id: str,
        cycles: set[str],
        number: int,
    ) -> None:
        record_id = _derived_id(key, "record", line.id)
        values = line.model_dump(
            exclude={"kind", "id", "chunks", "superseded_by", "thread_id", "resource_id"}
        )
        conn.execute(
            REC.insert().values(
                **values,
                id=record_id,
                lookup_key=key,
                thread_id=thread_id,
                resource_id=resource_id,
                superseded_by=_derived_id(key, "record", line.superseded_by) if line.superseded_by else None,
                config={},
                is_observing=False,
                is_reflecting=False,
                is_buffering_observation=False,
                is_buffering_reflection=False,
            )
        )
        rows = []
        for chunk in line.chunks:
            if chunk.cycle_id in cycles:
                raise ImportRefused(
                    "invalid", f"chunk cycle_id {chunk.cycle_id!r} appears twice in the log", number
                )
            cycles.add(chunk.cycle_id)
            if chunk.to_seq < chunk.from_seq:
                raise ImportRefused("invalid", f"chunk {chunk.id!r}: to_seq is before from_seq", number)
            chunk_values = chunk.model_dump(exclude={"id", "thread_id"})
            rows.append(
                {
                    **chunk_values,
                    "id": _derived_id(key, "chunk", chunk.id),
                    "lookup_key": key,
                    "record_id": record_id,
                    "thread_id": self.stored(chunk.thread_id) if chunk.thread_id is not None else thread_id,
                }
            )
        if rows:
            conn.execute(CH.insert(), rows)

    # ------------------------------------------------------------------------ groups, working memory

    def _groups(self, conn: Connection, lines: list[tuple[int, GroupLine]]) -> None:
        for _, line in lines:
            if conn.execute(select(G.c.id).where(G.c.id == line.id)).first() is not None:
                self.report.groups_skipped += 1
                continue
            thread, resource = self.stored(line.thread_id), self.stored(line.resource_id)
            conn.execute(
                G.insert().values(
                    id=line.id,
                    thread_id=thread,
                    resource_id=resource,
                    lookup_key=f"resource:{resource}" if line.scope == "resource" else f"thread:{thread}",
                    cycle_id=line.cycle_id,
                    kind=line.group_kind,
                    ranges=line.ranges,
                    text=line.text,
                    observed_at=line.observed_at,
                    created_at=line.created_at,
                )
            )
            self.report.groups += 1

    def _memory(self, conn: Connection, lines: list[tuple[int, WorkingMemoryLine]]) -> None:
        for _, line in lines:
            thread = self.stored(line.thread_id) if line.thread_id is not None else None
            resource = self.stored(line.resource_id)
            key = f"thread:{thread}" if line.scope == "thread" else f"resource:{resource}"
            if conn.execute(select(WM.c.lookup_key).where(WM.c.lookup_key == key)).first() is not None:
                self.report.working_memory_skipped += 1
                continue
            conn.execute(
                WM.insert().values(
                    lookup_key=key,
                    scope=line.scope,
                    thread_id=thread if line.scope == "thread" else None,
                    resource_id=resource,
                    content=line.content,
                    format=line.format,
                    version=line.version,
                    updated_at=line.updated_at,
                    updated_by=line.updated_by,
                )
            )
            self.report.working_memory += 1
