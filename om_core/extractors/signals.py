"""Signals an `onExtracted` callback sends (behaviour §8.6.2 `sendSignal`).

In the original, `sendSignal({type: 'user-message', contents})` hands a message to the running agent. om runs
no agent: the chat backend does. So a signal is what om can hand that backend: a `data-om-signal` event on the
thread's stream, written in the transaction that persists the values (so it exists exactly when the values
do, and a redelivered cycle writes it once), delivered like every event (`GET /v1/threads/{id}/events`,
webhooks, Python hooks' debug events). The backend decides what its agent does with it.

A callback is operator code, but what it forwards comes from model output over a tenant's messages, so a
signal is bounded: a `type` of at most 64 lower-case characters, `contents` text of at most
`MAX_CONTENTS_CHARS`, nothing else, at most `MAX_SIGNALS_PER_RUN` per extractor and run. A signal that
breaks a bound raises `ValueError` in the callback, which becomes that extractor's failure like any raise.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: Most signals one extractor's callback may send in one run.
MAX_SIGNALS_PER_RUN = 8
#: Longest `contents` of one signal, in characters.
MAX_CONTENTS_CHARS = 16_000
_TYPE_RE = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")
_KEYS = frozenset({"type", "contents"})


@dataclass(frozen=True)
class Signal:
    """One signal as sent: the extractor it came from, its `type` and its `contents`."""

    slug: str
    type: str
    contents: str


def checked(slug: str, signal: Mapping[str, Any]) -> Signal:
    """`signal` as a `Signal`, or `ValueError` saying which rule it breaks."""
    if not isinstance(signal, Mapping):
        raise ValueError("a signal is a mapping with `type` and `contents`")
    unknown = sorted(set(signal) - _KEYS)
    if unknown:
        raise ValueError(f"a signal holds only `type` and `contents`, not {unknown[0]!r}")
    kind, contents = signal.get("type"), signal.get("contents", "")
    if not isinstance(kind, str) or not _TYPE_RE.match(kind):
        raise ValueError(
            "a signal's `type` is lower-case letters, digits, '-' and '_', starting with a letter "
            "(at most 64 characters), e.g. 'user-message'"
        )
    if not isinstance(contents, str):
        raise ValueError("a signal's `contents` is text")
    if len(contents) > MAX_CONTENTS_CHARS:
        raise ValueError(f"a signal's `contents` holds at most {MAX_CONTENTS_CHARS} characters")
    return Signal(slug, kind, contents)


@dataclass
class Outbox:
    """The signals of one run, collected as callbacks send them; written with the values."""

    sent: list[Signal] = field(default_factory=list)

    def sender(self, slug: str) -> SendSignal:
        """The `send_signal` function one extractor's callback receives."""
        return SendSignal(self, slug)


@dataclass(frozen=True)
class SendSignal:
    """`ctx.send_signal({"type": ..., "contents": ...})`: queue a signal of extractor `slug`."""

    outbox: Outbox
    slug: str

    def __call__(self, signal: Mapping[str, Any]) -> None:
        if sum(1 for s in self.outbox.sent if s.slug == self.slug) >= MAX_SIGNALS_PER_RUN:
            raise ValueError(f"at most {MAX_SIGNALS_PER_RUN} signals per extractor and run")
        self.outbox.sent.append(checked(self.slug, signal))
