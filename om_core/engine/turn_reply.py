"""What a turn returns: its status event, then the actor's context (observation log, hints, working
memory, recall guidance) and tools, from one consistent read of the thread."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from om_core.config.options import ResolvedConfig
from om_core.context.actor import ActorContext, build_actor_context
from om_core.engine import events as ev
from om_core.engine import extraction, shared_view
from om_core.engine.core import EngineCore
from om_core.engine.tasks import lookup_key
from om_core.engine.tool_pairs import with_observed_calls
from om_core.engine.turn_store import Stored
from om_core.engine.window import Window, build_window
from om_core.messages import Message
from om_core.policy import decisions
from om_core.policy.decisions import StatusPayload
from om_core.recall.tool import RECALL_TOOL, recall_guidance
from om_core.store import history, records
from om_core.store.db import single_write
from om_core.store.outbox import write_events
from om_core.store.types import NewEvent, Record, StoredEvent
from om_core.tenancy.scoped_ids import PublicId, StoredId, public_id
from om_core.working_memory import document as wm

#: The resource id of a result that names none (the default; every turn sets it).
NO_RESOURCE = PublicId("")


@dataclass(frozen=True)
class TurnResult:
    """What the actor sees next. Ids are public: the ones the caller's tenant chose (`scoped_ids`)."""

    thread_id: PublicId
    record_id: str
    system_messages: list[str]
    messages: list[Message]
    continuation_reminder: str
    status: StatusPayload
    events: list[StoredEvent]
    blocked: bool = False
    degraded: bool = False
    degraded_reason: str | None = None
    context: ActorContext = field(default_factory=ActorContext)
    resource_id: PublicId = NO_RESOURCE
    #: Tools the actor should be offered, in the chat-completions format: the recall tool when the
    #: thread has `retrieval` on (behaviour §9.2), `updateWorkingMemory` when the actor manages its working
    #: memory (§8.7), else none. Shared values: read, do not modify.
    tools: list[dict[str, Any]] = field(default_factory=list)
    #: False when the caller asked for no context: the fields above that make it up are empty.
    with_context: bool = True


class Current(NamedTuple):
    """What a turn returns, as of one consistent read."""

    head: Record
    window: Window
    thread: history.ThreadRow
    messages: list[Message]
    shared: shared_view.SharedView


def disabled_turn(
    core: EngineCore,
    thread_id: StoredId,
    cfg: ResolvedConfig,
    stored: Stored,
    step_number: int,
    with_context: bool,
) -> TurnResult:
    """A turn with OM off: the messages are stored (storage is the source of truth) and nothing else
    happens: no model call, no background work, no change to the record or the thread's hints, no
    idle trigger, no event. The cursor stays where it was, so turning OM on later observes the
    backlog by the normal policy. The status reports the record as it stands and the context's
    message tokens."""
    status = shared_view.status_with(core, stored.head, stored.window, cfg, stored.shared)
    return TurnResult(
        thread_id=public_id(thread_id),
        resource_id=public_id(stored.thread.resource_id),
        record_id=stored.head.id,
        system_messages=[],
        messages=[m for m in stored.messages if m.has_visible_content],
        continuation_reminder="",
        status=status.to_status_payload(stored.head.id, thread_id, step_number, stored.head.generation_count),
        events=[],
        with_context=with_context,
    )


def read_current(
    core: EngineCore, thread_id: StoredId, cfg: ResolvedConfig, *, bodies: bool = True
) -> Current:
    """Head, window, unobserved messages (none without `bodies`) and shared memory as committed now
    (after work that changed them)."""
    with core.db.connect() as conn:
        head = records.read_head(conn, lookup_key(thread_id))
        thread = history.get_thread(conn, thread_id)
        assert head is not None and thread is not None, "the turn created both"
        head, unobserved, shared = shared_view.read_consistent(
            core,
            conn,
            thread,
            head,
            cfg,
            lambda current: history.read_unobserved(
                conn,
                thread_id,
                current.last_observed_seq,
                known=lambda seq: core.cached_part(thread, seq),
                bodies=bodies,
                held=core.held_window(thread, current.last_observed_seq),
            ),
        )
    core.remember_parts(thread, unobserved, {})
    window = build_window(unobserved.rows, core.counter)
    return Current(head, window, thread, unobserved.messages, shared)


def current_status(core: EngineCore, thread_id: StoredId, step_number: int = 0) -> StatusPayload:
    """The thread's status as committed now, as its next turn would compute it. KeyError when the
    thread has no record yet."""
    cfg = core.thread_config(thread_id)
    if records.get_head(core.db, lookup_key(thread_id)) is None:
        raise KeyError(thread_id)
    head, window, _thread, _messages, shared = read_current(core, thread_id, cfg, bodies=False)
    log = shared.log
    status = shared_view.status_with(core, head, window, cfg, shared)
    return status.to_status_payload(log.id, thread_id, step_number, log.generation_count)


def turn_result(
    core: EngineCore,
    thread_id: StoredId,
    cfg: ResolvedConfig,
    step_number: int,
    blocked: bool,
    degraded_reason: str | None,
    sink: list[StoredEvent],
    *,
    current: Current | None,
    status: decisions.Status | None = None,
    with_context: bool = True,
) -> TurnResult:
    """Write the turn's status event and build what the actor sees from one consistent read (only the
    status and events `with_context` False)."""
    head, window, thread, unobserved, shared = current or read_current(
        core, thread_id, cfg, bodies=with_context
    )
    status = status or shared_view.status_with(core, head, window, cfg, shared)
    log = shared.log
    payload = status.to_status_payload(log.id, thread_id, step_number, log.generation_count)
    memory: wm.WorkingMemory | None = None
    with single_write(core.db) as conn:  # one INSERT, and a read that need not be consistent with it
        stored = write_events(
            conn,
            lookup_key=lookup_key(thread_id),
            thread_id=thread_id,
            resource_id=head.resource_id,
            record_id=log.id,
            events=[NewEvent(ev.STATUS.value, dict(payload))],
        )
        if cfg.working_memory.enabled:  # one primary-key read, only for threads that have one
            memory = wm.read_at(conn, wm.target_for_thread(thread, cfg), cfg)
    core.publish(stored)
    bare = TurnResult(
        thread_id=public_id(thread_id),
        resource_id=public_id(thread.resource_id),
        record_id=log.id,
        system_messages=[],
        messages=[],
        continuation_reminder="",
        status=payload,
        events=list(sink),
        blocked=blocked,
        degraded=degraded_reason is not None,
        degraded_reason=degraded_reason,
        with_context=False,
    )
    if not with_context:
        return bare
    visible = with_observed_calls(
        core, thread_id, head.last_observed_seq, [m for m in unobserved if m.has_visible_content]
    )
    options = cfg.retrieval_options
    guidance = (
        recall_guidance(options.scope, options.vector and core.searcher is not None, options.instructions)
        if options is not None
        else None
    )
    context = actor_context(
        core,
        thread,
        log,
        has_unobserved=bool(visible),
        others=shared.others,
        retrieval_guidance=guidance,
        guidance_without_memory=options is not None and options.scope == "resource",
        memory=memory,
        cfg=cfg,
    )
    tools = [RECALL_TOOL] if options is not None else []
    if memory is not None and cfg.working_memory.agent_managed:
        tools.append(wm.update_tool(cfg.working_memory))
    return replace(
        bare,
        system_messages=list(context.system_messages),
        messages=visible,
        continuation_reminder=context.continuation_reminder,
        context=context,
        tools=tools,
        with_context=True,
    )


def actor_context(
    core: EngineCore,
    thread: history.ThreadRow | None,
    log: Record,
    *,
    has_unobserved: bool,
    others: str = "",
    retrieval_guidance: str | None = None,
    guidance_without_memory: bool = False,
    memory: wm.WorkingMemory | None = None,
    cfg: ResolvedConfig | None = None,
) -> ActorContext:
    """The observation log, the other conversations (resource scope) and the thread's hints as the
    actor's system messages; in retrieval mode the recall guidance with the preamble (behaviour §4.11); the
    working memory (`memory`, with the `cfg` it was read under) after the stable prefix (§8.7). Values of
    extractors marked `context: true` follow the built-in hints, in the volatile part, so a new value
    never changes the stable prefix."""
    meta = thread.om_metadata if thread is not None else {}
    extra = (
        extraction.context_values(core.config_for(thread.effective_overrides), thread)
        if thread is not None
        else {}
    )
    shown = wm.actor_messages(memory, cfg.working_memory) if memory is not None and cfg is not None else []
    return build_actor_context(
        active_observations=log.active_observations,
        extra_values=extra,
        other_conversations=others or None,
        current_task=meta.get("currentTask"),
        suggested_response=meta.get("suggestedResponse"),
        now=core.clock(),
        tz=core.settings.timezone,
        has_unobserved_history=has_unobserved,
        rendered_logs=core.rendered_logs,
        retrieval_guidance=retrieval_guidance,
        guidance_without_memory=guidance_without_memory,
        working_memory=shown,
        working_memory_as_signal=cfg is not None and cfg.working_memory.use_state_signals,
    )
