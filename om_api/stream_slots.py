"""How many event streams may be open at once: per API key and per API process.

An event stream holds a connection, a task and a share of its thread's poller for as long as the client
keeps it, so without a bound one key could hold the capacity every tenant shares (issue 28, item 9). A
stream takes a slot when it is accepted and gives it back when its response ends however it ends (the
client left, the server stopped it, it failed): `SlotResponse` releases in a `finally`, so a dropped
client cannot keep its slot.

The counts are per process: behind N replicas a key may hold N times its cap. Without a key (OM_AUTH=none,
one local user) only the process cap applies.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from om_api.errors import ApiError

#: What a refused client is told to wait: streams end when their clients leave, which cannot be known.
RETRY_AFTER_S = 5


class StreamSlot:
    """An open stream's place in the counts; `release` is idempotent."""

    def __init__(self, slots: StreamSlots, key: str | None) -> None:
        self._slots = slots
        self._key = key
        self._held = True

    def release(self) -> None:
        self._slots._give_back(self)

    @property
    def key(self) -> str | None:
        return self._key


class StreamSlots:
    """The open streams of this process, counted per key and in all, each count under its cap."""

    def __init__(self, *, per_key: int, total: int) -> None:
        self.per_key = per_key
        self.total = total
        self._guard = threading.Lock()
        self._by_key: Counter[str] = Counter()
        self._open = 0

    def take(self, key: str | None) -> StreamSlot:
        """A slot for one more stream of `key`, or a 429 saying which cap was reached."""
        with self._guard:
            if key is not None and self._by_key[key] >= self.per_key:
                raise _refused(
                    f"this API key already has {self.per_key} event streams open on this server "
                    "(OM_SSE_MAX_STREAMS_PER_KEY): close one before opening another",
                    self.per_key,
                )
            if self._open >= self.total:
                raise _refused(
                    f"this server already has {self.total} event streams open (OM_SSE_MAX_STREAMS): "
                    f"retry in {RETRY_AFTER_S} seconds",
                    self.total,
                )
            self._open += 1
            if key is not None:
                self._by_key[key] += 1
        return StreamSlot(self, key)

    def _give_back(self, slot: StreamSlot) -> None:
        with self._guard:
            if not slot._held:
                return
            slot._held = False
            self._open -= 1
            if slot.key is not None:
                self._by_key[slot.key] -= 1
                if self._by_key[slot.key] <= 0:
                    del self._by_key[slot.key]

    def open_streams(self, key: str | None = None) -> int:
        """Streams open now: all of them, or one key's."""
        with self._guard:
            return self._open if key is None else self._by_key[key]


def _refused(message: str, limit: int) -> ApiError:
    retry = {"Retry-After": str(RETRY_AFTER_S)}
    return ApiError(429, "too_many_streams", message, limit=limit, headers=retry)


class SlotResponse(StreamingResponse):
    """A streaming response that holds a slot until it ends, and closes its body iterator then: a body
    suspended at a `yield` when the client left is not resumed by Starlette, so its own cleanup (leaving
    the thread's feed) would otherwise wait for the garbage collector."""

    def __init__(self, content: Any, *, slot: StreamSlot, **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self.slot = slot

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.slot.release()
            close = getattr(self.body_iterator, "aclose", None)
            if close is not None:
                await close()
