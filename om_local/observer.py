"""The offline Observer heuristic behind `om-local/extractive` (reads §5.3 transcripts, writes §5.2 output).

Why it exists: tests, demos and air-gapped deployments need the whole memory cycle to run with no model
API, and they need it to behave like a model that *compresses*: facts survive, chatter does not. So it
reads the same prompt a real Observer gets and answers in the same format, extracting rather than
generating:

- user clauses that carry a fact (a name, a number, a date, money, a place, a stated preference, a health
  or diet constraint) become 🔴 "User stated …" lines, first person turned into third; questions become
  "User asked: …", 🔴 when they name a value, 🟡 when not. A short message keeps all its facts; a longer one
  keeps every lasting fact about the user (their pet's name, where they live, what they prefer, a dated
  commitment: `om_local.salience`) and its best other facts (anecdotes, details of the day) within a word
  budget that grows with the square root of its length. Chatter with no fact (greetings, moods, thanks)
  gets no line (a batch of nothing but chatter gets one 🟢 line, so the Observer never answers with
  nothing);
- a relative date the user gives ("next Friday", "in two weeks", "three days ago", "last month",
  "in March") is resolved against the message's date and appended to its line as `(meaning <date>)`, or
  `(estimated <period>)` when it names a week, month or year; vague words ("soon", "recently") are not;
- a correction or change ("Correction: …", "actually …", "went up to …", "X, not Y", "moved from Lisbon
  to Porto", "no longer …") is kept whatever the budget and becomes a 🔴 "User updated: …" line of its
  own, so it visibly replaces the earlier statement (§5.2 state changes) and the Reflector drops that
  statement at the next reflection;
- each assistant message becomes one 🟡 line: its most informative sentence (or the introduction of the
  list it gave) plus the entities it named;
- tool calls become 🟡 "Called <tool> (key args)" with the result's gist nested under it, and a run of
  calls to the same tool is grouped under one parent line;
- reasoning, system reminders and gap markers are skipped.

Everything is a pure function of the prompt text, so the same prompt always yields the same output.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any

from om_local.salience import Tier, is_correction, is_profile_fact, salience

__all__ = [
    "HINTS_SUPPRESSED_RE",
    "TRANSCRIPT_HEADING_RE",
    "Sections",
    "extract_prior_hint",
    "has_fact",
    "hints_suppressed",
    "is_observer_prompt",
    "normalize_for_dedup",
    "observe_prompt",
    "observe_transcript",
    "requested_sections",
    "shorten",
    "split_sentences",
    "summarize_text",
]

#: Longest observation line, in words (a line is a memory entry, not a paragraph).
MAX_LINE_WORDS = 40
#: Longest kept clause of a user message, in words.
MAX_CLAUSE_WORDS = 12
#: How many words a user message's statements may keep grows with the square root of its length: a
#: medium message keeps most of its facts, a long ramble is summarised (100 words -> 20, 400 -> 40).
USER_WORDS_PER_ROOT = 2.0
#: Messages up to this many words keep every fact they state ("short messages almost verbatim");
#: longer ones keep at least `MIN_USER_WORDS`.
SHORT_USER_WORDS = 20
MIN_USER_WORDS = 20
#: Longest assistant lead sentence, and whole assistant line with its entities, in words.
MAX_LEAD_WORDS = 12
MAX_ASSISTANT_WORDS = 18
RESULT_GIST_CHARS = 200
#: Added to a user clause's score by its `om_local.salience` tier (health constraints already score high).
TIER_BONUS = {Tier.PROFILE: 3, Tier.CORRECTION: 6}

TRANSCRIPT_HEADING_RE = re.compile(
    r"^#{1,6}[ \t]*New Message History to Observe\b.*$", re.MULTILINE | re.IGNORECASE
)
_TASK_HEADING_RE = re.compile(r"^#{1,6}[ \t]*Your Task\b.*$", re.MULTILINE | re.IGNORECASE)
_PREVIOUS_HEADING_RE = re.compile(r"^#{1,6}[ \t]*Previous Observations\b.*$", re.MULTILINE | re.IGNORECASE)
_ANY_HEADING_RE = re.compile(r"^#{1,6}[ \t]+\S.*$", re.MULTILINE)
HINTS_SUPPRESSED_RE = re.compile(r"output only (?:the )?<observations>", re.IGNORECASE)
_THREAD_BLOCK_RE = re.compile(r"<thread id=\"(?P<id>[^\"]+)\">(?P<body>.*?)</thread>", re.DOTALL)

_MONTH_ABBR = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_MONTH_FULL = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip
_MONTH_NUMBER = {name.lower(): i + 1 for names in (_MONTH_ABBR, _MONTH_FULL) for i, name in enumerate(names)}
_MONTH_NUMBER["sept"] = 9
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")

# --- transcript line grammar ----------------------------------------------------------------------------

_TIME = r"\d{1,2}:\d{2}[ \t]?[AaPp]\.?[Mm]\.?"
_DATE_LINE_RE = re.compile(r"^(?P<month>[A-Za-z]{3,9})\.? (?P<day>\d{1,2}),? (?P<year>\d{4}):[ \t]*$")
_TOOL_LINE_RE = re.compile(
    rf"^Tool (?P<kind>Call|Result|Error|Denied) (?P<name>\S+?)(?: \((?P<time>{_TIME})\))?:(?: (?P<body>.*))?$"
)
_KNOWN_TITLES = ("User", "Assistant", "System", "Tool", "Reasoning", "system-reminder", "Image", "File")
#: A speaker's name after the role ("User Alice"), as `om_client.messages.SPEAKER_NAME_PATTERN` allows it.
_SPEAKER = r"[\w.'-](?:[\w .'-]{0,62}?[\w.'-])?"
_TITLED_LINE_RE = re.compile(
    rf"^(?P<title>{'|'.join(_KNOWN_TITLES)})(?: \((?P<time>{_TIME})\))?:(?: (?P<body>.*))?$"
)
_SPEAKER_LINE_RE = re.compile(
    rf"^(?P<title>User|Assistant) (?P<speaker>{_SPEAKER})(?: \((?P<time>{_TIME})\))?:(?: (?P<body>.*))?$"
)
_SIGNAL_LINE_RE = re.compile(rf"^(?P<title>[A-Za-z][\w.-]{{0,40}}) \((?P<time>{_TIME})\):(?: (?P<body>.*))?$")
_GAP_LINE_RE = re.compile(rf"^\((?P<time>{_TIME})\):(?: (?P<body>.*))?$")
_TIME_PARTS_RE = re.compile(r"(?P<hour>\d{1,2}):(?P<minute>\d{2})[ \t]?(?P<ampm>[AaPp])")

_REMINDER_BLOCK_RE = re.compile(r"<system-reminder\b[^>]*>.*?</system-reminder>", re.DOTALL | re.IGNORECASE)
_CODE_FENCE_RE = re.compile(r"```.*?(?:```|\Z)", re.DOTALL)
_TRUNCATION_NOTE_RE = re.compile(r"\n?\.\.\. \[truncated [^\]]*\]\s*$")

# --- what makes a clause worth keeping ----------------------------------------------------------------------

_WORD_RE = re.compile(r"[A-Za-z0-9€$£][\w'’€$£%./:-]*")
_NUMBER_RE = re.compile(r"\d")
_DATE_WORD_RE = re.compile(
    r"\b(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sep(?:t(?:ember)?)?"
    r"|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?|mondays?|tuesdays?|wednesdays?|thursdays?|fridays?"
    r"|saturdays?|sundays?|tomorrow|yesterday|weekend|next (?:week|month|year)"
    r"|last (?:night|week|month|year))\b",
    re.IGNORECASE,
)
_MONEY_RE = re.compile(
    r"[$€£¥]|\b(?:euros?|dollars?|usd|eur|gbp|pounds?|bucks|budget|price|costs?|salary|rent)\b", re.IGNORECASE
)
_CRITICAL_RE = re.compile(
    r"\b(?:allergic|allergy|allergies|intolerant|intolerance|vegetarian|vegan|diabetic|celiac|coeliac"
    r"|pregnant|diagnosed|medication|wheelchair|kosher|halal)\b",
    re.IGNORECASE,
)
#: A clause whose object is a bare pronoun ("I never sleep on them") means little without the sentence
#: before it; it needs a name or a number to stand on its own.
_DANGLING_RE = re.compile(r"\b(?:them|it|this|that|those|these)\s*[.!?]?$", re.IGNORECASE)
#: Health and diet words only matter when said about someone ("I'm allergic", not "allergy card").
_PERSON_RE = re.compile(
    r"\b(?:i|i'm|my|me|we|we're|our|he|he's|she|she's|his|her|they|they're|their)\b", re.I
)
_STRONG_PREFERENCE_RE = re.compile(
    r"\b(?:prefer(?:s|red)?|love[sd]?|hate[sd]?|favou?rite|can't stand|cannot stand|rather|avoid"
    r"|don't like|dislike[sd]?|birthday|anniversary|deadline|married|divorced|moved|switched|quit|retired"
    r"|(?:is|are|was) (?:called|named)|my name is|work(?:s|ed)? (?:as|at|for)|nothing beats"
    r"|can't live without|big fan of|go-to|swear by|obsessed with|addicted to|allergic|intolerant)\b",
    re.IGNORECASE,
)
_WEAK_RE = re.compile(
    r"\b(?:want(?:s|ed)?|need(?:s|ed)?|plan(?:s|ned|ning)?|will|won't|going to|like to|likes|wish|hope"
    r"|always|never"
    r"|today|tonight|morning|evening|spring|summer|autumn|fall|winter|partner|wife|husband|sister|brother"
    r"|mother|mom|mum|father|dad|son|daughter|kids?|children|dog|cat|boss|friend)\b|\b[A-Za-z]+'ll\b",
    re.IGNORECASE,
)
_NOT_NAMES = frozenset(
    {
        "I", "I'm", "I've", "I'll", "I'd", "OK", "Ok", "Okay", "Hi", "Hey", "Hello", "Thanks", "Thank", "Yes",
        "No", "Haha", "Lol", "Oh", "Well", "So", "And", "But", "Also", "Sure", "Please", "Great", "Cool",
        "Nice", "Yeah", "Yep", "Hmm", "Wow", "Anyway", "Honestly", "Btw", "Then", "Maybe", "Just", "The",
        "This", "That", "These", "Those", "It", "It's", "We", "We're", "You", "You're", "My", "Our", "Let's",
        "Their", "They", "They're", "He", "She", "His", "Her", "Here", "There", "What", "When", "Where",
    }
)  # fmt: skip
_LEADING_MARKERS_RE = re.compile(
    r"^(?:okay|ok|so|and|also|but|anyway|anyways|oh|wow|well|yeah|yes|hey|hi|plus|then|um+|uh+|hmm+|haha+"
    r"|lol|honestly|alright|right|remember(?: that)?|note that|fyi|just so you know"
    r"|one more thing(?: though)?|quick update|by the way)\b[,!.:]?\s*",
    re.IGNORECASE,
)
_FILLER_RE = re.compile(
    r"\b(?:honestly|basically|literally|totally|actually|really|just|super|pretty much|you know|i mean"
    r"|kind of|sort of|to be honest|by the way|anyways?|haha+|lol|um+|uh+|before i forget"
    r"|the (?:big |good |bad |main )?news is(?: that)?)\b[,!]?\s*",
    re.IGNORECASE,
)
#: A decision the user made ("let's go with Casa Azul"): what the next turns build on.
_SELF_DISCLOSURE_RE = re.compile(
    r"^\s*(?:my|our|i am|i'm|i've|i have|i own|i live|i work|i moved|i signed|i prefer|i was born|"
    r"i study|i should mention)\b",
    re.IGNORECASE,
)
#: The user's own plan ("we'd go", "I'll fly", "we're going to"): with a date, it is a commitment (§5.2).
_INTENT_RE = re.compile(
    r"\b(?:i|we)(?:'ll|'d| will| would| want to| need to| plan to| intend to| hope to|'m going to"
    r"|'re going to| am going to| are going to)\s+(?!like\b|love\b|say\b|think\b)\w+",
    re.IGNORECASE,
)
#: What a dated plan of the user adds to the score of the clause holding its date.
DATED_PLAN_BONUS = 2
_CHOICE_RE = re.compile(
    r"\b(?:let's go with|go with|i'll take|we'll take|i choose|we choose|i picked|we picked"
    r"|book(?:ed)? the)\b",
    re.IGNORECASE,
)
_DECISION_RE = re.compile(
    r"\b(?:go with|choose|chose|pick|picked|use|let's|lets|please|yes|approve|approved|confirm|confirmed"
    r"|cancel|stop|continue|proceed|skip|book|do it|go ahead)\b",
    re.IGNORECASE,
)
_REQUEST_RE = re.compile(
    r"^(?:please |can you |could you |would you |help |find |show |tell |write |make |create |fix |book "
    r"|plan |recommend |suggest |give |explain |list |check |look |draft |add |update |remove |let's )",
    re.IGNORECASE,
)
_CLAUSE_SPLIT_RE = re.compile(
    r"(?:,(?!\d{3}\b)|;| — | – | - |: )\s*"  # not the comma of "$27,300"
    r"|\s+(?=(?:and|but|so|because|which|although|though|whereas|while|where)\s)",
    re.IGNORECASE,
)
#: Words that only link a clause to the one before it; a kept clause stands alone without them.
_CLAUSE_OPENER_RE = re.compile(r"^(?:but|and|so|also|plus|then|probably|maybe|perhaps)\s+", re.IGNORECASE)
#: A relative clause that says more about the thing before it ("Kalispell, where I spent my childhood").
_DESCRIBING_RE = re.compile(r"(?:where|who|which|whose)\b", re.IGNORECASE)
_RELATIVE_START_RE = re.compile(r"^(?:which|who|whom|whose|where|that|and|so|because)\b", re.IGNORECASE)
_SENTENCE_END_RE = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9€$£])")
_ABBREVIATIONS = ("e.g.", "i.e.", "Mr.", "Mrs.", "Ms.", "Dr.", "St.", "vs.", "etc.", "approx.", "No.")
_LIST_ITEM_RE = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+")
_BOLD_RE = re.compile(r"\*\*(?P<text>[^*]+)\*\*")
_MARKDOWN_RE = re.compile(r"(\*\*|__|`|^#+\s*)", re.MULTILINE)

_PRONOUNS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), replacement)
    for pattern, replacement in (
        (r"\bI am\b", "they are"),
        (r"\bI'm\b", "they're"),
        (r"\bI was\b", "they were"),
        (r"\bI've\b", "they've"),
        (r"\bI'd\b", "they'd"),
        (r"\bI'll\b", "they'll"),
        (r"\bI\b", "they"),
        (r"\bmy\b", "their"),
        (r"\bMy\b", "Their"),
        (r"\bmine\b", "theirs"),
        (r"\bmyself\b", "themselves"),
        (r"\bme\b", "them"),
        (r"\bwe're\b", "they're"),
        (r"\bWe're\b", "They're"),
        (r"\bwe\b", "they"),
        (r"\bWe\b", "They"),
        (r"\bour\b", "their"),
        (r"\bOur\b", "Their"),
        (r"\bours\b", "theirs"),
        (r"\bus\b", "them"),
    )
)


def has_fact(text: str) -> bool:
    """A line worth keeping when everything else goes: it names someone/something or holds a number."""
    return bool(_NUMBER_RE.search(text)) or bool(_names(text, first_is_start=False))


def _names(text: str, *, first_is_start: bool) -> list[str]:
    names: list[str] = []
    for index, word in enumerate(_WORD_RE.findall(text)):
        if index == 0 and first_is_start:
            continue
        bare = word.strip(".,:;!?'’\"")
        if len(bare) < 2 or bare in _NOT_NAMES or bare.lower() in _MONTH_NUMBER or bare.lower() in _WEEKDAYS:
            continue
        if bare[0].isupper() or any(ch.isupper() for ch in bare[1:]):
            names.append(bare)
    return names


#: "… and I'll send you a photo": said to the assistant, about the conversation, not a fact about the user.
_TO_THE_ASSISTANT_RE = re.compile(r"\byou(?:'ll|'re)?\b", re.IGNORECASE)


def _holds_value(text: str) -> bool:
    """A name, a number or a date: what a question about the past is most often answered with."""
    return bool(_NUMBER_RE.search(text) or _DATE_WORD_RE.search(text) or _names(text, first_is_start=False))


def _score(text: str, *, first_is_start: bool = True) -> int:
    """How much a clause says about the world: 0 is chatter, 2 or more is a fact worth a line."""
    score = 0
    for pattern in (_NUMBER_RE, _DATE_WORD_RE, _MONEY_RE):
        if pattern.search(text):
            score += 2
    if not _DATE_WORD_RE.search(text) and _RELATIVE_RE.search(text):
        score += 2  # "in two weeks", "three days ago": a date once resolved
    if score < 2 and not _RELATIVE_START_RE.match(text) and is_profile_fact(text):
        score = 2  # "my usual order is a cold brew": a lasting fact about the user, with no name or number
    if _STRONG_PREFERENCE_RE.search(text):
        score += 3  # what the user likes, avoids or decided says more about them than a passing name
    if _names(text, first_is_start=first_is_start):
        score += 2
    if _CRITICAL_RE.search(text) and _PERSON_RE.search(text):
        score += 4
    if _CHOICE_RE.search(text):
        score += 2
    if _SELF_DISCLOSURE_RE.search(text) and (_NUMBER_RE.search(text) or _names(text, first_is_start=True)):
        score += 2  # concrete facts about the user themselves (my sister Maya, my bib is 7318) come first
    if _WEAK_RE.search(text):
        score += 1
    standalone = _NUMBER_RE.search(text) or _names(text, first_is_start=True)
    if _DANGLING_RE.search(text) and not standalone:
        score = max(0, score - 2)
    return score


def _words(text: str) -> list[str]:
    return text.split()


def _clean(text: str) -> str:
    """Normalise quotes and spacing, drop filler words and leading discourse markers."""
    text = text.replace("’", "'").replace("‘", "'").replace("“", '"').replace("”", '"')
    text = _FILLER_RE.sub("", text)
    text = re.sub(r"\s+", " ", text).strip()
    text = re.sub(r"\s+([,.;:!?])", r"\1", text)
    previous = None
    while previous != text:
        previous = text
        text = _LEADING_MARKERS_RE.sub("", text).lstrip(" ,;-–—")
    return text.strip(" ,;-–—")


def split_sentences(text: str) -> list[str]:
    """Sentences, with list items and paragraphs as their own units; abbreviations do not split."""
    units: list[str] = []
    for paragraph in re.split(r"\n\s*\n|\n(?=\s*(?:[-*•]|\d+[.)])\s)", text):
        flat = " ".join(line.strip() for line in paragraph.splitlines() if line.strip())
        if not flat:
            continue
        protected = flat
        for abbreviation in _ABBREVIATIONS:
            protected = protected.replace(abbreviation, abbreviation.replace(".", "\0"))
        for piece in _SENTENCE_END_RE.split(protected):
            piece = piece.replace("\0", ".").strip()
            if piece:
                units.append(piece)
    return units


def _is_question(sentence: str) -> bool:
    return sentence.rstrip(" \"')").endswith("?")


def _cut_words(text: str, max_words: int) -> str:
    words = _words(text)
    if len(words) <= max_words:
        return text
    return " ".join(words[:max_words]).rstrip(",;:") + " …"


def _cut_clause(text: str, max_words: int) -> str:
    """`text` cut to `max_words`, from the end when only the end holds its value ("so I was thinking the
    entry code for our building's front door is 2295": the code, not the musing, is the fact)."""
    words = _words(text)
    if len(words) <= max_words:
        return text
    head, tail = " ".join(words[:max_words]), " ".join(words[-max_words:])
    if _holds_value(tail) and not _holds_value(head):
        return "… " + tail
    return _cut_words(text, max_words)


def _split_clauses(sentence: str) -> list[str]:
    return [piece.strip() for piece in _CLAUSE_SPLIT_RE.split(sentence) if piece and piece.strip()]


def _fact_clauses(sentence: str) -> list[tuple[int, str, int]]:
    """(index, clause, score) of the clauses of `sentence` that state a fact, each cut to
    `MAX_CLAUSE_WORDS`.

    A clause that only continues the one before it ("which I love", "and he hates crowds") is merged into
    it when that one is kept, and dropped otherwise, so no kept fact starts in the middle of a thought.
    """
    kept: list[tuple[int, str, int]] = []
    clauses = _split_clauses(sentence)
    for index, clause in enumerate(clauses):
        score = _score(clause, first_is_start=index == 0)
        continues = bool(_RELATIVE_START_RE.match(clause))
        joined = False
        describes = bool(_DESCRIBING_RE.match(clause)) and is_profile_fact(clause)  # "…, where I grew up"
        if continues and kept and kept[-1][0] == index - 1 and (score >= 2 or describes):
            _, previous, previous_score = kept[-1]
            kept[-1] = (
                index,
                f"{previous} {_cut_words(clause, MAX_CLAUSE_WORDS)}",
                max(previous_score, score),
            )
            continue
        if continues and index > 0 and not _TO_THE_ASSISTANT_RE.search(clause):
            # A fact after a lead-in that was not kept is still a fact. With a name, number or date of its
            # own, a short lead-in is its subject ("Aiko | and I drove to Leeds") and a longer one stays out
            # ("… | and called her Tofu"); a lasting fact without one needs its lead-in to say what it is
            # about ("Last time I had kiwi fruit my throat swelled up | so I avoid it completely").
            lead = clauses[index - 1]
            if _holds_value(clause):
                clause = f"{lead} {clause}" if len(_words(lead)) <= 3 else _CLAUSE_OPENER_RE.sub("", clause)
                continues = False
            elif score >= 2 and len(_words(lead)) <= MAX_CLAUSE_WORDS and is_profile_fact(clause):
                clause, continues, joined = f"{lead}, {clause}", False, True
        if len(_words(clause)) < 2 and index > 0 and _holds_value(clause):
            # "New number for the wedding: $11,600": a bare value means what its lead-in says
            clause = f"{clauses[index - 1]} {clause}"
            score = max(score, 2)
        if score < 2 or len(_words(clause)) < 2 or continues:
            continue
        clause = _CLAUSE_OPENER_RE.sub("", clause) or clause
        kept.append((index, _cut_clause(clause, MAX_CLAUSE_WORDS + (6 if joined else 0)), score))
    return kept


_PIECE_SPLIT_RE = re.compile(r"(;\s+|,\s+|\s+[—–]\s+)")


def _best_pieces(text: str, budget: int) -> str:
    """The first piece (it holds the subject) plus the most valuable other pieces that fit (lasting facts
    about the user before details of the moment, then the most specific), in order, each keeping the
    separator it had."""
    parts = _PIECE_SPLIT_RE.split(text)
    pieces, separators = parts[0::2], ["", *parts[1::2]]
    ranked = sorted(
        range(len(pieces)),
        key=lambda i: (
            i != 0,
            -salience(pieces[i]),
            -_score(pieces[i], first_is_start=i == 0),
            len(_words(pieces[i])),
            i,
        ),
    )
    chosen: set[int] = set()
    used = 0
    for index in ranked:
        cost = len(_words(pieces[index]))
        if chosen and used + cost > budget:
            continue
        chosen.add(index)
        used += cost
    kept = ""
    for index in sorted(chosen):
        kept += (separators[index] if kept else "") + pieces[index]
    return _cut_words(kept, budget)


_RESOLVED_SUFFIX_RE = re.compile(r"\s*\((?:meaning|estimated)[^()]*\)\s*$")


def shorten(text: str, max_words: int) -> str:
    """Fit `text` into `max_words` by dropping its least factual clauses (then cutting words if one
    clause alone is too long). A trailing `(meaning …)` date stays attached."""
    suffix_match = _RESOLVED_SUFFIX_RE.search(text)
    suffix = suffix_match.group(0).strip() if suffix_match else ""
    body = text[: suffix_match.start()] if suffix_match else text
    budget = max(1, max_words - len(_words(suffix)))
    if len(_words(body)) > budget:
        body = _best_pieces(body, budget)
    return f"{body} {suffix}".strip()


def _third_person(text: str) -> str:
    for pattern, replacement in _PRONOUNS:
        text = pattern.sub(replacement, text)
    return text


def _lower_first(text: str) -> str:
    if not text:
        return text
    first = text.split(" ", 1)[0]
    if first in {"I", "I'm", "I've", "I'll", "I'd"} or _names(first, first_is_start=False):
        return text
    return text[0].lower() + text[1:]


def _strip_end(text: str) -> str:
    return text.rstrip(" .!;,:")


def normalize_for_dedup(line: str) -> str:
    """Comparable form of an observation: no bullet, marker, time or punctuation, lower case."""
    text = re.sub(r"^\s*[*-]\s*", "", line)
    text = re.sub(r"^(?:🔴|🟡|🟢|✅|->)\s*", "", text)
    text = re.sub(r"^\(\d{1,2}:\d{2}(?:\s*[AaPp]\.?[Mm]\.?)?\)\s*", "", text)
    return re.sub(r"[^\w]+", " ", text.lower()).strip()


# --- relative dates ---------------------------------------------------------------------------------------


def _long_date(day: date) -> str:
    return f"{_MONTH_FULL[day.month - 1]} {day.day}, {day.year}"


_COUNT_WORDS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "a couple of": 2, "a few": 3,
}  # fmt: skip
_COUNT = r"(?:\d{1,3}|a couple of|a few|an?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)"
_UNIT = r"(?:days?|weeks?|months?)"
_RELATIVE_RE = re.compile(
    r"\b(?P<word>yesterday|last night|tomorrow|the day after tomorrow|the day before yesterday)\b"
    r"|\b(?P<which>next|this|last|this coming|coming) (?P<weekday>monday|tuesday|wednesday|thursday|friday"
    r"|saturday|sunday)\b"
    rf"|\bin (?P<in_n>{_COUNT}) (?P<in_unit>{_UNIT})(?: time)?\b"
    rf"|\b(?P<ago_n>{_COUNT}) (?P<ago_unit>{_UNIT}) ago\b"
    r"|\b(?P<weekend>this|next|last) weekend\b"
    r"|\b(?P<period_which>next|last) (?P<period>week|month|year)\b"
    r"|\bin (?P<month>january|february|march|april|june|july|august|september|october|november|december)\b",
    re.IGNORECASE,
)
_PAST_TENSE_RE = re.compile(r"\b(?:was|were|went|did|had|got|moved|started|finished|ago|last)\b", re.I)


def _count(word: str) -> int:
    return int(word) if word.isdigit() else _COUNT_WORDS.get(word.lower(), 1)


def _shift_months(anchor: date, months: int) -> date:
    index = anchor.year * 12 + anchor.month - 1 + months
    return date(index // 12, index % 12 + 1, 1)


def _month_year(day: date) -> str:
    return f"{_MONTH_FULL[day.month - 1]} {day.year}"


def _span(anchor: date, n: int, unit: str) -> date | str:
    """`n` units after `anchor` (negative: before): a day for days and weeks, a month for months."""
    unit = unit.lower()
    if unit.startswith("month"):
        return _month_year(_shift_months(anchor, n))
    return anchor + timedelta(days=n * (7 if unit.startswith("week") else 1))


def _resolve_relative(text: str, anchor: date | None) -> str | None:
    """`(meaning <date>)` for the first resolvable relative reference, `(estimated <date>)` when it names
    a period rather than a day ("next week", "in March"); vague words ("soon", "recently") are left
    alone, and a reference to the message's own month is not repeated (§5.2 temporal anchoring)."""
    if anchor is None:
        return None
    match = _RELATIVE_RE.search(text)
    if match is None:
        return None
    for group, resolve in _RESOLVERS:
        if match.group(group):
            return resolve(match, anchor, text)
    return None


def _meaning(moment: date | str) -> str:
    return f"(meaning {moment if isinstance(moment, str) else _long_date(moment)})"


def _resolve_word(match: re.Match[str], anchor: date, text: str) -> str:
    word = match.group("word").lower()
    delta = {"yesterday": -1, "last night": -1, "tomorrow": 1, "the day after tomorrow": 2}.get(word, -2)
    return _meaning(anchor + timedelta(days=delta))


def _resolve_weekday(match: re.Match[str], anchor: date, text: str) -> str:
    target = _WEEKDAYS.index(match.group("weekday").lower())
    which = match.group("which").lower()
    if which == "last":
        return _meaning(anchor - timedelta(days=(anchor.weekday() - target) % 7 or 7))
    ahead = (target - anchor.weekday()) % 7
    return _meaning(anchor + timedelta(days=(ahead or 7) if which == "next" else ahead))


def _resolve_in(match: re.Match[str], anchor: date, text: str) -> str | None:
    if _PAST_TENSE_RE.search(text):
        return None  # "we saw 3 cities in 9 days": a duration, not a date
    return _meaning(_span(anchor, _count(match.group("in_n")), match.group("in_unit")))


def _resolve_ago(match: re.Match[str], anchor: date, text: str) -> str:
    return _meaning(_span(anchor, -_count(match.group("ago_n")), match.group("ago_unit")))


def _resolve_period(match: re.Match[str], anchor: date, text: str) -> str:
    step = 1 if match.group("period_which").lower() == "next" else -1
    period = match.group("period").lower()
    if period == "year":
        return _meaning(str(anchor.year + step))
    if period == "month":
        return _meaning(_month_year(_shift_months(anchor, step)))
    monday = anchor - timedelta(days=anchor.weekday()) + timedelta(days=7 * step)
    return f"(estimated week of {_long_date(monday)})"


def _resolve_month(match: re.Match[str], anchor: date, text: str) -> str | None:
    month = _MONTH_NUMBER[match.group("month").lower()]
    past = bool(_PAST_TENSE_RE.search(text))
    if month == anchor.month:
        return None  # the message's own month: nothing to add
    year = anchor.year
    if month < anchor.month and not past:
        year += 1  # "in March", said in November about a plan: next year's March
    elif month > anchor.month and past:
        year -= 1
    return f"(estimated {_MONTH_FULL[month - 1]} {year})"


def _resolve_weekend(match: re.Match[str], anchor: date, text: str) -> str:
    which = match.group("weekend").lower()
    saturday = anchor + timedelta(days=(5 - anchor.weekday()) % 7)
    saturday += timedelta(days={"next": 7, "last": -7}.get(which, 0))
    sunday = saturday + timedelta(days=1)
    if sunday.month == saturday.month:
        return f"(meaning {_MONTH_FULL[saturday.month - 1]} {saturday.day}-{sunday.day}, {saturday.year})"
    return _meaning(saturday)


_RESOLVERS: tuple[tuple[str, Callable[[re.Match[str], date, str], str | None]], ...] = (
    ("word", _resolve_word),
    ("weekday", _resolve_weekday),
    ("in_n", _resolve_in),
    ("ago_n", _resolve_ago),
    ("period", _resolve_period),
    ("month", _resolve_month),
    ("weekend", _resolve_weekend),
)


# --- transcript parsing -----------------------------------------------------------------------------------


@dataclass
class _Entry:
    """One titled transcript line plus its continuation lines."""

    kind: str
    title: str
    tool: str | None
    day: date | None
    minutes: int | None
    lines: list[str] = field(default_factory=list)
    #: Who wrote the message when the transcript names them ("User Alice"): several people, one thread.
    speaker: str | None = None

    @property
    def subject(self) -> str:
        """Who an observation of a user entry is about: the speaker's name, else "User"."""
        return self.speaker or "User"

    @property
    def body(self) -> str:
        return "\n".join(self.lines).strip()


def _minutes(label: str) -> int | None:
    match = _TIME_PARTS_RE.search(label)
    if match is None:
        return None
    hour, minute = int(match.group("hour")) % 12, int(match.group("minute"))
    if match.group("ampm").lower() == "p":
        hour += 12
    return hour * 60 + minute if minute < 60 else None


def _date_line(line: str) -> date | None:
    match = _DATE_LINE_RE.match(line)
    if match is None:
        return None
    month = _MONTH_NUMBER.get(match.group("month").lower())
    if month is None:
        return None
    try:
        return date(int(match.group("year")), month, int(match.group("day")))
    except ValueError:
        return None


_TITLE_KINDS = {
    "User": "user",
    "Assistant": "assistant",
    "System": "system",
    "Tool": "tool-text",
    "Reasoning": "reasoning",
    "system-reminder": "reminder",
    "Image": "attachment",
    "File": "attachment",
}


def _head(line: str) -> tuple[str, str, str | None, str | None, str, str | None] | None:
    """(kind, title, tool name, time label, first body line, speaker) when `line` starts a transcript
    entry."""
    match = _TOOL_LINE_RE.match(line)
    if match:
        kind = "tool-" + match.group("kind").lower()
        return (
            kind,
            f"Tool {match.group('kind')}",
            match.group("name"),
            match.group("time"),
            match.group("body") or "",
            None,
        )
    match = _TITLED_LINE_RE.match(line) or _SPEAKER_LINE_RE.match(line)
    if match:
        title = match.group("title")
        speaker = match.groupdict().get("speaker")
        return _TITLE_KINDS[title], title, None, match.group("time"), match.group("body") or "", speaker
    match = _GAP_LINE_RE.match(line)
    if match:
        return "gap", "", None, match.group("time"), match.group("body") or "", None
    match = _SIGNAL_LINE_RE.match(line)
    if match:
        return "signal", match.group("title"), None, match.group("time"), match.group("body") or "", None
    return None


def _parse_transcript(text: str) -> list[_Entry]:
    entries: list[_Entry] = []
    day: date | None = None
    minutes: int | None = None
    current: _Entry | None = None
    for raw in text.splitlines():
        line = raw.rstrip()
        new_day = _date_line(line)
        if new_day is not None:
            day, minutes, current = new_day, None, None
            continue
        head = _head(line)
        if head is not None:
            kind, title, tool, label, body, speaker = head
            if label is not None:
                minutes = _minutes(label)
            current = _Entry(kind, title, tool, day, minutes, [body], speaker)
            entries.append(current)
        elif current is not None:
            current.lines.append(line)
    return entries


# --- observations -----------------------------------------------------------------------------------------


@dataclass
class _ToolCall:
    args: str
    outcome: str | None = None


@dataclass
class _Observation:
    day: date | None
    minutes: int | None
    marker: str
    text: str = ""
    tool: str | None = None
    calls: list[_ToolCall] = field(default_factory=list)

    def lines(self) -> list[str]:
        time = f"({self.minutes // 60:02d}:{self.minutes % 60:02d}) " if self.minutes is not None else ""
        text, subs = self._tool_text() if self.tool is not None else (self.text, [])
        return [f"* {self.marker} {time}{text}", *(f"  * -> {sub}" for sub in subs)]

    def _tool_text(self) -> tuple[str, list[str]]:
        if len(self.calls) == 1:
            call = self.calls[0]
            head = f"Called {self.tool}" + (f" ({call.args})" if call.args else "")
            return head, [call.outcome] if call.outcome else []
        subs = []
        for call in self.calls[:6]:
            label = call.args or "no args"
            subs.append(f"{label}: {call.outcome}" if call.outcome else label)
        if len(self.calls) > 6:
            subs.append(f"… {len(self.calls) - 6} more calls")
        return f"Called {self.tool} {len(self.calls)} times", subs


def _strip_reminders(text: str) -> str:
    return _REMINDER_BLOCK_RE.sub(" ", text)


@dataclass(frozen=True)
class _Fact:
    sentence: int
    clause: int
    text: str
    score: int
    question: bool = False
    tier: Tier = Tier.PLAIN

    @property
    def kept_whatever_the_budget(self) -> bool:
        """Health and diet constraints, corrections and lasting facts about the user (a name, where they
        live, what they prefer, a dated commitment) are kept however long the message: forgetting the
        first can hurt someone, forgetting the second leaves the memory wrong, and the third is what the
        user expects to be remembered. The budget only rations anecdotes and details of the moment."""
        critical = bool(_CRITICAL_RE.search(self.text) and _PERSON_RE.search(self.text))
        return critical or self.tier >= Tier.PROFILE

    @property
    def value(self) -> int:
        """The score plus a bonus for a lasting fact about the user or a correction, so "I prefer green tea"
        outranks an anecdote with a place, a date and an amount."""
        return self.score + TIER_BONUS.get(self.tier, 0)

    @property
    def cost(self) -> int:
        return len(_words(self.text))


def _user_facts(
    sentences: list[str], corrections: list[bool] | None = None
) -> tuple[list[_Fact], list[_Fact]]:
    """(facts, context clauses): fact clauses and questions, plus each sentence's opening clause, which
    is added back when one of its facts is kept and room remains ("I work as a translator, but …").

    `corrections[i]` says sentence i corrects something said before; its cue ("Correction:", "actually")
    may sit in words the clauses no longer hold, so it is read from the whole sentence."""
    facts: list[_Fact] = []
    contexts: list[_Fact] = []
    for index, sentence in enumerate(sentences):
        corrects = bool(corrections and corrections[index])
        if _is_question(sentence):
            if len(_words(sentence)) >= 3:
                facts.append(_Fact(index, 0, _cut_words(sentence, 12), 3 + _score(sentence), question=True))
            continue
        clauses = _fact_clauses(_strip_end(sentence))
        for clause_index, clause, score in clauses:
            tier = salience(clause, correction=True if corrects else None)
            if _INTENT_RE.search(sentence) and (_DATE_WORD_RE.search(clause) or _RELATIVE_RE.search(clause)):
                score += DATED_PLAN_BONUS
            facts.append(_Fact(index, clause_index, clause, score, tier=tier))
        if clauses and clauses[0][0] > 0:
            opening = _split_clauses(sentence)[0]
            if 3 <= len(_words(opening)) <= MAX_CLAUSE_WORDS + 4 and not _RELATIVE_START_RE.match(opening):
                tier = Tier.CORRECTION if corrects else Tier.PLAIN  # an update's context reads as the update
                contexts.append(_Fact(index, 0, _cut_words(opening, MAX_CLAUSE_WORDS - 2), 1, tier=tier))
    return facts, contexts


def _fact_key(fact: _Fact) -> str:
    return normalize_for_dedup(_third_person(fact.text))


def _select_facts(facts: list[_Fact], contexts: list[_Fact], budget: int) -> list[_Fact]:
    """The best statements that fit `budget` words (at least one; health and diet constraints and
    corrections always; lasting facts about the user rank above details of the moment), the
    opening clauses of their sentences while room remains, and the message's last two questions (they
    have their own allowance: a question is the user's request, never crowded out by facts). Returned in
    spoken order."""
    chosen = [fact for fact in facts if fact.question][-2:]
    used = 0
    statements = (f for f in facts if not f.question)
    for fact in sorted(statements, key=lambda f: (-f.value, f.sentence, f.clause)):
        if used and used + fact.cost > budget and not fact.kept_whatever_the_budget:
            continue
        chosen.append(fact)
        used += fact.cost
    chosen_sentences = {fact.sentence for fact in chosen if not fact.question}
    for context in contexts:
        covered = any(
            fact.sentence == context.sentence and context.text.rstrip(",;:. ") in fact.text for fact in chosen
        )
        if covered:
            continue  # the fact clause already carries its opening words
        if context.sentence in chosen_sentences and used + context.cost <= budget * 1.25:
            chosen.append(context)
            used += context.cost
    return sorted(chosen, key=lambda f: (f.sentence, f.clause))


def _user_observations(entry: _Entry, known: str = "") -> list[_Observation]:
    """The message's best facts in spoken order, packed into few lines ("User stated A; B; asked: Q?").

    Short messages keep every fact; longer ones a budget growing with the square root of their length
    (`USER_WORDS_PER_ROOT`), best facts first. Facts already in `known`
    (normalized text of earlier observations) are not stated again. A fact with a resolved relative date
    ends its line, so the `(meaning …)` annotation stays at the end of the line it belongs to.
    """
    raw_sentences = [raw for raw in split_sentences(_strip_reminders(entry.body)) if _clean(raw)]
    sentences = [_clean(raw) for raw in raw_sentences]
    word_count = sum(len(_words(s)) for s in sentences)
    facts, contexts = _user_facts(sentences, [is_correction(raw) for raw in raw_sentences])
    facts = [fact for fact in facts if fact.question or _fact_key(fact) not in known]
    if word_count <= SHORT_USER_WORDS:
        budget = word_count
    else:
        budget = max(MIN_USER_WORDS, math.ceil(USER_WORDS_PER_ROOT * math.sqrt(word_count)))
    segments: list[_Segment] = []
    for fact in _select_facts(facts, contexts, budget):
        source = sentences[fact.sentence] if fact.question else fact.text
        text = fact.text if fact.question else _lower_first(_third_person(fact.text))
        kind = "asked" if fact.question else "updated" if fact.tier == Tier.CORRECTION else "stated"
        previous = segments[-1] if segments else None
        if previous and previous.kind == kind != "asked" and previous.sentence == fact.sentence:
            previous.parts.append(text)
        else:
            segments.append(_Segment(kind, fact.sentence, [text]))
        segments[-1].resolved = segments[-1].resolved or _resolve_relative(source, entry.day)
    lines = _user_lines(segments, entry.subject)
    observations = [_observation(entry, _user_marker(line, entry.subject), line) for line in lines]
    if not observations and sentences and word_count <= 25 and _DECISION_RE.search(" ".join(sentences)):
        said = f"{entry.subject} said: " + _strip_end(" ".join(sentences))
        observations.append(_observation(entry, "🟢", said))
    return observations


def _user_marker(line: str, subject: str = "User") -> str:
    """🔴 for what the user states; a line of questions only is 🟡 unless it names a value (the seed's
    example: "🟡 User asked about middleware configuration"; "asked: a table near Alfama for May 3?" is
    a goal with its facts, 🔴)."""
    opening = f"{subject} asked:"
    questions_only = line.startswith(opening) and "; stated " not in line and "; updated:" not in line
    if questions_only and not _holds_value(line[len(opening) :]):
        return "🟡"
    return "🔴"


@dataclass
class _Segment:
    """Consecutive facts of one kind from one sentence ("stated" or "updated" clauses, or one "asked"
    question)."""

    kind: str
    sentence: int
    parts: list[str]
    resolved: str | None = None

    def render(self, continues: bool) -> str:
        text = ", ".join(self.parts)
        if continues:
            return text
        if self.kind == "stated":
            return f"stated {text}"
        return f"{self.kind}: {text}"


def _user_lines(segments: list[_Segment], subject: str = "User") -> list[str]:
    """Segments packed into lines of at most `MAX_LINE_WORDS`, each starting with `subject` ("User", or the
    speaker's name when several people share the thread); an update gets a line of its own, so it reads
    as replacing what was said before and a Reflector can match it against the statement it supersedes."""
    lines: list[str] = []
    current: list[str] = []
    last_kind: str | None = None
    size = 0
    for segment in segments:
        rendered = segment.render(continues=last_kind == segment.kind == "stated")
        words = len(_words(rendered))
        alone = segment.kind == "updated" or last_kind == "updated"
        if current and (alone or size + words > MAX_LINE_WORDS - 2):
            lines.append(f"{subject} " + "; ".join(current))
            current, size = [], 0
            rendered = segment.render(continues=False)
            words = len(_words(rendered))
        current.append(rendered)
        last_kind = segment.kind
        size += words
        if segment.resolved:
            lines.append(f"{subject} " + "; ".join(current) + f" {segment.resolved}")
            current, size, last_kind = [], 0, None
    if current:
        lines.append(f"{subject} " + "; ".join(current))
    return lines


def _observation(entry: _Entry, marker: str, text: str) -> _Observation:
    return _Observation(entry.day, entry.minutes, marker, text)


# --- assistant messages ------------------------------------------------------------------------------------

_OPENERS_RE = re.compile(
    r"^(?:sure|okay|ok|great|absolutely|of course|certainly|good question|great question|happy to help"
    r"|no problem|got it|good (?:morning|afternoon|evening)|what a [^.!?—]*|congratulations[^.!?]*"
    r"|thanks[^.!?]*|that sounds[^.!?]*|you're (?:very )?welcome"
    r"|it (?:has been|was) a pleasure[^.!?]*|i hope you[^.!?]*|enjoy[^.!?]*|good luck[^.!?]*"
    r"|have a (?:great|wonderful|lovely|nice)[^.!?]*)[,!.]?\s*",
    re.IGNORECASE,
)
_ASSISTANT_VERBS = (
    (re.compile(r"^here(?:'s| is) (?:how|what) .+$", re.IGNORECASE), "Assistant outlined steps"),
    (re.compile(r"^here (?:are|is) (?P<rest>.+)$", re.IGNORECASE), "Assistant provided {rest}"),
    (
        re.compile(
            r"^i(?: would|'d)? (?P<verb>recommend|suggest)(?:ed)?(?: that)? (?P<rest>.+)$", re.IGNORECASE
        ),
        "Assistant {verb}ed {rest}",
    ),
    (
        re.compile(
            r"^i(?:'ve| have)? (?P<verb>found|checked|updated|created|fixed|added|ran|removed|changed"
            r"|looked at|booked|wrote|drafted) (?P<rest>.+)$",
            re.IGNORECASE,
        ),
        "Assistant {verb} {rest}",
    ),
    (
        re.compile(r"^you (?P<verb>should|could|might|can) (?P<rest>.+)$", re.IGNORECASE),
        "Assistant advised: you {verb} {rest}",
    ),
)
_PROPER_NAME_RE = re.compile(r"\b[A-Z][\w'-]+(?: (?:de |da |do |of |the |del )?[A-Z][\w'-]+)*")
_MONEY_AMOUNT_RE = re.compile(
    r"[$€£]\s?\d[\d,.]*(?:/\w+)?|\d[\d,.]*\s?(?:€|euros?|dollars?|usd|eur)(?: per \w+)?", re.IGNORECASE
)
_QUANTITY_RE = re.compile(
    r"\d[\d,.-]*\s?(?:%|km|miles?|min(?:utes)?|hours?|nights?|days?|stars?|GB|MB|ms|s)\b", re.IGNORECASE
)


def _assistant_phrase(sentence: str) -> str:
    sentence = _strip_end(_MARKDOWN_RE.sub("", sentence))
    for pattern, template in _ASSISTANT_VERBS:
        match = pattern.match(sentence)
        if match:
            groups = {
                key: value.lower() if key == "verb" else value for key, value in match.groupdict().items()
            }
            return template.format(**groups)
    if _is_question(sentence):
        return "Assistant asked: " + sentence
    return "Assistant: " + sentence


_TRAILING_FUNCTION_WORDS_RE = re.compile(
    r"(?:\s+(?:a|an|the|than|rather|of|to|and|or|but|so|for|with|in|on|at|by|is|are|that|which))+$",
    re.IGNORECASE,
)


def _list_item_gist(line: str) -> str:
    """A list item's name plus the number that tells it apart (price, distance, rating …)."""
    body = _LIST_ITEM_RE.sub("", line).strip()
    bold = _BOLD_RE.search(body)
    head = (
        bold.group("text").strip() if bold else re.split(r"[:,;.]| – | — | - ", body, maxsplit=1)[0].strip()
    )
    head = " ".join(_strip_end(_MARKDOWN_RE.sub("", head)).split()[:5])
    head = _TRAILING_FUNCTION_WORDS_RE.sub("", head)
    detail = _MONEY_AMOUNT_RE.search(body) or _QUANTITY_RE.search(body)
    if detail and detail.group(0) not in head:
        return f"{head} {detail.group(0).strip()}"
    return head


def _assistant_entities(text: str, known: str) -> list[str]:
    """What a later question may need: list items, else the names and amounts the reply mentioned;
    anything already in `known` (the lead, earlier observations) is skipped."""
    entities = [_list_item_gist(line) for line in text.splitlines() if _LIST_ITEM_RE.match(line)]
    if not entities:
        for sentence in split_sentences(text):
            for match in _PROPER_NAME_RE.finditer(_MARKDOWN_RE.sub("", sentence)):
                words = match.group(0).split()
                if match.start() == 0:
                    words = words[1:]
                if words and " ".join(words) not in _NOT_NAMES:
                    entities.append(re.sub(r"'s$", "", " ".join(words)))
            entities.extend(match.group(0) for match in _MONEY_AMOUNT_RE.finditer(sentence))
    kept: list[str] = []
    seen = known.lower()
    for entity in entities:
        if entity and entity.lower() not in seen:
            seen += " " + entity.lower()
            kept.append(entity)
    return kept[:3]


def _lead_sentence(text: str) -> str | None:
    """The sentence that says what the reply was: the introduction of its list when the list comes
    early, else its most informative sentence among the first three (pleasantries skipped)."""
    sentences = [s for s in (_clean(_OPENERS_RE.sub("", raw)) for raw in split_sentences(text)) if s]
    statements = [s for s in sentences if not _is_question(s) and not _LIST_ITEM_RE.match(s)]
    lines = list(re.finditer(r"^.*$", text, re.MULTILINE))
    first_item = next((line for line in lines if _LIST_ITEM_RE.match(line.group(0))), None)
    if first_item is not None:
        intro = split_sentences(text[: first_item.start()])
        before = [s for s in (_clean(_OPENERS_RE.sub("", raw)) for raw in intro) if s]
        if before and not _is_question(before[-1]) and before[-1] in statements[:4]:
            return before[-1]
    candidates = statements[:3]
    if candidates:
        best = max(candidates, key=lambda s: (_lead_score(s), -candidates.index(s)))
        return best if _score(best) > 0 or len(_words(best)) >= 6 else None
    return None


def _lead_score(sentence: str) -> int:
    """Facts first, then how many distinct names and numbers the sentence carries."""
    details = len(set(_names(sentence, first_is_start=True))) + len(re.findall(r"\d+", sentence))
    return _score(sentence) + min(details, 4)


def _lead_gist(lead: str) -> str:
    """The lead's fact clauses, whole clauses only, within `MAX_LEAD_WORDS` (the first one is cut if it
    alone is too long)."""
    clauses = [clause for _, clause, _ in _fact_clauses(_strip_end(lead))] or [_strip_end(lead)]
    kept = [clauses[0]]
    for clause in clauses[1:]:
        if len(_words(", ".join([*kept, clause]))) > MAX_LEAD_WORDS:
            break
        kept.append(clause)
    return _cut_words(", ".join(kept), MAX_LEAD_WORDS)


def _assistant_observation(entry: _Entry, known: str) -> _Observation | None:
    text = _strip_reminders(_CODE_FENCE_RE.sub(" [code snippet] ", entry.body))
    lead = _lead_sentence(text)
    if lead is None:
        return None
    phrase = _assistant_phrase(_lead_gist(lead))
    listed: list[str] = []
    room = MAX_ASSISTANT_WORDS - len(_words(phrase)) - 1
    for entity in _assistant_entities(text, f"{phrase} {known}"):
        if len(_words("; ".join([*listed, entity]))) > room:
            break
        listed.append(entity)
    line = f"{phrase} ({'; '.join(listed)})" if listed else phrase
    return _Observation(entry.day, entry.minutes, "🟡", line)


# --- tool calls --------------------------------------------------------------------------------------------


def _scalar(value: Any, limit: int = 40) -> str | None:
    if isinstance(value, str):
        flat = re.sub(r"\s+", " ", value).strip()
        return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int | float):
        return str(value)
    return None


def _tool_args(body: str) -> str:
    """The first three arguments that fit on a line (`key=value`)."""
    try:
        value = json.loads(body)
    except ValueError:
        return _cut_chars(body, 80) if body and body != "[arguments unavailable]" else ""
    if not isinstance(value, dict):
        return _scalar(value, 80) or ""
    pairs = []
    for key, item in value.items():
        shown = _scalar(item)
        if shown is None and isinstance(item, list):
            scalars = [_scalar(element, 20) for element in item]
            joined = "/".join(s for s in scalars if s is not None)
            shown = joined if joined and len(joined) <= 40 and None not in scalars else f"[{len(item)} items]"
        if shown is not None:
            pairs.append(f"{key}={shown}")
        if len(pairs) == 3:
            break
    return ", ".join(pairs)


def _cut_chars(text: str, limit: int) -> str:
    flat = re.sub(r"\s+", " ", text).strip()
    if len(flat) <= limit:
        return flat
    cut = flat[: limit - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else cut).rstrip(" ,;:") + "…"


_LABEL_KEYS = ("name", "title", "id", "path", "file", "filename", "url", "key", "label")


def _record_gist(record: dict[str, Any], fields_shown: int = 2) -> str:
    """`Casa Azul (price=85)`: a record's label and its first other fields, numbers first."""
    label_key = next((key for key in _LABEL_KEYS if _scalar(record.get(key)) is not None), None)
    label = _scalar(record[label_key]) if label_key else None
    others = [(key, value) for key, value in record.items() if key != label_key]
    numbers = [(k, v) for k, v in others if isinstance(v, int | float) and not isinstance(v, bool)]
    texts = [(k, v) for k, v in others if isinstance(v, str)]
    fields = [f"{key}={_scalar(value, 30)}" for key, value in [*numbers, *texts][:fields_shown]]
    inner = ", ".join(fields)
    if label:
        return f"{label} ({inner})" if inner else label
    return inner or "{…}"


def _summarise_value(value: Any, depth: int = 0) -> str:
    shown = _scalar(value, 80)
    if shown is not None:
        return shown
    if isinstance(value, list):
        if not value:
            return "no items"
        if all(isinstance(item, dict) for item in value):
            records = "; ".join(_record_gist(item, 1 if len(value) > 1 else 3) for item in value[:3])
            return f"{len(value)} items: {records}" + ("; …" if len(value) > 3 else "")
        scalars = [s for s in (_scalar(item, 30) for item in value[:5]) if s is not None]
        return f"{len(value)} items: " + ", ".join(scalars) if scalars else f"{len(value)} items"
    if isinstance(value, dict):
        if depth >= 2:
            return "{…}"
        parts = []
        for key, item in value.items():
            inner = _scalar(item, 40)
            parts.append(
                f"{key}={inner}" if inner is not None else f"{key}: {_summarise_value(item, depth + 1)}"
            )
        return ", ".join(parts)
    return str(value)


def _result_gist(body: str) -> str:
    body = _TRUNCATION_NOTE_RE.sub("", body).strip()
    if not body or body == "[empty result]":
        return "empty result"
    try:
        value = json.loads(body)
    except ValueError:
        return _cut_chars(body, RESULT_GIST_CHARS)
    return _cut_chars(_summarise_value(value), RESULT_GIST_CHARS)


# --- building the block ------------------------------------------------------------------------------------


class _Builder:
    """Turns transcript entries into observations, remembering open tool calls to nest results."""

    def __init__(self, known: set[str]) -> None:
        self.known = known
        self.observations: list[_Observation] = []
        self.last_speaker = "User"

    def add(self, observation: _Observation) -> None:
        key = normalize_for_dedup(observation.text)
        if key in self.known:
            return
        self.known.add(key)
        self.observations.append(observation)

    def entry(self, entry: _Entry) -> None:
        handler = getattr(self, "_" + entry.kind.replace("-", "_"), None)
        if handler is not None:
            handler(entry)

    def _user(self, entry: _Entry) -> None:
        self.last_speaker = entry.subject
        known = self.known
        if entry.speaker is not None:
            # What someone else said is not known about this speaker: only their own lines count.
            own = normalize_for_dedup(entry.speaker) + " "
            known = {key for key in known if key.startswith(own)}
        for observation in _user_observations(entry, " ".join(known)):
            self.add(observation)

    def _assistant(self, entry: _Entry) -> None:
        self.last_speaker = "Assistant"
        observation = _assistant_observation(entry, " ".join(o.text for o in self.observations))
        if observation is not None:
            self.add(observation)

    def _tool_call(self, entry: _Entry) -> None:
        args = _tool_args(entry.body)
        previous = self.observations[-1] if self.observations else None
        if previous is not None and previous.tool == entry.tool and previous.day == entry.day:
            previous.calls.append(_ToolCall(args))
            return
        observation = _Observation(entry.day, entry.minutes, "🟡", tool=entry.tool, calls=[_ToolCall(args)])
        self.observations.append(observation)

    def _finish_tool(self, entry: _Entry, outcome: str) -> None:
        for observation in reversed(self.observations[-8:]):
            if observation.tool == entry.tool:
                open_calls = [call for call in observation.calls if call.outcome is None]
                if open_calls:
                    open_calls[0].outcome = outcome
                    return
        self.add(_Observation(entry.day, entry.minutes, "🟡", f"{entry.tool} returned {outcome}"))

    def _tool_result(self, entry: _Entry) -> None:
        self._finish_tool(entry, _result_gist(entry.body))

    def _tool_error(self, entry: _Entry) -> None:
        self._finish_tool(entry, "error: " + _cut_chars(entry.body or "tool failed", RESULT_GIST_CHARS))

    def _tool_denied(self, entry: _Entry) -> None:
        self._finish_tool(entry, "denied: " + _cut_chars(entry.body or "not approved", RESULT_GIST_CHARS))

    def _attachment(self, entry: _Entry) -> None:
        shared = f"{self.last_speaker} shared {_cut_chars(entry.body, 80)}"
        self.add(_Observation(entry.day, entry.minutes, "🟡", shared))

    def _signal(self, entry: _Entry) -> None:
        gist = shorten(_clean(entry.body), 20)
        if gist:
            self.add(_Observation(entry.day, entry.minutes, "🟢", f"{entry.title}: {gist}"))


def _render_observations(observations: list[_Observation]) -> str:
    lines: list[str] = []
    current_day: date | None = None
    for observation in observations:
        if observation.day is not None and observation.day != current_day:
            current_day = observation.day
            lines.append(f"Date: {_MONTH_ABBR[current_day.month - 1]} {current_day.day}, {current_day.year}")
        lines.extend(observation.lines())
    return "\n".join(lines)


def _fallback_observation(entries: list[_Entry]) -> _Observation | None:
    """Something rather than nothing when a transcript held only chatter: its last spoken line, short."""
    for entry in reversed(entries):
        if entry.kind in ("user", "assistant") and entry.body.strip():
            speaker = f"{entry.subject} said" if entry.kind == "user" else "Assistant said"
            text = f"{speaker}: {_cut_words(_clean(entry.body), 20)}"
            return _Observation(entry.day, entry.minutes, "🟢", text)
    return None


# --- continuation hints -----------------------------------------------------------------------------------


def _request_gist(entry: _Entry) -> tuple[str, bool] | None:
    """The user's latest ask in an entry (text, is_question), if it contains one."""
    sentences = [s for s in (_clean(raw) for raw in split_sentences(_strip_reminders(entry.body))) if s]
    for sentence in reversed(sentences):
        if _is_question(sentence):
            return _cut_words(sentence, 25), True
    for sentence in reversed(sentences):
        if _REQUEST_RE.match(sentence) or (_DECISION_RE.search(sentence) and _score(sentence) >= 2):
            return _cut_words(_strip_end(sentence), 25), False
    return None


def _current_task(entries: list[_Entry], prior: str | None) -> str:
    requests: list[tuple[int, str, bool]] = []
    for index, entry in enumerate(entries):
        gist = _request_gist(entry) if entry.kind == "user" else None
        if gist is not None:
            requests.append((index, *gist))
    replies = [i for i, entry in enumerate(entries) if entry.kind in ("assistant", "tool-result")]
    last_reply = replies[-1] if replies else -1
    if not requests:
        return prior or "- Primary: continue the conversation with the user (waiting for user)"
    index, text, is_question = requests[-1]
    speaker = entries[index].speaker
    whose = f"{speaker}'s" if speaker else "the user's"
    primary = f"answer {whose} question: {text}" if is_question else f"follow {whose} request: {text}"
    lines = [f"- Primary: {primary}" + (" (answered; waiting for user)" if last_reply > index else "")]
    if len(requests) > 1 and requests[-2][1] != text:
        lines.append(f"- Secondary: {requests[-2][1]} (waiting for user)")
    return "\n".join(lines)


def _suggested_response(entries: list[_Entry]) -> str:
    kinds = ("user", "assistant", "tool-result", "tool-call", "tool-error", "tool-denied")
    spoken = [entry for entry in entries if entry.kind in kinds]
    if not spoken:
        return "Wait for the user's next message."
    last = spoken[-1]
    if last.kind == "user":
        gist = _request_gist(last)
        about = f" ({gist[0]})" if gist else ""
        return f"Answer the user's latest message{about}, then wait for their reply."
    if last.kind.startswith("tool"):
        return f"Continue from the {last.tool} result and tell the user what it means."
    return "Wait for the user's reply before continuing."


_STOPWORDS = frozenset(
    {
        "about", "above", "after", "again", "against", "because", "before", "being", "below", "between",
        "could", "doing", "during", "every", "from", "have", "having", "here", "into", "itself", "just",
        "like", "more", "most", "other", "over", "really", "same", "should", "some", "such", "than", "that",
        "their", "them", "then", "there", "these", "they", "this", "those", "through", "under", "until",
        "very", "what", "when", "where", "which", "while", "with", "would", "your", "yours", "also", "want",
        "need", "please", "thanks", "thank", "going", "maybe", "something", "think", "know", "okay", "good",
        "great", "sure", "will", "sounds", "amazing", "helpful", "things", "thing", "much", "many",
    }
)  # fmt: skip


def _thread_title(entries: list[_Entry]) -> str:
    """Two or three topic words of the user's messages, names first, in first-seen order."""
    scores: dict[str, list[int]] = {}
    seen = 0
    for entry in entries:
        if entry.kind != "user":
            continue
        for sentence in split_sentences(_clean(_strip_reminders(entry.body))):
            for index, word in enumerate(_WORD_RE.findall(_clean(sentence))):
                bare = word.strip(".,:;!?'\"")
                lower = bare.lower()
                is_name = index > 0 and bare[:1].isupper()
                if not bare.isalpha() or lower in _STOPWORDS or bare in _NOT_NAMES or lower in _MONTH_NUMBER:
                    continue
                if lower in _WEEKDAYS or len(bare) < (4 if is_name else 6):
                    continue
                entry_score = scores.setdefault(lower, [0, seen])
                entry_score[0] += 3 if is_name else 1
                seen += 1
    ranked = sorted(scores.items(), key=lambda item: (-item[1][0], item[1][1]))[:3]
    words = [word for word, _ in sorted(ranked, key=lambda item: item[1][1])]
    if not words:
        return "General Conversation"
    if len(words) == 1:
        words.append("discussion")
    return " ".join(word.capitalize() for word in words)


# --- prompt handling --------------------------------------------------------------------------------------


def is_observer_prompt(user: str) -> bool:
    return TRANSCRIPT_HEADING_RE.search(user) is not None


def hints_suppressed(user: str) -> bool:
    return HINTS_SUPPRESSED_RE.search(user) is not None


def _section_after(pattern: re.Pattern[str], text: str, end: re.Pattern[str] | None) -> str | None:
    start = pattern.search(text)
    if start is None:
        return None
    rest = text[start.end() :]
    stop = (end or _ANY_HEADING_RE).search(rest)
    body = rest[: stop.start()] if stop else rest
    body = re.sub(r"(?:\n[ \t]*(?:-{3,}|\*{3,}|={3,})[ \t]*)+\s*$", "", "\n" + body.rstrip())
    return body.strip("\n")


def extract_prior_hint(text: str, tag: str) -> str | None:
    """The newest value of a continuation section in a prompt: a `<tag>…</tag>` block or a
    `prior <tag>: …` line (with its indented/bulleted continuation lines), whichever comes last."""
    candidates: list[tuple[int, str]] = []
    for match in re.finditer(rf"<{tag}>(?P<body>.*?)</{tag}>", text, re.DOTALL | re.IGNORECASE):
        candidates.append((match.start(), match.group("body").strip()))
    prior_line = re.compile(
        rf"^[ \t]*(?:-[ \t]*)?prior {tag}:[ \t]*(?P<body>.*(?:\n(?:[ \t]+\S|[ \t]*- ).*)*)",
        re.MULTILINE | re.IGNORECASE,
    )
    for match in prior_line.finditer(text):
        candidates.append((match.start(), match.group("body").strip()))
    candidates = [(position, body) for position, body in candidates if body]
    return max(candidates)[1] if candidates else None


def _previous_keys(user: str) -> set[str]:
    section = _section_after(_PREVIOUS_HEADING_RE, user, None) or ""
    return {normalize_for_dedup(line) for line in section.splitlines() if line.strip()}


def _observation_block_body(entries: list[_Entry], known: set[str] | None) -> str:
    builder = _Builder(set(known or ()))
    for entry in entries:
        builder.entry(entry)
    observations = builder.observations
    if not observations:
        fallback = _fallback_observation(entries)
        observations = [fallback] if fallback is not None else []
    return _render_observations(observations)


@dataclass(frozen=True)
class Sections:
    """Which continuation sections an answer carries besides `<observations>`."""

    current_task: bool = True
    suggested_response: bool = True
    thread_title: bool = False


def requested_sections(system: str, user: str) -> Sections:
    """The sections the prompt asks for: none when it says to output only `<observations>`; else the
    hint sections the system prompt names (both when it names neither), and a title when it names one."""
    title = "<thread-title>" in system
    if hints_suppressed(user) or hints_suppressed(system):
        return Sections(current_task=False, suggested_response=False, thread_title=title)
    named = ("<current-task>" in system, "<suggested-response>" in system)
    if not any(named):
        return Sections(thread_title=title)
    return Sections(current_task=named[0], suggested_response=named[1], thread_title=title)


def _hint_sections(entries: list[_Entry], sections: Sections, prior_task: str | None) -> list[str]:
    out: list[str] = []
    if sections.current_task:
        out.append(f"<current-task>\n{_current_task(entries, prior_task)}\n</current-task>")
    if sections.suggested_response:
        out.append(f"<suggested-response>\n{_suggested_response(entries)}\n</suggested-response>")
    if sections.thread_title:
        out.append(f"<thread-title>{_thread_title(entries)}</thread-title>")
    return out


def observe_transcript(
    transcript: str,
    *,
    sections: Sections = Sections(),  # frozen, so sharing the default is safe
    prior_task: str | None = None,
    known: set[str] | None = None,
) -> str:
    """Observer output for one single-thread transcript: the `<observations>` block, then the requested
    continuation sections. Lines whose normalized text is in `known` (already observed) are skipped."""
    entries = _parse_transcript(transcript)
    body = _observation_block_body(entries, known)
    parts = [f"<observations>\n{body}\n</observations>" if body else "<observations>\n</observations>"]
    parts.extend(_hint_sections(entries, sections, prior_task))
    return "\n\n".join(parts)


def _observe_threads(transcript: str, sections: Sections, known: set[str], system: str = "") -> str:
    from om_local.extraction import inline_sections  # it imports this module

    blocks: list[str] = []
    for match in _THREAD_BLOCK_RE.finditer(transcript):
        entries = _parse_transcript(match.group("body"))
        inner = [
            _observation_block_body(entries, known),
            *_hint_sections(entries, sections, None),
            *inline_sections(system, match.group("body")),
        ]
        body = "\n".join(part for part in inner if part)
        blocks.append(f'<thread id="{match.group("id")}">\n{body}\n</thread>')
    return "<observations>\n" + "\n".join(blocks) + "\n</observations>"


def observe_prompt(system: str, user: str) -> str:
    """Answer an Observer prompt (system prompt + §5.3 user message) as an Observer model would."""
    transcript = _section_after(TRANSCRIPT_HEADING_RE, user, _TASK_HEADING_RE) or ""
    sections = requested_sections(system, user)
    known = _previous_keys(user)
    if _THREAD_BLOCK_RE.search(transcript):
        return _observe_threads(transcript, sections, known, system)
    reply = observe_transcript(
        transcript, sections=sections, prior_task=extract_prior_hint(user, "current-task"), known=known
    )
    from om_local.extraction import inline_sections  # it imports this module

    return "\n\n".join([reply, *inline_sections(system, transcript)])


def summarize_text(text: str) -> str:
    """For prompts that are neither Observer nor Reflector: the text's fact-bearing sentences as one
    undated observation block, so a misrouted call still gets a short, parseable answer."""
    entry = _Entry("user", "User", None, None, None, [text])
    observations = _user_observations(entry)
    fallback = _fallback_observation([entry])
    if not observations and fallback is not None:
        observations = [fallback]
    return f"<observations>\n{_render_observations(observations)}\n</observations>"
