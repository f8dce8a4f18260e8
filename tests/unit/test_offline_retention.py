"""What the offline Observer and Reflector keep (issue 33): names, numbers, dates, places and preferences
survive observation and every later reflection; an update replaces the value it updates; repetition is
merged; priorities follow the Observer rules (user facts 🔴, assistant gist 🟡, chatter dropped or 🟢).

Everything runs through `local_reply` with the prompts the engine builds, so the tests see what the
service stores, not a helper's view of it.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from om_core.observer.prompt import (
    ObserverPromptOptions,
    build_observer_system_prompt,
    build_observer_user_message,
    parse_observer_output,
)
from om_core.reflector.prompt import (
    ReflectorPromptOptions,
    build_reflector_system_prompt,
    build_reflector_user_message,
    parse_reflector_output,
)
from om_local.extractive import local_reply
from om_local.reflector import count_tokens, reflect_observations

OBSERVER_SYSTEM = build_observer_system_prompt(ObserverPromptOptions(thread_title=False))
REFLECTOR_SYSTEM = build_reflector_system_prompt(
    ReflectorPromptOptions(observer_instructions=OBSERVER_SYSTEM)
)

CHATTER = (
    "haha ok, thanks for that",
    "the weather has been grey all week and I barely left the house",
    "sorry, got distracted, where were we",
    "that makes sense I guess, I will think about it",
)
ASSISTANT = "That makes sense. Many people feel that way, and it helps to take one small step at a time."
_PEOPLE = ("Aiko", "Bram", "Celia", "Dario", "Elif", "Femi", "Goran", "Hana")
_TOWNS = ("Leeds", "Aarhus", "Namur", "Parma", "Oulu", "Zadar", "Trier", "Cadiz")


def _anecdote(index: int) -> str:
    """A detail of the day with a name, a place and a number: what fills the log and forces reflection."""
    person, town = _PEOPLE[index % 8], _TOWNS[(index * 3) % 8]
    return f"{person} and I drove to {town} and paid {20 + index * 7} euros for parking"


def _transcript(day: str, turns: list[str], hour: int = 9) -> str:
    lines = [f"{day}:"]
    for minute, text in enumerate(turns):
        lines.append(f"User ({hour}:{minute * 2:02d} AM): {text}")
        lines.append(f"Assistant ({hour}:{minute * 2 + 1:02d} AM): {ASSISTANT}")
    return "\n".join(lines)


def _observe(transcript: str, previous: str = "") -> str:
    user = build_observer_user_message(
        transcript=transcript,
        previous_observations=previous,
        previous_truncated=False,
        prior_current_task=None,
        prior_suggested_response=None,
        prior_thread_title=None,
        include_hints=False,
    )
    return parse_observer_output(local_reply(OBSERVER_SYSTEM, user)).observations


def _reflect(log: str, target: int, level: int = 0) -> str:
    user = build_reflector_user_message(
        log, level=level, target_tokens=target, manual_prompt=None, include_hints=False
    )
    return parse_reflector_output(local_reply(REFLECTOR_SYSTEM, user)).observations


def _session(index: int) -> str:
    """A day of chatter and anecdotes, as the user would post it."""
    turns = [CHATTER[n % len(CHATTER)] if n % 2 else _anecdote(index * 10 + n) for n in range(10)]
    return _transcript(f"Feb {index + 1} 2026", turns)


def _lifetime(first_day: list[str], later: Sequence[tuple[str, list[str]]] = (), sessions: int = 12) -> str:
    """Observe `first_day`, then `sessions` days of chatter and anecdotes (with `later` days at their place),
    reflecting to a 600-token target whenever the log passes it, as the engine does."""
    log = _observe(_transcript("Jan 5 2026", first_day))
    extra = dict(later)
    for index in range(sessions):
        transcript = _session(index)
        if f"Feb {index + 1} 2026" in extra:
            transcript += "\n" + _transcript(f"Feb {index + 1} 2026", extra[f"Feb {index + 1} 2026"], hour=11)
        log = (log + "\n" + _observe(transcript, previous=log)).strip()
        if count_tokens(log) >= 600:
            log = _reflect(log, 600)
            assert count_tokens(log) < 600
    return log


@pytest.mark.parametrize(
    ("statement", "kept"),
    [
        ("My dog is called Biscuit and she hates the vacuum.", "Biscuit"),  # a name
        ("Our door code at the new flat is 4817.", "4817"),  # a number
        ("My dentist appointment is on March 14.", "March 14"),  # a date
        ("I live in Tallinn with my partner.", "Tallinn"),  # a place
        ("I prefer oat milk in my coffee.", "oat milk"),  # a preference
    ],
)
def test_each_kind_of_fact_survives_observation_and_many_reflections(statement: str, kept: str) -> None:
    log = _lifetime([CHATTER[0], statement, CHATTER[1]])
    assert kept in log
    assert "grey all week" not in log  # the chatter around it did not


def test_a_relative_date_is_kept_as_the_date_it_means() -> None:
    # Jan 5, 2026 is a Monday: "next Friday" is read as the coming one.
    log = _lifetime(["Our flight to Oslo is next Friday, so I need to pack soon."])
    assert "flight to Oslo is next Friday (meaning January 9, 2026)" in log


@pytest.mark.parametrize(
    ("said", "meaning"),
    [
        ("the exam is in two weeks", "(meaning January 19, 2026)"),
        ("I started the course three days ago", "(meaning January 2, 2026)"),
        ("the move is next month", "(meaning February 2026)"),
        ("the wedding is the day after tomorrow", "(meaning January 7, 2026)"),
        ("our trip is in March", "(estimated March 2026)"),
        ("we visited Graz last weekend", "(meaning January 3-4, 2026)"),
    ],
)
def test_relative_dates_are_resolved_against_the_message_date(said: str, meaning: str) -> None:
    observations = _observe(_transcript("Jan 5 2026", [f"Just so you know, {said}."]))
    assert meaning in observations


def test_vague_times_get_no_date() -> None:
    observations = _observe(
        _transcript("Jan 5 2026", ["I will call my sister Maya soon, she moved recently."])
    )
    assert "Maya" in observations and "(meaning" not in observations and "(estimated" not in observations


def test_a_move_is_observed_as_an_update_and_replaces_where_the_user_lived() -> None:
    log = _lifetime(
        ["I live in Lisbon, near the river.", "My sister Ana lives in Lisbon too."],
        later=[("Feb 6 2026", ["Big news: I moved from Lisbon to Porto last weekend!"])],
    )
    assert "User updated: they moved from Lisbon to Porto" in log
    assert "they live in Lisbon" not in log  # the user's old home is replaced ...
    assert "sister Ana lives in Lisbon" in log  # ... their sister's is not


def test_an_updated_amount_replaces_the_old_one() -> None:
    log = _lifetime(
        ["Our rent is 950 euros a month."],
        later=[("Feb 4 2026", ["Update: our rent went up to 1020 euros after the renovation."])],
    )
    assert "1020 euros" in log
    assert "950 euros" not in log


def test_a_fact_said_again_is_kept_once() -> None:
    first = _observe(_transcript("Jan 5 2026", ["My cat is called Pixel."]))
    second = _observe(_transcript("Jan 9 2026", ["My cat is called Pixel."]))  # a new session, no context
    log = first + "\n" + second + "\n" + _observe(_session(0))
    reflected = _reflect(log, count_tokens(log) - 1)
    assert reflected.count("cat is called Pixel") == 1


def test_priorities_follow_the_observer_rules() -> None:
    transcript = _transcript(
        "Jan 5 2026",
        ["haha ok thanks!", "My sister Maya lives in Lisbon and I prefer trains to planes."],
    )
    transcript += "\nAssistant (9:30 AM): Lisbon to Madrid by train takes about 9 hours via Entroncamento."
    lines = _observe(transcript).splitlines()
    user = [line for line in lines if "User stated" in line]
    assert user and all(line.startswith("* 🔴 ") for line in user)
    assert any("Maya" in line for line in user) and any("prefer trains" in line for line in user)
    assistant = [line for line in lines if "Assistant" in line or "Entroncamento" in line]
    assert assistant and all(line.startswith("* 🟡 ") for line in assistant)
    assert not any("haha" in line for line in lines)  # chatter next to facts is dropped


def test_reflection_drops_no_fact_while_dropping_chatter_is_enough() -> None:
    facts = [f"* 🔴 (09:{n:02d}) User stated {_anecdote(n)}" for n in range(20)]
    chatter = [f"* 🟡 (10:{n:02d}) Assistant: it helps to take one small step at a time" for n in range(20)]
    low = [f"* 🟢 (11:{n:02d}) User said the weather was grey again, number {n}" for n in range(20)]
    log = "\n".join(["Date: Jan 5, 2026", *facts, *chatter, *low])
    target = count_tokens("\n".join(["Date: Jan 5, 2026", *facts])) + 40
    reflected = reflect_observations(log, target=target, level=0)
    assert count_tokens(reflected) < target
    for line in facts:
        assert line in reflected


def test_reflection_lands_just_under_its_target_not_far_below() -> None:
    log = "\n".join(
        ["Date: Jan 5, 2026", *(f"* 🔴 (09:{n % 60:02d}) User stated {_anecdote(n)}" for n in range(120))]
    )
    target = int(count_tokens(log) * 0.8)
    reflected = reflect_observations(log, target=target, level=0)
    assert int(target * 0.9) <= count_tokens(reflected) < target


def test_a_question_is_high_only_when_it_names_a_value() -> None:
    lines = _observe(
        _transcript(
            "Jan 5 2026", ["What would you do in my place?", "Can you find a table at Casa Azul for May 3?"]
        )
    ).splitlines()
    assert "* 🟡 (09:00) User asked: What would you do in my place?" in lines
    assert "* 🔴 (09:02) User asked: Can you find a table at Casa Azul for May 3?" in lines


@pytest.mark.parametrize(
    ("message", "kept"),
    [
        ("The builder's quote for the new roof came in at $18,450.", "$18,450"),  # a thousands separator
        ("New figure for the party: €3,200.", "€3,200"),  # a bare value after its lead-in
        (
            "My usual lunch at work is a miso soup with rice.",
            "miso soup",
        ),  # a lasting fact, no name or number
        ("We picked a puppy from the shelter and called him Pretzel.", "Pretzel"),  # after a dropped lead-in
        ("Last time I ate mango my lips swelled up, so I avoid it completely.", "mango"),
        ("Nothing beats a flat white after lunch.", "flat white"),  # a preference in other words
        ("Ugh. Our chess club finally beat the champions last night.", "chess club"),  # a dated event
        (  # where they come from outranks an anecdote with more numbers in it
            "The tram was 25 minutes late at 8 on Monday. Anyway, whenever I smell the sea I think of "
            "Brest, where I spent my childhood.",
            "Brest where they spent their childhood",
        ),
    ],
)
def test_a_fact_is_kept_whatever_its_sentence_looks_like(message: str, kept: str) -> None:
    lines = _observe(_transcript("Jan 5 2026", [message])).splitlines()
    assert any(kept in line and line.startswith("* 🔴 ") for line in lines), lines


@pytest.mark.parametrize(
    "message",
    [
        "Trip plans changed, it's Iceland now.",
        "The Tuesday yoga class now starts at 7:30 pm.",
        "Scrap what I said before, the party is at Lena's place.",
    ],
)
def test_a_change_is_observed_as_an_update(message: str) -> None:
    assert "User updated: " in _observe(_transcript("Jan 5 2026", [message]))


def test_a_long_clause_keeps_the_value_at_its_end() -> None:
    message = "So I was thinking The alarm code for our allotment shed at the back is 7731."
    assert "is 7731" in _observe(_transcript("Jan 5 2026", [message]))


def test_older_lines_of_one_date_are_merged_before_any_fact_is_dropped() -> None:
    older = [f"* 🔴 (09:{n:02d}) User stated {_anecdote(n)}" for n in range(12)]
    recent = [f"* 🔴 (10:{n:02d}) User stated {_anecdote(50 + n)}" for n in range(6)]
    log = "\n".join(["Date: Jan 5, 2026", *older, "Date: Jan 6, 2026", *recent])
    target = int(count_tokens(log) * 0.85)  # only removing repeated bullets, markers and times gets there
    reflected = reflect_observations(log, target=target, level=0)
    assert count_tokens(reflected) < target
    for n in range(12):
        assert _anecdote(n) in reflected  # every statement, whole
    assert len([line for line in reflected.splitlines() if line.startswith("* ")]) < len(older) + len(recent)


def test_merged_lines_keep_who_said_what() -> None:
    older = [
        f"* 🔴 (09:{n:02d}) Ana stated her bike lock code is {1000 + n}"
        if n % 2
        else f"* 🔴 (09:{n:02d}) Ben stated his bike lock code is {1000 + n}"
        for n in range(16)
    ]
    recent = [f"* 🔴 (10:{n:02d}) User stated {_anecdote(50 + n)}" for n in range(6)]
    log = "\n".join(["Date: Jan 5, 2026", *older, "Date: Jan 6, 2026", *recent])
    reflected = reflect_observations(log, target=int(count_tokens(log) * 0.85), level=0)
    lines = [line for line in reflected.splitlines() if line.startswith("* ")]
    assert len(lines) < len(older) + len(recent)  # merged
    assert all("his " not in line for line in lines if "Ana stated" in line)
    assert all("her " not in line for line in lines if "Ben stated" in line)
    for n in range(16):
        assert str(1000 + n) in reflected
