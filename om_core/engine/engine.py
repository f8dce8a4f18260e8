"""`MemoryEngine`: the one door to the engine, a facade over the use-case modules.

Each use-case reads the head, calls a model if it must (outside any transaction), then commits through
one storage operation that re-checks everything under the row lock (`Cycle`). The engine never trusts
its own snapshot at commit time; that is what keeps it correct when several workers run the same thread.
`om_workers` and `om_api` call these methods and add nothing to OM's behaviour.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import select

from om_core.config import request_choice
from om_core.config.options import ResolvedConfig
from om_core.engine import (
    activation,
    buffering,
    erase,
    extraction,
    log_edit,
    manual,
    observation,
    reflection,
    reflection_buffer,
    resource_observation,
    resource_search,
    turn,
    turn_reply,
)
from om_core.engine.core import Activity, EngineCore
from om_core.engine.cycle import Cycle
from om_core.engine.handlers import HANDLERS
from om_core.engine.manual import OperationOutcome
from om_core.engine.tasks import (
    BufferObservation,
    BufferReflection,
    DeliverWebhooks,
    ExtractValues,
    IndexThread,
    Observe,
    ObserveBatch,
    Reflect,
    Task,
    lookup_key,
)
from om_core.engine.turn_reply import TurnResult
from om_core.engine.turn_store import TurnInput
from om_core.messages import Message
from om_core.policy.decisions import StatusPayload
from om_core.recall import RecallNotFound, run_recall
from om_core.search import Searcher, SearchHit, SearchRequest
from om_core.search import errors as search_errors
from om_core.store import history, records, schema
from om_core.store.payloads import TriggerDetails
from om_core.store.types import Record
from om_core.tenancy.scoped_ids import StoredId, public_id
from om_core.working_memory import document as wm


class MemoryEngine(EngineCore):
    """One engine per process; stateless between calls apart from its collaborators (`EngineCore`).

    The rule: this class is the one door. The shells (om_api, om_workers, om_app) reach the engine
    through the methods defined here, and so do the behaviour tests; the use-case modules beside it, and
    `EngineCore`'s collaborators (executor, coordination, publisher) and shared reads and writes, are its
    inside, free to change shape behind these signatures. So a method here may forward in one line: it is
    the door, not a detour. A method nothing calls (the task handlers are called by `run_task`'s table)
    is removed, and a shell that needs more gets a method here rather than reaching through
    (`tests/unit/test_engine_door.py` holds the routes and the shells' imports to that). Besides these,
    the shells may read what every layer reads: `db`, `clock`, `config_for`, `thread_config`, and
    `run_task`, the entry point an executor calls."""

    handlers = HANDLERS

    # ---------------------------------------------------------------------------------- the turn

    def ingest_turn(
        self,
        thread_id: StoredId,
        resource_id: StoredId | None,
        messages: Sequence[Message],
        *,
        actor_model: str | None = None,
        step_number: int = 0,
        turn_end: bool | None = None,
        tenant_id: str | None = None,
        provider_options: Mapping[str, Any] | None = None,
        with_context: bool = True,
        memory_options: Mapping[str, Any] | None = None,
    ) -> TurnResult:
        """Store the new messages and return what the actor should see next (see `engine.turn`).
        `provider_options` are the actor call's (they set the `"auto"` idle TTL, behaviour §4.7); without
        `with_context` only the status and events come back. `memory_options` choose the models (and
        extractors) of the background work this turn starts, within what the operator allows
        (`om_core.config.request_choice`; `OMConfigError` naming the field otherwise, nothing stored)."""
        return turn.ingest_turn(
            self,
            TurnInput(
                thread_id,
                resource_id,
                list(messages),
                actor_model,
                step_number,
                turn_end,
                tenant_id,
                dict(provider_options) if provider_options else None,
                with_context,
                request_choice.normalize(memory_options) if memory_options else None,
            ),
        )

    def status(self, thread_id: StoredId, step_number: int = 0) -> StatusPayload:
        return turn_reply.current_status(self, thread_id, step_number)

    # -------------------------------------------------------------------------------- recall

    def recall(self, thread_id: StoredId, params: Mapping[str, Any]) -> dict[str, Any]:
        """Answer one call of the recall tool (behaviour §9.3–§9.4) on the active thread `thread_id` (a
        stored id), with the thread's effective retrieval settings and this engine's searcher.

        Raises `om_core.recall.RecallError`: `RecallInvalid` (a parameter to fix), `RecallNotFound` (a
        cursor or thread this thread cannot read), `RetrievalDisabled` (retrieval is off here)."""
        thread = history.get_thread(self.db, thread_id)
        if thread is None:
            raise RecallNotFound(f"thread {public_id(thread_id)!r} does not exist; post a turn first")
        cfg = self.config_for(thread.effective_overrides)
        return run_recall(
            self.db,
            thread_id,
            cfg.retrieval_options,
            params,
            count=self.counter.count_string,
            searcher=self.searcher,
        )

    # ------------------------------------------------------------- task handlers (`engine.handlers`)

    def buffer_observation(self, task: BufferObservation) -> bool:
        return buffering.buffer_observation(self, task)

    def buffer_reflection(self, task: BufferReflection) -> bool:
        return reflection_buffer.buffer_reflection(self, task)

    def observe(self, task: Observe) -> bool:
        return observation.observe(self, task)

    def observe_batch(self, task: ObserveBatch) -> bool:
        return resource_observation.observe_batch(self, task)

    def reflect(self, task: Reflect) -> bool:
        return reflection.reflect(self, task)

    def extract_values(self, task: ExtractValues) -> bool:
        """Structured extraction after a committed cycle (`engine.extraction`); True when it ran."""
        return extraction.extract_values(self, task)

    def record_dropped(self, task: Task, deliveries: int) -> bool:
        """Report a task dropped as poison (every delivery killed its worker) with its kind's failed
        event. False when the thread has no record to report on, or for indexing and webhook delivery,
        which report no events (the next request indexes the thread again; the next maintenance pass
        queues the endpoint again, its cursor unmoved)."""
        if isinstance(task, IndexThread | DeliverWebhooks):
            return False
        head = records.get_head(self.db, lookup_key(task.thread_id))
        if head is None:
            return False
        Cycle.of(self, task, head, 0).fail(
            RuntimeError(
                f"[WORKER_LOST] delivered {deliveries} times and every delivery ended with its worker "
                "process dying; dropped so it cannot loop forever"
            )
        )
        return True

    # ------------------------------------------------------------------------ triggered work

    def activate(
        self,
        thread_id: StoredId,
        *,
        pending_tokens: int | None = None,
        triggered_by: str = "threshold",
        trigger_details: TriggerDetails | None = None,
        activate_all: bool = False,
    ) -> Record | None:
        return activation.activate(
            self,
            thread_id,
            pending_tokens=pending_tokens,
            triggered_by=triggered_by,
            trigger_details=trigger_details,
            activate_all=activate_all,
        )

    def maybe_reflect(
        self, thread_id: StoredId, *, activity: Activity | None = None, now: datetime | None = None
    ) -> tuple[bool, str | None]:
        """Decide and run reflection work as a turn would, on its own (the interleaving fuzz drives it)."""
        return reflection.maybe_reflect(self, thread_id, activity=activity, now=now)

    def on_idle(
        self,
        thread_id: StoredId,
        *,
        actor_model: str | None = None,
        now: datetime | None = None,
        provider_options: Mapping[str, Any] | None = None,
    ) -> bool:
        return activation.on_idle(
            self, thread_id, actor_model=actor_model, now=now, provider_options=provider_options
        )

    # -------------------------------------------------------------------------------- search

    def searcher_for(self, cfg: ResolvedConfig) -> Searcher:
        """Search as `cfg` (a thread's or a resource's effective config) allows it: lexical, plus vectors
        when `retrieval.vector` is on. Raises `search.errors.RetrievalDisabled` when retrieval is off. (The
        recall tool's searcher, `self.searcher`, is the vector one, which it uses only with
        `retrieval.vector`.)"""
        if not cfg.retrieval:
            raise search_errors.RetrievalDisabled("this thread or resource")
        vector = cfg.retrieval_options is not None and cfg.retrieval_options.vector
        cache = self.searcher.cache if isinstance(self.searcher, Searcher) else None
        return Searcher(self.db, self.embedder if vector else None, cache)

    def resource_config(self, resource_id: StoredId) -> ResolvedConfig:
        """The resource's effective config: the service config with the resource's own overrides (what
        its threads start from before their own)."""
        with self.db.connect() as conn:
            value = conn.execute(
                select(schema.resources.c.metadata).where(schema.resources.c.id == resource_id)
            ).scalar()
        return self.config_for(history.resource_overrides(value))

    def search(self, request: SearchRequest, cfg: ResolvedConfig) -> list[SearchHit]:
        """`searcher_for(cfg)(request)`: one search of a resource under `cfg`."""
        return self.searcher_for(cfg)(request)

    def search_resource(self, request: SearchRequest) -> list[SearchHit]:
        """One search of a resource over its indexed threads: those whose own effective config has
        retrieval on, whether it was switched on in the resource's config or in each thread's
        (`resource_search`). Raises `resource_search.NothingIndexed` (a `RetrievalDisabled`) when none is."""
        with self.db.connect() as conn:
            value = conn.execute(
                select(schema.resources.c.metadata).where(schema.resources.c.id == request.resource_id)
            ).scalar()
        overrides = history.resource_overrides(value)
        return resource_search.search_resource(
            self, request, self.config_for(overrides), overrides, self.searcher_for
        )

    # ---------------------------------------------------------------------------- manual API

    def require_enabled(self, thread_id: StoredId) -> None:
        """Refuse manual work on a thread with OM off (`MemoryDisabled`), instead of a silent no-op."""
        manual.require_enabled(self, thread_id)

    def observe_now(
        self, thread_id: StoredId, *, wait: bool = True, infrastructure: tuple[type[BaseException], ...] = ()
    ) -> OperationOutcome:
        """Observe the thread's unobserved messages now (in resource scope every thread of its resource,
        in parallel batches), waiting within the blocking deadline unless `wait` is False. Raises
        `MemoryDisabled` when OM is off for the thread; a model failure is the outcome's `error`, while a
        database error, or one of the `infrastructure` types of the executor's broker, propagates."""
        manual.require_enabled(self, thread_id)
        return manual.run(
            self, manual.observation_tasks(self, thread_id), wait=wait, infrastructure=infrastructure
        )

    def reflect_now(
        self,
        thread_id: StoredId,
        prompt: str | None = None,
        *,
        wait: bool = True,
        infrastructure: tuple[type[BaseException], ...] = (),
    ) -> OperationOutcome:
        """Reflect the log the thread reads now (its resource's in resource scope), with the caller's
        guidance `prompt`; as `observe_now` otherwise."""
        manual.require_enabled(self, thread_id)
        return manual.run(
            self, [manual.reflection_task(self, thread_id, prompt)], wait=wait, infrastructure=infrastructure
        )

    def edit_observation_line(
        self, thread_id: StoredId, index: int, expected_sha256: str, text: str | None
    ) -> log_edit.LineEditResult:
        """Replace line `index` of the log the thread reads with `text`, or forget it (`text` None), as a
        new generation, if the line's SHA-256 is still `expected_sha256` (`engine.log_edit`). Raises
        `LineEditError` saying why not."""
        return log_edit.edit_line(self, thread_id, index, expected_sha256, text)

    def log_key_of(self, thread: history.ThreadRow) -> str:
        """The key of the record chain holding the log `thread` reads: its own, or its resource's in
        resource scope."""
        return self.log_key(thread.id, self.config_for(thread.effective_overrides))

    def write_working_memory(
        self,
        target: wm.Target,
        cfg: ResolvedConfig,
        content: object,
        *,
        by: wm.Author,
        expected_version: int | None = None,
        via_thread: StoredId | None = None,
    ) -> wm.WorkingMemory:
        """Replace a working memory whole (`working_memory.document.update`) and publish its event. Raises
        `WorkingMemoryInvalid` (the schema refuses it) or `WorkingMemoryConflict` (`expected_version` is
        not the stored version)."""
        memory, events = wm.update(
            self.db, target, cfg, content, expected_version=expected_version, by=by, via_thread=via_thread
        )
        self.publish(events)
        return memory

    def delete_thread(self, thread_id: StoredId) -> bool:
        """Erase a thread and everything OM keeps for it (`engine.erase`); False if it did not exist."""
        return erase.erase_thread(self, thread_id)

    def delete_resource(self, resource_id: StoredId) -> bool:
        """Erase a resource, its threads and its shared log (`engine.erase`); False if it did not exist."""
        return erase.erase_resource(self, resource_id)
