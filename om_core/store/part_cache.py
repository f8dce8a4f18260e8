"""Parsed message parts kept between turns, so a turn does not reload and re-parse its whole window.

Every turn returns the unobserved messages, and the window grows to tens of thousands of tokens before it
is observed: reading every body again (transfer, JSON decode, model validation) was the largest share of
a turn. Parts are append-only and never change once stored, so a copy keyed by where it is stored stays
right for as long as that storage exists. The key carries the thread's creation time, so a thread deleted
and created again under the same id (which reuses sequence numbers) never sees the old copies.

Only committed parts go in (callers add after their transaction commits); the cache is bounded by an
estimate of its size and forgets the least recently used parts first. Each process has its own; a part
another replica stored is simply read from the database once.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from datetime import datetime

from om_core.messages import Part

#: (thread id, thread created_at, seq)
PartKey = tuple[str, datetime, int]

#: Fixed overhead charged per cached part on top of its text (object headers, dict, key).
_PART_OVERHEAD_BYTES = 600


def estimated_bytes(part: Part, tokens: float) -> int:
    """A cheap size estimate from the stored token count (about four bytes of text a token), plus inline
    attachment data, which weighs far more than the tokens it is counted as."""
    inline = len(part.data) if isinstance(part.data, str) else 0
    return _PART_OVERHEAD_BYTES + int(tokens * 4) + inline


class PartCache:
    def __init__(self, max_bytes: int = 64 * 1024 * 1024) -> None:
        self.max_bytes = max_bytes
        self._parts: OrderedDict[PartKey, tuple[Part, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: PartKey) -> Part | None:
        with self._lock:
            entry = self._parts.get(key)
            if entry is None:
                self.misses += 1
                return None
            self._parts.move_to_end(key)
            self.hits += 1
            return entry[0]

    def put(self, key: PartKey, part: Part, tokens: float) -> None:
        size = estimated_bytes(part, tokens)
        if size > self.max_bytes:
            return
        with self._lock:
            previous = self._parts.pop(key, None)
            if previous is not None:
                self._bytes -= previous[1]
            self._parts[key] = (part, size)
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, (_, evicted) = self._parts.popitem(last=False)
                self._bytes -= evicted

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._parts)
