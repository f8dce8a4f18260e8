"""Python hooks (behaviour §10.3) and debug events (§10.4): an application's callbacks on every cycle.

Hooks are dispatched from the events each cycle writes, after they committed (`EngineCore.publish`), so
there is one call site for every kind of cycle and a hook never sees work that was rolled back. They run
on one dispatcher thread per process, in the order the events were written: a cycle (and the locks it
holds) never waits for a hook, and a hook that raises is logged and forgotten; it never fails a cycle. A
process runs the hooks of the cycles it ran: a Celery worker for queued work, the API for inline work, so
every process that runs cycles must load the module registering them (`OM_PLUGINS`).

Register with `register_hooks(MyHooks())` from a plugin module: such hooks see every tenant's cycles.
`register_hooks(MyHooks(), tenants={"acme"})` serves only the tenants listed: they see the cycles of those
tenants' threads and resources, nothing of any other tenant (the tenant of an event is that of its stored
thread or record id, `om_core.tenancy.scoped_ids.tenant_of`). Without tenancy only hooks for every tenant run.

`trigger` is `manual` (the observe and reflect endpoints), `turn-sync` (blocking work a turn launched) or
`async-buffer` (buffering, and the background run of a backlog). End hooks get the cycle's usage, cost and
model; a failed cycle's end hook gets `error` (buffering failures included: they never raise).
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, cast

from om_core.store.payloads import LifecycleFields, lifecycle_fields
from om_core.store.types import StoredEvent
from om_core.tenancy.registrations import Audience, Tenants, audience, serves
from om_core.tenancy.scoped_ids import PublicId, StoredId, public_id, tenant_of

log = logging.getLogger("om.hooks")

HookTrigger = Literal["manual", "turn-sync", "async-buffer"]
#: A stored thread id → its stored resource id (None when the thread is gone).
ResourceOf = Callable[[StoredId], StoredId | None]

#: The trigger of the task the current thread runs (`EngineCore.run_task` sets it).
CURRENT_TRIGGER: ContextVar[str | None] = ContextVar("om_hook_trigger", default=None)

_START = {"data-om-observation-start", "data-om-buffering-start"}
_END = {"data-om-observation-end", "data-om-buffering-end"}
_FAILED = {"data-om-observation-failed", "data-om-buffering-failed"}
_BUFFERED = {"data-om-buffering-start", "data-om-buffering-end", "data-om-buffering-failed"}
_STATUS = "data-om-status"
#: The pseudo-trigger of `HookDispatcher.drain`'s marker.
DRAIN = "__drain__"


@dataclass(frozen=True)
class HookContext:
    """What a hook receives (§10.3 `ctx`). `usage`, `cost`, `model` and `error` are set on end hooks only;
    `provider_metadata` carries litellm's per-call cost where a provider reported one (else None)."""

    thread_id: PublicId | None
    resource_id: PublicId | None
    trigger: HookTrigger
    cycle_id: str | None
    operation: Literal["observation", "reflection"]
    usage: dict[str, int] | None = None
    cost: float | None = None
    model: str | None = None
    error: str | None = None
    provider_metadata: dict[str, Any] | None = None
    #: The event's payload as written (public ids), for anything the fields above leave out.
    event: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class DebugEvent:
    """One §10.4 debug event: `type` is `observation_triggered`, `observation_complete`,
    `reflection_triggered`, `reflection_complete` or `step_progress`; `data` holds its fields."""

    type: str
    timestamp: datetime
    thread_id: PublicId | None
    resource_id: PublicId | None
    data: dict[str, Any]


class ObserveHooks:
    """Override the callbacks you need; the defaults do nothing. Called on the dispatcher thread."""

    def on_observation_start(self, ctx: HookContext) -> None:
        """An observation cycle (blocking or buffered) started."""

    def on_observation_end(self, ctx: HookContext) -> None:
        """An observation cycle ended; `ctx.error` is set when it failed."""

    def on_reflection_start(self, ctx: HookContext) -> None:
        """A reflection cycle (blocking or buffered) started."""

    def on_reflection_end(self, ctx: HookContext) -> None:
        """A reflection cycle ended; `ctx.usage` sums every Reflector attempt of the ladder."""

    def on_debug_event(self, event: DebugEvent) -> None:
        """A §10.4 debug event."""


_registered: list[tuple[ObserveHooks, Audience]] = []
_registry_guard = threading.Lock()


def register_hooks(hooks: ObserveHooks, *, tenants: Tenants = None) -> None:
    """Add `hooks` to every engine of this process (call it from a plugin module, at import), for the
    cycles of `tenants` (None: every tenant's)."""
    scope = audience(tenants)
    with _registry_guard:
        _registered.append((hooks, scope))


def unregister_hooks(hooks: ObserveHooks) -> None:
    """Remove every registration of `hooks`."""
    with _registry_guard:
        _registered[:] = [(h, scope) for h, scope in _registered if h is not hooks]


def registered_hooks() -> tuple[ObserveHooks, ...]:
    """Every registered hooks object, whichever tenants it serves."""
    with _registry_guard:
        return tuple(h for h, _ in _registered)


def hooks_for(tenant: str | None) -> tuple[ObserveHooks, ...]:
    """The hooks that see `tenant`'s cycles (None: no tenancy, hooks for every tenant only)."""
    with _registry_guard:
        return tuple(h for h, scope in _registered if serves(scope, tenant))


def event_tenant(event: StoredEvent) -> str | None:
    """The tenant whose cycle wrote `event`: from its stored thread id, else from its record chain's key
    (`thread:<stored id>` or `resource:<stored id>`: a resource's shared log)."""
    if event.thread_id is not None:
        return tenant_of(event.thread_id)
    return tenant_of(StoredId(event.lookup_key.partition(":")[2]))


def hook_trigger(event_type: str, task_trigger: str | None) -> HookTrigger:
    """Buffering is `async-buffer`; so is a backlog's background run; blocking work is the task's own."""
    if event_type in _BUFFERED or task_trigger in ("async-buffer", "backlog"):
        return "async-buffer"
    return "manual" if task_trigger == "manual" else "turn-sync"


def _operation(payload: LifecycleFields) -> Literal["observation", "reflection"]:
    return "reflection" if payload.get("operationType") == "reflection" else "observation"


def _public(value: object) -> PublicId | None:
    return PublicId(str(value)) if value is not None else None


def _text(value: object) -> str | None:
    return str(value) if value is not None else None


def calls_for(
    event: StoredEvent, trigger: HookTrigger, resource_id: PublicId | None, now: datetime
) -> list[tuple[str, HookContext | DebugEvent]]:
    """(method name, argument) of every hook call one event makes, in order: the lifecycle hook, then
    its debug event."""
    payload = lifecycle_fields(event.payload)
    thread = _public(payload.get("threadId"))
    calls: list[tuple[str, HookContext | DebugEvent]] = []
    if event.type == _STATUS:
        active = event.payload.get("windows", {}).get("active", {}).get("messages", {})
        pending, threshold = int(active.get("tokens", 0)), int(active.get("threshold", 0))
        data = {
            "stepNumber": event.payload.get("stepNumber", 0),
            "pendingTokens": pending,
            "threshold": threshold,
            "thresholdPercent": round(pending / threshold * 100) if threshold else 0,
            # A turn always stores its messages before it decides anything.
            "willSave": True,
            "willObserve": threshold > 0 and pending >= threshold,
        }
        calls.append(("on_debug_event", DebugEvent("step_progress", now, thread, resource_id, data)))
        return calls
    if event.type not in _START | _END | _FAILED:
        return calls
    operation = _operation(payload)
    base = HookContext(thread, resource_id, trigger, event.cycle_id, operation, event=payload)
    if event.type in _START:
        calls.append((f"on_{operation}_start", base))
        tokens = payload.get("tokensToObserve", payload.get("tokensToBuffer", 0))
        if operation == "observation":
            data = {"cycleId": event.cycle_id, "trigger": trigger, "tokensToObserve": tokens}
        else:
            data = {"cycleId": event.cycle_id, "trigger": trigger, "inputTokens": tokens}
        calls.append(("on_debug_event", DebugEvent(f"{operation}_triggered", now, thread, resource_id, data)))
        return calls
    usage = payload.get("usage") if isinstance(payload.get("usage"), Mapping) else None
    cost = payload.get("cost")
    ended = HookContext(
        thread,
        resource_id,
        trigger,
        event.cycle_id,
        operation,
        usage=dict(cast(Mapping[str, int], usage)) if usage is not None else None,
        cost=float(cost) if isinstance(cost, int | float) else None,
        model=_text(payload.get("model")),
        error=str(payload.get("error")) if event.type in _FAILED else None,
        provider_metadata={"cost": float(cost)} if isinstance(cost, int | float) else None,
        event=payload,
    )
    calls.append((f"on_{operation}_end", ended))
    if event.type in _END:
        data = {
            "cycleId": event.cycle_id,
            "trigger": trigger,
            "observations": payload.get("observations"),
            "usage": ended.usage,
            "inputTokens": (ended.usage or {}).get("inputTokens", 0),
            "outputTokens": (ended.usage or {}).get("outputTokens", 0),
        }
        calls.append(("on_debug_event", DebugEvent(f"{operation}_complete", now, thread, resource_id, data)))
    return calls


class HookDispatcher:
    """One thread per process calling the registered hooks with what cycles wrote, in order.

    `submit` never blocks: past `capacity` waiting batches it drops the batch and logs it (a hook that
    stalls must not grow memory without bound). The thread is started on first use and again in a forked
    child (a Celery pool process inherits no thread)."""

    def __init__(self, capacity: int = 10_000) -> None:
        self._queue: queue.Queue[tuple[list[StoredEvent], str | None, ResourceOf | None] | None] = (
            queue.Queue(capacity)
        )
        self._pid: int | None = None
        self._guard = threading.Lock()
        self._resources: dict[StoredId, StoredId | None] = {}
        self._drained: dict[int, threading.Event] = {}

    def submit(
        self, events: Sequence[StoredEvent], trigger: str | None, resource_of: ResourceOf | None
    ) -> None:
        """Queue `events` for the hooks (nothing when no hooks are registered). `resource_of` maps a stored
        thread id to its stored resource id; it runs on the dispatcher thread, never on the caller's."""
        if not _registered or not events:
            return
        self._ensure_thread()
        try:
            self._queue.put_nowait((list(events), trigger, resource_of))
        except queue.Full:
            log.error("hook queue full: %d events not passed to hooks", len(events))

    def drain(self, timeout_s: float = 10.0) -> bool:
        """Wait until every event submitted so far went through the hooks (tests); False on timeout."""
        if self._pid != os.getpid():
            return True
        marker: list[StoredEvent] = []
        done = threading.Event()
        self._drained[id(marker)] = done
        try:
            self._queue.put((marker, DRAIN, None), timeout=timeout_s)
        except queue.Full:
            self._drained.pop(id(marker), None)
            return False
        return done.wait(timeout_s)

    def _ensure_thread(self) -> None:
        with self._guard:
            if self._pid == os.getpid():
                return
            self._pid = os.getpid()
            self._queue = queue.Queue(self._queue.maxsize)
            threading.Thread(target=self._loop, name="om-hooks", daemon=True).start()

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            events, trigger, resource_of = item
            if trigger == DRAIN:
                waiter = self._drained.pop(id(events), None)
                if waiter is not None:
                    waiter.set()
                continue
            for event in events:
                self._dispatch(event, trigger, resource_of)

    def _resource(self, event: StoredEvent, resource_of: ResourceOf | None) -> StoredId | None:
        if event.thread_id is None or resource_of is None:
            return None
        if event.thread_id not in self._resources:
            if len(self._resources) > 10_000:
                self._resources.clear()
            try:
                self._resources[event.thread_id] = resource_of(event.thread_id)
            except Exception:
                log.exception("hooks: no resource id for thread %s", event.thread_id)
                return None
        return self._resources[event.thread_id]

    def _dispatch(self, event: StoredEvent, task_trigger: str | None, resource_of: ResourceOf | None) -> None:
        audience_hooks = hooks_for(event_tenant(event))
        if not audience_hooks:
            return
        trigger = hook_trigger(event.type, task_trigger)
        stored_resource = self._resource(event, resource_of)
        public_resource = public_id(stored_resource) if stored_resource else None
        for name, argument in calls_for(event, trigger, public_resource, datetime.now(UTC)):
            for hooks in audience_hooks:
                try:
                    getattr(hooks, name)(argument)
                except Exception:
                    # §10.3: a hook's exception is logged and never fails the cycle.
                    log.exception("hook %s.%s raised; ignored", type(hooks).__name__, name)


#: The process's dispatcher (every engine of the process shares it, like the registry).
DISPATCHER = HookDispatcher()


__all__ = [
    "CURRENT_TRIGGER",
    "DISPATCHER",
    "DebugEvent",
    "HookContext",
    "HookDispatcher",
    "HookTrigger",
    "ObserveHooks",
    "calls_for",
    "event_tenant",
    "hook_trigger",
    "hooks_for",
    "register_hooks",
    "registered_hooks",
    "unregister_hooks",
]
