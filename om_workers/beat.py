"""The Celery shell of periodic maintenance (`om.maintenance`, scheduled by celery-beat every
`OM_WORKER_BEAT_INTERVAL_S`). What a pass does, and why it is safe to repeat, is `om_core.maintenance.sweep`.

The schedule entry itself lives in `om_adapters.celery_app.create_app` (the app owns its configuration).
"""

from __future__ import annotations

from typing import Any

from om_adapters.celery_app import WorkerSettings
from om_core import MaintenancePolicy, run_maintenance
from om_core.engine import MAINTENANCE_TASK
from om_workers.app import app
from om_workers.tasks import worker_runtime


def maintenance_policy(worker: WorkerSettings) -> MaintenancePolicy:
    """Passes closer than half an interval skip: beat's normal cadence always runs, while a backlog left
    by a time without maintenance workers drains at one Redis read per queued pass."""
    return MaintenancePolicy(
        scan_limit=worker.maintenance_scan_limit,
        rebuffer_after_s=worker.idle_rebuffer_after_s,
        lock_ttl_s=worker.soft_time_limit_s,
        min_gap_s=worker.beat_interval_s / 2,
    )


def maintenance() -> dict[str, Any]:
    runtime = worker_runtime()
    return run_maintenance(runtime.engine, maintenance_policy(runtime.settings)).as_dict()


app.task(name=MAINTENANCE_TASK)(maintenance)


__all__ = ["maintenance", "maintenance_policy"]
