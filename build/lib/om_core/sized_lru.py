"""A per-process map bounded by the memory its entries take, least recently used out first.

The caches that keep a turn's cost flat in history length (parsed parts, rendered logs) hold immutable
values that would otherwise be read and rebuilt on every turn. They live in long-running processes whose
memory is budgeted, so each is bounded by the sum of its entries' estimated sizes, not by a count.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class SizedLRU(Generic[K, V]):
    """Thread-safe. Callers must not mutate a value once it is stored: readers share it."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: K) -> V | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return entry[0]

    def put(self, key: K, value: V, size: int) -> None:
        """Keep `value` as `size` bytes, forgetting the least recently used entries to stay in budget. A
        value larger than the whole budget is not kept."""
        if size > self.max_bytes:
            return
        with self._lock:
            previous = self._entries.pop(key, None)
            if previous is not None:
                self._bytes -= previous[1]
            self._entries[key] = (value, size)
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, (_, evicted) = self._entries.popitem(last=False)
                self._bytes -= evicted

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)
