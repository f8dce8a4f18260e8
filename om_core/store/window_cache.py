"""The unobserved window's rows kept between turns, so a turn reads only the parts stored since the last.

Both calls of every turn need the weight of every part after the cursor (the policy) and the fields of
their messages (the context). Read whole, that is a join over the window's every part, parsed again on
every call: late in a cycle, hundreds of rows for one new part. Parts are append-only and never change
once stored, and a thread's parts are numbered under its row lock and committed in that order, so what
any reader sees of a thread is every part up to some number. A process therefore keeps, per thread, the
committed rows after some cursor up to the last one it saw, and the next read asks only for the rows
after that one.

The rules that keep it right, as in `store.part_cache`: only rows a committed transaction read go in
(callers add after the commit: a rolled-back insert's numbers are reused), and the key carries the
thread's creation time, so a thread erased and created again under the same id never sees the old rows.
A cursor that moved back before what is kept (OM turned off, which shows history from before the cursor)
simply reads the whole window again. Each process has its own; rows another replica stored are read once.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from om_core.sized_lru import SizedLRU
from om_core.store.history import WindowRow

#: (thread id, thread created_at)
WindowKey = tuple[str, datetime]

#: A row with its part weight and message fields, as Python objects (measured with tracemalloc: ~0.6 kB
#: plus its metadata, which most messages do not have).
_ROW_BYTES = 800


@dataclass(frozen=True)
class _Kept:
    """Every committed row with `after_seq` < seq <= `upto`, in order."""

    after_seq: int
    rows: tuple[WindowRow, ...]
    seqs: tuple[int, ...]

    @property
    def upto(self) -> int:
        return self.seqs[-1] if self.seqs else self.after_seq


class WindowCache:
    def __init__(self, max_bytes: int) -> None:
        self._lru: SizedLRU[WindowKey, _Kept] = SizedLRU(max_bytes)

    def held(self, key: WindowKey, after_seq: int) -> tuple[Sequence[WindowRow], int] | None:
        """The rows after `after_seq` this process holds and the number they run to: what
        `history.read_unobserved` need not read. None when it holds nothing that starts early enough."""
        kept = self._lru.get(key)
        if kept is None or kept.after_seq > after_seq:
            return None
        if kept.upto <= after_seq:
            return ((), after_seq)
        return (kept.rows[bisect_right(kept.seqs, after_seq) :], kept.upto)

    def remember(self, key: WindowKey, after_seq: int, rows: Sequence[WindowRow]) -> None:
        """After commit only: `rows` are every row after `after_seq` that the committed read saw."""
        kept = _Kept(after_seq, tuple(rows), tuple(row.seq for row in rows))
        previous = self._lru.get(key)
        if previous is not None and previous.upto > kept.upto and previous.after_seq <= kept.after_seq:
            return  # a concurrent turn of this process already kept more
        self._lru.put(key, kept, _ROW_BYTES * (len(rows) + 1))

    @property
    def size_bytes(self) -> int:
        return self._lru.size_bytes

    def __len__(self) -> int:
        return len(self._lru)
