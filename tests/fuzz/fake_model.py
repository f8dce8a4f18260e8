"""A seeded, traceable Observer/Reflector at the engine's model boundary, for the interleaving fuzz.

Every stored part's text carries a marker `id[m<message>.<part>]`. The fake Observer writes one observation
line per marker it finds in the transcript, and the fake Reflector keeps every marker of its input while
dropping the words, so the checker can trace any part to the observation that carries it, through any
number of reflections.

The marker is glued to a word on purpose: the actor's view drops free-standing bracket tags
(`optimize_for_actor`), so a plain `[id=m17]` would vanish from exactly the place we need to see it.

Behaviour is a function of (seed, role, input, how often this input was seen): latencies and failures do
not depend on which thread happens to call first, so the same seed gives the same model behaviour for the
same calls. Failures are the ones a real provider produces: exceptions, an empty reply, garbage, and
repetition loops. Garbage keeps the markers (a model that silently drops content is a quality problem the
engine cannot detect; what the engine must not do is lose content the model did return).

Resource scope: a multi-thread Observer prompt holds one `<thread id="...">` block per thread; the fake
answers with one block per input block carrying that block's markers (so a marker written into another
thread's section is the engine's doing), and sometimes leaves one block out (`partial`: the engine must
keep that thread's messages raw). The fake Reflector keeps each marker inside the `<thread id>` section it
was found in, as the resource-scope Reflector prompt asks.
"""

from __future__ import annotations

import hashlib
import random
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

from om_core.observer.prompt import NEW_HISTORY_HEADING, YOUR_TASK_HEADING
from om_core.reflector.prompt import OBSERVATIONS_HEADING
from tests.support.fake_models import user_text

MARKER_RE = re.compile(r"id\[(m\d+\.\d+)\]")

Role = Literal["observer", "reflector"]
Outcome = Literal["ok", "error", "empty", "garbage", "degenerate", "bloated", "partial"]

#: One block of a multi-thread Observer prompt (`om_core.observer.prompt.render_thread_blocks`) or a section
#: of a resource's log.
THREAD_BLOCK_RE = re.compile(r'<thread id="(?P<id>[^"\n]+)">\n(?P<body>.*?)\n</thread>', re.DOTALL)
_OPEN_TAG_RE = re.compile(r'^\s*<thread id="(?P<id>[^"\n]+)">\s*$')
_CLOSE_TAG_RE = re.compile(r"^\s*</thread>\s*$")


class InjectedModelError(ConnectionError):
    """A transport failure the fake provider injected (what litellm would raise after its retries)."""


def marker(message_number: int, part_index: int) -> str:
    return f"id[m{message_number}.{part_index}]"


def markers_in(text: str | None) -> list[str]:
    """Every marker in `text`, in order, with repetitions (duplicates are what the checker counts)."""
    return MARKER_RE.findall(text or "")


@dataclass(frozen=True)
class FakeCompletion:
    text: str
    input_tokens: int
    output_tokens: int
    cost: float | None
    model: str
    finish_reason: str | None = "stop"


@dataclass(frozen=True)
class ModelCall:
    """One call as the checker sees it: which parts went in, which came out, and what we injected."""

    role: Role
    outcome: Outcome
    input_markers: tuple[str, ...]
    output_markers: tuple[str, ...]


@dataclass(frozen=True)
class FaultRates:
    """Per-call probabilities of each injected failure (the rest of the calls answer faithfully)."""

    error: float = 0.03
    empty: float = 0.015
    garbage: float = 0.015
    degenerate: float = 0.015
    #: Reflector only: a faithful reply that is not smaller than its input (must never be committed).
    bloated: float = 0.05
    #: Multi-thread Observer only: one thread's block is missing from an otherwise faithful reply.
    partial: float = 0.04


@dataclass
class SeededModels:
    """The engine's `models=` collaborator: one per seed, shared by both instances, safe across threads."""

    seed: int
    rates: FaultRates = field(default_factory=FaultRates)
    max_latency_s: float = 0.02
    calls: list[ModelCall] = field(default_factory=list)
    _seen: Counter[str] = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def complete(self, model: Any, *, system: str, user: Any, **_: Any) -> FakeCompletion:
        user = user_text(user)
        role: Role = "observer" if NEW_HISTORY_HEADING in user else "reflector"
        section = _transcript(user) if role == "observer" else _reflection_input(user)
        digest = hashlib.blake2b(section.encode(), digest_size=8).hexdigest()
        with self._lock:
            attempt = self._seen[f"{role}:{digest}"]
            self._seen[f"{role}:{digest}"] += 1
        rng = random.Random(f"{self.seed}|{role}|{digest}|{attempt}")
        if self.max_latency_s > 0:
            time.sleep(rng.uniform(0.0, self.max_latency_s))
        found = markers_in(section)
        blocks = thread_blocks(section) if role == "observer" else []
        outcome = self._outcome(rng, role, multi_thread=bool(blocks))
        if outcome == "error":
            self._record(ModelCall(role, outcome, tuple(found), ()))
            raise InjectedModelError(f"injected provider failure ({role}, attempt {attempt})")
        text = _reply_threads(rng, outcome, blocks) if blocks else _reply(rng, role, outcome, found, section)
        self._record(ModelCall(role, outcome, tuple(found), tuple(markers_in(text))))
        return FakeCompletion(text, len(user) // 4, len(text) // 4, 0.0, str(model))

    def accepts_images(self, model: str) -> bool | None:
        return None  # nothing known: the fuzz's parts are text only

    def _outcome(self, rng: random.Random, role: Role, *, multi_thread: bool = False) -> Outcome:
        roll = rng.random()
        table: list[tuple[Outcome, float]] = [
            ("error", self.rates.error),
            ("empty", self.rates.empty),
            ("garbage", self.rates.garbage),
            ("degenerate", self.rates.degenerate),
            ("bloated", self.rates.bloated if role == "reflector" else 0.0),
            ("partial", self.rates.partial if multi_thread else 0.0),
        ]
        for outcome, rate in table:
            if roll < rate:
                return outcome
            roll -= rate
        return "ok"

    def _record(self, call: ModelCall) -> None:
        with self._lock:
            self.calls.append(call)


def _transcript(user: str) -> str:
    """Only the new history: previous observations in the prompt must not be observed again."""
    body = user.split(NEW_HISTORY_HEADING, 1)[1]
    return body.split(YOUR_TASK_HEADING, 1)[0]


def _reflection_input(user: str) -> str:
    body = user.split(OBSERVATIONS_HEADING, 1)[1] if OBSERVATIONS_HEADING in user else user
    return body.split("\n---\n", 1)[0]


def thread_blocks(section: str) -> list[tuple[str, str]]:
    """The (id, body) of each `<thread id>` block of a multi-thread transcript, in order."""
    return [(m.group("id"), m.group("body")) for m in THREAD_BLOCK_RE.finditer(section)]


def markers_by_section(text: str) -> list[tuple[str | None, str]]:
    """Every marker of `text` with the `<thread id>` section it stands in (None: outside any), read line
    by line as a reader of the log would: an opening tag starts a section, a closing tag ends it."""
    out: list[tuple[str | None, str]] = []
    current: str | None = None
    for line in text.split("\n"):
        opened = _OPEN_TAG_RE.match(line)
        if opened is not None:
            current = opened.group("id")
            continue
        if _CLOSE_TAG_RE.match(line):
            current = None
            continue
        out.extend((current, m) for m in markers_in(line))
    return out


def _reply_threads(rng: random.Random, outcome: Outcome, blocks: list[tuple[str, str]]) -> str:
    """A multi-thread Observer reply: one `<thread id>` block per input block, each with its markers."""
    if outcome in ("empty", "degenerate"):
        return _reply(rng, "observer", outcome, [], "")
    if outcome == "garbage" and rng.random() < 0.5:
        return _garbage(rng, [m for _, body in blocks for m in markers_in(body)])  # no thread blocks at all
    if outcome == "partial":
        dropped = rng.randrange(len(blocks))
        blocks = [b for i, b in enumerate(blocks) if i != dropped]
    parts: list[str] = []
    for thread, body in blocks:
        found = markers_in(body)
        if outcome == "garbage":
            inner = _garbage(rng, found)
        else:
            lines = "\n".join(f"* 🔴 (09:00) Said id[{m}] {_words_after(body, m)}".rstrip() for m in found)
            inner = f"Date: Mar 3, 2026\n{lines}\n<current-task>\nkeep chatting in {thread}\n</current-task>"
        parts.append(f'<thread id="{thread}">\n{inner}\n</thread>')
    return "<observations>\n" + "\n".join(parts) + "\n</observations>"


def _reply(rng: random.Random, role: Role, outcome: Outcome, found: list[str], section: str) -> str:
    if outcome == "empty":
        return ""
    if outcome == "degenerate":
        loop = "* 🔴 (09:00) The user keeps repeating the same request again and again and again"
        return "<observations>\n" + "\n".join([loop] * 400) + "\n</observations>"
    if outcome == "garbage":
        return _garbage(rng, found)
    if role == "observer":
        return _observe(found, section)
    if outcome == "bloated":
        extra = "* 🔴 (09:00) Also worth keeping: every detail above"
        return f"<observations>\n{section.strip()}\n{extra}\n</observations>"
    return _reflect(markers_by_section(section))


def _garbage(rng: random.Random, found: list[str]) -> str:
    """Malformed but content-bearing replies: prose without list items, or an unclosed block of items."""
    ids = " ".join(f"id[{m}]" for m in found)
    if rng.random() < 0.5:
        return f"Sure! Here is what I noticed in the conversation: {ids}. Let me know if you need more."
    lines = "\n".join(f"* 🔴 (09:00) noted id[{m}]" for m in found)
    return f"<observations>\nDate: Mar 3, 2026\n{lines}\n"


def _observe(found: list[str], section: str) -> str:
    words = {m: _words_after(section, m) for m in found}
    lines = [f"* 🔴 (09:00) Said id[{m}] {words[m]}".rstrip() for m in found]
    body = "\n".join(lines)
    return (
        f"<observations>\nDate: Mar 3, 2026\n{body}\n</observations>\n\n"
        "<current-task>\nkeep chatting\n</current-task>"
    )


def _words_after(section: str, found: str) -> str:
    """About a third of the part's words, so observations cost tokens and reflection has work to do."""
    match = re.search(re.escape(f"id[{found}]") + r"([^\n]*)", section)
    if match is None:
        return ""
    words = match.group(1).split()
    return " ".join(words[: max(1, len(words) // 3)])


def _reflect(found: list[tuple[str | None, str]]) -> str:
    """Every marker kept, the words dropped; markers found in a `<thread id>` section stay in a section of
    that thread (one per thread, in order of first appearance), the others come first, outside any."""
    by_section: dict[str | None, list[str]] = {None: []}
    for section, m in found:
        by_section.setdefault(section, []).append(m)
    blocks = [_recalled(by_section.pop(None))]
    blocks.extend(
        f'<thread id="{section}">\n{_recalled(ms)}\n</thread>' for section, ms in by_section.items()
    )
    body = "\n".join(block for block in blocks if block)
    return "<observations>\nDate: Mar 3, 2026\n" + body + "\n</observations>"


def _recalled(found: list[str]) -> str:
    return "\n".join(
        "* 🔴 (09:00) Recalled " + " ".join(f"id[{m}]" for m in found[i : i + 6])
        for i in range(0, len(found), 6)
    )
