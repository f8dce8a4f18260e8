"""Starting the processes: a worker for chosen queues, beat, and Flower, each in the foreground.

These are plain functions for the `om` command (`om worker --queues om.observe -c 4`, `om beat`,
`om flower`); `python -m om_workers.cli …` runs them without it. Configuration comes from the
environment (`OM_*` service settings, `OM_WORKER_*` worker knobs).
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import sys
from collections.abc import Mapping, Sequence

from om_adapters import telemetry
from om_adapters.celery_app import WorkerSettings
from om_adapters.logs import configure_logging
from om_core.config.settings import Settings
from om_core.engine import QUEUES
from om_core.process.malloc_arenas import cap_malloc_arenas

POOLS = ("prefork", "threads", "solo", "gevent", "eventlet")


def _check_queues(queues: Sequence[str]) -> list[str]:
    chosen = [name.strip() for name in queues if name.strip()]
    unknown = sorted(set(chosen) - set(QUEUES))
    if not chosen or unknown:
        raise SystemExit(f"unknown or missing queue(s) {unknown or chosen}; choose from {', '.join(QUEUES)}")
    return chosen


def worker_argv(
    queues: Sequence[str],
    concurrency: int,
    pool: str,
    *,
    hostname: str | None = None,
    loglevel: str = "INFO",
) -> list[str]:
    """The `celery worker` arguments `run_worker` uses (exposed for tests and process managers)."""
    chosen = _check_queues(queues)
    if pool not in POOLS:
        raise SystemExit(f"unknown pool {pool!r}; choose from {', '.join(POOLS)}")
    if concurrency < 1:
        raise SystemExit("concurrency must be at least 1")
    name = hostname or f"om-{'-'.join(q.removeprefix('om.') for q in chosen)}-{os.getpid()}@%h"
    return [
        "worker",
        f"--queues={','.join(chosen)}",
        f"--concurrency={concurrency}",
        f"--pool={pool}",
        f"--hostname={name}",
        f"--loglevel={loglevel}",
        "--without-gossip",
        "--without-mingle",
    ]


def run_worker(
    queues: list[str],
    concurrency: int,
    pool: str,
    *,
    hostname: str | None = None,
    loglevel: str = "INFO",
) -> None:
    """Run a Celery worker consuming `queues` until it is stopped (SIGTERM: warm shutdown)."""
    cap_malloc_arenas()  # before the pool starts its threads
    from om_workers.app import app

    configure_logging(Settings().log_format, loglevel)
    app.worker_main(worker_argv(queues, concurrency, pool, hostname=hostname, loglevel=loglevel))


def run_beat(*, loglevel: str = "INFO") -> None:
    """Run celery-beat with the maintenance schedule. Run one; a second one is harmless, not useful."""
    from om_workers.app import app

    configure_logging(Settings().log_format, loglevel)
    telemetry.setup_tracing("om-beat")  # the publish span of each maintenance pass it sends
    schedule = WorkerSettings().schedule_file()
    app.start(["beat", f"--loglevel={loglevel}", f"--schedule={schedule}"])


def flower_login_problems(address: str, environ: Mapping[str, str]) -> list[str]:
    """Why Flower may not listen on `address`: on any address but loopback it needs a login
    (`FLOWER_BASIC_AUTH=user:password`, or Flower's own OAuth via `FLOWER_AUTH`). Refused rather than
    warned about: Flower shows every task's arguments and results and can revoke tasks and shrink or
    restart worker pools, and a warning in a container log is read after the port was open. On loopback
    only local users reach it, as with `om up`. `run_flower` asks this, so `om flower` and
    `python -m om_workers.cli flower` refuse alike."""
    if _is_loopback(address) or environ.get("FLOWER_AUTH"):
        return []
    basic = environ.get("FLOWER_BASIC_AUTH", "")
    if not basic:
        return [
            f"Flower on {address} would be open to anyone who reaches it: set "
            "FLOWER_BASIC_AUTH=user:password (several: comma-separated), or bind --address 127.0.0.1"
        ]
    if any(":" not in entry.strip(":") for entry in basic.split(",")):
        return ["FLOWER_BASIC_AUTH must be user:password (several: comma-separated)"]
    return []


def _is_loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def run_flower(port: int, *, address: str = "127.0.0.1", environ: Mapping[str, str] | None = None) -> None:
    """Run Flower against the broker: tasks appear by name (`om.buffer_observation`) with their args.
    Refuses (SystemExit, one `error:` line) an address other hosts reach without a login
    (`flower_login_problems`; Flower reads the login from `environ`, the process's by default)."""
    problems = flower_login_problems(address, os.environ if environ is None else environ)
    if problems:
        raise SystemExit("\n".join(f"error: {problem}" for problem in problems))
    from om_workers.app import app

    app.start(["flower", f"--port={port}", f"--address={address}"])


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m om_workers.cli", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    worker = commands.add_parser("worker", help="run a worker for chosen queues")
    worker.add_argument("-Q", "--queues", default=",".join(QUEUES), help="comma-separated queue names")
    worker.add_argument("-c", "--concurrency", type=int, default=1)
    worker.add_argument("-P", "--pool", default="prefork", choices=POOLS)
    worker.add_argument("-n", "--hostname", default=None)
    worker.add_argument("-l", "--loglevel", default="INFO")
    beat = commands.add_parser("beat", help="run celery-beat (maintenance schedule)")
    beat.add_argument("-l", "--loglevel", default="INFO")
    flower = commands.add_parser("flower", help="run Flower")
    flower.add_argument("--port", type=int, default=5555)
    flower.add_argument("--address", default="127.0.0.1")
    args = parser.parse_args(argv)
    if args.command == "worker":
        queues = args.queues.split(",")
        run_worker(queues, args.concurrency, args.pool, hostname=args.hostname, loglevel=args.loglevel)
    elif args.command == "beat":
        run_beat(loglevel=args.loglevel)
    else:
        run_flower(args.port, address=args.address)


if __name__ == "__main__":
    main(sys.argv[1:])
