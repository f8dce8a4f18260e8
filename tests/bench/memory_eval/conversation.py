"""The generated conversation: one user's sessions with an assistant, planted facts, and questions.

`generate(seed, size)` is deterministic (a seeded `random.Random`, nothing fetched): the same seed and size
give the same turns, dates and questions. Sessions are days apart; facts are planted at random places among
small talk; each question's answer appears verbatim in the conversation. Question kinds:

- `single`: a fact stated once;
- `updated`: a fact stated, then changed in a later session: the answer is the new value only (the old one
  is the question's `stale` value, never counted as right);
- `date`: when something happens or happened, as the user wrote the date;
- `multi_session`: two facts from two sessions; answered only when both are present.
"""

from __future__ import annotations

import datetime
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

from tests.bench.memory_eval import facts, filler

Kind = Literal["single", "updated", "date", "multi_session"]
KINDS: tuple[Kind, ...] = ("single", "updated", "date", "multi_session")
START = datetime.datetime(2026, 3, 2, 9, 0, tzinfo=datetime.UTC)


@dataclass(frozen=True)
class Size:
    """How long a conversation is and how many questions of each kind it carries."""

    name: str
    exchanges: int
    sessions: int
    single: int
    updated: int
    date: int
    multi_session: int
    #: The memory thresholds it is played with: the issue's for the full size; the smaller sizes'
    #: conversations are shorter, so they get the server's smallest `messageTokens` (1,000) and an
    #: `observationTokens` in the same proportion, or their context would hold the whole conversation.
    message_tokens: int = 3000
    observation_tokens: int = 4000

    def count(self, kind: Kind) -> int:
        count: int = getattr(self, kind)
        return count


#: The issue's size: ~600 turns, ~22k tokens.
FULL = Size("full", exchanges=300, sessions=8, single=16, updated=7, date=8, multi_session=6)
#: For development and the quick bench: ~120 turns.
QUICK = Size(
    "quick",
    60,
    sessions=3,
    single=6,
    updated=3,
    date=3,
    multi_session=3,
    message_tokens=1000,
    observation_tokens=1500,
)
#: The smoke test's.
TINY = Size(
    "tiny",
    48,
    sessions=2,
    single=2,
    updated=1,
    date=1,
    multi_session=1,
    message_tokens=1000,
    observation_tokens=1500,
)
SIZES = {size.name: size for size in (FULL, QUICK, TINY)}


def _pattern(value: str) -> re.Pattern[str]:
    """`value` as a whole phrase, any case, any run of whitespace between its words."""
    words = [re.escape(w) for w in value.split()]
    return re.compile(r"(?<!\w)" + r"\s+".join(words) + r"(?!\w)", re.IGNORECASE)


def contains(text: str, value: str) -> bool:
    """Whether `value` appears in `text` as a phrase (not inside a longer word or number)."""
    return _pattern(value).search(text) is not None


@dataclass(frozen=True)
class Question:
    kind: Kind
    key: str
    text: str
    #: Every one must be present for the question to count as answered.
    answers: tuple[str, ...]
    #: Values that were true once (an updated fact's old value): never an answer.
    stale: tuple[str, ...] = ()

    def answered(self, text: str) -> bool:
        return all(contains(text, answer) for answer in self.answers)


@dataclass(frozen=True)
class Turn:
    role: Literal["user", "assistant"]
    text: str
    session: int
    at: datetime.datetime
    #: The question keys whose values this turn states.
    plants: tuple[str, ...] = ()


@dataclass
class Conversation:
    seed: int
    size: Size
    turns: list[Turn]
    questions: list[Question]
    facts_at_start: bool = False
    sessions: int = field(init=False)

    def __post_init__(self) -> None:
        self.sessions = max(t.session for t in self.turns) + 1

    def session_turns(self, session: int) -> list[Turn]:
        return [t for t in self.turns if t.session == session]

    def message_body(self, turn: Turn, prefix: str) -> dict[str, Any]:
        """The `/turns` JSON of a turn; ids are `prefix` and the turn's position (unique per run)."""
        return {
            "id": f"{prefix}-m{self.turns.index(turn)}",
            "role": turn.role,
            "parts": [{"type": "text", "text": turn.text}],
            "created_at": turn.at.isoformat(),
        }

    @cached_property
    def text(self) -> str:
        return "\n".join(t.text for t in self.turns)


@dataclass(frozen=True)
class _Plant:
    key: str
    text: str
    session: int


def _date_value(rng: random.Random, used: set[str]) -> str:
    while True:
        month, day = rng.choice(facts.MONTHS), rng.randint(1, 28)
        value = f"{month} {day}" if rng.random() < 0.5 else f"{day} {month}"
        if value not in used:
            used.add(value)
            return value


def _statement(rng: random.Random, template: str, value: str) -> str:
    """The user's message stating a fact: the sentence alone, or after an opener, or before or after a
    piece of small talk (a fact is not always a message of its own)."""
    sentence = template.format(v=value)
    roll = rng.random()
    if roll < 0.25:
        return f"{rng.choice(filler.USER_OPENERS)} {sentence}"
    if roll < 0.45:
        return f"{sentence} Also, {rng.choice(filler.USER_TOPICS)}"
    if roll < 0.7:
        return f"{filler.user_small_talk(rng)} By the way, {sentence[0].lower()}{sentence[1:]}"
    return sentence


def _questions_and_plants(
    rng: random.Random, size: Size, sessions: int
) -> tuple[list[Question], list[_Plant]]:
    questions: list[Question] = []
    plants: list[_Plant] = []
    dates: set[str] = set()

    def anywhere() -> int:
        return rng.randrange(sessions)

    def two_sessions() -> tuple[int, int]:
        first, second = sorted(rng.sample(range(sessions), 2))
        return first, second

    for slot in rng.sample(facts.SINGLE, size.single):
        value = rng.choice(slot.values)
        questions.append(Question("single", slot.key, rng.choice(slot.questions), (value,)))
        plants.append(_Plant(slot.key, _statement(rng, rng.choice(slot.statements), value), anywhere()))
    for slot in rng.sample(facts.UPDATED, size.updated):
        old, new = rng.sample(slot.values, 2)
        first, second = two_sessions()
        questions.append(Question("updated", slot.key, rng.choice(slot.questions), (new,), (old,)))
        plants.append(_Plant(slot.key, _statement(rng, rng.choice(slot.statements), old), first))
        plants.append(_Plant(slot.key, _statement(rng, rng.choice(slot.updates), new), second))
    for slot in rng.sample(facts.DATED, size.date):
        value = _date_value(rng, dates)
        questions.append(Question("date", slot.key, rng.choice(slot.questions), (value,)))
        plants.append(_Plant(slot.key, _statement(rng, rng.choice(slot.statements), value), anywhere()))
    for pair in rng.sample(facts.PAIRS, size.multi_session):
        a, b = rng.choice(pair.first.values), rng.choice(pair.second.values)
        first, second = two_sessions()
        questions.append(Question("multi_session", pair.key, rng.choice(pair.questions), (a, b)))
        plants.append(_Plant(pair.key, _statement(rng, rng.choice(pair.first.statements), a), first))
        plants.append(_Plant(pair.key, _statement(rng, rng.choice(pair.second.statements), b), second))
    return questions, plants


def _session_lengths(rng: random.Random, size: Size) -> list[int]:
    """Exchanges per session: about equal, each at least a quarter of the mean."""
    mean = size.exchanges / size.sessions
    weights = [rng.uniform(0.6, 1.4) for _ in range(size.sessions)]
    lengths = [max(int(mean / 4), round(size.exchanges * w / sum(weights))) for w in weights]
    lengths[-1] += size.exchanges - sum(lengths)
    return lengths


def _place(
    rng: random.Random, plants: Sequence[_Plant], lengths: Sequence[int], at_start: bool
) -> list[list[_Plant | None]]:
    """Each session's exchanges: a plant, or None for small talk."""
    slots: list[list[_Plant | None]] = [[None] * n for n in lengths]
    if at_start:  # every plant in order at the very beginning (the smoke test's truncation check)
        flat = [(s, i) for s, n in enumerate(lengths) for i in range(n)]
        for plant, (s, i) in zip(plants, flat, strict=False):
            slots[s][i] = plant
        return slots
    for session, length in enumerate(lengths):
        mine = [p for p in plants if p.session == session]  # keeps the plants' order (old before new)
        if len(mine) > length:
            raise ValueError(f"session {session} has {length} exchanges for {len(mine)} facts")
        for plant, index in zip(mine, sorted(rng.sample(range(length), len(mine))), strict=True):
            slots[session][index] = plant
    return slots


def generate(seed: int = 33, size: Size | str = QUICK, *, facts_at_start: bool = False) -> Conversation:
    """A conversation of `size` (a `Size` or its name) from `seed`; `facts_at_start` plants every fact in
    the first exchanges (for a test whose truncation baseline must find none)."""
    size = SIZES[size] if isinstance(size, str) else size
    rng = random.Random(f"memory-eval:{seed}:{size.name}")
    questions, plants = _questions_and_plants(rng, size, size.sessions)
    lengths = _session_lengths(rng, size)
    turns: list[Turn] = []
    day = START
    for session, exchanges in enumerate(_place(rng, plants, lengths, facts_at_start)):
        if session:
            day += datetime.timedelta(days=rng.randint(3, 9), minutes=rng.randint(-90, 240))
        at = day
        for plant in exchanges:
            at += datetime.timedelta(seconds=rng.randint(30, 240))
            if plant is None:
                turns.append(Turn("user", filler.user_small_talk(rng), session, at))
                reply = filler.assistant_reply(rng)
            else:
                turns.append(Turn("user", plant.text, session, at, (plant.key,)))
                reply = filler.acknowledgement(rng)
            at += datetime.timedelta(seconds=rng.randint(5, 40))
            turns.append(Turn("assistant", reply, session, at))
    conversation = Conversation(seed, size, turns, questions, facts_at_start)
    _check(conversation)
    return conversation


def _check(conversation: Conversation) -> None:
    """Every answer (and stale value) is in the conversation and in no small talk."""
    small_talk = "\n".join(filler.every_fragment())
    for question in conversation.questions:
        for value in (*question.answers, *question.stale):
            if not contains(conversation.text, value):
                raise AssertionError(f"{question.key}: {value!r} is not in the conversation")
            if contains(small_talk, value):
                raise AssertionError(f"{question.key}: {value!r} also appears in small talk")
