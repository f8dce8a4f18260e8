"""One cycle of a background operation: its start, failed and end events, and its commit.

A cycle reports on one thread's stream: a start event, then either a typed failure (which never changes
the record) or the end event written in the transaction that commits the result, published once it
committed. `engine.runner` drives cycles through that sequence; the use-cases never do it by hand.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import Connection

from om_core.engine import events as ev
from om_core.engine.core import EngineCore
from om_core.engine.ports import Completion
from om_core.engine.tasks import Task, TaskKind, kind_of
from om_core.errors import OMError, public_text
from om_core.extractors.signals import Signal
from om_core.store.outbox import write_record_events
from om_core.store.payloads import UsageFields
from om_core.store.types import NewEvent, Record, StoredEvent
from om_core.tenancy.scoped_ids import PublicId, StoredId

T = TypeVar("T")


@dataclass
class Usage:
    """Model usage of one cycle, reported on its end or failed event."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost: float | None = None
    model: str | None = None

    def add(self, completion: Completion) -> None:
        self.input_tokens += completion.input_tokens
        self.output_tokens += completion.output_tokens
        if completion.cost is not None:
            self.cost = (self.cost or 0.0) + completion.cost
        self.model = completion.model

    def fields(self) -> UsageFields:
        return ev.usage_fields(self.input_tokens, self.output_tokens, self.cost, self.model)


@dataclass
class Cycle:
    """One run of one task kind on one record: its events and its commit.

    `tokens` is what the start event announces (tokens to observe or buffer) and the failed event
    reports as attempted.
    """

    core: EngineCore
    kind: TaskKind
    cycle_id: str
    head: Record
    thread_id: StoredId
    tokens: int
    usage: Usage = field(default_factory=Usage)
    started: datetime = field(init=False)

    def __post_init__(self) -> None:
        self.started = self.core.clock()

    @classmethod
    def of(
        cls, core: EngineCore, task: Task, head: Record, tokens: int, *, cycle_id: str | None = None
    ) -> Cycle:
        return cls(core, kind_of(task), cycle_id or task.cycle_id, head, task.thread_id, tokens)

    @property
    def operation(self) -> ev.Operation:
        return self.kind.operation

    def start(
        self,
        config: dict[str, Any],
        *,
        with_change: Callable[[Connection], None] | None = None,
        thread_ids: list[PublicId] | None = None,
    ) -> None:
        """Report the start (with `with_change` in the same transaction, when the start changes state).
        `thread_ids` (public ids) are the threads of a multi-thread batch, reported on each thread's start
        marker (behaviour §10.1)."""

        def write(conn: Connection) -> tuple[None, list[StoredEvent]]:
            return None, self.start_on(conn, config, with_change=with_change, thread_ids=thread_ids)

        self.commit(write)

    def start_on(
        self,
        conn: Connection,
        config: dict[str, Any],
        *,
        with_change: Callable[[Connection], None] | None = None,
        thread_ids: list[PublicId] | None = None,
    ) -> list[StoredEvent]:
        """`start` written on the caller's open transaction (a cycle that read its snapshot there saves a
        transaction); the caller publishes what this returns once that transaction has committed."""
        draft = ev.start(
            self.kind.phase.start,
            cycle_id=self.cycle_id,
            operation=self.operation,
            started_at=self.started,
            tokens=self.tokens,
            record_id=self.head.id,
            thread_id=self.thread_id,
            config=config,
        )
        if thread_ids is not None:
            draft = replace(draft, payload={**draft.payload, "threadIds": thread_ids})
        if with_change is not None:
            with_change(conn)
        return write_record_events(conn, self.head, [self.own(draft)])

    def fail(self, error: BaseException, *, retrying: bool = False) -> None:
        """Report the failure; the record is untouched, so nothing leaves the actor's context. An error OM
        raised on purpose reports its code too (`errorCode`, e.g. `MODEL_TIER_EXCEEDED`, behaviour §11.1). The
        event's `error` is what the tenant may read (`public_text`: never a provider's or a library's
        words); when that hides something, the full text goes to the server's log. An error that carries
        what was observed before the failure (`partial_observations`) reports it as `observations`."""
        shown = public_text(error, context=f"{self.operation.value} cycle {self.cycle_id}")
        self.core.write_events(
            self.head,
            [
                self.own(
                    ev.failed(
                        self.kind.phase.failed,
                        cycle_id=self.cycle_id,
                        operation=self.operation,
                        started_at=self.started,
                        failed_at=self.core.clock(),
                        tokens_attempted=self.tokens,
                        error=shown,
                        record_id=self.head.id,
                        thread_id=self.thread_id,
                        usage=self.usage.fields(),
                        retrying=retrying,
                        error_code=error.code if isinstance(error, OMError) else None,
                        observations=getattr(error, "partial_observations", "") or "",
                    )
                )
            ],
        )

    def restart(self, reason: str, cycle_id: str, config: dict[str, Any]) -> None:
        """A retry within the same run: this cycle is reported failed (retrying) and a new one starts."""
        self.fail(RuntimeError(reason), retrying=True)
        self.cycle_id = cycle_id
        self.start(config)

    def ending(self, *, signals: Sequence[Signal] = (), **fields: Any) -> Callable[[object], list[NewEvent]]:
        """The end event, built by the store inside the committing transaction from what it wrote (a new
        generation's record id when the commit made one), then a `data-om-signal` per signal the run's
        `onExtracted` callbacks sent."""
        completed = self.core.clock()

        def build(result: object) -> list[NewEvent]:
            record_id = result.id if isinstance(result, Record) else self.head.id
            common: dict[str, Any] = {
                "cycle_id": self.cycle_id,
                "operation": self.operation,
                "started_at": self.started,
                "completed_at": completed,
                "record_id": record_id,
                "thread_id": self.thread_id,
                "usage": self.usage.fields(),
            }
            end = ev.buffering_end if self.kind.phase is ev.BUFFERED else ev.observation_end
            sent = [
                ev.signal(
                    cycle_id=self.cycle_id,
                    operation=self.operation,
                    index=index,
                    slug=signal.slug,
                    kind=signal.type,
                    contents=signal.contents,
                    sent_at=completed,
                    record_id=record_id,
                    thread_id=self.thread_id,
                )
                for index, signal in enumerate(signals)
            ]
            return [self.own(event) for event in (end(**common, **fields), *sent)]

        return build

    def own(self, draft: NewEvent) -> NewEvent:
        """`draft` reported on this cycle's thread's stream, whichever record it is written for (a
        resource's shared log belongs to no one thread)."""
        return replace(draft, thread_id=self.thread_id)

    def commit(self, write: Callable[[Connection], tuple[T, list[StoredEvent]]]) -> T:
        """One transaction (the store re-checks everything under the row lock), then publish."""
        with self.core.db.begin() as conn:
            result, stored = write(conn)
        self.core.publish(stored)
        return result
