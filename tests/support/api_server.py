"""A real API server process (uvicorn) for the API tests, against the test Postgres and Redis.

The server runs `om_api.asgi:create_app_from_env` in its own process on a free loopback port, with the
offline model (`om-local/extractive`) for memory and the fake actor (`om-actor/echo`) for the proxy. It is
ready when `/readyz` answers 200 (or `/healthz`, for servers started against a database that is down on
purpose); a server that exits or misses the deadline fails the test with its log.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from sqlalchemy import Engine

from om_api.client import OMClient
from om_api.schemas import OMEvent
from om_core.tenancy import access

REPO = Path(__file__).resolve().parents[2]
#: The scrape token the test servers take (`OM_METRICS_TOKEN`): `/metrics` on the API port needs it.
METRICS_TOKEN = "test-scrape-token-0123456789"
METRICS_HEADERS = {"Authorization": f"Bearer {METRICS_TOKEN}"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class ApiServer:
    base_url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def metrics(self) -> str:
        """The server's Prometheus text, read as the operator's scraper does (with the scrape token)."""
        response = httpx.get(f"{self.base_url}/metrics", headers=METRICS_HEADERS, timeout=30)
        response.raise_for_status()
        return response.text


def _wait_ready(server: ApiServer, probe: str, deadline_s: float) -> None:
    end = time.monotonic() + deadline_s
    last_error = "no answer"
    with httpx.Client(timeout=2.0) as http:
        while time.monotonic() < end:
            if server.process.poll() is not None:
                raise RuntimeError(
                    f"the API server exited with {server.process.returncode}:\n{server.log_text()}"
                )
            try:
                response = http.get(server.base_url + probe)
                if response.status_code == 200:
                    return
                last_error = f"{response.status_code} {response.text[:300]}"
            except httpx.TransportError as exc:
                last_error = type(exc).__name__
            time.sleep(0.05)  # polling a starting process; the deadline bounds it
    raise RuntimeError(
        f"the API server was not ready within {deadline_s}s ({last_error}):\n{server.log_text()}"
    )


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=5)


@contextlib.contextmanager
def run_api_server(
    database_url: str,
    redis_url: str,
    log_dir: Path,
    *,
    env: Mapping[str, str] | None = None,
    probe: str = "/readyz",
    deadline_s: float = 60.0,
    om_serve: bool = False,
) -> Iterator[ApiServer]:
    """`om_serve` starts it as production does (`om serve`: preflight, encoding loaded first) instead of
    the uvicorn factory the tests use (quieter logs, a shorter graceful shutdown)."""
    port = free_port()
    environment = {
        **os.environ,
        "OM_DATABASE_URL": database_url,
        "OM_REDIS_URL": redis_url,
        "OM_MODEL": "om-local/extractive",
        "OM_AUTH": "keys",
        "OM_EXECUTOR": "inline",
        "OM_PLUGINS": "tests.support.fake_actor",
        "OM_ACTOR_MODELS": "om-actor/*",
        "OM_SSE_HEARTBEAT_S": "0.5",  # dropped test clients are noticed quickly
        "OM_SSE_POLL_S": "0.25",
        "OM_METRICS_TOKEN": METRICS_TOKEN,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "PYTHONPATH": os.pathsep.join(
            [str(REPO), str(REPO / "clients" / "python")]
        ),  # this checkout's client
        **(env or {}),
    }
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"api-{port}.log"
    uvicorn = [
        sys.executable,
        "-m",
        "uvicorn",
        "om_api.asgi:create_app_from_env",
        "--factory",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "warning",
        "--timeout-graceful-shutdown",
        "5",
    ]
    served = [sys.executable, "-m", "om_app.cli", "serve", "--host", "127.0.0.1", "--port", str(port)]
    command = served if om_serve else uvicorn
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            command, cwd=REPO, env=environment, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    server = ApiServer(f"http://127.0.0.1:{port}", process, log_path)
    try:
        _wait_ready(server, probe, deadline_s)
        yield server
    finally:
        _stop(process)


# ----------------------------------------------------------------------------------------------- fixtures
# Imported by the test_api_* modules (one server per module that uses them).


@pytest.fixture(scope="module")
def api_server(
    postgres_url: str, redis_url: str, pg_engine: Engine, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApiServer]:
    """The shared server: keys auth, inline executor, offline memory model, fake actor."""
    log_dir = tmp_path_factory.mktemp("api")
    env = {"OM_FAKE_ACTOR_LOG": str(log_dir / "actor.jsonl")}
    with run_api_server(postgres_url, redis_url, log_dir, env=env) as server:
        yield server


@pytest.fixture
def tenant_key(pg_engine: Engine, tenant: str) -> str:
    """A key of `tenant` (tests/conftest.py): a fresh tenant, so every test sees only its own threads."""
    return access.create_key(pg_engine, tenant, "test").secret


@pytest.fixture
def om(api_server: ApiServer, tenant_key: str) -> Iterator[OMClient]:
    with OMClient(api_server.base_url, tenant_key, timeout=60) as client:
        yield client


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


class Follower:
    """Follows a thread's SSE stream on a daemon thread, so a test can post turns meanwhile and wait for
    events with a deadline (a stream that never delivers fails the test instead of hanging it)."""

    def __init__(
        self, base_url: str, api_key: str, thread_id: str, *, last_event_id: str | int | None = None
    ) -> None:
        self._client = OMClient(base_url, api_key)
        self._received: queue.Queue[OMEvent | BaseException] = queue.Queue()
        self.events: list[OMEvent] = []
        self._thread = threading.Thread(target=self._follow, args=(thread_id, last_event_id), daemon=True)
        self._thread.start()

    def _follow(self, thread_id: str, last_event_id: str | int | None) -> None:
        try:
            for event in self._client.events(thread_id, last_event_id=last_event_id):
                self._received.put(event)
        except BaseException as exc:  # handed to the test thread
            self._received.put(exc)
        else:  # a followed stream only ends when the server ends it: say so instead of timing out
            self._received.put(AssertionError("the server ended the event stream"))

    def wait_for(
        self,
        until: Callable[[list[OMEvent]], bool],
        *,
        deadline_s: float = 60.0,
        explain: Callable[[list[OMEvent]], str] | None = None,
    ) -> list[OMEvent]:
        """The events so far once `until` holds; `explain` says on a timeout what was still missing."""
        end = time.monotonic() + deadline_s
        while not until(self.events):
            remaining = end - time.monotonic()
            if remaining <= 0:
                got = [(e.id, e.type) for e in self.events]
                why = explain(self.events) if explain is not None else ""
                raise AssertionError(f"timed out after {deadline_s}s; {why}; got {got}")
            try:
                item = self._received.get(timeout=remaining)
            except queue.Empty:
                continue
            if isinstance(item, BaseException):
                raise item
            self.events.append(item)
        return list(self.events)

    def close(self) -> None:
        """Drop the connection (the reader thread ends with a transport error, which is ignored)."""
        self._client.close()


def collect_events(
    base_url: str,
    api_key: str,
    thread_id: str,
    until: Callable[[list[OMEvent]], bool],
    *,
    deadline_s: float = 60.0,
    last_event_id: str | int | None = None,
) -> list[OMEvent]:
    """Follow the thread's stream until `until(events so far)` holds; fail after `deadline_s`."""
    follower = Follower(base_url, api_key, thread_id, last_event_id=last_event_id)
    try:
        return follower.wait_for(until, deadline_s=deadline_s)
    finally:
        follower.close()
