"""The offline Reflector heuristic behind `om-local/extractive` (reads a §6.1 prompt, writes §6.1 output).

A Reflector must return a log that is smaller than its input, never empty, and ideally under the target
the prompt states. This one gets there by deleting and shortening lines in a fixed order of value, so the
cheapest information goes first and the facts a user would miss go last:

1. identical and near-identical lines (same wording, same numbers and names) are removed, and a
   statement the user later updated ("User updated: their rent went up to 1020 euros", "User updated:
   they moved from Lisbon to Porto") loses the earlier statement it replaces, so the memory holds one
   current value, not two; this always runs in full;
2. 🟢 lines are dropped, oldest first;
3. lines that hold no fact (no name, number, date, place or lasting preference: assistant chatter,
   questions and statements without one) and 🟡 lines, cheapest and oldest first;
4. older 🟡 lines are shortened, then dropped; the older 🔴 user lines of one date are merged into one
   ("User stated A; B; C": every statement kept, the repeated bullets, markers, times and "User stated"
   gone); then older 🔴/✅ lines are shortened to their most valuable statements (lasting facts, health
   constraints and corrections stay whole);
5. recent material is condensed the same way;
6. whole fact-bearing lines are dropped, cheapest first (anecdotes before lasting facts about the user,
   health constraints and corrections; oldest first; the best line of each date last), until the log
   fits, keeping at least one line.

Steps 2-6 edit one line at a time and stop at the edit that makes the log fit, so a reflection lands just
under its target: no fact is dropped while dropping chatter is still enough.

**What wins when the target and the facts cannot both be met: the target.** The memory must stay
bounded (the engine reflects again, and may block a turn, while the log is over its threshold), so when
every line left holds a fact the oldest, least lasting facts go; lasting facts about the user, health
constraints and updates go last. Dates are never rewritten: a line keeps its date header (a merged line the
time of its first), and a resolved `(meaning …)` date stays attached to its statement.

Value comes from `om_local.salience`: a lasting fact about the user (what they are called, where they live,
what they prefer, a dated commitment), a health or diet constraint, and a correction outrank details of
the moment however many names and numbers those hold. Shortening works on the statements of a user line
("User stated A; B; asked: C"), not on its words: the valuable statements stay whole and the others make
room, so a fact stated in the first week survives every later reflection instead of being cut in half.

The compression level from the prompt decides how many condensing steps run whatever the size (level 0:
de-duplication only; level 4 also drops 🟢, condenses older material and keeps a few lines per older
date); the budgeted steps above run only while the log is over the target or not yet smaller than the
input. Date headers stay with the lines they head; lines that are not observations (thread tags,
retrieval group headings) pass through unchanged.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from om_local.observer import (
    extract_prior_hint,
    has_fact,
    hints_suppressed,
    normalize_for_dedup,
    shorten,
)
from om_local.salience import Tier, is_correction, salience, supersedes

__all__ = [
    "OBSERVATIONS_HEADING_RE",
    "count_tokens",
    "is_reflector_prompt",
    "parse_target",
    "reflect_observations",
    "reflect_prompt",
]

log = logging.getLogger(__name__)

OBSERVATIONS_HEADING_RE = re.compile(
    r"^#{1,6}[ \t]*Observations to Reflect On\b.*$", re.MULTILINE | re.IGNORECASE
)
_SECTION_END_RE = re.compile(r"^#{1,6}[ \t]+(?!Group\b)\S.*$", re.MULTILINE)
_SEPARATOR_RE = re.compile(r"^[ \t]*-{3,}[ \t]*$", re.MULTILINE)
_TARGET_RE = re.compile(r"Target size:\s*under\s*(?P<tokens>[\d,_]+)\s*tokens", re.IGNORECASE)
_LEVEL_RE = re.compile(r"compression level\s*(?P<level>\d)", re.IGNORECASE)
#: Without a target line the level shows only in its guidance: "keep about 6/10 of the detail" (§6.2).
_DETAIL_RE = re.compile(r"(?P<tenths>[2468])/10 of the detail", re.IGNORECASE)
_LEVEL_BY_DETAIL = {8: 1, 6: 2, 4: 3, 2: 4}
_DATE_HEADER_RE = re.compile(r"^Date:[ \t]*\S")
_ITEM_RE = re.compile(
    r"^(?P<bullet>[*-])[ \t]+(?:(?P<marker>🔴|🟡|🟢|✅)[ \t]*)?"
    r"(?:\((?P<time>\d{1,2}:\d{2}(?:[ \t]*[AaPp]\.?[ \t]*[Mm]\.?)?)\)[ \t]*)?(?P<text>.*)$"
)
_HINT_BLOCK_RE = re.compile(
    r"^[ \t]*<(current-task|suggested-response)>.*?</\1>[ \t]*$", re.DOTALL | re.MULTILINE
)
_EMBEDDED_INSTRUCTIONS_RE = re.compile(
    r"<observational-memory-instruction>.*?</observational-memory-instruction>", re.DOTALL
)
_OBSERVATIONS_TAG_RE = re.compile(r"^[ \t]*</?observations>[ \t]*$", re.MULTILINE)

MAX_LEVEL = 4
#: `_Item.rank` of the most valuable lines `_drop_cheap` removes before any fact-bearing line is touched.
_RANK_NO_FACT = 2
#: A lasting fact, health constraint or correction is never shortened below this many words by the
#: condensing steps (only the last resort, when one line alone is over the target, cuts further).
MIN_PROTECTED_WORDS = 16
_NEAR_DUPLICATE_JACCARD = 0.85
_NEAR_DUPLICATE_WINDOW = 60


# --- token counting ---------------------------------------------------------------------------------------

_counter: Callable[[str], int] | None = None


def count_tokens(text: str) -> int:
    """The engine's token estimate (tiktoken o200k) when available, else ceil(len / 4).

    Using the engine's own estimator matters: "under the target" is judged by the engine, in its units.
    """
    global _counter
    if _counter is None:
        try:
            from om_core.tokens import default_estimator

            estimator = default_estimator()
            estimator("warm up")
            _counter = estimator
        except Exception as exc:  # no tiktoken data: a coarse but monotone estimate still works
            log.debug("tiktoken unavailable for the local model (%s); using len/4", exc)
            _counter = _char_estimate
    return _counter(text)


def _char_estimate(text: str) -> int:
    return math.ceil(len(text) / 4)


# --- user lines as statements ----------------------------------------------------------------------------

#: A user line's subject: "User", or the speaker's name when several people share the thread ("Alice
#: stated …"); never the assistant.
_USER_LINE_RE = re.compile(
    r"^(?P<subject>User|(?!Assistant\b|Agent\b)[\w.'-](?:[\w .'-]{0,62}?[\w.'-])?) "
    r"(?P<kind>stated|updated:|asked:) "
)
_STATEMENT_KIND_RE = re.compile(r"^(?P<kind>stated|updated:|asked:) ")


@dataclass
class _Statement:
    """One statement of a user line: "stated …", "updated: …" (a correction) or "asked: …"."""

    kind: str
    text: str
    #: Whose statement it is: "User", or a speaker's name.
    subject: str = "User"

    @property
    def tier(self) -> Tier:
        if self.kind == "asked":  # the user's assertions outrank their questions (§6.1)
            return min(salience(self.text), Tier.SPECIFIC)
        return salience(self.text, correction=True if self.kind == "updated" else None)

    @property
    def corrects(self) -> bool:
        return self.kind == "updated" or (self.kind == "stated" and is_correction(self.text))


def _statements(text: str) -> list[_Statement] | None:
    """The statements of an Observer user line ("User stated A, B; C; asked: Q?"), None for other lines."""
    match = _USER_LINE_RE.match(text)
    if match is None:
        return None
    statements: list[_Statement] = []
    kind = match.group("kind").rstrip(":")
    subject = match.group("subject")
    for index, piece in enumerate(text[len(subject) + 1 :].split("; ")):
        piece_kind = _STATEMENT_KIND_RE.match(piece)
        if piece_kind is not None:
            kind = piece_kind.group("kind").rstrip(":")
            piece = piece[piece_kind.end() :]
        elif index == 0:
            return None
        if piece.strip():
            statements.append(_Statement(kind, piece.strip(), subject))
    return statements or None


def _render_statements(statements: list[_Statement]) -> str:
    pieces: list[str] = []
    previous: str | None = None
    for statement in statements:
        if statement.kind == previous and statement.kind != "asked":
            pieces.append(statement.text)
        elif statement.kind == "stated":
            pieces.append(f"stated {statement.text}")
        else:
            pieces.append(f"{statement.kind}: {statement.text}")
        previous = statement.kind
    subject = statements[0].subject if statements else "User"
    return f"{subject} " + "; ".join(pieces)


def _statement_words(statement: _Statement) -> int:
    return len(statement.text.split()) + 1


# --- the log as items ------------------------------------------------------------------------------------


@dataclass
class _Item:
    group: int
    position: int
    marker: str | None
    time: str | None
    text: str
    subs: list[str]
    bullet: str = "*"
    dropped: bool = False
    recent: bool = False
    #: How many lines were merged into this one (`_merge_older_user_lines`); shortening allows each its room.
    merged: int = 1

    @property
    def tier(self) -> Tier:
        """The value of the line's best statement; only 🔴/✅ lines can hold user facts."""
        if self.marker not in ("🔴", "✅"):
            return Tier.PLAIN
        statements = _statements(self.text)
        if statements is None:
            return salience(self.text)
        return max(statement.tier for statement in statements)

    @property
    def rank(self) -> int:
        """Value when space runs out (higher survives longer)."""
        if self.marker == "🟢":
            return 0
        tier = self.tier
        if tier >= Tier.PROFILE:
            return 5 + tier - Tier.PROFILE  # lasting user facts (5), health (6), corrections (7)
        fact = has_fact(self.text)
        if self.marker in ("🔴", "✅") and fact:
            return 4
        if self.marker == "✅":
            return 3
        if self.marker == "🔴" or fact:
            return _RANK_NO_FACT  # a user line without a fact, or a medium line with one
        return 1

    def render(self) -> list[str]:
        head = (
            f"{self.bullet} "
            + (f"{self.marker} " if self.marker else "")
            + (f"({self.time}) " if self.time else "")
        )
        return [head + self.text, *self.subs]


@dataclass
class _Log:
    """Lines in order: ("header", index) for date headers, ("item", index), ("raw", text)."""

    layout: list[tuple[str, int | str]] = field(default_factory=list)
    headers: list[str] = field(default_factory=list)
    items: list[_Item] = field(default_factory=list)

    def kept(self) -> list[_Item]:
        return [item for item in self.items if not item.dropped]

    def render(self) -> str:
        live_groups = {item.group for item in self.items if not item.dropped}
        lines: list[str] = []
        for kind, value in self.layout:
            if kind == "header":
                if value in live_groups:
                    lines.append(self.headers[int(value)])
            elif kind == "item":
                item = self.items[int(value)]
                if not item.dropped:
                    lines.extend(item.render())
            else:
                lines.append(str(value))
        return "\n".join(lines).strip()


def _parse_log(text: str) -> _Log:
    parsed = _Log()
    group = -1
    current: _Item | None = None
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line.strip():
            continue
        if _DATE_HEADER_RE.match(line):
            if group >= 0 and parsed.headers[group] == line.strip():
                current = None  # the same date again (chunks activated one after another): one group
                continue
            parsed.headers.append(line.strip())
            group = len(parsed.headers) - 1
            parsed.layout.append(("header", group))
            current = None
            continue
        match = _ITEM_RE.match(line)
        if match:
            current = _Item(
                group=group,
                position=len(parsed.items),
                marker=match.group("marker"),
                time=match.group("time"),
                text=match.group("text").strip(),
                subs=[],
                bullet=match.group("bullet"),
            )
            parsed.items.append(current)
            parsed.layout.append(("item", current.position))
        elif line[:1] in (" ", "\t") and current is not None:
            current.subs.append(line)
        else:
            parsed.layout.append(("raw", line))
            current = None
    _mark_recent(parsed)
    return parsed


def _mark_recent(parsed: _Log) -> None:
    """Recent = the newest date's lines, but never more than the last third of the log."""
    if not parsed.items:
        return
    newest = parsed.items[-1].group
    tail_start = len(parsed.items) - max(1, math.ceil(len(parsed.items) / 3))
    for item in parsed.items:
        item.recent = item.group == newest and item.position >= tail_start


# --- compression steps --------------------------------------------------------------------------------------


def _word_set(text: str) -> frozenset[str]:
    return frozenset(normalize_for_dedup(text).split())


def _signature(text: str) -> tuple[frozenset[str], frozenset[str]]:
    numbers = frozenset(re.findall(r"\d+(?:[.,]\d+)?", text))
    names = frozenset(re.findall(r"(?<!^)(?<![.!?] )\b[A-Z][a-z][\w'-]*", text))
    return numbers, names


def _dedupe(parsed: _Log, budget: _Budget | None = None) -> bool:
    """Identical and near-identical lines go, and statements a later correction replaces (always whole:
    a half-de-duplicated log would keep two values for one thing)."""
    _supersede(parsed)
    seen: set[str] = set()
    window: list[_Item] = []
    for item in parsed.items:
        if item.dropped:
            continue
        key = normalize_for_dedup(item.text)
        if key in seen:
            item.dropped = True
            continue
        words, signature = _word_set(item.text), _signature(item.text)
        for earlier in window:
            other = _word_set(earlier.text)
            union = words | other
            similar = (
                len(words) >= 4 and bool(union) and len(words & other) / len(union) >= _NEAR_DUPLICATE_JACCARD
            )
            if similar and _signature(earlier.text) == signature:
                item.dropped = True
                break
        if item.dropped:
            continue
        seen.add(key)
        window = [*window[-(_NEAR_DUPLICATE_WINDOW - 1) :], item]
        unique_subs: list[str] = []
        sub_keys: set[str] = set()
        for sub in item.subs:
            sub_key = normalize_for_dedup(sub)
            if sub_key not in sub_keys:
                sub_keys.add(sub_key)
                unique_subs.append(sub)
        item.subs = unique_subs
    return False


def _supersede(parsed: _Log) -> None:
    """Drop each statement a later correction replaces (same subject, same kind of value); a line left
    with no statement goes. Only user statements are compared: they are what the user can correct."""
    kept = [(item, _statements(item.text)) for item in parsed.kept()]
    user_lines = [(item, statements) for item, statements in kept if statements is not None]
    for index, (item, statements) in enumerate(user_lines):
        for correction in [statement for statement in statements if statement.corrects]:
            if correction not in statements:  # a later correction on the same line replaced it
                continue
            before = statements[: statements.index(correction)]
            earlier = [(other, their) for other, their in user_lines[:index] if not other.dropped]
            for other, their in [*earlier, (item, before)]:
                replaced = [
                    s
                    for s in their
                    if s.kind != "asked"
                    and s.subject == correction.subject  # one person never corrects another's facts
                    and supersedes(correction.text, s.text)
                ]
                if not replaced:
                    continue
                if other is item:
                    statements[:] = [s for s in statements if s not in replaced]
                    item.text = _render_statements(statements)
                elif len(replaced) < len(their):
                    their[:] = [s for s in their if s not in replaced]
                    other.text = _render_statements(their)
                else:
                    other.dropped = True


def _shorten_item(item: _Item, max_words: int) -> None:
    """Fit a line into about `max_words`. A user line keeps its lasting facts and corrections whole and
    fills the rest with its most specific statements (spoken order kept); other lines are cut by clause."""
    statements = _statements(item.text)
    if statements is None or len(statements) == 1:
        if statements is None or statements[0].tier < Tier.PROFILE:
            item.text = shorten(item.text, max_words)
        else:
            statements[0].text = shorten(statements[0].text, max(max_words, MIN_PROTECTED_WORDS))
            item.text = _render_statements(statements)
        return
    protected = [s for s in statements if s.tier >= Tier.PROFILE]
    for statement in protected:
        statement.text = shorten(statement.text, max(max_words, MIN_PROTECTED_WORDS))
    used = sum(_statement_words(s) for s in protected) + 1
    others = sorted(
        (s for s in statements if s not in protected),
        key=lambda s: (-s.tier, -has_fact(s.text), statements.index(s)),
    )
    chosen = list(protected)
    for statement in others:
        if chosen and used + _statement_words(statement) > max_words:
            continue
        chosen.append(statement)
        used += _statement_words(statement)
    item.text = _render_statements([s for s in statements if s in chosen])
    if not protected and len(item.text.split()) > max_words:
        item.text = shorten(item.text, max_words)


class _Budget:
    """The log's size while items are edited one at a time, so a step given a budget stops as soon as the
    log fits (a reflection lands just under its target instead of far below it: what the offline model
    drops is gone for good, so it drops no more than it must)."""

    def __init__(self, parsed: _Log, fits: Callable[[int], bool]) -> None:
        self.parsed = parsed
        self.fits = fits
        self.size = count_tokens(parsed.render())

    def edit(self, item: _Item, change: Callable[[_Item], None]) -> bool:
        """Apply `change` to `item`; True when the log fits afterwards."""
        before = _item_tokens(item)
        change(item)
        self.size += (0 if item.dropped else _item_tokens(item)) - before
        if not self.fits(self.size):
            return False
        self.size = count_tokens(self.parsed.render())  # the estimate said it fits: check exactly
        return self.fits(self.size)


def _item_tokens(item: _Item) -> int:
    return count_tokens("\n".join(item.render())) + 1


def _apply(items: list[_Item], change: Callable[[_Item], None], budget: _Budget | None) -> bool:
    """`change` each item in order: all of them without a budget, until the log fits with one."""
    for item in items:
        if item.dropped:
            continue
        if budget is None:
            change(item)
        elif budget.edit(item, change):
            return True
    return False


def _drop(item: _Item) -> None:
    item.dropped = True


def _drop_low(parsed: _Log, budget: _Budget | None = None) -> bool:
    return _apply([item for item in parsed.items if item.marker == "🟢"], _drop, budget)


def _done_subs(item: _Item, max_words: int) -> list[str]:
    kept = []
    for sub in item.subs:
        if "✅" in sub:
            indent = sub[: len(sub) - len(sub.lstrip())]
            kept.append(indent + shorten(sub.strip(), max_words))
    return kept


def _shortener(max_words: int, sub_words: int | None) -> Callable[[_Item], None]:
    def change(item: _Item) -> None:
        _shorten_item(item, max_words * item.merged)
        item.subs = _done_subs(item, sub_words) if sub_words is not None else []

    return change


def _shorten_older_medium(parsed: _Log, budget: _Budget | None = None) -> bool:
    older = [item for item in parsed.kept() if not item.recent and item.marker not in ("🔴", "✅")]
    return _apply(older, _shortener(14, 14), budget)


def _condense_older(parsed: _Log, budget: _Budget | None = None) -> bool:
    older = [item for item in parsed.kept() if not item.recent]
    medium = [item for item in older if item.marker not in ("🔴", "✅")]
    if _apply(medium, _drop, budget):  # the medium lines go before any high line is shortened
        return True
    return _apply([item for item in older if item.marker in ("🔴", "✅")], _shortener(30, 12), budget)


def _few_per_older_date(parsed: _Log, budget: _Budget | None = None, per_date: int = 3) -> bool:
    """Each older date keeps its `per_date` best lines, and every line holding a lasting user fact.

    Only ever run unconditionally (at compression level 4): with a budget, facts go one at a time in
    `_drop_until` instead, so no fact is dropped while the log already fits."""
    by_group: dict[int, list[_Item]] = {}
    for item in parsed.kept():
        if not item.recent:
            by_group.setdefault(item.group, []).append(item)
    for items in by_group.values():
        ranked = sorted(items, key=lambda it: (-it.rank, it.position))
        best = [item for index, item in enumerate(ranked) if index < per_date or item.tier >= Tier.PROFILE]
        for item in items:
            if item not in best:
                item.dropped = True
            else:
                _shorten_item(item, 24)
                item.subs = []
    return False


def _tighten_older(parsed: _Log, budget: _Budget | None = None) -> bool:
    """Older high lines shortened to their most valuable statements (lasting facts stay whole)."""
    older = [item for item in parsed.kept() if not item.recent and item.marker in ("🔴", "✅")]
    return _apply(older, _shortener(20, None), budget)


def _condense_recent(parsed: _Log, budget: _Budget | None = None) -> bool:
    recent = [item for item in parsed.kept() if item.recent]
    medium = [item for item in recent if item.marker not in ("🔴", "✅")]
    if _apply(medium[:-3], _drop, budget):
        return True
    return _apply(recent, _shortener(24, 10), budget)


_Step = Callable[[_Log, "_Budget | None"], bool]


def _drop_cheap(parsed: _Log, budget: _Budget | None = None) -> bool:
    """Lines that hold no fact (🟡 chatter, questions and statements without a name, number, date or
    preference) and medium lines, oldest first, before any fact-bearing line is shortened."""
    cheap = [item for item in parsed.kept() if item.rank <= _RANK_NO_FACT]
    cheap.sort(key=lambda it: (it.rank, it.recent, it.position))
    return _apply(cheap[:-1] if len(cheap) == len(parsed.kept()) else cheap, _drop, budget)


#: Run regardless of size, the first `_STEPS_BY_LEVEL[level]` of them (level 0: only de-duplication).
_STEPS: tuple[_Step, ...] = (
    _dedupe,
    _drop_low,
    _shorten_older_medium,
    _condense_older,
    _few_per_older_date,
    _condense_recent,
)
_STEPS_BY_LEVEL = (1, 2, 3, 4, 5)


def _drop_older_medium(parsed: _Log, budget: _Budget | None = None) -> bool:
    older = [item for item in parsed.kept() if not item.recent and item.marker not in ("🔴", "✅")]
    return _apply(older, _drop, budget)


#: A merged line holds at most this many words: a Reflector's line is still one memory entry.
MAX_MERGED_WORDS = 70


def _merge_older_user_lines(parsed: _Log, budget: _Budget | None = None) -> bool:
    """Older 🔴 lines of one date and one speaker become one line ("User stated A; B; C" at the first
    one's time): every statement stays, and each merged line saves its bullet, marker, time and "User
    stated" (a third of a short line). Oldest dates first."""
    groups: dict[tuple[int, str], list[_Item]] = {}  # one date, one speaker: who said what stays known
    for item in parsed.kept():
        statements = _statements(item.text)
        if not item.recent and item.marker == "🔴" and not item.subs and statements is not None:
            groups.setdefault((item.group, statements[0].subject), []).append(item)
    for items in groups.values():
        host = items[0]
        for item in items[1:]:
            host_statements, statements = _statements(host.text), _statements(item.text)
            if host_statements is None or statements is None:
                continue
            merged = _render_statements([*host_statements, *statements])
            if len(merged.split()) > MAX_MERGED_WORDS:
                host = item
                continue
            before = _item_tokens(host) + _item_tokens(item)
            host.text, item.dropped = merged, True
            host.merged += item.merged
            if budget is not None:
                budget.size += _item_tokens(host) - before
                if budget.fits(budget.size):
                    budget.size = count_tokens(parsed.render())
                    if budget.fits(budget.size):
                        return True
    return False


#: Run while the log is over its target, each stopping as soon as it fits: cheapest information first.
_BUDGETED_STEPS: tuple[_Step, ...] = (
    _drop_low,
    _drop_cheap,
    _shorten_older_medium,
    _drop_older_medium,
    _merge_older_user_lines,
    _condense_older,
    _tighten_older,
    _condense_recent,
)


def _drop_until(parsed: _Log, fits: Callable[[int], bool]) -> None:
    """The last step: drop whole lines, cheapest first, until the log fits; never below one line."""
    size = count_tokens(parsed.render())
    if fits(size):
        return
    # First pass keeps the best line of every date, so old periods shrink instead of vanishing (a log
    # reflected many times would otherwise lose its oldest weeks entirely); the second pass may drop them.
    for keep_one_per_date in (True, False):
        for item in sorted(parsed.kept(), key=lambda it: (it.rank, it.recent, it.position)):
            if len(parsed.kept()) <= 1:
                break
            if item.dropped:
                continue
            same_date = [other for other in parsed.kept() if other.group == item.group]
            if keep_one_per_date and len(same_date) <= 1:
                continue
            cost = _item_tokens(item)
            item.dropped = True
            size -= cost
            if fits(size):
                size = count_tokens(parsed.render())
                if fits(size):
                    return
    remaining = parsed.kept()
    for words in (16, 10, 6):
        if fits(count_tokens(parsed.render())):
            return
        for item in remaining:
            item.text = shorten(item.text, words)
            item.subs = []


def reflect_observations(observations: str, *, target: int | None, level: int) -> str:
    """The rewritten log: smaller than `observations` when it has more than one line, under `target`
    when that is reachable without emptying it, never empty when the input has observations.

    The compression level decides how many condensing steps run whatever the size; after them, the
    budgeted steps run only while the log is over its target (or not smaller than the input), each
    stopping at the edit that makes it fit."""
    parsed = _parse_log(observations)
    if not parsed.items:
        return observations.strip()
    original = count_tokens(observations.strip())

    def fits(size: int) -> bool:
        under_target = target is None or size < target
        smaller = size < original or len(parsed.items) <= 1
        return under_target and smaller

    level = max(0, min(level, MAX_LEVEL))
    for step in _STEPS[: _STEPS_BY_LEVEL[level]]:
        step(parsed, None)
        _keep_at_least_one(parsed)
    for budgeted in _BUDGETED_STEPS:
        if fits(count_tokens(parsed.render())):
            break
        budgeted(parsed, _Budget(parsed, fits))
        _keep_at_least_one(parsed)
    _drop_until(parsed, fits)
    return parsed.render()


def _keep_at_least_one(parsed: _Log) -> None:
    """A step may drop every line (a log of only 🟢 lines); the most valuable, newest one comes back."""
    if parsed.items and not parsed.kept():
        max(parsed.items, key=lambda it: (it.rank, it.position)).dropped = False


# --- prompt handling --------------------------------------------------------------------------------------


def is_reflector_prompt(user: str) -> bool:
    return OBSERVATIONS_HEADING_RE.search(user) is not None


def parse_target(user: str) -> tuple[int | None, int]:
    """(target tokens, compression level) from the prompt's `Target size: under T tokens (compression
    level L of 4).` line, else the level from its detail share ("about 6/10 of the detail"); no target
    and level 0 when neither is present."""
    target_match = _TARGET_RE.search(user)
    target = int(re.sub(r"[,_]", "", target_match.group("tokens"))) if target_match else None
    level_match = _LEVEL_RE.search(user)
    if level_match:
        return target, int(level_match.group("level"))
    detail_match = _DETAIL_RE.search(user)
    return target, _LEVEL_BY_DETAIL.get(int(detail_match.group("tenths")), 0) if detail_match else 0


def _observations_section(user: str) -> str:
    start = OBSERVATIONS_HEADING_RE.search(user)
    if start is None:
        return ""
    rest = user[start.end() :]
    end = _SECTION_END_RE.search(rest)
    body = rest[: end.start()] if end else rest
    separators = list(_SEPARATOR_RE.finditer(body))
    if separators:
        body = body[: separators[-1].start()]
    return body.strip()


def reflect_prompt(system: str, user: str) -> str:
    """Answer a Reflector prompt as a Reflector model would."""
    section = _observations_section(user)
    observations = _OBSERVATIONS_TAG_RE.sub("", _HINT_BLOCK_RE.sub("", section)).strip()
    target, level = parse_target(user)
    rewritten = reflect_observations(observations, target=target, level=level)
    sections = [f"<observations>\n{rewritten}\n</observations>"]
    # The system prompt quotes the Observer's instructions, which may say "output only <observations>"
    # about the Observer's own call; only the Reflector's own words count here.
    own_system = _EMBEDDED_INSTRUCTIONS_RE.sub("", system)
    if not hints_suppressed(user) and not hints_suppressed(own_system):
        for tag in ("current-task", "suggested-response"):
            value = extract_prior_hint(user, tag)
            if value:
                sections.append(f"<{tag}>\n{value}\n</{tag}>")
    return "\n\n".join(sections)
