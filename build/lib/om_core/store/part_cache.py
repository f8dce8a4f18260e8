"""Parsed message parts kept between turns, so a turn does not reload and re-parse its whole window.

Every turn returns the unobserved messages, and the window grows to tens of thousands of tokens before it
is observed: reading every body again (transfer, JSON decode, model validation) was the largest share of
a turn. Parts are append-only and never change once stored, so a copy keyed by where it is stored stays
right for as long as that storage exists. The key carries the thread's creation time, so a thread deleted
and created again under the same id (which reuses sequence numbers) never sees the old copies.

Only committed parts go in (callers add after their transaction commits); the cache is bounded by an
estimate of the memory its parts take and forgets the least recently used parts first. Each process has
its own; a part another replica stored is simply read from the database once.
"""

from __future__ import annotations

import sys
from datetime import datetime
from typing import Any

from om_core.messages import Part
from om_core.sized_lru import SizedLRU

#: (thread id, thread created_at, seq)
PartKey = tuple[str, datetime, int]

#: A parsed part without its payload: the model instance with its 20-field dict and field set, plus the
#: cache's key and entry. Measured with tracemalloc over a generated 200k-token conversation: a text part
#: costs ~1.2 kB plus its text.
_PART_OVERHEAD_BYTES = 1_400


def estimated_bytes(part: Part) -> int:
    """What keeping `part` costs: its payload fields at their real size, strings by their width (a string
    holding one emoji takes four bytes a character) and parsed JSON object by object (a list of small
    dicts weighs about ten times its JSON text)."""
    return _PART_OVERHEAD_BYTES + sum(
        _deep_size(value) for value in (part.text, part.error_text, part.args, part.result, part.data)
    )


def _deep_size(value: Any) -> int:
    if value is None or isinstance(value, bool):
        return 0  # shared singletons
    size = sys.getsizeof(value)
    if isinstance(value, dict):
        return size + sum(_deep_size(k) + _deep_size(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return size + sum(_deep_size(item) for item in value)
    return size


class PartCache(SizedLRU[PartKey, Part]):
    def remember(self, key: PartKey, part: Part) -> None:
        self.put(key, part, estimated_bytes(part))
