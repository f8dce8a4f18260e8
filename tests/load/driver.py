"""The load client: one asyncio task per simulated chat, each playing a conversation over HTTP.

A chat plays the deterministic benchmark conversation of its seed (`tests/bench/conversations.py`: user
turns, assistant replies, now and then a tool call with a large result). One turn is two calls, as a chat
backend makes them: post the user's message (and get the context for the actor model), wait while the
actor "answers" (a seeded think time), post the reply. A chat that reaches the end of its conversation
starts the next one on a new thread; nothing new starts after the deadline, and a turn under way finishes.

Every text part is prefixed with a marker (`id[m<n>.<k>]`) that the traced fake model copies into
observations, so the checker can trace each stored part to what each turn showed the actor. The client
keeps, per thread, every message it got a 2xx for (to prove none was lost) and every turn's view.
Timings are taken around the HTTP exchange only: bodies are serialised before the clock starts and
decoded after it stops (`tests/bench/http_driver.py`, whose client settings are reused).
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx

from om_core.messages import Message, Part
from tests.bench.conversations import generate, message_body
from tests.bench.http_driver import TurnPoster, turn_payload
from tests.fuzz.fake_model import marker, markers_in

#: Marker number of a thread's final (check) turn.
FINAL_NUMBER = 1_000_000


@dataclass(frozen=True)
class LoadSettings:
    threads: int = 50
    duration_s: float = 300.0
    #: Seconds the actor model takes to answer, between the two calls of a turn (seeded per turn).
    think_s: tuple[float, float] = (0.5, 1.5)
    #: Size of each conversation a chat plays (counted tokens); a chat that finishes one starts another.
    conversation_tokens: int = 60_000
    seed: int = 0
    request_timeout_s: float = 120.0


@dataclass
class Posted:
    """One `/turns` call as the checker needs it."""

    label: str
    #: Markers of the parts this call sent.
    own: frozenset[str]
    ok: bool
    raw: tuple[str, ...] = ()
    observed: tuple[str, ...] = ()


@dataclass
class ThreadLog:
    thread_id: str
    resource_id: str
    #: Message id -> parts the client got a 2xx for.
    acknowledged: dict[str, int] = field(default_factory=dict)
    posted: list[Posted] = field(default_factory=list)
    final: Posted | None = None


@dataclass
class LoadLog:
    """Everything the run measured; `threads` in the order they were started."""

    threads: list[ThreadLog] = field(default_factory=list)
    #: Seconds per successful call, and per turn (both calls succeeded: their sum).
    request_s: list[float] = field(default_factory=list)
    turn_s: list[float] = field(default_factory=list)
    #: "200", "503", "transport:ReadTimeout", ... of the load's calls, and of the final check turns.
    outcomes: Counter[str] = field(default_factory=Counter)
    final_outcomes: Counter[str] = field(default_factory=Counter)
    blocked: int = 0
    degraded: int = 0
    errors: list[str] = field(default_factory=list)
    started: float = 0.0
    ended: float = 0.0

    @property
    def seconds(self) -> float:
        return self.ended - self.started


def marked(message: Message, number: int) -> Message:
    """The message with a marker in front of each text part (part index = position in the message)."""
    parts = [
        part.model_copy(update={"text": f"{marker(number, index)} {part.text}"}) if part.text else part
        for index, part in enumerate(message.parts)
    ]
    return message.model_copy(update={"parts": parts})


def _own_markers(message: Message) -> frozenset[str]:
    return frozenset(m for part in message.parts for m in markers_in(part.text))


class Chats:
    """The simulated chats of one run, sharing one HTTP client and one log."""

    def __init__(self, poster: TurnPoster, settings: LoadSettings, tag: str) -> None:
        self.poster = poster
        self.settings = settings
        self.tag = tag
        self.log = LoadLog()

    async def run(self) -> LoadLog:
        self.log.started = time.monotonic()
        deadline = self.log.started + self.settings.duration_s
        await asyncio.gather(*(self._chat(slot, deadline) for slot in range(self.settings.threads)))
        self.log.ended = time.monotonic()
        return self.log

    async def _chat(self, slot: int, deadline: float) -> None:
        rng = random.Random(f"load|{self.settings.seed}|{slot}")
        round_ = 0
        while time.monotonic() < deadline:
            seed = self.settings.seed * 100_000 + slot * 100 + round_
            conversation = await asyncio.to_thread(generate, seed, self.settings.conversation_tokens)
            thread_id = f"load-{self.tag}-{slot}-{round_}"
            thread = ThreadLog(thread_id, f"user-{self.tag}-{slot}")
            self.log.threads.append(thread)
            for index, (user, reply) in enumerate(conversation.exchanges()):
                if time.monotonic() >= deadline:
                    break
                first = await self._post(thread, marked(user, 2 * index), "user")
                await asyncio.sleep(rng.uniform(*self.settings.think_s))  # the actor model answering
                second = await self._post(thread, marked(reply, 2 * index + 1), "reply")
                if first is not None and second is not None:
                    self.log.turn_s.append(first + second)
            round_ += 1

    async def _post(self, thread: ThreadLog, message: Message, label: str) -> float | None:
        """Post one message of the load; the seconds the call took when it succeeded, else None."""
        outcome, elapsed, data = await self._exchange(thread, message)
        self.log.outcomes[outcome] += 1
        own = _own_markers(message)
        if data is None:
            thread.posted.append(Posted(label, own, ok=False))
            return None
        self.log.request_s.append(elapsed)
        thread.acknowledged[message.id] = max(thread.acknowledged.get(message.id, 0), len(message.parts))
        thread.posted.append(view_of(data, label, own))
        self.log.blocked += bool(data.get("blocked"))
        self.log.degraded += bool(data.get("degraded"))
        return elapsed

    async def _exchange(
        self, thread: ThreadLog, message: Message
    ) -> tuple[str, float, dict[str, Any] | None]:
        """(status or transport error, seconds, decoded answer when 2xx); the body is built before the clock
        starts and decoded after it stops."""
        # Both forms, as before the cheap default: the checker reads the stored messages of every view.
        payload = turn_payload([message_body(message)], thread.resource_id, "full")
        path = f"/v1/threads/{quote(thread.thread_id, safe='')}/turns"
        started = time.perf_counter()
        try:
            response = await self.poster.http.post(path, content=payload)
            body = await response.aread()
        except httpx.HTTPError as exc:
            self.log.errors.append(f"{thread.thread_id} {message.id}: {type(exc).__name__}: {exc}"[:300])
            return f"transport:{type(exc).__name__}", time.perf_counter() - started, None
        elapsed = time.perf_counter() - started
        if not 200 <= response.status_code < 300:
            self.log.errors.append(f"{thread.thread_id} {message.id}: {response.status_code} {body[:200]!r}")
            return str(response.status_code), elapsed, None
        data: dict[str, Any] = json.loads(body)
        return str(response.status_code), elapsed, data

    async def final_turns(self, concurrency: int = 8) -> None:
        """One quiet turn per thread (after the workers drained): its view must be the whole conversation.
        Not part of the load's figures; a failed one leaves `final` unset (the checker reports it)."""
        gate = asyncio.Semaphore(concurrency)

        async def one(thread: ThreadLog) -> None:
            text = "final question: what do you remember about me?"
            message = marked(
                Message(id="final", role="user", parts=[Part(type="text", text=text)]), FINAL_NUMBER
            )
            async with gate:
                outcome, _, data = await self._exchange(thread, message)
            self.log.final_outcomes[outcome] += 1
            if data is not None:
                thread.acknowledged[message.id] = len(message.parts)
                thread.final = view_of(data, "final", _own_markers(message))

        await asyncio.gather(*(one(thread) for thread in self.log.threads))


def view_of(data: dict[str, Any], label: str, own: frozenset[str]) -> Posted:
    """A `/turns` answer reduced to markers: raw messages and observations the actor would be shown."""
    context = data.get("context") or {}
    raw = tuple(
        m
        for message in context.get("messages") or []
        for part in message.get("parts") or []
        for m in markers_in(part.get("text"))
    )
    observed = tuple(m for text in context.get("system_messages") or [] for m in markers_in(text))
    return Posted(label, own, ok=True, raw=raw, observed=observed)


def percentile(values: list[float], share: float) -> float:
    """Nearest-rank percentile (`share` in 0..1); NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(share * len(ordered))))
    return ordered[rank - 1]
