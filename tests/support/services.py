"""A private Postgres and Redis for one test module, which a test may stop and start again.

The session services of `make test` are shared by every module, so no test may take them down. A fault
test that restarts a database or a broker gets its own from here: `start()`, `stop()`, and `start()` again
on the SAME port and data directory, so every client keeps its URL and only sees the outage. Postgres is
started with scripts/testenv.py's functions (initdb once, then the same server command each time); Redis
with the embedded stack's launcher. Redis keeps nothing across a restart (no RDB, no AOF), like a broker
that lost its memory: queued tasks, locks and counters are gone, which is the harder case.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from om_app.embedded import free_port, start_redis, stop_process
from scripts import testenv
from tests.support.workers import Process, WorkerCluster


class RestartablePostgres:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.cluster: testenv.PostgresCluster | None = None
        self.server: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        assert self.cluster is not None, "start() first"
        return self.cluster.url(self.port)

    @property
    def running(self) -> bool:
        return self.server is not None and self.server.poll() is None

    def start(self) -> None:
        """First call: initdb and create the database; later calls: the same server again."""
        assert not self.running, "already running"
        first = self.cluster is None
        if self.cluster is None:
            self.cluster = testenv.init_postgres(self.workdir)
        self.server = testenv.start_postgres(self.cluster, self.port)
        if first:
            testenv.create_database(self.cluster, self.port)

    def stop(self, *, crash: bool = False) -> None:
        """A fast shutdown (every session is terminated, as in a restart), or with `crash` an immediate
        one (no checkpoint: the next start runs crash recovery)."""
        if self.server is None:
            return
        if crash:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.server.pid, signal.SIGQUIT)
        testenv.stop(self.server, "postgres")
        self.server = None


class RestartableRedis:
    def __init__(self, workdir: Path) -> None:
        self.folder = workdir / "redis"
        self.port = free_port()
        self.server: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def running(self) -> bool:
        return self.server is not None and self.server.poll() is None

    def start(self) -> None:
        assert not self.running, "already running"
        self.server, url = start_redis(self.folder, self.port)
        assert url == self.url, (url, self.url)

    def stop(self) -> None:
        if self.server is not None:
            stop_process(self.server)
            self.server = None


@contextlib.contextmanager
def private_services() -> Iterator[tuple[RestartablePostgres, RestartableRedis]]:
    """Both services started; both stopped (and their data removed) at the end, whatever state a test
    left them in. The data lives in a folder of its own under the system temp dir: run as root, Postgres
    runs as another account, which could not reach a folder inside pytest's private temp tree."""
    workdir = Path(tempfile.mkdtemp(prefix="om-faults-"))
    postgres, redis = RestartablePostgres(workdir), RestartableRedis(workdir)
    try:
        postgres.start()
        redis.start()
        yield postgres, redis
    finally:
        redis.stop()
        postgres.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def kill_processes(*processes: Process) -> None:
    """Stop without Celery's warm shutdown (seconds per worker under load), where the broker and queues
    are thrown away afterwards: SIGKILL each process group, by its id."""
    for process in processes:
        if process.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.popen.pid, signal.SIGKILL)
            process.popen.wait(timeout=10)


def kill_workers(cluster: WorkerCluster) -> None:
    """`kill_processes` for every process the cluster started."""
    kill_processes(*cluster.processes)
