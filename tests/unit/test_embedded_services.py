"""The embedded stack's processes without a running stack: which worker consumes which queue, and how a
background process is started below the API's CPU priority (real child processes, read back from /proc).

The stack itself (`embedded_stack`, `om up`) is checked with every process running in
tests/integration/test_embedded_priority.py and test_embedded_up.py."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from om_adapters.celery_app import WorkerSettings
from om_app.cli import app
from om_app.embedded import (
    AUTOGROUP_SWITCH,
    BACKGROUND_CONCURRENCY,
    BACKGROUND_QUEUES,
    DEFAULT_BACKGROUND_NICE,
    DEFAULT_WORKER_METRICS_PORT,
    TURN_QUEUES,
    _check_lowered,
    background_nice,
    services,
    start_service,
    stop_process,
)
from om_core.engine import QUEUES

#: Starts a second thread, says so, then waits to be stopped.
WITH_A_THREAD = """
import threading, time
threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
print("ready", flush=True)
time.sleep(600)
"""

runner = CliRunner()


def own_nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, 0)


def thread_nices(pid: int) -> list[int]:
    """The niceness of every thread of the process (field 19 of /proc/<pid>/task/<tid>/stat)."""
    nices = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        nices.append(int(fields[16]))
    return nices


def autogroup_nice(pid: int) -> int:
    """`/autogroup-123 nice 10`: the niceness of the process's session's autogroup."""
    return int(Path(f"/proc/{pid}/autogroup").read_text().split()[-1])


def autogroups_on() -> bool:
    try:
        return AUTOGROUP_SWITCH.read_text().strip() == "1"
    except OSError:
        return False


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    processes: list[subprocess.Popen[bytes]] = []
    yield processes
    for process in processes:
        stop_process(process, grace_s=5)


def start_with_a_thread(
    started: list[subprocess.Popen[bytes]], nice: int
) -> tuple[subprocess.Popen[bytes], str | None]:
    read_end, write_end = os.pipe()
    with os.fdopen(write_end, "wb") as output:
        process, problem = start_service([sys.executable, "-c", WITH_A_THREAD], os.environ, output, nice=nice)
    started.append(process)
    with os.fdopen(read_end, "rb") as said:
        assert said.readline() == b"ready\n", "the child started its second thread"
    return process, problem


def test_every_queue_has_exactly_one_worker_and_a_turn_never_waits_behind_background_work() -> None:
    layout = services(8088, {})
    workers = {name: s for name, s in layout.items() if s.queues}
    assert set(workers) == {"turn-worker", "worker"}
    assert sorted(q for s in workers.values() for q in s.queues) == sorted(QUEUES), "each queue once"
    assert set(TURN_QUEUES) == {"om.observe", "om.reflect"}, "the queues of the work a turn waits for"
    assert workers["turn-worker"].queues == TURN_QUEUES and workers["worker"].queues == BACKGROUND_QUEUES
    for name, service in workers.items():
        command = service.command
        assert command[command.index("--queues") + 1] == ",".join(service.queues), name
        assert command[command.index("--pool") + 1] == "threads", name
    background = workers["worker"].command
    assert background[background.index("--concurrency") + 1] == str(BACKGROUND_CONCURRENCY)
    assert {name for name, s in layout.items() if s.background} == {"worker", "beat"}
    assert not layout["api"].background and not layout["turn-worker"].background


def test_the_turn_worker_serves_its_metrics_on_the_port_after_the_workers() -> None:
    assert WorkerSettings.model_fields["metrics_port"].default == DEFAULT_WORKER_METRICS_PORT

    def turn_worker_port(environ: dict[str, str]) -> str | None:
        return services(8088, environ)["turn-worker"].env.get("OM_WORKER_METRICS_PORT")

    assert turn_worker_port({}) == "9809"
    assert turn_worker_port({"OM_WORKER_METRICS_PORT": "9900"}) == "9901"
    assert turn_worker_port({"OM_WORKER_METRICS_PORT": "0"}) == "0", "off stays off"
    assert services(8088, {})["worker"].env == {}, "the background worker keeps the port it is given"


def test_om_background_nice_is_a_niceness_from_0_to_19() -> None:
    assert background_nice({}) == DEFAULT_BACKGROUND_NICE == 10
    assert background_nice({"OM_BACKGROUND_NICE": "0"}) == 0
    assert background_nice({"OM_BACKGROUND_NICE": " 19 "}) == 19
    for bad in ("20", "-1", "ten"):
        with pytest.raises(ValueError, match=r"OM_BACKGROUND_NICE=.* is invalid: give a niceness from 0"):
            background_nice({"OM_BACKGROUND_NICE": bad})


def test_a_background_process_and_every_thread_it_starts_run_below_this_one(
    started: list[subprocess.Popen[bytes]],
) -> None:
    process, problem = start_with_a_thread(started, nice=7)
    assert problem is None
    nices = thread_nices(process.pid)
    assert len(nices) == 2 and set(nices) == {min(19, own_nice() + 7)}, nices
    assert os.getsid(process.pid) == process.pid, "a session of its own (stopped by process group)"
    if autogroups_on():
        assert autogroup_nice(process.pid) == 7, "else its niceness counts only within its own session"


def test_nice_zero_starts_a_process_at_this_ones_priority(started: list[subprocess.Popen[bytes]]) -> None:
    process, problem = start_with_a_thread(started, nice=0)
    assert problem is None
    assert set(thread_nices(process.pid)) == {own_nice()}
    if autogroups_on():
        assert autogroup_nice(process.pid) == 0


def test_a_process_not_running_lowered_is_reported_with_its_niceness(
    started: list[subprocess.Popen[bytes]],
) -> None:
    """What the stack logs when the niceness did not take: the check reads the process's real priority."""
    process, _ = start_with_a_thread(started, nice=0)
    assert _check_lowered(process.pid, 5) == f"its niceness is {own_nice()}, not {min(19, own_nice() + 5)}"
    process.kill()
    process.wait(timeout=30)  # reaped: the pid is gone
    assert _check_lowered(process.pid, 5) is None, "an exited process is its supervisor's to notice"


def test_om_up_reads_om_background_nice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    chosen: list[int] = []

    def run_up(port: int, data_dir: Path, *, background_nice: int) -> int:
        chosen.append(background_nice)
        return 0

    monkeypatch.setattr("om_app.up.run_up", run_up)
    monkeypatch.setenv("OM_MODEL", "om-local/extractive")
    monkeypatch.delenv("OM_BACKGROUND_NICE", raising=False)
    data = ["--data-dir", str(tmp_path)]
    assert runner.invoke(app, ["up", *data]).exit_code == 0
    assert runner.invoke(app, ["up", *data], env={"OM_BACKGROUND_NICE": "0"}).exit_code == 0
    assert runner.invoke(app, ["up", *data, "--background-nice", "3"]).exit_code == 0
    assert chosen == [DEFAULT_BACKGROUND_NICE, 0, 3]
    refused = runner.invoke(app, ["up", *data], env={"OM_BACKGROUND_NICE": "20"})
    assert refused.exit_code == 2 and chosen == [DEFAULT_BACKGROUND_NICE, 0, 3]
    assert "OM_BACKGROUND_NICE" in runner.invoke(app, ["up", "--help"], terminal_width=200).output
