"""Keeping the embedded stack's processes alive: restart what dies, with backoff, until it keeps dying.

`om up` is left running under a chat backend, so one crashed process must not take the others down (a
SIGKILLed worker used to stop the API mid-conversation). The supervisor starts its children in order,
notices one that exited, and starts it again after a delay that doubles with each crash of that child
within the policy's window. A child that crashes `max_crashes` times within `window_s` is no longer a
transient fault but a loop (a bad setting, a full disk, a port taken): restarting it forever would hide
that, so the supervisor gives up (`CrashLoop`), naming the child and its log.

What the policy decides is data (`RestartPolicy`) and time comes from an injectable clock, so the policy
is tested without waiting; the children are real processes. Everything runs on the caller's thread: no
background thread can race a restart with a stop.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from threading import Event

from om_app.embedded import stop_process

__all__ = ["Child", "CrashLoop", "RestartPolicy", "Supervisor", "describe_exit"]


@dataclass(frozen=True)
class RestartPolicy:
    """When to restart a child that exited, and when to stop trying.

    The n-th crash within `window_s` waits `first_delay_s * 2**(n-1)` (at most `max_delay_s`) before the
    restart, so a child that died once comes back at once while a failing one does not spin; crashes
    older than the window are forgotten, which resets the delay after a quiet spell. The `max_crashes`-th
    crash within the window stops the supervisor.
    """

    first_delay_s: float = 1.0
    max_delay_s: float = 30.0
    max_crashes: int = 5
    window_s: float = 300.0

    def __post_init__(self) -> None:
        if self.first_delay_s < 0 or self.max_delay_s < self.first_delay_s:
            raise ValueError("need 0 <= first_delay_s <= max_delay_s")
        if self.max_crashes < 1 or self.window_s <= 0:
            raise ValueError("need max_crashes >= 1 and window_s > 0")

    def delay_s(self, recent_crashes: int) -> float:
        """The wait before restarting a child that has crashed `recent_crashes` times within the window
        (this crash included)."""
        return min(self.max_delay_s, self.first_delay_s * 2.0 ** max(0, recent_crashes - 1))

    def gives_up(self, recent_crashes: int) -> bool:
        return recent_crashes >= self.max_crashes


@dataclass(frozen=True)
class Child:
    """One supervised process. `start` launches it in a session of its own (it is stopped by process
    group, so whatever it started stops too) and may wait until it serves, raising if it does not;
    `before_start` runs before every launch, the first one included (the worker's hands back the
    tasks its dead predecessor held); `log` is where its output goes, named when it crash-loops."""

    name: str
    start: Callable[[], subprocess.Popen[bytes]]
    log: Path
    before_start: Callable[[], None] | None = None


class CrashLoop(RuntimeError):
    """A child crashed too often within the policy's window; the message says which and where to look."""


@dataclass
class _State:
    process: subprocess.Popen[bytes] | None = None
    crashes: deque[float] = field(default_factory=deque)
    restart_at: float | None = None


def describe_exit(code: int) -> str:
    """What became of a child: `exited with code 3`, or `killed by SIGKILL` (a negative return code)."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


class Supervisor:
    """Starts `children` in order, restarts the ones that exit (`check`, or `run` until stopped), stops
    them all in reverse order (`stop`). `say` receives one line per event worth logging; `on_change`
    receives the running children's pids whenever they change (`om up` writes them to its state file)."""

    def __init__(
        self,
        children: Sequence[Child],
        policy: RestartPolicy | None = None,
        *,
        say: Callable[[str], None] = print,
        on_change: Callable[[Mapping[str, int]], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        stop_grace_s: float = 15.0,
    ) -> None:
        names = [child.name for child in children]
        if len(set(names)) != len(names):
            raise ValueError(f"child names must be unique: {names}")
        self.children = list(children)
        self.policy = policy or RestartPolicy()
        self.say = say
        self.on_change = on_change
        self.clock = clock
        self.stop_grace_s = stop_grace_s
        self.states = {child.name: _State() for child in children}

    def pids(self) -> dict[str, int]:
        """The pid of every child that is running (or exited and not yet noticed)."""
        return {name: state.process.pid for name, state in self.states.items() if state.process is not None}

    def start(self) -> None:
        """Launch every child in order. A child whose launch fails is scheduled for a restart like one
        that crashed (`CrashLoop` if that keeps happening)."""
        for child in self.children:
            self._launch(child, restart=False)

    def check(self) -> None:
        """One pass: record the children that exited, restart those whose delay is over. Raises
        `CrashLoop` when a child crashed too often."""
        for child in self.children:
            state = self.states[child.name]
            if state.process is not None and state.process.poll() is not None:
                self._crashed(child, describe_exit(state.process.returncode))
            if state.process is None and state.restart_at is not None and self.clock() >= state.restart_at:
                self._launch(child, restart=True)

    def run(self, stop: Event, poll_s: float = 0.2) -> None:
        """`check` every `poll_s` until `stop` is set (by a signal handler); `CrashLoop` ends it early."""
        while not stop.wait(poll_s):
            self.check()

    def stop(self) -> None:
        """Stop every child, last started first (the API before the worker it sends work to, Redis last),
        each with a grace period for a clean shutdown."""
        for child in reversed(self.children):
            state = self.states[child.name]
            state.restart_at = None
            if state.process is not None:
                stop_process(state.process, grace_s=self.stop_grace_s)
                state.process = None
        self._changed()

    def _launch(self, child: Child, *, restart: bool) -> None:
        state = self.states[child.name]
        state.restart_at = None
        if restart:
            self.say(f"restarting {child.name}")
        if child.before_start is not None:
            try:
                child.before_start()
            except Exception as exc:  # a failed preparation must not stop the restart itself
                self.say(f"{child.name}: preparing the start failed ({exc}); starting it anyway")
        try:
            state.process = child.start()
        except Exception as exc:
            self._crashed(child, f"failed to start ({exc})")
            return
        self._changed()

    def _crashed(self, child: Child, how: str) -> None:
        state = self.states[child.name]
        state.process = None
        now = self.clock()
        state.crashes.append(now)
        while state.crashes and state.crashes[0] <= now - self.policy.window_s:
            state.crashes.popleft()
        recent = len(state.crashes)
        self._changed()
        if self.policy.gives_up(recent):
            raise CrashLoop(
                f"{child.name} crashed {recent} times within {self.policy.window_s:.0f}s (last: {how}); "
                f"giving up. Its log: {child.log}"
            )
        delay = self.policy.delay_s(recent)
        state.restart_at = now + delay
        self.say(
            f"{child.name} {how}; restarting it in {delay:.1f}s (crash {recent}/{self.policy.max_crashes} "
            f"within {self.policy.window_s:.0f}s; log: {child.log})"
        )

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change(self.pids())
