"""How long a statement deserves to stay in memory: value tiers shared by the local Observer and Reflector.

Counting names, numbers and dates tells a fact from chatter, but not one fact from another: "On June 10 we
drove to Leeds and paid 40 euros for parking" has more specifics than "I prefer green tea without sugar",
yet the second is what an assistant must still know months later. A model Observer and Reflector weigh
this naturally; the extractive stand-ins use these tiers (the Reflector ranks lines by tier first and by
specifics only within a tier; the Observer adds a bonus per tier to its clause score):

- `CORRECTION`: the user corrects or updates something ("Correction: …", "actually …", "went up to",
  "X, not Y", "no longer"). Losing it leaves the memory wrong, not just incomplete;
- `CRITICAL`: a health or diet constraint about a person (forgetting it can hurt someone);
- `PROFILE`: a lasting fact about the user: what something of theirs is or is called ("my cat is called
  Pixel", "our rent is 950 euros"), what they are or prefer ("I'm a nurse", "I prefer green tea"), a
  lasting change ("I moved to Ghent"), or a commitment with a date or amount ("the thesis deadline is
  3 June");
- `SPECIFIC`: any other statement with a name, number or date: an anecdote or a detail of the moment;
- `PLAIN`: the rest.

Every pattern accepts both the user's own words (I, my, we, our) and the Observer's third-person rendering
of them (they, their), so a statement keeps its tier from the transcript into the log and through every
later reflection.

`supersedes(new, old)` decides whether a correction replaces an earlier statement: both must be about the
same thing (same subject noun or the same name or the same event) and carry the same kind of value (an
amount, a date, a place). It is deliberately strict: merging two unrelated facts loses one of them.
"""

from __future__ import annotations

import re
from enum import IntEnum
from functools import lru_cache

__all__ = [
    "Tier",
    "is_correction",
    "is_profile_fact",
    "salience",
    "subject_keys",
    "supersedes",
]


class Tier(IntEnum):
    PLAIN = 0
    SPECIFIC = 1
    PROFILE = 2
    CRITICAL = 3
    CORRECTION = 4


_SELF = r"(?:i|we|they)"
_POSSESSIVE = r"(?:my|our|their)"
_COPULA = r"(?:is|are|was|were|'s|has been|have been|will be|went (?:up|down) to|lives?|works?|stays?)"

_CORRECTION_RE = re.compile(
    r"\b(?:correction|correcting|to correct|i meant|they meant|scratch that|my mistake|their mistake"
    r"|i was wrong|they were wrong|no longer|not any ?more|instead of|changed (?:to|from)|has changed"
    r"|have changed|went (?:up|down) to|(?:is|are|'s|'re|am|'m) now|now (?:is|are|lives?|works?|prefers?)"
    r"|updated to|actually|changed|scrap (?:that|what)|forget what (?:i|they) said|plans? changed"
    r"|now (?:starts?|begins?|ends?|costs?|takes?|opens?|closes?|runs?|meets?)"
    r"|new (?:number|date|time|address|total|figure|price|deadline|schedule) for)\b"
    r"|\b(?:is|are|'s|'re) (?:[\w'-]+ ){0,3}now\s*[.!]?\s*$"  # "it's Patagonia now"
    # "I moved from Lisbon to Porto", "we switched from Vodafone to Digi": the new value and the old one
    r"|\b(?:moved|moving|relocated|switched|switching|changed|went|upgraded|transferred|swapped)\s+from\s+"
    r"(?:[\w'-]+\s+){1,3}?to\b",
    re.IGNORECASE,
)
#: "… on the fifth of March, not the third": a value followed by the one it replaces.
_NOT_THE_OTHER_RE = re.compile(
    r",\s*not (?:the |on |in |at )?(?!(?:really|yet|sure|much|quite|exactly|always|now|too|that|so)\b)"
    r"[\w'-]+\s*[.!]?\s*$",
    re.IGNORECASE,
)

_CRITICAL_RE = re.compile(
    r"\b(?:allergic|allergy|allergies|intolerant|intolerance|vegetarian|vegan|diabetic|celiac|coeliac"
    r"|pregnant|diagnosed|medication|wheelchair|kosher|halal)\b",
    re.IGNORECASE,
)
_PERSON_RE = re.compile(
    r"\b(?:i|i'm|my|me|we|we're|our|he|he's|she|she's|his|her|they|they're|their)\b", re.IGNORECASE
)

#: "my sister Ana lives in Bruges", "their locker number at the gym is 118": something of theirs, what it is.
_POSSESSIVE_STATE_RE = re.compile(
    rf"(?:^|[,;:]\s*|\b(?:that|and|but)\s+){_POSSESSIVE}\s+(?:[\w'-]+\s+){{0,10}}?{_COPULA}\b"
    r"(?!\s+(?:not\s+)?[\w'-]+ing\b)",  # "my partner is coming": a plan of the moment, not a lasting state
    re.IGNORECASE,
)
#: "I'm allergic", "they are a nurse"; not moods or moments ("I'm going", "I'm tired").
_SELF_STATE_RE = re.compile(
    rf"\b{_SELF}(?:'m|'re| am| are)\s+(?!(?:not|so|just|still|also|really|going|trying|thinking|sure|a bit"
    r"|tired|happy|sad|glad|sorry|excited|busy|fine|ok|okay|good|great|bored|stressed|worried|nervous"
    r"|confused|done|ready|back|here|there|curious|afraid|about|able|free|late|early|off|out|in|on)\b)"
    r"(?![\w'-]+ing\b)[\w'-]+",
    re.IGNORECASE,
)
#: Preferences, where they live and work, and changes that last ("moved", "switched", "retired").
_SELF_LASTING_RE = re.compile(
    rf"\b{_SELF}\s+(?:(?:really|also|now|strongly|always|usually)\s+)?"
    r"(?:prefer|(?:love|like)(?! (?:the idea|it|that|this|how|when|what)\b)|hate|dislike|avoid|can't stand"
    r"|cannot stand|live|work|study|own"
    r"|moved|relocated|married|divorced|switched|quit|retired|adopted|got married|got divorced"
    r"|have (?:a|an|two|three|four|\d+)|go by|am called|are called)\b",
    re.IGNORECASE,
)
#: Where they come from: "the town where I spent my childhood", "they grew up in Graz", "I was born in Cork".
_ORIGIN_RE = re.compile(
    rf"\b{_SELF}\s+(?:grew up|was born|were born|am from|are from|come from|spent {_POSSESSIVE} childhood)\b"
    rf"|\b{_POSSESSIVE}\s+(?:hometown|home town|childhood)\b",
    re.IGNORECASE,
)
_NAME_IS_RE = re.compile(r"\b(?:my|their|our) name is\b|\b(?:is|are) (?:called|named)\b", re.IGNORECASE)
#: A dated or budgeted commitment named as the subject ("the report deadline is Friday 14 November").
_COMMITMENT_RE = re.compile(
    r"\b(?:deadline|birthday|anniversary|appointment|due date|budget|flight|booking|reservation|wedding"
    r"|exam|interview|check-in|surgery)\s+(?:(?!(?:and|but|or|with|then|which|than)\b)[\w'-]+\s+){0,6}?"
    r"(?:is|are|was|falls|went|moved)\b",
    re.IGNORECASE,
)

_NUMBER_RE = re.compile(r"\d")
_DATE_RE = re.compile(
    r"\b(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sep(?:t(?:ember)?)?"
    r"|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?|mondays?|tuesdays?|wednesdays?|thursdays?|fridays?"
    r"|saturdays?|sundays?|tomorrow|yesterday|weekend|\d{1,2}(?:st|nd|rd|th))\b"
    r"|\b(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|[a-z]+teenth|[a-z]+tieth) of\b",
    re.IGNORECASE,
)
_MONEY_RE = re.compile(
    r"[$€£¥]\s?\d|\d[\d,.]*\s?(?:€|euros?|dollars?|usd|eur|gbp|pounds?|bucks|k\b)", re.IGNORECASE
)
_NAME_RE = re.compile(r"(?<![.!?:;]\s)(?<!^)\b[A-Z][a-z][\w'-]*")
_NOT_NAMES = frozenset(
    {
        "User", "Assistant", "They", "Their", "The", "This", "That", "On", "In", "At", "About", "Correction",
        "Update", "Actually", "January", "February", "March", "April", "May", "June", "July", "August",
        "September", "October", "November", "December", "Monday", "Tuesday", "Wednesday", "Thursday",
        "Friday", "Saturday", "Sunday", "I", "I'm", "It", "We", "My", "Our", "Last", "Next",
    }
)  # fmt: skip
_SPEAKER_RE = re.compile(r"^(?:user|assistant)\s+(?:stated|said|updated|corrected|asked)\s*:?\s*", re.I)


def is_correction(text: str) -> bool:
    """The statement corrects or updates something said before."""
    return bool(_CORRECTION_RE.search(text) or _NOT_THE_OTHER_RE.search(text))


def is_profile_fact(text: str) -> bool:
    """A lasting fact about the user (see the module docstring), in their words or the Observer's."""
    return bool(
        _POSSESSIVE_STATE_RE.search(text)
        or _SELF_STATE_RE.search(text)
        or _SELF_LASTING_RE.search(text)
        or _NAME_IS_RE.search(text)
        or _ORIGIN_RE.search(text)
        or _COMMITMENT_RE.search(text)
    )


def _is_critical(text: str) -> bool:
    return bool(_CRITICAL_RE.search(text) and _PERSON_RE.search(text))


def _names(text: str) -> set[str]:
    return {name for name in _NAME_RE.findall(_SPEAKER_RE.sub("", text)) if name not in _NOT_NAMES}


def _is_specific(text: str) -> bool:
    return bool(_NUMBER_RE.search(text) or _DATE_RE.search(text) or _names(text))


@lru_cache(maxsize=8192)  # a Reflector ranks the same lines many times while it condenses a log
def salience(text: str, *, correction: bool | None = None) -> Tier:
    """The tier of one statement. `correction` overrides the cue check when the caller saw the cue in words
    that were trimmed away ("Correction: …" before the clause)."""
    corrects = correction if correction is not None else is_correction(text)
    if corrects and (_is_specific(text) or is_profile_fact(text)):
        return Tier.CORRECTION
    if _is_critical(text):
        return Tier.CRITICAL
    if is_profile_fact(text):
        return Tier.PROFILE
    if _is_specific(text):
        return Tier.SPECIFIC
    return Tier.PLAIN


# --- which earlier statement a correction replaces -------------------------------------------------------

_STOP = frozenset(
    {
        "the", "a", "an", "of", "to", "in", "on", "at", "for", "and", "or", "but", "is", "are", "was", "were",
        "be", "been", "has", "have", "had", "went", "go", "goes", "up", "down", "after", "before", "not",
        "they", "their", "them", "i", "my", "me", "we", "our", "us", "it", "its", "this", "that", "with",
        "from", "by", "now", "no", "longer", "actually", "correction", "update", "updated", "user",
        "stated", "corrected", "whole", "more", "than", "cent", "still", "just", "really", "also", "every",
        "other", "so", "as", "about", "into", "over", "will", "would", "should", "could", "can", "do", "does",
    }
)  # fmt: skip
_POSSESSED_RE = re.compile(rf"\b{_POSSESSIVE}\s+(?P<noun>[a-z][\w'-]*)", re.IGNORECASE)
_THE_SUBJECT_RE = re.compile(
    r"^(?:the|a|an)\s+(?:[\w'-]+\s+)?(?P<noun>[a-z][\w'-]*)\s+(?:to|of|for|is|was)\b", re.IGNORECASE
)
_SELF_VERB_RE = re.compile(rf"\b{_SELF}\s+(?P<verb>[a-z]+ed)\b", re.IGNORECASE)
_WORD_RE = re.compile(r"[a-z0-9][\w'-]*", re.IGNORECASE)
#: Where the user lives and who they work for: one value each, so a move or a new job replaces the old
#: one whatever words the two statements share ("they live in Lisbon" / "they moved to Porto"). Only the
#: user's own (I, we, they), never a third person's ("their sister lives in Lisbon").
_SELF_RELATIONS = (
    (
        "residence",
        re.compile(
            rf"\b{_SELF}\s+(?:(?:still|now|currently|just|recently|finally)\s+)?(?:live|lived|moved|relocated"
            r"|(?:am|are|'m|'re) (?:living|based))\b",
            re.IGNORECASE,
        ),
    ),
    (
        "employer",
        re.compile(
            rf"\b{_SELF}\s+(?:(?:still|now|currently|just|recently|finally)\s+)?(?:work(?:ed)? (?:at|for)"
            r"|joined|(?:am|are|'m|'re) employed (?:at|by))\b",
            re.IGNORECASE,
        ),
    ),
)


def _stem(word: str) -> str:
    word = word.lower().strip("'")
    for suffix in ("ing", "ed", "es", "s", "e"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


@lru_cache(maxsize=8192)
def subject_keys(text: str) -> frozenset[str]:
    """What a statement is about: the nouns it says are theirs ("their budget"), the noun it opens with
    ("the move to Ghent"), the past event the user reports ("they moved"), and the names it holds."""
    body = _SPEAKER_RE.sub("", text.strip())
    keys = {_stem(m.group("noun")) for m in _POSSESSED_RE.finditer(body)}
    opening = _THE_SUBJECT_RE.match(body)
    if opening:
        keys.add(_stem(opening.group("noun")))
    keys |= {_stem(m.group("verb")) for m in _SELF_VERB_RE.finditer(body)}
    keys |= {name.lower() for name in _names(body)}
    keys |= {f"<{relation}>" for relation, pattern in _SELF_RELATIONS if pattern.search(body)}
    return frozenset(key for key in keys if key not in _STOP)


def _value_kinds(text: str) -> set[str]:
    kinds = set()
    if _MONEY_RE.search(text):
        kinds.add("amount")
    elif _NUMBER_RE.search(text):
        kinds.add("number")
    if _DATE_RE.search(text):
        kinds.add("date")
    return kinds


def supersedes(new: str, old: str) -> bool:
    """Whether `new`, a statement the user made as a correction (its cue may have been trimmed, as in the
    Observer's "User updated: …" lines), replaces the earlier statement `old`: same subject, same kind of
    value, other wording."""
    new_keys = subject_keys(new)
    shared = new_keys & subject_keys(old)
    if not shared:
        return False
    relations = {key for key in new_keys if key.startswith("<")}
    if relations and not relations & shared:
        return False  # a move replaces where the user lived, not what else was said of that place
    names_new, names_old = _names(new) - {s.capitalize() for s in shared}, _names(old)
    same_kind = bool(_value_kinds(new) & _value_kinds(old)) or bool(
        names_new and names_old - {n for n in names_old if n.lower() in shared}
    )
    if any(key.startswith("<") for key in shared):  # where they live, who they work for: one value each
        same_kind = same_kind or bool(_names(new) and _names(old))
    return same_kind and _content(new) != _content(old)


def _content(text: str) -> frozenset[str]:
    return frozenset(_stem(w) for w in _WORD_RE.findall(_SPEAKER_RE.sub("", text)) if w.lower() not in _STOP)
