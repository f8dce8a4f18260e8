"""Chit-chat around the planted facts: user small talk and assistant replies, built from fragments.

Fragments are combined at random (seeded), so no two filler turns need be alike and the whole reads as a
long everyday conversation. No fragment holds any value of `facts.py` (the generator checks it), so a
value found in a text was planted, never filler.
"""

from __future__ import annotations

import random

USER_OPENERS = (
    "Morning!",
    "Hey, quick one.",
    "Okay, so",
    "Random thought:",
    "Back again.",
    "Hi there.",
    "Ugh, long day.",
    "So I was thinking",
    "Right,",
    "Hello again.",
    "Not urgent, but",
    "Honestly,",
)
USER_TOPICS = (
    "I keep meaning to organise the hall cupboard but every weekend disappears somehow.",
    "the weather has been so grey that I barely want to leave the house.",
    "I tried a new recipe for lentil soup and it came out far too salty.",
    "my neighbours are renovating again and the drilling starts at eight sharp.",
    "I watched a documentary about deep sea creatures and now I can't stop reading about octopuses.",
    "work has been a stream of meetings that could have been emails.",
    "I want to get better at going to bed before midnight.",
    "I found an old box of photos in the attic and lost an entire afternoon to it.",
    "the train was delayed twice this week and I missed the start of a call.",
    "I'm trying to drink more water but I forget as soon as I sit down.",
    "I've been thinking about repainting the living room something warmer.",
    "there's a jigsaw puzzle on our dining table that nobody is allowed to touch.",
    "I started a small herb garden on the balcony, mostly basil and mint.",
    "the supermarket reorganised every aisle and I wandered around lost.",
    "I need a better system for all the receipts piling up on my desk.",
    "I got caught in the rain without an umbrella, classic.",
    "my sleep has been all over the place since the clocks changed.",
    "I'm thinking of taking a pottery class, it looks so calming.",
    "our internet dropped out during a video call and I had to reconnect three times.",
    "I spent the evening sorting out the cables behind the television.",
    "I want to plan meals for the week so I stop ordering takeaway.",
    "I finally cleaned out the fridge and found things I don't want to talk about.",
    "somebody at work brought in homemade cinnamon rolls and the whole floor smelled amazing.",
    "I've been trying to read more instead of scrolling on my phone at night.",
    # Small talk with names, numbers, places and times of its own, so that keeping every sentence with a
    # name or a number is not a way to keep exactly the planted facts.
    "my colleague Marcus asked me to cover his shift on Saturday from 9 to 5.",
    "I paid 42 dollars for parking downtown, which is robbery.",
    "we drove 130 kilometres to see the lakes near Hallstatt last weekend.",
    "the plumber, a guy called Dennis, said he'd come back on Tuesday at 10.",
    "my aunt Gloria sent a parcel from Seville with three jars of olives.",
    "the 7:40 bus was cancelled again so I walked 25 minutes in the drizzle.",
    "I bought 2 kilos of tomatoes at the Saturday market for a big batch of sauce.",
    "Jenny from accounting is running the Brighton 10k and wants sponsors.",
    "the new bakery on Elm Street sells sourdough for 6 pounds a loaf.",
    "my neighbour Frank lent me his ladder and I still haven't returned it after 3 weeks.",
    "there was a 40 minute queue at the post office on Monday.",
    "Rachel and Tom invited us to a barbecue on Sunday afternoon.",
    "I counted 14 tabs open on my browser and felt personally attacked.",
    "the museum in Ghent has a free entry day on the first Wednesday of each month.",
    "I spent 3 hours assembling a bookshelf that was supposed to take 45 minutes.",
    "Uncle Harold turned 70 and gave a speech that lasted far too long.",
)
USER_CLOSERS = (
    "Any thoughts?",
    "What would you do?",
    "Just venting a bit.",
    "Does that make sense?",
    "Any tips?",
    "Anyway.",
    "How do people manage this?",
    "",
    "",
)
ASSISTANT_OPENERS = (
    "That sounds familiar to a lot of people.",
    "Thanks for sharing that.",
    "Oh, I hear you.",
    "That's a good thing to notice.",
    "Fair enough.",
    "That makes a lot of sense.",
    "Ha, that happens more often than you'd think.",
    "Good question.",
)
ASSISTANT_ADVICE = (
    "Breaking it into small steps, ten minutes at a time, usually makes it feel less daunting.",
    "Setting a gentle reminder on your phone can help until it becomes a habit.",
    "It might help to pick one evening a week and protect it for exactly that.",
    "A simple checklist on the fridge is surprisingly effective for things like this.",
    "Sometimes the easiest fix is to lower the bar and just start with something small.",
    "You could try pairing it with something you already do every day, like your morning tea.",
    "Writing it down before bed tends to take it off your mind.",
    "A short walk outside, even in bad weather, often resets the whole day.",
    "Many people find that 20 minutes of tidying on Sunday evening keeps the week calmer.",
    "A friend of mine swears by the two-minute rule: if it takes less, do it now.",
    "Some people schedule it for 8 pm on a weekday so the weekend stays free.",
    "It's worth asking a friend to do it with you, since company makes chores lighter.",
    "Keeping a notebook by the door for quick notes can save a lot of hunting later.",
    "Batching similar tasks together saves more energy than it seems.",
    "Being a little kinder to yourself about it will probably help more than any system.",
)
ASSISTANT_CLOSERS = (
    "Let me know how it goes.",
    "Want me to suggest a plan?",
    "I'm happy to help you think it through.",
    "How does that sound?",
    "",
    "",
)
#: The assistant's answer to a planted fact: an acknowledgement that never repeats the value.
ACKNOWLEDGEMENTS = (
    "Got it, thanks for letting me know.",
    "Noted! That's good to know.",
    "Oh nice, I'll keep that in mind.",
    "Thanks, that's helpful context.",
    "Understood. Is there anything you'd like to do about it?",
    "Ah, good to know. Anything I can help with there?",
    "Okay, I've got that.",
)


def user_small_talk(rng: random.Random) -> str:
    return _join(rng.choice(USER_OPENERS), rng.choice(USER_TOPICS), rng.choice(USER_CLOSERS))


def assistant_reply(rng: random.Random) -> str:
    return _join(
        rng.choice(ASSISTANT_OPENERS), *rng.sample(ASSISTANT_ADVICE, 3), rng.choice(ASSISTANT_CLOSERS)
    )


def acknowledgement(rng: random.Random) -> str:
    return rng.choice(ACKNOWLEDGEMENTS)


def every_fragment() -> tuple[str, ...]:
    return (
        USER_OPENERS
        + USER_TOPICS
        + USER_CLOSERS
        + ASSISTANT_OPENERS
        + ASSISTANT_ADVICE
        + ASSISTANT_CLOSERS
        + ACKNOWLEDGEMENTS
    )


def _join(*pieces: str) -> str:
    return " ".join(p for p in pieces if p)
