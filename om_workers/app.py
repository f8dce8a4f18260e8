"""The workers' Celery application (`celery -A om_workers.app:app`, as the deploy manifests name it).

It is the app both shells share (`om_adapters.celery_app`), with the modules that register the workers'
tasks and beat's schedule entry.
"""

from __future__ import annotations

from om_adapters.celery_app import create_app

#: Loaded by every worker and by beat: one Celery task per kind of work, and the maintenance task.
TASK_MODULES = ("om_workers.tasks", "om_workers.beat")

app = create_app(task_modules=TASK_MODULES)
