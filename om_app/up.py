"""`om up`: the embedded stack as a real default, kept running and kept on disk.

A chat backend posts its turns to `om up` and expects its memory to be there tomorrow, so:

- **Data survives.** Everything lives in one data directory (`DataDir`): the SQLite database, Redis's
  append-only file (the broker queue, locks and counters come back after a restart too), beat's schedule,
  the logs and the state file. Migrations run at every start (they are idempotent).
- **One owner.** A lock file (`flock`) admits one `om up` per data directory; a second one is refused
  with the pid of the first instead of sharing the files. The children inherit the lock, so processes
  left over from an `om up` that was killed keep it held until they are gone; on Linux they are also
  asked to end with their supervisor (`PR_SET_PDEATHSIG`).
- **Children are supervised** (`om_app.supervisor`): a crashed worker, beat, Redis or API is restarted
  with backoff and logged; the API keeps answering turns while the worker is down (a turn that would
  wait for a synchronous observation waits at most `OM_BLOCKING_DEADLINE_S`, then the failure policy
  applies), and the tasks the dead worker held are handed back to the queue before its replacement
  starts. Only Ctrl-C / SIGTERM or a crash loop stops the stack.
- **Turns first.** The services are the embedded stack's (`om_app.embedded.services`): the work a turn may
  wait for has a worker of its own, and the background worker and beat run `--background-nice` below the
  API's CPU priority, every time they are started again too.
- **Loopback only.** The API runs without authentication, so it and Redis bind 127.0.0.1, and the start
  banner says so.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from om_app.embedded import (
    DEFAULT_BACKGROUND_NICE,
    Service,
    api_ready,
    free_port,
    om_command,
    process_env,
    services,
    stack_env,
    start_redis,
    start_service,
)
from om_app.supervisor import Child, CrashLoop, RestartPolicy, Supervisor

__all__ = ["DataDir", "DataDirInUse", "default_data_dir", "hold", "run_up"]

DATA_DIR_ENV = "OM_DATA_DIR"
READY_DEADLINE_S = 120.0


def default_data_dir(environ: Mapping[str, str] | None = None) -> Path:
    """`$XDG_DATA_HOME/om`, else `~/.local/share/om` (`OM_DATA_DIR` or `--data-dir` override it).

    The user's data directory rather than the working directory: the memory belongs to the user, not to
    the folder `om up` happened to be started from. A folder under the working directory would make the
    same backend find an empty memory when started from elsewhere (which looks like data loss), and could
    end up committed to a repository with the conversations in it.
    """
    env = os.environ if environ is None else environ
    base = env.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "om"


@dataclass(frozen=True)
class DataDir:
    """Where one `om up` keeps everything, and what each file is."""

    root: Path

    @property
    def database(self) -> Path:
        return self.root / "om.db"

    @property
    def database_url(self) -> str:
        return f"sqlite:///{self.database}"

    @property
    def redis(self) -> Path:
        return self.root / "redis"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def lock(self) -> Path:
        return self.root / "om-up.lock"

    @property
    def state(self) -> Path:
        """JSON: the API, Redis and database URLs and the children's pids, rewritten on every change."""
        return self.root / "om-up.json"

    def log(self, name: str) -> Path:
        return self.logs / f"{name}.log"

    def create(self) -> None:
        """The folders, private to the user (they hold the conversations)."""
        for folder in (self.root, self.redis, self.logs):
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)


class DataDirInUse(RuntimeError):
    """Another `om up` (or processes it left behind) holds the data directory."""


@contextlib.contextmanager
def hold(data: DataDir) -> Iterator[int]:
    """Hold the data directory's lock for the block; yields the lock's file descriptor (pass it on to the
    children so they hold it too). The file is never deleted: deleting a lock file lets two processes
    lock two different files of the same name."""
    fd = os.open(data.lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise DataDirInUse(
            f"{data.root} is in use by another `om up` (pid {holder}) or processes it started; stop it "
            "first, or pass another --data-dir"
        ) from None
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield fd
    finally:
        os.close(fd)


class Announcer:
    """Says a line on stdout and appends it, timestamped, to the stack's own log."""

    def __init__(self, log: Path) -> None:
        self.log = log

    def __call__(self, line: str, *, err: bool = False) -> None:
        print(f"om: {line}", file=sys.stderr if err else sys.stdout, flush=True)
        stamp = datetime.now(UTC).isoformat(timespec="seconds")
        with self.log.open("a", encoding="utf-8") as out:
            out.write(f"{stamp} {line}\n")


_PR_SET_PDEATHSIG = 1


def _child_options(lock_fd: int) -> dict[str, Any]:
    """Popen options of every child: its own session (Ctrl-C in the terminal reaches only `om up`, which
    stops the children in order), the data directory's lock, and on Linux a SIGTERM when `om up` dies,
    even by SIGKILL, so no worker or Redis outlives its supervisor."""
    options: dict[str, Any] = {"start_new_session": True, "pass_fds": (lock_fd,)}
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        options["preexec_fn"] = lambda: libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    return options


def _launcher(
    name: str,
    service: Service,
    env: Mapping[str, str],
    log: Path,
    options: Mapping[str, Any],
    nice: int,
    say: Callable[[str], None],
) -> Callable[[], subprocess.Popen[bytes]]:
    """Starts the service, a background one `nice` below the API's priority, every time (a restarted
    worker is lowered again)."""

    def start() -> subprocess.Popen[bytes]:
        with log.open("ab") as output:
            process, problem = start_service(
                service.command,
                {**env, **service.env},
                output,
                nice=nice if service.background else 0,
                popen_options=options,
            )
        if problem is not None:
            say(f"{name}: CPU priority not lowered: {problem}")
        return process

    return start


@dataclass
class _Plan:
    """What this start of the stack runs, on which ports."""

    data: DataDir
    api_port: int
    redis_port: int
    lock_fd: int
    background_nice: int = DEFAULT_BACKGROUND_NICE

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def dashboard_url(self) -> str:
        """The memory dashboard the API serves (no sign-in: `om up` runs without keys)."""
        return f"{self.api_url}/ui/"

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}/0"

    def env(self) -> dict[str, str]:
        return process_env(stack_env(self.data.database_url, self.redis_url, self.data.root))

    def children(self, say: Callable[[str], None]) -> list[Child]:
        """Redis first (the others need it), then the two workers, beat and the API. Redis restarts on the
        same port and from its append-only file, so the others reconnect to the same queues."""
        options = _child_options(self.lock_fd)
        redis_log = self.data.log("redis")

        def start_redis_server() -> subprocess.Popen[bytes]:
            with redis_log.open("ab") as output:
                process, _ = start_redis(
                    self.data.redis, self.redis_port, persist=True, output=output, popen_options=options
                )
            return process

        env = self.env()
        children = [Child("redis", start_redis_server, redis_log)]
        for name, service in services(self.api_port, env).items():
            log = self.data.log(name)
            hook = self._restore_worker_tasks(name, service.queues, say) if service.queues else None
            start = _launcher(name, service, env, log, options, self.background_nice, say)
            children.append(Child(name, start, log, hook))
        return children

    def _restore_worker_tasks(
        self, name: str, queues: tuple[str, ...], say: Callable[[str], None]
    ) -> Callable[[], None]:
        """Before a worker starts, no other consumer of its queues is running (each queue has one worker
        in the stack and the lock keeps other stacks away), so every unacknowledged task of those queues
        belongs to a dead one: back on its queue, now, instead of after the broker's visibility timeout.
        The other worker's tasks are left alone: it may be running them."""

        def restore() -> None:
            from om_adapters.broker import restore_unacked

            restored = restore_unacked(self.redis_url, queues=queues)
            if restored:
                say(f"handed {restored} unfinished task(s) of the previous {name} back to the queue")

        return restore

    def write_state(self, pids: Mapping[str, int]) -> None:
        state = {
            "pid": os.getpid(),
            "api_url": self.api_url,
            "redis_url": self.redis_url,
            "database_url": self.data.database_url,
            "children": dict(pids),
        }
        temporary = self.data.state.with_suffix(".tmp")
        temporary.write_text(json.dumps(state, indent=2) + "\n")
        temporary.replace(self.data.state)


@contextlib.contextmanager
def _stop_requested() -> Iterator[threading.Event]:
    """An event set by Ctrl-C (SIGINT) or SIGTERM, instead of an exception raised wherever the program
    happens to be: the supervisor finishes what it is doing, then stops its children in order."""
    stop = threading.Event()
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        signal.signal(sig, lambda *_: stop.set())
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run_up(
    port: int,
    data_dir: Path,
    policy: RestartPolicy | None = None,
    *,
    background_nice: int = DEFAULT_BACKGROUND_NICE,
) -> int:
    """`om up`: run the stack in `data_dir` until Ctrl-C or SIGTERM (0) or a crash loop (1); the background
    worker and beat `background_nice` below the API's CPU priority."""
    data = DataDir(data_dir.expanduser().resolve())
    data.create()
    say = Announcer(data.log("om-up"))
    try:
        with hold(data) as lock_fd:
            plan = _Plan(
                data,
                api_port=port,
                redis_port=free_port(),
                lock_fd=lock_fd,
                background_nice=background_nice,
            )
            return _run(plan, say, policy or RestartPolicy())
    except DataDirInUse as exc:
        say(f"error: {exc}", err=True)
        return 1


def _run(plan: _Plan, say: Announcer, policy: RestartPolicy) -> int:
    data = plan.data
    say(f"data directory {data.root} (database, Redis, logs; kept across restarts)")
    say("the API runs WITHOUT authentication and listens on 127.0.0.1 only; do not expose it")
    if plan.background_nice:
        say(
            f"the background worker and beat run {plan.background_nice} below the API's CPU priority "
            "(OM_BACKGROUND_NICE)"
        )
    if not _port_free(plan.api_port):
        say(f"error: port {plan.api_port} on 127.0.0.1 is in use; pass another --port", err=True)
        return 1
    supervisor = Supervisor(
        plan.children(say), policy, say=say, on_change=plan.write_state, stop_grace_s=15.0
    )
    code = 0
    with _stop_requested() as stop:
        if not _migrate(plan, say):
            return 1
        if stop.is_set():
            return 0
        try:
            supervisor.start()
            if _wait_ready(plan, supervisor, stop, say):
                say(f"API ready at {plan.api_url}  (docs: {plan.api_url}/docs)")
                say(f"dashboard at {plan.dashboard_url}  (threads, memory, live events, the fleet)")
                say(f"other commands on this data: OM_DATABASE_URL={data.database_url} om keys list")
                supervisor.run(stop)
            elif not stop.is_set():
                code = 1
        except CrashLoop as exc:
            say(f"{exc}; stopping everything", err=True)
            code = 1
        finally:
            say("stopping")
            supervisor.stop()
    say(f"stopped; the data stays in {data.root}")
    return code


def _port_free(port: int) -> bool:
    """Checked before anything starts: an API that cannot bind would crash-loop, and say so only after
    its restarts ran out. The probe binds as the API does (uvicorn sets SO_REUSEADDR): a port left only
    with the closing connections of an `om up` stopped a moment ago, which a plain bind refuses, is free
    for the API, and a port something listens on is refused either way."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
            probe.listen()
        except OSError:
            return False
    return True


def _migrate(plan: _Plan, say: Announcer) -> bool:
    """Bring the schema up to date (idempotent), every start: a newer om may have added migrations."""
    log = plan.data.log("migrate")
    with log.open("ab") as output:
        result = subprocess.run(om_command("migrate"), env=plan.env(), stdout=output, stderr=output)
    if result.returncode != 0:
        say(f"error: the database migration failed; see {log}", err=True)
    return result.returncode == 0


def _wait_ready(plan: _Plan, supervisor: Supervisor, stop: threading.Event, say: Announcer) -> bool:
    """Until the API answers /readyz, restarting children that die meanwhile; False if stopped or late."""
    end = time.monotonic() + READY_DEADLINE_S
    reason = "no answer yet"
    while not stop.wait(0.2):
        supervisor.check()
        ready, reason = api_ready(plan.api_url)
        if ready:
            return True
        if time.monotonic() > end:
            say(
                f"error: the API was not ready within {READY_DEADLINE_S:.0f}s ({reason}); "
                f"see {plan.data.log('api')}",
                err=True,
            )
            return False
    return False
