"""Correct or forget one line of a thread's active observation log (its own, or its resource's shared log
in resource scope): a new generation, fenced by the line's digest, reported on the event stream.

Why it refuses while a reflection runs instead of waiting: the reflection's text was computed from the log
before the edit, so the edit would only make that reflection's commit refused (its row retired) after a
model call was paid for, and waiting means holding an HTTP request for a model call of unbounded length.
So an edit takes the log's reflection locks (`om:lock:reflect:<key>` and its buffered variant) for its one
short transaction and answers "busy" (HTTP 409) when either is held; the caller retries after the
reflection's end event. Observation and buffering need no lock: their commits re-read the head under its
row lock and append to whatever generation is live, so an edit between their start and their commit is
kept. The locks only save wasted work; correctness is the storage fence (`store.log_edits`): the line's
digest is checked under the row lock, and a reflection that started before the edit is refused at commit
because its row was retired, so a forgotten line never comes back through it.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Literal

from om_core.coordination import Keys
from om_core.engine import events as ev
from om_core.engine import indexing
from om_core.engine.core import EngineCore
from om_core.engine.tasks import lookup_key
from om_core.errors import OMError
from om_core.store import history, log_edits, records
from om_core.store.types import NewEvent, Record
from om_core.tenancy.scoped_ids import StoredId

__all__ = ["MAX_LINE_CHARS", "LineEditError", "LineEditResult", "edit_line", "is_structural"]

#: A replacement is one observation line; anything longer is not what the edit is for.
MAX_LINE_CHARS = 10_000

#: A line that is a tag of the log's structure (a resource's `<thread id>` section, an observation group's
#: wrapper, `<thread-title>`...): tags count only at the start of a line (`observations.text`).
_TAG = re.compile(r"\s*</?[A-Za-z][\w-]*(\s[^>]*)?>")


def is_structural(line: str) -> bool:
    """Whether `line` is a tag or blank: not an observation a caller may edit or delete."""
    return not line.strip() or _TAG.match(line) is not None


class LineEditError(OMError):
    """Why an edit was refused. `code`: NO_OBSERVATIONS (no log yet), OBSERVATION_LINE_CHANGED (the line
    is not the one the caller read, or is gone), OBSERVATION_LOG_BUSY (a reflection of the log is
    running), NOT_AN_OBSERVATION_LINE (a tag or blank line), INVALID_OBSERVATION_TEXT (the replacement).
    `field` names the request field to fix, when one is at fault."""

    def __init__(self, code: str, message: str, field: str | None = None) -> None:
        super().__init__(code, message)
        self.field = field

    def __reduce__(self) -> tuple[object, ...]:
        return (LineEditError, (self.code, str(self), self.field))


@dataclass(frozen=True)
class LineEditResult:
    """The new head of the log, the id of the generation it replaced, and the edit's cycle id."""

    record: Record
    previous_record_id: str
    cycle_id: str
    action: str
    line: int


def check_replacement(text: str) -> str:
    """The replacement line as it will be stored, or a `LineEditError` saying what to change."""
    if "\n" in text or "\r" in text:
        raise LineEditError(
            "INVALID_OBSERVATION_TEXT",
            "text holds a line break: an edit replaces one line; edit the lines one by one",
            "text",
        )
    if not text.strip():
        raise LineEditError(
            "INVALID_OBSERVATION_TEXT", "text is blank: to remove the line, DELETE it instead", "text"
        )
    if len(text) > MAX_LINE_CHARS:
        raise LineEditError(
            "INVALID_OBSERVATION_TEXT",
            f"text is {len(text)} characters; a line holds at most {MAX_LINE_CHARS}",
            "text",
        )
    if is_structural(text):
        raise LineEditError(
            "INVALID_OBSERVATION_TEXT",
            "text starts with a tag (<...>): the log's tags are its structure; write the observation as "
            "prose",
            "text",
        )
    return text


def _changed(index: int, count: int) -> LineEditError:
    where = (
        f"line {index} no longer exists (the log has {count} lines)"
        if index >= count
        else f"line {index} is not the line you read (its sha256 differs from expected_sha256)"
    )
    return LineEditError(
        "OBSERVATION_LINE_CHANGED",
        f"{where}: the log changed since you read it; read GET /observations again and address the line by "
        "its current index and text",
        "expected_sha256",
    )


def edit_line(
    core: EngineCore, thread_id: StoredId, index: int, expected_sha256: str, replacement: str | None
) -> LineEditResult:
    """Replace (or delete, `replacement` None) line `index` of the log the thread reads."""
    if replacement is not None:
        replacement = check_replacement(replacement)
    thread = history.get_thread(core.db, thread_id)
    if thread is None:
        raise LineEditError("NO_OBSERVATIONS", "the thread does not exist")
    cfg = core.config_for(thread.effective_overrides)
    log_key = core.log_key(thread_id, cfg)
    shared = log_key != lookup_key(thread_id)
    head = records.get_head(core.db, log_key)
    if head is None or not head.active_observations:
        raise LineEditError("NO_OBSERVATIONS", "the thread has no observations yet: nothing to edit")
    lines = head.active_observations.split("\n")
    if index >= len(lines) or log_edits.line_digest(lines[index]) != expected_sha256:
        raise _changed(index, len(lines))
    if is_structural(lines[index]):
        raise LineEditError(
            "NOT_AN_OBSERVATION_LINE",
            f"line {index} is {'blank' if not lines[index].strip() else 'a tag of the log structure'}, "
            "not an observation: address a line of observation text",
            "line",
        )
    thread_ids: list[StoredId] = (
        [t.id for t in history.list_threads(core.db, thread.resource_id)] if shared else [thread_id]
    )
    cycle_id = f"edit-{uuid.uuid4().hex}"
    action: Literal["update", "delete"] = "delete" if replacement is None else "update"
    scope = "resource" if shared else "thread"
    now = core.clock()

    def drafts(successor: Record, previous: str) -> list[tuple[str, StoredId | None, NewEvent]]:
        return [
            (
                lookup_key(each),
                each,
                ev.observation_edit(
                    cycle_id=cycle_id,
                    action=action,
                    line=index,
                    text=replacement,
                    edited_at=now,
                    record_id=successor.id,
                    previous_record_id=previous,
                    generation_count=successor.generation_count,
                    observation_tokens=successor.observation_token_count,
                    thread_id=each,
                    scope=scope,
                ),
            )
            for each in thread_ids
        ]

    locks = sorted([Keys.reflect_lock(log_key), Keys.buffered_reflection_lock(log_key)])
    with core.holding(*locks) as held:
        if not held:
            raise LineEditError(
                "OBSERVATION_LOG_BUSY",
                "a reflection of this log is running: retry after its end event (data-om-observation-end or "
                "data-om-buffering-end with operationType reflection)",
            )
        with core.db.begin() as conn:
            outcome, stored = log_edits.edit_line(
                conn,
                log_key,
                index=index,
                expected_sha256=expected_sha256,
                replacement=replacement,
                count_tokens=core.counter.count_string,
                thread_ids=thread_ids,
                events=drafts,
            )
    if outcome.reason == "not-found" or outcome.record is None:
        raise LineEditError("NO_OBSERVATIONS", "the thread has no observations yet: nothing to edit")
    if outcome.reason == "changed":
        raise _changed(index, outcome.line_count)
    core.publish(stored)
    if cfg.retrieval:
        # A forgotten or corrected line also changed the observation groups' text: their search documents
        # follow (`search.index` rewrites a group document whose text differs).
        indexing.request_index(core, thread_ids)
    assert outcome.previous_record_id is not None
    return LineEditResult(outcome.record, outcome.previous_record_id, cycle_id, action, index)
