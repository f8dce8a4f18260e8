"""How the Celery app is configured and how task values are routed: delivery guarantees, queues, limits,
the executor contract, and Flower against the broker."""

from __future__ import annotations

import os
import pickle
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from celery.exceptions import TimeoutError as ResultTimeout
from pydantic import ValidationError

from om_adapters.celery_app import TASK_QUEUES, WorkerSettings, create_app
from om_adapters.celery_executor import SENT_AT_HEADER, CeleryExecutor, WorkerExecutor
from om_core.config.settings import Settings
from om_core.engine import (
    QUEUES,
    BufferObservation,
    BufferReflection,
    Observe,
    Reflect,
    Task,
    kind_of,
    task_from_dict,
)
from om_core.errors import OperationFailed
from om_workers.cli import worker_argv
from tests.support.workers import REPO, redis_db_url, wait_until


@pytest.mark.parametrize(
    ("knobs", "problem"),
    [
        ({"soft_time_limit_s": 600, "time_limit_s": 600}, "SOFT_TIME_LIMIT"),
        ({"time_limit_s": 600, "visibility_timeout_s": 600}, "VISIBILITY_TIMEOUT"),
    ],
)
def test_worker_settings_refuse_limits_that_break_delivery(knobs: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValidationError, match=problem):
        WorkerSettings(**knobs)


def test_a_worker_app_refuses_model_retries_that_outlast_its_tasks() -> None:
    """The retry policy is service-wide (OM_MODEL_RETRY_*), the time limit a worker's: checked where both
    meet, as a pydantic error so `om worker` prints it as one line."""
    patient = Settings(
        redis_url="redis://127.0.0.1:1/0", model_retry_base_delay_s=60, model_retry_max_delay_s=600
    )
    with pytest.raises(ValidationError, match=r"OM_MODEL_RETRY_\* let one model call wait up to \d+s"):
        create_app(patient, WorkerSettings())
    create_app(
        patient, WorkerSettings(soft_time_limit_s=20_000, time_limit_s=20_001, visibility_timeout_s=40_003)
    )


def test_the_default_limits_nest() -> None:
    worker = WorkerSettings()
    retries = Settings(_env_file=None).model_call_policy().worst_case_retry_wait_s()
    # Every model-retry backoff fits in the soft limit, which fits in the hard one, which is well inside
    # the broker's visibility timeout: a healthy task is never handed out twice.
    assert retries < worker.soft_time_limit_s < worker.time_limit_s
    assert worker.time_limit_s * 2 <= worker.visibility_timeout_s


def test_the_app_acknowledges_late_and_takes_one_message_at_a_time() -> None:
    app = create_app(Settings(redis_url="redis://127.0.0.1:1/0"), WorkerSettings())
    conf = app.conf
    assert conf.task_acks_late is True
    assert conf.task_reject_on_worker_lost is True
    assert conf.worker_prefetch_multiplier == 1
    assert (
        conf.task_soft_time_limit < conf.task_time_limit < conf.broker_transport_options["visibility_timeout"]
    )
    assert [q.name for q in conf.task_queues] == list(QUEUES)
    assert {name: route["queue"] for name, route in conf.task_routes.items()} == TASK_QUEUES
    assert conf.beat_schedule["om-maintenance"]["task"] == "om.maintenance"


def test_task_events_are_off_until_asked_for() -> None:
    """They cost a worker CPU on every task; Flower turns them on in the workers while it runs."""
    quiet = create_app(Settings(redis_url="redis://127.0.0.1:1/0"), WorkerSettings()).conf
    assert quiet.worker_send_task_events is False and quiet.task_send_sent_event is False
    watched = create_app(Settings(redis_url="redis://127.0.0.1:1/0"), WorkerSettings(task_events=True)).conf
    assert watched.worker_send_task_events is True and watched.task_send_sent_event is True


def test_the_worker_app_registers_a_readable_task_per_kind() -> None:
    import om_workers.beat  # noqa: F401  (registers every task, through om_workers.tasks)
    from om_workers.app import app

    assert set(TASK_QUEUES) <= set(app.tasks)


def test_a_recorded_failure_is_an_expected_task_outcome_and_keeps_its_message() -> None:
    """Celery logs it without a traceback (a crash still gets one), and the turn waiting on the result
    gets it back whole: a JSON result rebuilds it from its message alone."""
    import om_workers.beat  # noqa: F401
    from om_workers.app import app

    for name in ("om.observe", "om.reflect", "om.buffer_observation", "om.buffer_reflection"):
        assert app.tasks[name].throws == (OperationFailed,), name
    failure = OperationFailed("[OBSERVER_DEGENERATE] no observations for a non-empty transcript")
    rebuilt = type(failure)(*failure.args)
    assert str(rebuilt) == str(failure) and rebuilt.code == "OPERATION_FAILED"
    assert pickle.loads(pickle.dumps(failure)).args == failure.args


@dataclass
class StubResult:
    outcome: Any = True
    waited: list[float] = field(default_factory=list)

    def get(self, timeout: float, propagate: bool, disable_sync_subtasks: bool) -> Any:
        self.waited.append(timeout)
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome


@dataclass
class StubApp:
    sent: list[tuple[str, list[Any], str]] = field(default_factory=list)
    result: StubResult = field(default_factory=StubResult)

    ignored: list[bool] = field(default_factory=list)

    def send_task(
        self,
        name: str,
        *,
        args: list[Any],
        queue: str,
        routing_key: str,
        ignore_result: bool,
        headers: dict[str, Any],
    ) -> StubResult:
        assert routing_key == queue
        assert isinstance(headers[SENT_AT_HEADER], float), "the send time the worker's queue wait reads"
        self.sent.append((name, args, queue))
        self.ignored.append(ignore_result)
        return self.result


@pytest.mark.parametrize(
    ("task", "name", "queue"),
    [
        (BufferObservation("t1", "buffer-obs-1", 1200), "om.buffer_observation", "om.buffer"),
        (BufferReflection("t1", "rec-1", "buffer-refl-1"), "om.buffer_reflection", "om.reflect"),
        (Observe("t1", "observe-1"), "om.observe", "om.observe"),
        (Reflect("t1", "reflect-1", manual_prompt="keep dates"), "om.reflect", "om.reflect"),
    ],
)
def test_each_task_kind_goes_to_its_queue_under_a_readable_name(task: Task, name: str, queue: str) -> None:
    app = StubApp()
    CeleryExecutor(app).submit(task)
    [(sent_name, args, sent_queue)] = app.sent
    assert (sent_name, sent_queue) == (name, queue) == (kind_of(task).name, TASK_QUEUES[name])
    assert task_from_dict(args[0]) == task, "the argument Flower shows is the whole task value"


def test_fire_and_forget_keeps_no_result_unless_someone_follows_the_work() -> None:
    quiet, followed = StubApp(), StubApp()
    CeleryExecutor(quiet).submit(BufferObservation("t", "c", 0))
    CeleryExecutor(quiet).run(Observe("t", "c"), 1.0)
    CeleryExecutor(followed, on_sent=lambda task, result: None).submit(BufferObservation("t", "c", 0))
    assert quiet.ignored == [True, False], "a blocking run needs its result; a background task does not"
    assert followed.ignored == [False]


def test_only_synchronous_observation_uses_the_observe_queue() -> None:
    kinds: list[Task] = [BufferObservation("t", "c", 0), BufferReflection("t", "r", "c"), Reflect("t", "c")]
    assert all(kind_of(task).queue != "om.observe" for task in kinds)


def test_run_waits_at_most_the_deadline_and_raises_what_the_task_raised() -> None:
    finished = StubApp(result=StubResult(True))
    assert CeleryExecutor(finished).run(Observe("t", "c"), 2.5) is True
    assert finished.result.waited == [2.5]
    late = StubApp(result=StubResult(ResultTimeout("late")))
    assert CeleryExecutor(late).run(Observe("t", "c"), 1.0) is False
    failing = StubApp(result=StubResult(RuntimeError("[OBSERVER_DEGENERATE] loop")))
    with pytest.raises(RuntimeError, match="OBSERVER_DEGENERATE"):
        CeleryExecutor(failing).run(Observe("t", "c"), 1.0)


def test_inside_a_worker_blocking_work_runs_in_place_and_background_work_is_enqueued() -> None:
    app = StubApp()
    ran: list[Task] = []
    executor = WorkerExecutor(app, ran.append)
    assert executor.run(Reflect("t", "c"), 0.0) is True
    executor.submit(BufferObservation("t", "c2", 0))
    assert ran == [Reflect("t", "c")]
    assert [name for name, _, _ in app.sent] == ["om.buffer_observation"]


@pytest.mark.parametrize(
    ("queues", "pool", "concurrency"),
    [
        (["om.nope"], "prefork", 1),
        ([], "prefork", 1),
        (["om.buffer"], "fibers", 1),
        (["om.buffer"], "solo", 0),
    ],
)
def test_worker_arguments_are_checked(queues: list[str], pool: str, concurrency: int) -> None:
    with pytest.raises(SystemExit):
        worker_argv(queues, concurrency, pool)


def test_worker_arguments_name_the_queues() -> None:
    argv = worker_argv(["om.observe"], 4, "prefork", hostname="obs@%h")
    assert argv[0] == "worker"
    assert {"--queues=om.observe", "--concurrency=4", "--pool=prefork", "--hostname=obs@%h"} <= set(argv)


@pytest.mark.redis
def test_flower_runs_against_the_broker(redis_url: str, tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("OM_")},
        "OM_REDIS_URL": redis_db_url(redis_url, 7),
        "PYTHONPATH": str(REPO),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    log = tmp_path / "flower.log"
    process = subprocess.Popen(
        [sys.executable, "-m", "om_workers.cli", "flower", "--port", str(port)],
        cwd=REPO,
        env=env,
        stdout=open(log, "wb"),  # noqa: SIM115
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )

    def page() -> str | None:
        assert process.poll() is None, log.read_text()
        try:
            response = httpx.get(f"http://127.0.0.1:{port}/", timeout=2)
        except httpx.HTTPError:
            return None
        return response.text if response.status_code == 200 else None

    try:
        html = wait_until(page, deadline_s=90, what="Flower to serve its dashboard", every_s=0.2)
        assert html is not None and "Flower" in html
    finally:
        os.killpg(process.pid, 15)
        process.wait(timeout=20)
