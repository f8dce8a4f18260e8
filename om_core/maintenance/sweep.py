"""Periodic maintenance: one pass fires due idle triggers, clears stale flags and re-buffers stalled windows.

celery-beat schedules a pass every `OM_WORKER_BEAT_INTERVAL_S` (`om_workers.beat` is its Celery shell).
Every step is safe to repeat and safe with two beats running by mistake:

1. **Due triggers.** The engine arms an `idle` trigger row on every turn when `activateAfterIdle` is set;
   `claim_due` hands each due row to exactly one caller (one conditional UPDATE), and the engine's
   `on_idle` re-checks the TTL against the thread's stored activity before activating anything, so a
   thread that became busy again is left alone (and one whose OM was switched off, `enabled: false`).
2. **Stale flags.** The durable `is_*` flags are hints (behaviour §3.6): a flag whose operation holds no lock
   in Redis belongs to a worker that died; it is cleared.
3. **Stalled buffering.** A quiet thread whose unbuffered window is past the buffering interval with no
   buffering running (its task failed, or was dropped as poison) gets a fresh buffering task. Each
   thread is looked at once per stored content (remembered by its last sequence number), so the pass
   stays cheap with many threads and a model that keeps failing does not turn into a loop.
4. **Search stragglers and webhooks** get their background tasks queued (`engine.indexing`,
   `queue_webhooks`).
5. **Usage deltas** are folded into the tenants' totals (`store.usage`): the pass is their only writer,
   so no cycle's commit waits on a tenant-wide row.

**One clock.** "Now" comes from the coordination store (Redis `TIME` in a fleet), never from the clock of
the worker that happens to run the pass: a worker whose clock ran ahead would fire triggers before their
TTL, one behind would never fire them. For the same reason a backlog of passes (beat kept scheduling while
no maintenance worker ran) is thinned by a marker that expires in the store (`min_gap_s`), not by a
message expiry each worker would judge by its own clock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import or_, select

from om_core.coordination import Keys
from om_core.engine import BufferObservation, DeliverWebhooks, MemoryEngine, indexing, new_cycle_id
from om_core.engine.tasks import webhook_key
from om_core.maintenance.triggers import IDLE, STALE, claim_due
from om_core.store import records, schema, usage
from om_core.tenancy.scoped_ids import StoredId
from om_core.webhooks import store as webhook_store

log = logging.getLogger("om.maintenance")

MAINTENANCE_LOCK = "om:lock:maintenance"
#: Set for `min_gap_s` when a pass starts; a pass that finds it skips (a backlog drains at one read each).
RECENT_PASS = "om:maint:recent-pass"
#: Threads quiet for longer than this are not scanned for stalled buffering any more.
REBUFFER_WINDOW_S = 24 * 3600
#: How long a queued endpoint is not queued again when its run never starts (a lost message).
WEBHOOK_QUEUED_TTL_S = 120.0

#: Which lock proves that the operation behind a flag is still running.
FLAG_LOCKS: dict[str, Callable[[str], str]] = {
    "is_buffering_observation": Keys.buffer_lock,
    "is_observing": Keys.observe_lock,
    "is_reflecting": Keys.reflect_lock,
    "is_buffering_reflection": Keys.buffered_reflection_lock,
}


def rebuffer_marker(key: str) -> str:
    return f"om:maint:rebuffer:{key}"


@dataclass(frozen=True)
class MaintenancePolicy:
    """How much one pass does and how passes space out."""

    scan_limit: int = 500
    #: A window this long quiet, past the buffering interval and not buffered, gets a buffering task.
    rebuffer_after_s: float = 60.0
    #: How long the pass's lock lives if its worker dies mid-pass.
    lock_ttl_s: float = 540.0
    #: Passes closer together than this skip (0: every pass runs, as a direct call expects).
    min_gap_s: float = 0.0


@dataclass
class MaintenanceReport:
    triggers_claimed: int = 0
    activated: list[str] = field(default_factory=list)
    flags_cleared: list[tuple[str, str]] = field(default_factory=list)
    rebuffered: list[str] = field(default_factory=list)
    reindexed: list[StoredId] = field(default_factory=list)
    webhooks: list[str] = field(default_factory=list)
    #: Usage deltas folded into the tenants' totals (`store.usage.fold_tenant_deltas`).
    usage_folded: int = 0
    skipped: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "triggersClaimed": self.triggers_claimed,
            "activated": self.activated,
            "flagsCleared": [list(item) for item in self.flags_cleared],
            "rebuffered": self.rebuffered,
            "reindexed": self.reindexed,
            "webhooks": self.webhooks,
            "usageFolded": self.usage_folded,
            "skipped": self.skipped,
        }


def run_maintenance(
    engine: MemoryEngine, policy: MaintenancePolicy, *, now: datetime | None = None
) -> MaintenanceReport:
    """One maintenance pass. A pass while another runs (two beats), or within `min_gap_s` of the last
    one, skips instead of doing the work again."""
    coordination = engine.coordination
    report = MaintenanceReport()
    token = coordination.try_lock(MAINTENANCE_LOCK, policy.lock_ttl_s)
    if token is None:
        report.skipped = True
        return report
    try:
        if policy.min_gap_s > 0:
            if coordination.get_int(RECENT_PASS) is not None:
                report.skipped = True
                return report
            coordination.set_int(RECENT_PASS, 1, ttl_s=policy.min_gap_s)
        moment = now or coordination.now()
        fire_due_triggers(engine, report, now=moment, limit=policy.scan_limit)
        clear_stale_flags(engine, report, limit=policy.scan_limit)
        rebuffer_stalled(engine, report, now=moment, quiet_s=policy.rebuffer_after_s, limit=policy.scan_limit)
        report.reindexed = indexing.index_stragglers(engine, now=moment, limit=policy.scan_limit)
        report.webhooks = queue_webhooks(engine, now=moment, limit=policy.scan_limit)
        report.usage_folded = usage.fold_tenant_deltas(engine.db)
    finally:
        coordination.release(MAINTENANCE_LOCK, token)
    if report.activated or report.flags_cleared or report.rebuffered or report.reindexed or report.webhooks:
        log.info("maintenance: %s", report.as_dict())
    return report


def queue_webhooks(engine: MemoryEngine, *, now: datetime, limit: int) -> list[str]:
    """Queue a delivery run (`DeliverWebhooks`, queue `om.webhook`) for each endpoint with events past its
    cursor and no backoff pending. The only place delivery is started from (apart from a run handing over
    to the next): a turn never reads or calls an endpoint. An endpoint already queued (its marker, cleared
    when its run starts) or running (its lock) is not queued again."""
    queued: list[str] = []
    for endpoint in webhook_store.due(engine.db, now, limit):
        key = webhook_key(endpoint.id)
        marker = Keys.webhook_queued(key)
        if engine.coordination.is_locked(Keys.webhook_lock(key)) or engine.coordination.get_int(marker):
            continue
        engine.coordination.set_int(marker, 1, ttl_s=WEBHOOK_QUEUED_TTL_S)
        try:
            engine.executor.submit(DeliverWebhooks(endpoint.id, new_cycle_id("webhook")))
        except Exception:
            engine.coordination.set_int(marker, None)
            log.exception("webhook %s: delivery could not be queued; the next pass tries again", endpoint.id)
            continue
        queued.append(endpoint.id)
    return queued


def fire_due_triggers(engine: MemoryEngine, report: MaintenanceReport, *, now: datetime, limit: int) -> None:
    for trigger in claim_due(engine.db, now=now, limit=limit):
        report.triggers_claimed += 1
        if trigger.thread_id is None or trigger.kind not in (IDLE, STALE):
            continue
        actor_model = trigger.payload.get("actorModel")
        options = trigger.payload.get("providerOptions")
        try:
            if engine.on_idle(
                trigger.thread_id,
                actor_model=actor_model if isinstance(actor_model, str) else None,
                now=now,
                provider_options=options if isinstance(options, dict) else None,
            ):
                report.activated.append(trigger.thread_id)
        except Exception:  # one thread's failure must not stop the pass; its next turn re-arms the trigger
            log.exception("idle check of thread %s failed", trigger.thread_id)


def clear_stale_flags(engine: MemoryEngine, report: MaintenanceReport, *, limit: int) -> None:
    R = schema.records
    flag_columns = [R.c[name] for name in FLAG_LOCKS]
    query = (
        select(R.c.id, R.c.lookup_key, *flag_columns)
        .where(R.c.superseded_by.is_(None), or_(*[column.is_(True) for column in flag_columns]))
        .limit(limit)
    )
    with engine.db.connect() as conn:
        rows = conn.execute(query).mappings().all()
    for row in rows:
        for flag, lock in FLAG_LOCKS.items():
            if row[flag] and not engine.coordination.is_locked(lock(row["lookup_key"])):
                with engine.db.begin() as conn:
                    records.set_flag(conn, row["id"], flag, False, redirect=False)
                report.flags_cleared.append((row["lookup_key"], flag))


def rebuffer_stalled(
    engine: MemoryEngine, report: MaintenanceReport, *, now: datetime, quiet_s: float, limit: int
) -> None:
    T, R = schema.threads, schema.records
    coordination = engine.coordination
    query = (
        select(T.c.id, T.c.last_seq, R.c.lookup_key)
        .join(R, R.c.lookup_key == "thread:" + T.c.id)
        .where(
            R.c.superseded_by.is_(None),
            T.c.last_seq > R.c.last_buffered_seq,
            T.c.last_seq > R.c.last_observed_seq,
            T.c.updated_at <= now - timedelta(seconds=quiet_s),
            T.c.updated_at >= now - timedelta(seconds=REBUFFER_WINDOW_S),
        )
        .order_by(T.c.updated_at.desc())
        .limit(limit)
    )
    with engine.db.connect() as conn:
        rows = conn.execute(query).mappings().all()
    for row in rows:
        thread_id, key = row["id"], row["lookup_key"]
        cfg = engine.thread_config(thread_id)  # its resource's overrides merged with its own
        interval = cfg.observation.buffer_tokens
        if not cfg.enabled or not cfg.async_observation_enabled or not interval:
            continue  # OM off (`enabled: false`) or buffering off: nothing to re-buffer
        if coordination.is_locked(Keys.buffer_lock(key)):
            continue
        if coordination.get_int(rebuffer_marker(key)) == int(row["last_seq"]):
            continue  # this content was already looked at (and retried if it needed it)
        coordination.set_int(rebuffer_marker(key), int(row["last_seq"]), ttl_s=REBUFFER_WINDOW_S)
        status = engine.status(thread_id)["windows"]
        pending = int(status["active"]["messages"]["tokens"])
        buffered = int(status["buffered"]["observations"]["messageTokens"])
        # Under a shared budget the interval follows the threshold of the moment (§4.2).
        interval = (
            cfg.observation.buffer_tokens_at(int(status["active"]["messages"]["threshold"])) or interval
        )
        if pending - buffered < interval:
            continue
        engine.executor.submit(BufferObservation(thread_id, new_cycle_id("buffer-obs"), pending))
        report.rebuffered.append(thread_id)


__all__ = [
    "FLAG_LOCKS",
    "MAINTENANCE_LOCK",
    "RECENT_PASS",
    "MaintenancePolicy",
    "MaintenanceReport",
    "clear_stale_flags",
    "fire_due_triggers",
    "rebuffer_marker",
    "rebuffer_stalled",
    "run_maintenance",
]
