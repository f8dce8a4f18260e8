"""Progress lines for the long commands (`make bench`, `make load`, `make fuzz`): done/total, elapsed, ETA.

    bench: 3/9 sections (21%), 2:14 elapsed, ETA 8:20 - peer
    load: 120/300 s (40%), 2:01 elapsed, ETA 3:00 - 1,412 requests, 0 errors
    fuzz: 840/2000 seeds (42%), 4:31 elapsed, ETA 6:14 - 0 failing

Lines go to stderr, so the tables the commands end with (stdout) stay a clean block to redirect. A line is
written at most every `every_s` seconds (the first update and `finish()` always), so a run of thousands of
seeds prints a few dozen lines, not thousands. `Ticker` prints on a timer for work that reports nothing
for minutes (a benchmark section); the clock is injectable so the unit tests never sleep.

Totals are in any unit (seeds, seconds, weighted sections); the ETA is the remaining part at the rate so
far, or "?" before anything is done.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

Clock = Callable[[], float]
#: The ETA is shown from this share of the total on (before, "?"): a rate from almost nothing is noise.
MIN_SHARE_FOR_ETA = 0.001


def clock_text(seconds: float) -> str:
    """`m:ss`, or `h:mm:ss` from an hour on."""
    whole = max(0, round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def eta_s(done: float, total: float, elapsed_s: float) -> float | None:
    """Seconds left at the rate so far; None before a measurable part (0.1 %) is done, when the rate is
    still noise, or with nothing to do."""
    if total <= 0 or done < MIN_SHARE_FOR_ETA * total or done <= 0 or elapsed_s <= 0:
        return None
    return max(0.0, elapsed_s * (total - done) / done)


def _number(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() or value >= 100 else f"{value:,.1f}"


class Progress:
    """done/total of one piece of work, printed at a bounded rate."""

    def __init__(
        self,
        label: str,
        total: float,
        *,
        unit: str = "",
        show_counts: bool = True,
        every_s: float = 5.0,
        out: TextIO | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        self.label = label
        self.total = float(total)
        self.unit = unit
        #: False: the line shows the share only (for totals in an internal unit, such as weights).
        self.show_counts = show_counts
        self.every_s = every_s
        self.out = out
        self.clock = clock
        self.done = 0.0
        self.note = ""
        self.started = clock()
        self._last_print: float | None = None
        self._lock = threading.Lock()

    # ----------------------------------------------------------------------------------------- reporting

    def elapsed_s(self) -> float:
        return self.clock() - self.started

    def line(self) -> str:
        elapsed = self.elapsed_s()
        share = f" ({100 * self.done / self.total:.0f}%)" if self.total > 0 else ""
        unit = f" {self.unit}" if self.unit else ""
        left = eta_s(self.done, self.total, elapsed)
        eta = "?" if left is None else clock_text(left)
        counts = (
            f"{_number(self.done)}/{_number(self.total)}{unit}{share}"
            if self.show_counts
            else share.strip(" ()")
        )
        text = f"{self.label}: {counts}, {clock_text(elapsed)} elapsed, ETA {eta}"
        return f"{text} - {self.note}" if self.note else text

    def _write(self, text: str) -> None:
        stream = self.out if self.out is not None else sys.stderr
        print(text, file=stream, flush=True)

    def maybe_print(self, *, force: bool = False) -> bool:
        """Print the current line if `every_s` has passed since the last one (or `force`)."""
        with self._lock:
            now = self.clock()
            due = self._last_print is None or now - self._last_print >= self.every_s
            if not (due or force):
                return False
            self._last_print = now
            text = self.line()
        self._write(text)
        return True

    # ------------------------------------------------------------------------------------------- updates

    def advance(self, amount: float = 1.0, note: str | None = None) -> None:
        with self._lock:
            self.done = min(self.total, self.done + amount) if self.total > 0 else self.done + amount
            if note is not None:
                self.note = note
        self.maybe_print()

    def set(self, done: float, note: str | None = None, *, quiet: bool = False) -> None:
        with self._lock:
            self.done = min(self.total, done) if self.total > 0 else done
            if note is not None:
                self.note = note
        if not quiet:
            self.maybe_print()

    def finish(self, note: str | None = None) -> None:
        """The last line, always printed: what was done, in how long (no ETA)."""
        with self._lock:
            if note is not None:
                self.note = note
            unit = f" {self.unit}" if self.unit else ""
            spent = clock_text(self.elapsed_s())
            counts = f"{_number(self.done)}/{_number(self.total)}{unit}" if self.show_counts else "done"
            text = f"{self.label}: {counts} in {spent}"
            if self.note:
                text += f" - {self.note}"
            self._last_print = self.clock()
        self._write(text)


class Ticker:
    """Prints `progress` every `every_s` seconds from a daemon thread while a `with` block runs, after
    `sample()` (if given) returned the current (done, note): for work that reports nothing for minutes.
    `tick()` is what the thread does each time, callable directly (the tests do, with an injected clock)."""

    def __init__(
        self,
        progress: Progress,
        *,
        every_s: float | None = None,
        sample: Callable[[], tuple[float, str | None]] | None = None,
    ) -> None:
        self.progress = progress
        self.every_s = progress.every_s if every_s is None else every_s
        self.sample = sample
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def tick(self) -> bool:
        if self.sample is not None:
            done, note = self.sample()
            self.progress.set(done, note, quiet=True)
        return self.progress.maybe_print()

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.tick()
            except Exception as exc:  # a progress line must never end the run it reports on
                self.progress.note = f"(progress sample failed: {type(exc).__name__})"

    def __enter__(self) -> Ticker:
        self._thread = threading.Thread(target=self._run, name=f"progress-{self.progress.label}", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
