"""The Celery application of both shells: Redis broker, one queue per kind of work, delivery guarantees.

The API sends tasks through an app made here (`create_app`); the workers run `om_workers.app:app`, made
here too with the modules that register the tasks and the beat schedule.

Queues are separate so each can be scaled on its own and, above all, so a synchronous observation a chat
is waiting for (`om.observe`) never sits behind a backlog of background buffering (`om.buffer`).

Delivery is at-least-once: a task is acknowledged only after it ran (`acks_late`), a worker process that
dies mid-task puts its message back (`reject_on_worker_lost`), and each worker process reserves one
message at a time (prefetch 1) so a slow Observer call does not hold other messages hostage. Running a
task twice has the effect of running it once because the storage rules dedupe by `cycle_id`.

The broker's visibility timeout (how long an unacknowledged message stays invisible before Redis hands it
out again) must exceed the hard time limit, or a long but healthy task would be delivered a second time
while it still runs; `WorkerSettings` refuses a configuration that breaks this, and `create_app` one whose
model-call retries (the service-wide policy, `OM_MODEL_RETRY_*`) could outlast the soft time limit.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from celery import Celery
from kombu.entity import Exchange, Queue
from pydantic import BaseModel, Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from om_adapters.broker import transport_for
from om_core import Settings
from om_core.engine import MAINTENANCE_QUEUE, MAINTENANCE_TASK, QUEUES, TASKS

#: Task names as Flower shows them, and the queue each one runs on (from the engine's task table).
TASK_QUEUES: dict[str, str] = {
    **{kind.name: kind.queue for kind in TASKS},
    MAINTENANCE_TASK: MAINTENANCE_QUEUE,
}


class WorkerSettings(BaseSettings):
    """Knobs of the worker processes (env prefix `OM_WORKER_`); service settings stay in `Settings`."""

    model_config = SettingsConfigDict(env_prefix="OM_WORKER_", env_file=".env", extra="ignore")

    soft_time_limit_s: float = Field(default=540.0, gt=0, description="Task gets SoftTimeLimitExceeded")
    time_limit_s: float = Field(default=600.0, gt=0, description="Task's process is killed")
    visibility_timeout_s: float = Field(
        default=1200.0, gt=0, description="Unacked messages of a vanished worker are redelivered after this"
    )
    max_deliveries: int = Field(default=3, ge=1, description="Deliveries of one cycle before it is dropped")
    lock_lease_s: float = Field(default=15.0, gt=0, description="Redis lock TTL, renewed by a heartbeat")
    beat_interval_s: float = Field(default=5.0, gt=0, description="How often beat runs maintenance")
    idle_rebuffer_after_s: float = Field(
        default=60.0, ge=0, description="Quiet time before beat re-enqueues buffering a turn left undone"
    )
    maintenance_scan_limit: int = Field(default=500, ge=1, description="Rows per maintenance pass")
    beat_schedule_file: str | None = Field(default=None, description="celery-beat state file")
    imports: str = Field(default="", description="Extra modules every worker imports (comma-separated)")
    metrics_port: int = Field(
        default=9808, ge=0, le=65535, description="Port of the worker's Prometheus /metrics (0 = off)"
    )
    metrics_host: str = Field(
        default="127.0.0.1",
        description=(
            "Address of the worker's /metrics: loopback unless a scraper on another host needs it "
            "(the deploy manifests set 0.0.0.0 inside the pod)"
        ),
    )
    task_events: bool = Field(
        default=False,
        description="Always send Celery task events (Flower turns them on while it runs either way)",
    )

    @model_validator(mode="after")
    def _limits_are_ordered(self) -> WorkerSettings:
        if self.soft_time_limit_s >= self.time_limit_s:
            raise ValueError("OM_WORKER_SOFT_TIME_LIMIT_S must be below OM_WORKER_TIME_LIMIT_S")
        if self.visibility_timeout_s <= self.time_limit_s:
            raise ValueError(
                "OM_WORKER_VISIBILITY_TIMEOUT_S must exceed OM_WORKER_TIME_LIMIT_S, or a healthy long task "
                "is handed to a second worker while it still runs"
            )
        return self

    def import_modules(self) -> list[str]:
        return [name.strip() for name in self.imports.split(",") if name.strip()]

    def schedule_file(self) -> str:
        return self.beat_schedule_file or str(Path(tempfile.gettempdir()) / "om-celerybeat-schedule")


class TaskTimeBudget(BaseModel):
    """A task's soft time limit against the longest back-off of one model call in it. The two come from
    two settings models (worker, service), so the rule tying them is checked where both meet; a pydantic
    error, so `om worker` reports it as one line like any other bad variable."""

    soft_time_limit_s: float
    worst_case_retry_wait_s: float

    @model_validator(mode="after")
    def _retries_fit(self) -> TaskTimeBudget:
        if self.worst_case_retry_wait_s >= self.soft_time_limit_s:
            raise ValueError(
                f"OM_MODEL_RETRY_* let one model call wait up to {self.worst_case_retry_wait_s:.0f}s in "
                f"retries, not under the tasks' soft time limit of {self.soft_time_limit_s:.0f}s: lower "
                "OM_MODEL_RETRY_MAX_RETRIES or OM_MODEL_RETRY_MAX_DELAY_S, or raise "
                "OM_WORKER_SOFT_TIME_LIMIT_S"
            )
        return self


def _queues() -> list[Queue]:
    # kombu's entity classes carry no annotations.
    return [
        Queue(name, Exchange(name, type="direct"), routing_key=name)  # type: ignore[no-untyped-call]
        for name in QUEUES
    ]


def create_app(
    settings: Settings | None = None,
    worker: WorkerSettings | None = None,
    *,
    task_modules: Sequence[str] = (),
) -> Celery:
    """A Celery app configured from the environment (or the given settings).

    Producers (the API, tests) only need the broker and result backend; they send tasks by name. Workers
    load `om_workers.app:app`, made with the `task_modules` that register the tasks and the beat schedule.
    """
    settings = settings or Settings()
    worker = worker or WorkerSettings()
    TaskTimeBudget(
        soft_time_limit_s=worker.soft_time_limit_s,
        worst_case_retry_wait_s=settings.model_call_policy().worst_case_retry_wait_s(),
    )
    app = Celery("om", broker=settings.broker, backend=settings.results)
    app.conf.broker_transport = transport_for(settings.broker)
    transport: dict[str, Any] = {"visibility_timeout": worker.visibility_timeout_s}
    app.conf.update(
        task_queues=_queues(),
        task_default_queue=MAINTENANCE_QUEUE,
        task_default_exchange=MAINTENANCE_QUEUE,
        task_default_routing_key=MAINTENANCE_QUEUE,
        task_routes={name: {"queue": queue, "routing_key": queue} for name, queue in TASK_QUEUES.items()},
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_acks_on_failure_or_timeout=True,
        worker_prefetch_multiplier=1,
        task_soft_time_limit=worker.soft_time_limit_s,
        task_time_limit=worker.time_limit_s,
        broker_transport_options=transport,
        result_backend_transport_options=transport,
        broker_connection_retry_on_startup=True,
        worker_cancel_long_running_tasks_on_connection_loss=True,
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        result_expires=3600,
        result_extended=True,
        # Task events cost a worker ~8 % of its CPU per buffered observation under a 64-thread backlog
        # (38 vs 35 ms; a Redis publish per event, each through a new client object in kombu). Flower
        # asks every worker to send them while it runs (every 5 s), so they are off unless something
        # is watching. No task state is tracked beyond the result (`task_track_started` is off).
        task_send_sent_event=worker.task_events,
        worker_send_task_events=worker.task_events,
        worker_hijack_root_logger=False,
        timezone="UTC",
        enable_utc=True,
        # `OM_PLUGINS` too: hooks (`om_core.hooks`) registered there run where cycles run.
        include=list(dict.fromkeys([*task_modules, *worker.import_modules(), *settings.plugin_modules()])),
        beat_schedule={
            "om-maintenance": {
                "task": MAINTENANCE_TASK,
                "schedule": worker.beat_interval_s,
                # No `expires`: each worker would judge it by its own clock, and one running ahead would
                # discard every pass. A backlog is thinned by the pass itself (`MaintenancePolicy.min_gap_s`).
                "options": {"queue": MAINTENANCE_QUEUE},
            }
        },
        beat_schedule_filename=worker.schedule_file(),
    )
    return app
