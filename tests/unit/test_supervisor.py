"""The supervisor's restart policy on real child processes, with a clock the test moves by hand (no
sleeping on delays): exited children come back after a doubling delay, a crash loop stops it with the
child's name and log, old crashes are forgotten, and `stop` ends everything in reverse order."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from om_app.supervisor import Child, CrashLoop, RestartPolicy, Supervisor, describe_exit

POLICY = RestartPolicy(first_delay_s=1.0, max_delay_s=4.0, max_crashes=4, window_s=60.0)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def python(code: str) -> Callable[[], subprocess.Popen[bytes]]:
    return lambda: subprocess.Popen([sys.executable, "-c", code], start_new_session=True)


SLEEPS = python("import time; time.sleep(60)")
EXITS_3 = python("import sys; sys.exit(3)")


class Harness:
    def __init__(self, children: list[Child], policy: RestartPolicy = POLICY) -> None:
        self.clock = Clock()
        self.said: list[str] = []
        self.pid_changes: list[dict[str, int]] = []
        self.supervisor = Supervisor(
            children, policy, say=self.said.append, on_change=self.record, clock=self.clock, stop_grace_s=5
        )

    def record(self, pids: Mapping[str, int]) -> None:
        self.pid_changes.append(dict(pids))

    def wait_exit(self, name: str) -> None:
        process = self.supervisor.states[name].process
        assert process is not None, f"{name} is not running"
        process.wait(timeout=30)


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return tmp_path / "child.log"


def test_the_delay_doubles_per_recent_crash_up_to_the_maximum() -> None:
    assert [POLICY.delay_s(n) for n in range(1, 6)] == [1.0, 2.0, 4.0, 4.0, 4.0]
    assert not POLICY.gives_up(3) and POLICY.gives_up(4)
    with pytest.raises(ValueError):
        RestartPolicy(first_delay_s=5, max_delay_s=1)
    with pytest.raises(ValueError):
        RestartPolicy(max_crashes=0)


def test_exit_descriptions_name_the_signal() -> None:
    assert describe_exit(-9) == "killed by SIGKILL"
    assert describe_exit(3) == "exited with code 3"


def test_a_killed_child_is_restarted_after_the_delay_and_the_others_keep_running(log: Path) -> None:
    harness = Harness([Child("worker", SLEEPS, log), Child("api", SLEEPS, log)])
    supervisor = harness.supervisor
    supervisor.start()
    try:
        first, api = supervisor.pids()["worker"], supervisor.pids()["api"]
        supervisor.states["worker"].process.kill()  # type: ignore[union-attr]
        harness.wait_exit("worker")

        supervisor.check()
        assert "worker" not in supervisor.pids(), "not restarted before its delay"
        assert harness.said[-1].startswith("worker killed by SIGKILL; restarting it in 1.0s (crash 1/4")
        assert str(log) in harness.said[-1]
        harness.clock.now += 0.9
        supervisor.check()
        assert "worker" not in supervisor.pids()
        harness.clock.now += 0.1
        supervisor.check()

        second = supervisor.pids()["worker"]
        assert second != first and supervisor.states["worker"].process.poll() is None  # type: ignore[union-attr]
        assert supervisor.pids()["api"] == api, "the API was never touched"
        assert harness.said[-1] == "restarting worker"
        assert harness.pid_changes[-1] == {"worker": second, "api": api}
    finally:
        supervisor.stop()
    assert supervisor.pids() == {} and harness.pid_changes[-1] == {}


def test_a_crash_loop_stops_with_the_child_and_its_log(log: Path) -> None:
    harness = Harness([Child("beat", EXITS_3, log)])
    supervisor = harness.supervisor
    supervisor.start()
    delays = []
    with pytest.raises(CrashLoop) as raised:
        for _ in range(10):
            harness.wait_exit("beat")
            supervisor.check()
            restart_at = supervisor.states["beat"].restart_at
            assert restart_at is not None
            delays.append(restart_at - harness.clock.now)
            harness.clock.now = restart_at
            supervisor.check()
    assert delays == [1.0, 2.0, 4.0], "three restarts, each waiting twice as long"
    message = str(raised.value)
    assert message.startswith("beat crashed 4 times within 60s (last: exited with code 3); giving up.")
    assert message.endswith(f"Its log: {log}")


def test_crashes_older_than_the_window_are_forgotten(log: Path) -> None:
    harness = Harness([Child("worker", EXITS_3, log)])
    supervisor = harness.supervisor
    supervisor.start()
    for _ in range(3):
        harness.wait_exit("worker")
        supervisor.check()
        harness.clock.now += 61  # each crash a window apart: never a loop, never a longer delay
        supervisor.check()
    harness.wait_exit("worker")
    supervisor.check()
    assert supervisor.states["worker"].restart_at == harness.clock.now + 1.0
    assert all("(crash 1/4" in line for line in harness.said if "restarting it" in line)
    supervisor.stop()


def test_a_failed_launch_counts_as_a_crash_and_a_failing_hook_does_not_stop_the_start(log: Path) -> None:
    launches: list[str] = []

    def refuses() -> subprocess.Popen[bytes]:
        launches.append("redis")
        raise RuntimeError("port taken")

    def hook() -> None:
        launches.append("hook")
        raise ConnectionError("broker down")

    harness = Harness([Child("redis", refuses, log), Child("worker", SLEEPS, log, before_start=hook)])
    supervisor = harness.supervisor
    supervisor.start()
    try:
        assert launches == ["redis", "hook"]
        assert "worker" in supervisor.pids()
        assert any(
            line.startswith("redis failed to start (port taken); restarting it") for line in harness.said
        )
        assert "worker: preparing the start failed (broker down); starting it anyway" in harness.said
        harness.clock.now += 1
        supervisor.check()
        assert launches == ["redis", "hook", "redis"], "the failed launch is retried after its delay"
    finally:
        supervisor.stop()


def test_stop_ends_the_children_last_started_first(tmp_path: Path, log: Path) -> None:
    order = tmp_path / "order"
    on_term = (
        "import signal, sys, time\n"
        "def end(*_):\n"
        f"    open({str(order)!r}, 'a').write(sys.argv[1] + '\\n'); sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, end)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )

    def child(name: str) -> Child:
        def start() -> subprocess.Popen[bytes]:
            process = subprocess.Popen(
                [sys.executable, "-c", on_term, name], stdout=subprocess.PIPE, start_new_session=True
            )
            assert process.stdout is not None and process.stdout.readline() == b"ready\n"
            return process

        return Child(name, start, log)

    harness = Harness([child("redis"), child("worker"), child("api")])
    harness.supervisor.start()
    harness.supervisor.stop()
    assert order.read_text().split() == ["api", "worker", "redis"]


def test_child_names_must_be_unique(log: Path) -> None:
    with pytest.raises(ValueError):
        Supervisor([Child("api", SLEEPS, log), Child("api", SLEEPS, log)])
