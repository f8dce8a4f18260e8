"""Periodic maintenance, scheduled by celery-beat (`om.maintenance` every `OM_WORKER_BEAT_INTERVAL_S`).

One pass does three things, each safe to repeat and safe with two beats running by mistake:

1. **Due triggers.** The engine arms an `idle` trigger row on every turn when `activateAfterIdle` is set;
   `claim_due` hands each due row to exactly one caller (one conditional UPDATE), and the engine's
   `on_idle` re-checks the TTL against the thread's stored activity before activating anything, so a
   thread that became busy again is left alone.
2. **Stale flags.** The durable `is_*` flags are hints (spec §3.6): a flag whose operation holds no lock
   in Redis belongs to a worker that died; it is cleared.
3. **Stalled buffering.** A quiet thread whose unbuffered window is past the buffering interval with no
   buffering running (its task failed, or was dropped as poison) gets a fresh buffering task. Each
   thread is looked at once per stored content (remembered by its last sequence number), so the pass
   stays cheap with many threads and a model that keeps failing does not turn into a loop.

The schedule entry itself lives in `om_workers.app.create_app` (the app owns its configuration).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import or_, select

from om_core.coordination import Coordination, Keys
from om_core.engine import BufferObservation, MemoryEngine, new_cycle_id
from om_core.store import records, schema
from om_core.triggers import IDLE, STALE, claim_due
from om_workers.app import WorkerSettings, app
from om_workers.tasks import worker_runtime

log = logging.getLogger("om.workers.beat")

MAINTENANCE_LOCK = "om:lock:maintenance"
#: Threads quiet for longer than this are not scanned for stalled buffering any more.
REBUFFER_WINDOW_S = 24 * 3600

#: Which lock proves that the operation behind a flag is still running.
FLAG_LOCKS: dict[str, Callable[[str], str]] = {
    "is_buffering_observation": Keys.buffer_lock,
    "is_observing": Keys.observe_lock,
    "is_reflecting": Keys.reflect_lock,
    "is_buffering_reflection": lambda key: Keys.buffered_reflection_lock(key),
}


def rebuffer_marker(key: str) -> str:
    return f"om:maint:rebuffer:{key}"


@dataclass
class MaintenanceReport:
    triggers_claimed: int = 0
    activated: list[str] = field(default_factory=list)
    flags_cleared: list[tuple[str, str]] = field(default_factory=list)
    rebuffered: list[str] = field(default_factory=list)
    skipped: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "triggersClaimed": self.triggers_claimed,
            "activated": self.activated,
            "flagsCleared": [list(item) for item in self.flags_cleared],
            "rebuffered": self.rebuffered,
            "skipped": self.skipped,
        }


def fire_due_triggers(engine: MemoryEngine, report: MaintenanceReport, *, now: datetime, limit: int) -> None:
    for trigger in claim_due(engine.db, now=now, limit=limit):
        report.triggers_claimed += 1
        if trigger.thread_id is None or trigger.kind not in (IDLE, STALE):
            continue
        actor_model = trigger.payload.get("actorModel")
        try:
            if engine.on_idle(
                trigger.thread_id, actor_model=actor_model if isinstance(actor_model, str) else None, now=now
            ):
                report.activated.append(trigger.thread_id)
        except Exception:  # one thread's failure must not stop the pass; its next turn re-arms the trigger
            log.exception("idle check of thread %s failed", trigger.thread_id)


def clear_stale_flags(
    engine: MemoryEngine, coordination: Coordination, report: MaintenanceReport, *, limit: int
) -> None:
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
            if row[flag] and not coordination.is_locked(lock(row["lookup_key"])):
                with engine.db.begin() as conn:
                    records.set_flag(conn, row["id"], flag, False, redirect=False)
                report.flags_cleared.append((row["lookup_key"], flag))


def rebuffer_stalled(
    engine: MemoryEngine,
    coordination: Coordination,
    report: MaintenanceReport,
    *,
    now: datetime,
    quiet_s: float,
    limit: int,
) -> None:
    T, R = schema.threads, schema.records
    query = (
        select(T.c.id, T.c.last_seq, T.c.config_overrides, R.c.lookup_key)
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
        cfg = engine.config_for(row["config_overrides"] or None)
        interval = cfg.observation.buffer_tokens
        if not cfg.async_observation_enabled or not interval:
            continue
        if coordination.is_locked(Keys.buffer_lock(key)):
            continue
        if coordination.get_int(rebuffer_marker(key)) == int(row["last_seq"]):
            continue  # this content was already looked at (and retried if it needed it)
        coordination.set_int(rebuffer_marker(key), int(row["last_seq"]), ttl_s=REBUFFER_WINDOW_S)
        status = engine.status(thread_id)["windows"]
        pending = int(status["active"]["messages"]["tokens"])
        buffered = int(status["buffered"]["observations"]["messageTokens"])
        if pending - buffered < interval:
            continue
        engine.executor.submit(BufferObservation(thread_id, new_cycle_id("buffer-obs"), pending))
        report.rebuffered.append(thread_id)


def run_maintenance(
    engine: MemoryEngine,
    coordination: Coordination,
    worker: WorkerSettings,
    *,
    now: datetime | None = None,
) -> MaintenanceReport:
    """One maintenance pass. Concurrent passes (two beats) skip instead of doing the work twice."""
    report = MaintenanceReport()
    token = coordination.try_lock(MAINTENANCE_LOCK, worker.soft_time_limit_s)
    if token is None:
        report.skipped = True
        return report
    try:
        moment = now or datetime.now(UTC)
        limit = worker.maintenance_scan_limit
        fire_due_triggers(engine, report, now=moment, limit=limit)
        clear_stale_flags(engine, coordination, report, limit=limit)
        rebuffer_stalled(
            engine, coordination, report, now=moment, quiet_s=worker.idle_rebuffer_after_s, limit=limit
        )
    finally:
        coordination.release(MAINTENANCE_LOCK, token)
    if report.activated or report.flags_cleared or report.rebuffered:
        log.info("maintenance: %s", report.as_dict())
    return report


def maintenance() -> dict[str, Any]:
    runtime = worker_runtime()
    return run_maintenance(runtime.engine, runtime.coordination, runtime.settings).as_dict()


app.task(name="om.maintenance")(maintenance)


__all__ = [
    "FLAG_LOCKS",
    "MaintenanceReport",
    "clear_stale_flags",
    "fire_due_triggers",
    "maintenance",
    "rebuffer_stalled",
    "run_maintenance",
]
