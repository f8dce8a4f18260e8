"""Shift one process's wall clock by an offset the test controls, so a worker's clock can jump mid-run.

A process started with `OM_TEST_CLOCK_OFFSET_FILE=<path>` and `tests/support/clock_skew_site` first on
`PYTHONPATH` runs `install()` at interpreter start (before Celery, kombu or om_core import anything), so
`time.time()`, `time.time_ns()` and `datetime.now()` / `utcnow()` / `today()` all return real time plus the
number of seconds written in the file. Every clock read checks whether the file was replaced (one `stat`),
so once `set_offset` returns, the process's next clock read already sees the jump: a task picked up right
after the rewrite cannot still run on the old offset. Monotonic clocks are left alone: sleeps, timeouts and
lock leases (kept by Redis) stay real, only what the process believes the date is moves.
"""

from __future__ import annotations

import datetime as _datetime
import os
import time
from pathlib import Path

ENV = "OM_TEST_CLOCK_OFFSET_FILE"
SITE_DIR = Path(__file__).resolve().parent / "clock_skew_site"

_real_time = time.time
_real_time_ns = time.time_ns
_RealDatetime = _datetime.datetime


def set_offset(path: Path, seconds: float) -> None:
    """Make every process reading `path` see its clock `seconds` away from real time (atomically)."""
    scratch = path.with_suffix(".tmp")
    scratch.write_text(repr(float(seconds)))
    scratch.replace(path)


class _Offset:
    def __init__(self, path: str) -> None:
        self.path = path
        self.value = 0.0
        self.version: tuple[int, int] | None = None  # (inode, mtime) of the file last read

    def seconds(self) -> float:
        try:
            status = os.stat(self.path)
        except OSError:
            return self.value  # no file yet: keep the last value
        version = (status.st_ino, status.st_mtime_ns)
        if version != self.version:
            try:
                with open(self.path) as handle:
                    self.value = float(handle.read().strip() or 0.0)
                self.version = version
            except (OSError, ValueError):
                pass  # keep the last value; the next read tries again
        return self.value


_offset: _Offset | None = None


def offset_s() -> float:
    return _offset.seconds() if _offset is not None else 0.0


def _skewed_time() -> float:
    return _real_time() + offset_s()


def _skewed_time_ns() -> int:
    return _real_time_ns() + int(offset_s() * 1e9)


class SkewedDatetime(_RealDatetime):
    """`datetime` whose "now" is the skewed clock; everything else is the real class's behaviour."""

    @classmethod
    def now(cls, tz: _datetime.tzinfo | None = None) -> SkewedDatetime:
        return cls.fromtimestamp(_skewed_time(), tz)

    @classmethod
    def utcnow(cls) -> SkewedDatetime:
        return cls.fromtimestamp(_skewed_time(), _datetime.UTC).replace(tzinfo=None)

    @classmethod
    def today(cls) -> SkewedDatetime:
        return cls.fromtimestamp(_skewed_time())


def install() -> bool:
    """Patch the clocks when `OM_TEST_CLOCK_OFFSET_FILE` is set; True if patched."""
    global _offset
    path = os.environ.get(ENV)
    if not path or _offset is not None:
        return False
    _offset = _Offset(path)
    time.time = _skewed_time
    time.time_ns = _skewed_time_ns
    _datetime.datetime = SkewedDatetime  # type: ignore[misc]
    return True
