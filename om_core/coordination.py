"""Shared coordination state: in-flight registry, buffering boundaries, per-key locks, suppression.

None of this decides correctness (the storage rules do); it de-duplicates work and remembers interval
boundaries between steps. The reference kept it in process memory, which broke across processes (P7), so
the engine only talks to this protocol: `LocalCoordination` serves one process (tests, embedded mode),
`om_adapters.redis_coordination` is the Redis implementation with the same semantics.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol


class Coordination(Protocol):
    def try_lock(self, name: str, ttl_s: float) -> str | None:
        """Take `name` if free; returns an owner token, or None when someone else holds it."""

    def release(self, name: str, token: str) -> None:
        """Release `name` only if `token` still owns it."""

    def extend(self, name: str, token: str, ttl_s: float) -> bool:
        """Extend a held lock while a long model call runs; False if it was lost."""

    def is_locked(self, name: str) -> bool: ...

    def get_int(self, name: str) -> int | None: ...

    def set_int(self, name: str, value: int | None, ttl_s: float | None = None) -> None: ...

    def incr(self, name: str, ttl_s: float | None = None) -> int: ...

    def peek(self, locks: Sequence[str], values: Sequence[str]) -> Peek:
        """Whether each of `locks` is held and the value of each of `values`, read together (one round trip
        where the store is remote: a turn reads five of them)."""

    def now(self) -> datetime:
        """The time every process agrees on (UTC). Decisions that compare a stored time with "now" across
        processes (is a trigger due, is a thread quiet) read this, not the local clock, so one host whose
        clock drifts cannot fire them early or never."""


@dataclass(frozen=True)
class Peek:
    """Locks and counters as read at one moment. Asking for a name that was not read is a KeyError."""

    locks: Mapping[str, bool]
    values: Mapping[str, int | None]

    def is_locked(self, name: str) -> bool:
        return self.locks[name]

    def get_int(self, name: str) -> int | None:
        return self.values[name]


class LocalCoordination:
    """In-process coordination with the semantics of the Redis one (TTL locks owned by a token)."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, tuple[str, float]] = {}
        self._values: dict[str, tuple[int, float | None]] = {}

    def try_lock(self, name: str, ttl_s: float) -> str | None:
        now = time.monotonic()
        with self._guard:
            held = self._locks.get(name)
            if held is not None and held[1] > now:
                return None
            token = uuid.uuid4().hex
            self._locks[name] = (token, now + ttl_s)
            return token

    def release(self, name: str, token: str) -> None:
        with self._guard:
            held = self._locks.get(name)
            if held is not None and held[0] == token:
                del self._locks[name]

    def extend(self, name: str, token: str, ttl_s: float) -> bool:
        with self._guard:
            held = self._locks.get(name)
            if held is None or held[0] != token:
                return False
            self._locks[name] = (token, time.monotonic() + ttl_s)
            return True

    def is_locked(self, name: str) -> bool:
        with self._guard:
            held = self._locks.get(name)
            return held is not None and held[1] > time.monotonic()

    def get_int(self, name: str) -> int | None:
        with self._guard:
            entry = self._values.get(name)
            if entry is None:
                return None
            if entry[1] is not None and entry[1] <= time.monotonic():
                del self._values[name]
                return None
            return entry[0]

    def set_int(self, name: str, value: int | None, ttl_s: float | None = None) -> None:
        with self._guard:
            if value is None:
                self._values.pop(name, None)
                return
            expiry = time.monotonic() + ttl_s if ttl_s is not None else None
            self._values[name] = (value, expiry)

    def peek(self, locks: Sequence[str], values: Sequence[str]) -> Peek:
        held = {name: self.is_locked(name) for name in locks}
        return Peek(held, {name: self.get_int(name) for name in values})

    def incr(self, name: str, ttl_s: float | None = None) -> int:
        with self._guard:
            entry = self._values.get(name)
            value = (entry[0] if entry is not None else 0) + 1
            expiry = time.monotonic() + ttl_s if ttl_s is not None else None
            self._values[name] = (value, expiry)
            return value

    def now(self) -> datetime:
        return datetime.now(UTC)  # one process: its own clock is the shared one


class Keys:
    """Names of the shared state, per lookup key (behaviour Appendix B)."""

    @staticmethod
    def buffer_lock(key: str) -> str:
        return f"om:lock:buffer:{key}"

    @staticmethod
    def extract_lock(key: str) -> str:
        """Structured extraction of a thread: one at a time, so two runs never interleave their writes."""
        return f"om:lock:extract:{key}"

    @staticmethod
    def observe_lock(key: str) -> str:
        return f"om:lock:observe:{key}"

    @staticmethod
    def reflect_lock(key: str) -> str:
        return f"om:lock:reflect:{key}"

    @staticmethod
    def buffered_reflection_lock(key: str) -> str:
        """Held while a buffered (background) reflection runs; distinct from the sync reflection lock."""
        return f"om:lock:reflect:{key}:buffer"

    @staticmethod
    def index_lock(key: str) -> str:
        """Held while a thread's search documents are written (one indexer per thread at a time)."""
        return f"om:lock:index:{key}"

    @staticmethod
    def webhook_lock(key: str) -> str:
        """Held while one webhook endpoint's events are delivered (one run per endpoint at a time)."""
        return f"om:lock:{key}"

    @staticmethod
    def webhook_queued(key: str) -> str:
        """Set by the maintenance pass that queued an endpoint's delivery, so later passes do not queue
        it again while that run waits in the queue."""
        return f"om:webhook:queued:{key}"

    @staticmethod
    def index_throttle(key: str) -> str:
        """Taken by a turn that asks for indexing and left to expire: at most one request per interval."""
        return f"om:index:requested:{key}"

    @staticmethod
    def index_model_settled(model: str) -> str:
        """Set by a maintenance pass that found no document with a vector of another model than `model`
        (the server's embedding model): the search for them rests while it lives."""
        return f"om:index:model-settled:{model}"

    @staticmethod
    def index_swept(key: str) -> str:
        """Set by a maintenance pass that asked for a thread's indexing, so the next passes do not ask
        again within the interval."""
        return f"om:index:swept:{key}"

    @staticmethod
    def buffer_boundary(key: str) -> str:
        return f"om:buf:boundary:{key}"

    @staticmethod
    def reflection_boundary(key: str) -> str:
        return f"om:refl:boundary:{key}"

    @staticmethod
    def reflection_suppressed(key: str) -> str:
        return f"om:refl:suppressed:{key}"
