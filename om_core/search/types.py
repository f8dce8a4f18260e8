"""The values search takes and returns, shared by the search engine, the recall tool and the HTTP API."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from om_core.tenancy.scoped_ids import StoredId

#: What a hit is: an observation group (its text and the range of raw messages it came from) or one raw
#: message.
HitKind = Literal["group", "message"]


@dataclass(frozen=True)
class SearchRequest:
    """One search over a resource. Ids are stored ids (`om_core.tenancy.scoped_ids`); the caller has already
    checked that the resource belongs to its tenant. `thread_ids` (when given) restricts the hits to those
    threads; `after` / `before` bound the hit's time (strictly)."""

    resource_id: StoredId
    query: str
    limit: int = 10
    thread_ids: tuple[StoredId, ...] | None = None
    after: datetime | None = None
    before: datetime | None = None
    kinds: tuple[HitKind, ...] = ("group", "message")


@dataclass(frozen=True)
class SearchHit:
    """One result. `ref` is the group id or the message id; `ranges` the group's message range
    (`start:end`, comma-separated when merged), None for a message; `at` when it was observed (group) or
    written (message); `score` the fused score (higher is better); `sources` which rankers found it."""

    kind: HitKind
    ref: str
    thread_id: StoredId
    resource_id: StoredId
    text: str
    at: datetime
    score: float
    ranges: str | None = None
    sources: tuple[Literal["lexical", "vector"], ...] = ()
