"""CPU accounting around a timed span: whose CPU a turn used, and how busy the machine was meanwhile.

A latency figure on a 2-core machine means little without knowing whether the cores were free: this reads
the processes' CPU time and the machine's busy time from /proc (Linux) before and after a span, so a
report can say "the API used N ms of CPU per turn and the machine was 100 % busy, a third of it with
other work".
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    # After the command name: state is field 3, utime 14 and stime 15 (1-based, see proc(5)).
    return (int(fields[11]) + int(fields[12])) / _TICK


def machine_cpu_s() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, all cores."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    total = sum(values[:8])
    return (total - idle) / _TICK, total / _TICK


@dataclass
class CpuSpan:
    """CPU used by named process groups and by the machine between `start()` and `stop()`.

    Groups are resolved at both ends (Postgres forks a backend per new connection), and each process
    counts from zero when it appears during the span; a process that exits during it loses its share.
    """

    groups: dict[str, Callable[[], Sequence[int]]]
    before: dict[str, dict[int, float]] = field(default_factory=dict)
    machine_before: tuple[float, float] = (0.0, 0.0)
    client_before: float = 0.0
    used: dict[str, float] = field(default_factory=dict)
    machine_busy_s: float = 0.0
    machine_total_s: float = 0.0

    def _sample(self) -> dict[str, dict[int, float]]:
        return {name: {pid: process_cpu_s(pid) for pid in pids()} for name, pids in self.groups.items()}

    @staticmethod
    def _client() -> float:
        times = os.times()
        return times.user + times.system

    def start(self) -> CpuSpan:
        self.before = self._sample()
        self.client_before = self._client()
        self.machine_before = machine_cpu_s()
        return self

    def stop(self) -> CpuSpan:
        after = self._sample()
        for name, now in after.items():
            then = self.before.get(name, {})
            self.used[name] = sum(max(0.0, cpu - then.get(pid, 0.0)) for pid, cpu in now.items())
        self.used["client"] = self._client() - self.client_before
        busy, total = machine_cpu_s()
        self.machine_busy_s = busy - self.machine_before[0]
        self.machine_total_s = total - self.machine_before[1]
        return self

    def summary(self, per: int, unit: str = "exchange") -> dict[str, float]:
        """CPU ms per `unit` for each process group, plus the machine's busy share and what was not ours."""
        out = {
            f"{name}_cpu_ms_per_{unit}": seconds * 1000 / max(per, 1) for name, seconds in self.used.items()
        }
        ours = sum(self.used.values())
        total = self.machine_total_s or float("nan")
        out["machine_busy_pct"] = 100 * self.machine_busy_s / total
        out["others_busy_pct"] = 100 * max(0.0, self.machine_busy_s - ours) / total
        return out


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def postgres_pids(port: int) -> list[int]:
    """The postmaster listening on `port` and its backends (so Postgres CPU can be told from others')."""
    pids = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]
    masters = [
        pid
        for pid in pids
        if (args := _cmdline(pid)) and args[0].endswith("postgres") and "-p" in args and str(port) in args
    ]
    if not masters:
        return []
    return masters + [pid for pid in pids if _parent(pid) in masters]
