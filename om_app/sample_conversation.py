"""The sample conversation: a deterministic generator of sessions over weeks, chatty turns, planted facts.

Shipped with the package because `om demo` plays it; the lifecycle test and the benchmarks use it too.
Every `seed` gives the same conversation. Planted facts (names, numbers, dates, preferences, and later
corrections) are recorded in `Conversation.facts` so a test can check what survived into the context.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from om_core import Message, Part, text_message

TOPICS = [
    ("garden", ["tomatoes", "raised beds", "compost", "the apple tree", "drip irrigation", "seedlings"]),
    (
        "travel",
        ["the train to Lyon", "a hostel in Ghent", "the ferry schedule", "packing cubes", "a day pass"],
    ),
    ("cooking", ["sourdough starter", "a lentil stew", "the cast iron pan", "fresh pasta", "miso glaze"]),
    ("work", ["the quarterly report", "a flaky integration test", "the onboarding doc", "the budget review"]),
    ("fitness", ["interval runs", "a stiff shoulder", "the climbing gym", "a 10k race", "rest days"]),
    ("books", ["a mystery novel", "the library hold list", "an audiobook", "a history of Venice"]),
]
FILLER = [
    "Honestly I keep going back and forth on it.",
    "It has been on my mind most of the week.",
    "I tried something similar last year and it sort of worked.",
    "My partner thinks I am overthinking it, which is probably fair.",
    "The weather has not helped at all, it rained almost every day.",
    "I read a couple of articles about it but they contradicted each other.",
    "Anyway, that is the background, sorry for the long message.",
    "I would like to get this sorted before the end of the month.",
    "A friend suggested a different approach but I am not convinced.",
    "It is not urgent, but it keeps nagging at me.",
    "I also wonder whether I am missing something obvious here.",
    "There is a bit of history behind this that I should explain.",
]
ASSISTANT = [
    "That makes sense, and it is a common situation.",
    "Here is how I would think about it, step by step.",
    "A good first move is to write down the constraints you already know.",
    "You could also try a smaller version first and see how it goes.",
    "Keep an eye on how it feels after a week, then adjust.",
    "If it helps, we can break it into three parts and tackle them one at a time.",
    "There are trade-offs either way, so it depends on what matters most to you.",
    "Many people find that a simple routine beats an elaborate plan.",
]

PLANTED = [
    ("pet", "My dog is called Biscuit and she is four years old.", "Biscuit"),
    ("allergy", "I should mention I am allergic to peanuts, so no recipes with them please.", "peanuts"),
    ("move", "I moved to Porto on March 3 and I am still unpacking boxes.", "Porto"),
    ("budget", "My budget for the whole trip is 2400 euros, not a cent more.", "2400 euros"),
    ("sister", "My sister Maya lives in Lisbon and visits every other weekend.", "Maya"),
    ("coffee", "I prefer oat milk in my coffee, regular milk upsets my stomach.", "oat milk"),
    ("deadline", "The report deadline is Friday 14 November at noon.", "14 November"),
    ("race", "My bib number for the 10k race on 21 December is 7318.", "7318"),
]
CORRECTIONS = [
    ("budget", "Update on the trip: my budget went up to 3100 euros after the bonus.", "3100 euros"),
    ("move", "Correction: the move to Porto was on the fifth of March, not the third.", "fifth of March"),
]


@dataclass
class Conversation:
    messages: list[Message] = field(default_factory=list)
    facts: dict[str, str] = field(default_factory=dict)

    def turns(self) -> Iterator[Message]:
        return iter(self.messages)


PEOPLE = ["Ana", "Bruno", "Chloe", "Dmitri", "Esra", "Farid", "Greta", "Hiro", "Ines", "Jonas", "Kemi"]
PLACES = ["Braga", "Ghent", "Lyon", "Tallinn", "Bergen", "Graz", "Utrecht", "Split", "Cork", "Lund", "Pisa"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October"]
DETAIL_TEMPLATES = [
    "{person} told me that {thing} took {n} minutes last {day}, which surprised everyone.",
    "On {month} {d} we went to {place} and spent {n} euros on {thing}.",
    "I compared {thing} with {other} and the first one was about {n} percent cheaper.",
    "{person} from {place} recommended {thing}, she has been doing it for {n} years.",
    "The plan is to finish {thing} by {month} {d}, then move on to {other}.",
    "Last {day} I measured {thing} again and got {n}, up from {m} the week before.",
    "I keep a note that {thing} needs {n} grams of {other}, otherwise it fails.",
    "My neighbour {person} lent me {other} for {thing}, I owe her {n} euros.",
]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


def _detail(rng: random.Random, things: list[str]) -> str:
    return rng.choice(DETAIL_TEMPLATES).format(
        person=rng.choice(PEOPLE),
        place=rng.choice(PLACES),
        month=rng.choice(MONTHS),
        d=rng.randint(1, 28),
        n=rng.randint(2, 950),
        m=rng.randint(2, 950),
        day=rng.choice(DAYS),
        thing=rng.choice(things),
        other=rng.choice(things),
    )


def _paragraph(rng: random.Random, topic: str, things: list[str], words: int) -> str:
    sentences: list[str] = []
    count = 0
    while count < words:
        roll = rng.random()
        if roll < 0.5:
            sentence = _detail(rng, things)
        elif roll < 0.7:
            habit = rng.choice(["plan ahead", "start early", "keep it simple", "ask for help"])
            first, second = rng.choice(things), rng.choice(things)
            sentence = f"About {first}, I noticed that {second} works better when I {habit}."
        else:
            sentence = rng.choice(FILLER)
        sentences.append(sentence)
        count += len(sentence.split())
    return f"Quick question about {topic}. " + " ".join(sentences)


def generate(seed: int, target_tokens: int, *, start: datetime | None = None) -> Conversation:
    """Messages until about `target_tokens` (estimated at 1.3 tokens per word) have been produced."""
    rng = random.Random(seed)
    clock = start or datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
    conversation = Conversation()
    produced = 0
    index = 0
    planted = list(PLANTED)
    corrections = list(CORRECTIONS)
    while produced < target_tokens:
        # A session: a handful of exchanges, then a gap of hours to days.
        for _ in range(rng.randint(3, 9)):
            topic, things = rng.choice(TOPICS)
            text = _paragraph(rng, topic, things, rng.randint(50, 600))
            if planted and rng.random() < 0.15:
                key, sentence, needle = planted.pop(0)
                text = f"{sentence} {text}"
                conversation.facts[key] = needle
            elif not planted and corrections and rng.random() < 0.1:
                key, sentence, needle = corrections.pop(0)
                text = f"{sentence} {text}"
                conversation.facts[key] = needle
            conversation.messages.append(text_message(f"u{index}", "user", text, clock))
            clock += timedelta(seconds=rng.randint(20, 120))
            reply_words = rng.randint(40, 250)
            reply: list[str] = []
            while sum(len(s.split()) for s in reply) < reply_words:
                reply.append(rng.choice(ASSISTANT))
            conversation.messages.append(
                Message(
                    id=f"a{index}",
                    role="assistant",
                    created_at=clock,
                    parts=[Part(type="text", text=" ".join(reply), created_at=clock)],
                )
            )
            produced += int((len(text.split()) + reply_words) * 1.3)
            clock += timedelta(minutes=rng.randint(1, 8))
            index += 1
        clock += timedelta(hours=rng.choice([3, 10, 26, 50, 170]))
    return conversation
