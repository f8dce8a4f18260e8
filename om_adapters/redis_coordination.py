"""`Coordination` on Redis: the in-flight registry, per-key locks and counters shared by every process.

Locks only de-duplicate work (no two Observers on one window); correctness never depends on them, so the
design favours "a dead holder's lock disappears soon" over "a lock is never lost":

- a lock is a key holding a random owner token (`SET NX PX`); only the owner releases or extends it,
  checked atomically in Lua (compare-and-delete, compare-and-expire), so a holder whose lock expired
  and was taken by someone else cannot delete the new owner's lock;
- the key lives for a short lease (`lease_s`), and a heartbeat thread extends every lock the process
  still holds. A killed worker stops heart-beating and its locks vanish within one lease, instead of
  blocking the thread's buffering for the engine's full lock lifetime. A stalled worker (stopped, swapped
  out) loses its lock the same way; the storage rules then refuse its late, stale commit.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import redis

from om_core import Peek

log = logging.getLogger("om.workers.coordination")

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('DEL', KEYS[1])
end
return 0
"""

_EXTEND = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""


def _int(value: bytes | str | None) -> int | None:
    if value is None:
        return None
    return int(value.decode() if isinstance(value, bytes) else value)


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


@dataclass
class _Held:
    token: str
    lease_ms: int


class RedisCoordination:
    """Implements `om_core.coordination.Coordination` with the semantics of `LocalCoordination`.

    `lease_s=None` gives locks exactly the TTL the engine asks for and no heartbeat. `on_refused(name)` is
    called for each `try_lock` that found the lock held (a worker counts them, `om_lock_contended_total`).
    """

    def __init__(
        self,
        client: redis.Redis,
        *,
        lease_s: float | None = 15.0,
        on_refused: Callable[[str], None] | None = None,
    ) -> None:
        self.client = client
        self.lease_s = lease_s
        self.on_refused = on_refused
        self._release = client.register_script(_RELEASE)
        self._extend = client.register_script(_EXTEND)
        self._guard = threading.Lock()
        self._held: dict[str, _Held] = {}
        self._heartbeat: threading.Thread | None = None
        self._stop = threading.Event()
        self._pid = os.getpid()

    # ------------------------------------------------------------------------------------ locks

    def try_lock(self, name: str, ttl_s: float) -> str | None:
        token = uuid.uuid4().hex
        lease_ms = _ms(min(ttl_s, self.lease_s) if self.lease_s is not None else ttl_s)
        if not self.client.set(name, token, nx=True, px=lease_ms):
            if self.on_refused is not None:
                self.on_refused(name)
            return None
        if self.lease_s is not None:
            self._remember(name, _Held(token, lease_ms))
        return token

    def release(self, name: str, token: str) -> None:
        with self._guard:
            held = self._held.get(name)
            if held is not None and held.token == token:
                del self._held[name]
        self._release(keys=[name], args=[token])

    def extend(self, name: str, token: str, ttl_s: float) -> bool:
        return bool(self._extend(keys=[name], args=[token, _ms(ttl_s)]))

    def is_locked(self, name: str) -> bool:
        return bool(self.client.exists(name))

    def held_locks(self) -> list[str]:
        """Names of the locks this process holds and keeps alive (for logs and tests)."""
        with self._guard:
            return sorted(self._held)

    # ----------------------------------------------------------------------------------- values

    def get_int(self, name: str) -> int | None:
        return _int(self.client.get(name))

    def set_int(self, name: str, value: int | None, ttl_s: float | None = None) -> None:
        if value is None:
            self.client.delete(name)
        elif ttl_s is None:
            self.client.set(name, int(value))
        else:
            self.client.set(name, int(value), px=_ms(ttl_s))

    def peek(self, locks: Sequence[str], values: Sequence[str]) -> Peek:
        """One MGET: a lock is held while its key exists (its value is the owner token)."""
        names = [*locks, *values]
        found = self.client.mget(names) if names else []
        held = {name: value is not None for name, value in zip(locks, found[: len(locks)], strict=True)}
        numbers = {name: _int(value) for name, value in zip(values, found[len(locks) :], strict=True)}
        return Peek(held, numbers)

    def incr(self, name: str, ttl_s: float | None = None) -> int:
        pipe = self.client.pipeline(transaction=True)
        pipe.incr(name)
        if ttl_s is not None:
            pipe.pexpire(name, _ms(ttl_s))
        return int(pipe.execute()[0])

    # ------------------------------------------------------------------------------------ clock

    def now(self) -> datetime:
        """The Redis server's clock (`TIME`): one clock for the whole fleet, like the lock leases."""
        seconds, microseconds = self.client.time()
        return datetime.fromtimestamp(seconds + microseconds / 1_000_000, UTC)

    # -------------------------------------------------------------------------------- heartbeat

    def close(self) -> None:
        """Stop the heartbeat; locks still held then expire within one lease."""
        self._stop.set()

    def _remember(self, name: str, held: _Held) -> None:
        with self._guard:
            if self._pid != os.getpid():
                # Forked after locks were taken: the parent's locks and heartbeat are not ours.
                self._held.clear()
                self._heartbeat = None
                self._stop = threading.Event()
                self._pid = os.getpid()
            self._held[name] = held
            if self._heartbeat is None or not self._heartbeat.is_alive():
                self._heartbeat = threading.Thread(target=self._beat, name="om-lock-heartbeat", daemon=True)
                self._heartbeat.start()

    def _beat(self) -> None:
        assert self.lease_s is not None
        interval = self.lease_s / 3.0
        while not self._stop.wait(interval):
            with self._guard:
                held = list(self._held.items())
            for name, lock in held:
                try:
                    alive = bool(self._extend(keys=[name], args=[lock.token, lock.lease_ms]))
                except redis.RedisError as exc:
                    log.warning("lock heartbeat for %s failed: %s", name, exc)
                    continue
                if not alive:
                    log.warning("lock %s was lost (expired while its holder stalled?)", name)
                    with self._guard:
                        if self._held.get(name) is lock:
                            del self._held[name]
