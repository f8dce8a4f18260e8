"""Remembered token counts of short strings that recur: the lines of an observation log.

Every Observer call shows the model the previous observations, shortened to a budget (behaviour §5.4), which
takes each line's token count. The log only grows between reflections, so a worker would otherwise
tokenise the same lines again on every buffered observation of a thread: work that grows with the log
rather than with the new messages. Counts are remembered by the string's 64-bit hash, so a process holds
integers, not the lines themselves (two lines of a log sharing a hash by chance: odds of about 1 in 10^9
with a full cache; the truncation still checks its answer against the budget with a full count).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

#: Lines longer than this are counted every time (they are rare, and costly to hash-and-remember wrongly).
MAX_REMEMBERED_CHARS = 4_000
#: About 140 bytes per remembered count (measured): 64k counts, some thirty 40k-token logs' lines, cost
#: ~9 MB at most per process.
DEFAULT_MAX_ENTRIES = 65_536


class RememberedCounts:
    """A `str -> int` counter that remembers its answers for short strings (least recently used out)."""

    def __init__(self, count: Callable[[str], int], *, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        self._count = count
        self._max_entries = max_entries
        self._entries: OrderedDict[int, int] = OrderedDict()
        self._guard = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __call__(self, text: str) -> int:
        if len(text) > MAX_REMEMBERED_CHARS:
            return self._count(text)
        key = hash(text)
        with self._guard:
            known = self._entries.get(key)
            if known is not None:
                self._entries.move_to_end(key)
                self.hits += 1
                return known
        counted = self._count(text)
        with self._guard:
            self.misses += 1
            self._entries[key] = counted
            if len(self._entries) > self._max_entries:
                self._entries.popitem(last=False)
        return counted

    def __len__(self) -> int:
        return len(self._entries)
