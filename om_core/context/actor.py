"""What the actor sees: the memory messages OM puts in front of the recent raw messages (behaviour §4.11).

Layout, in order, chosen for prompt caching:

1. stable system messages: the preamble with usage rules, then the observation log (an `<observations>`
   opener, one message per log chunk, a closing tag). These change only when the log changes, because the
   relative-time annotations depend on the calendar day and never on the time of day;
2. volatile system messages: in resource scope the other conversations' unobserved messages, then
   `<current-task>`, `<suggested-response>` and other carried-forward values, which change on every
   cycle. (The spec lists the other-conversations block before the observations; it sits here so that
   it cannot invalidate the cached log.) Working memory (§8.7) is volatile too: first among them, or, as
   a state signal (`workingMemory.useStateSignals`), last, after every other memory message;
3. the continuation reminder, a user-role `<system-reminder>` placed right before the recent raw
   messages, so the actor answers the latest message instead of resuming from the memory.

A provider caches the longest unchanged prefix, so everything that changes often sits after everything
that does not.
"""

from __future__ import annotations

import hashlib
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

from om_core.context.own_messages import CONTINUATION_LEAD, MEMORY_PREAMBLE_LEAD
from om_core.context.relative_time import annotate_relative_times, local_date
from om_core.observations.groups import render_for_actor
from om_core.sized_lru import SizedLRU

__all__ = [
    "OTHER_CONVERSATIONS_END",
    "OTHER_CONVERSATIONS_START",
    "ActorContext",
    "build_actor_context",
    "build_continuation_reminder",
    "build_memory_preamble",
    "optimize_for_actor",
    "split_log_chunks",
]

OTHER_CONVERSATIONS_START = "START_OTHER_CONVERSATIONS_BLOCK"
OTHER_CONVERSATIONS_END = "END_OTHER_CONVERSATIONS_BLOCK"

_LOW_PRIORITY_RE = re.compile("[🟡🟢]\ufe0f?[ \t]*")
# A free-standing bracketed tag, unless it is a collapse marker ("[12 items collapsed ...]") or a markdown
# link label. Brackets glued to a word (`items[0]`, `Dict[str, int]`) are code and stay.
_TAG_RE = re.compile(r"(?<!\S)\[(?!\s*\d+\s+items?\s+collapsed\b)[^\[\]\n]+\](?!\()", re.IGNORECASE)
_ARROW_RE = re.compile(r"[ \t]+->[ \t]+")
_INNER_SPACES_RE = re.compile(r"(?<=\S)[ \t]{2,}")
_TRAILING_SPACES_RE = re.compile(r"[ \t]+$", re.MULTILINE)
_BLANK_RUN_RE = re.compile(r"\n{3,}")
_LEADING_BLANK_LINES_RE = re.compile(r"\A(?:[ \t]*\n)+")
_BOUNDARY_RE = re.compile(r"\n*^--- message boundary \([^)\n]*\) ---$\n*", re.MULTILINE)


def optimize_for_actor(observations: str) -> str:
    """Drop what costs tokens but does not help the actor answer (behaviour §4.11 item 3).

    Leading indentation is kept: it is what groups a sub-item under its parent, and only interior runs
    of spaces are collapsed.
    """
    text = _LOW_PRIORITY_RE.sub("", observations)
    text = _TAG_RE.sub("", text)
    text = _ARROW_RE.sub(" ", text)
    text = _INNER_SPACES_RE.sub(" ", text)
    text = _TRAILING_SPACES_RE.sub("", text)
    text = _BLANK_RUN_RE.sub("\n\n", text)
    return _LEADING_BLANK_LINES_RE.sub("", text).rstrip()


def split_log_chunks(observations: str) -> list[str]:
    """Pieces of the log between message-boundary delimiters (§4.12); empty pieces are dropped."""
    return [piece.strip() for piece in _BOUNDARY_RE.split(observations) if piece.strip()]


def build_memory_preamble(retrieval_guidance: str | None = None) -> str:
    """The fixed preamble that introduces the memory and says how to use it."""
    text = (
        f"{MEMORY_PREAMBLE_LEAD} Treat them as things you remember, not as new input.\n"
        "\n"
        "How to use this memory:\n"
        "- Draw on the concrete details it records (names, numbers, dates, preferences) and tailor your "
        "answers to this user; when you recommend something, tie it to what they have told you or done "
        "before.\n"
        "- When two observations disagree, trust the one with the most recent date. Wording such as "
        '"switched to", "moved to", "replaced" or "no longer" marks a change that supersedes the older '
        "fact.\n"
        "- If an observation describes something planned for a date that has already passed, assume it "
        "happened unless a later observation says otherwise.\n"
        "- The user's latest message decides what you do now; constraints and preferences recorded earlier "
        "still apply to it.\n"
        "- Text inside <system-reminder> tags is internal guidance for keeping the conversation continuous. "
        "The user did not write it; do not quote it, answer it, or mention it."
    )
    if retrieval_guidance:
        text += "\n\n" + retrieval_guidance.strip()
    return text


def build_continuation_reminder(has_suggested_response: bool) -> str:
    """Our wording of the §4.11 continuation reminder, wrapped in `<system-reminder>` tags."""
    lines = [
        CONTINUATION_LEAD,
        "Everything before this point, including your memory, is background: use it when it helps, but do "
        "not resume an earlier topic on your own. Finish unfinished earlier work only if that serves the "
        "latest request.",
    ]
    if has_suggested_response:
        lines.append(
            "Follow the suggested response from your memory unless the latest message changes course."
        )
    lines += [
        "Do not mention memory, observations, summaries, or that earlier messages are missing.",
        "Messages after this reminder are newer than everything above and take priority over it.",
    ]
    return "<system-reminder>\n" + "\n".join(lines) + "\n</system-reminder>"


def _tagged(tag: str, value: str | None) -> str | None:
    body = (value or "").strip()
    return f"<{tag}>\n{body}\n</{tag}>" if body else None


@dataclass(frozen=True)
class ActorContext:
    """The memory part of the actor's input.

    `system_messages` is stable messages then volatile ones; `stable_count` says where the split is.
    `observation_block` / `hints_block` are the same two parts joined with blank lines (for hashing,
    logging and size checks). `continuation_reminder` is empty when no reminder is due.
    """

    system_messages: list[str] = field(default_factory=list)
    observation_block: str = ""
    hints_block: str = ""
    continuation_reminder: str = ""
    stable_count: int = 0

    @property
    def is_empty(self) -> bool:
        return not self.system_messages and not self.continuation_reminder

    def to_openai_messages(self, raw_messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Chat-completions messages: the caller's leading system messages, then memory, then the reminder,
        then the rest of `raw_messages` (the unobserved history ending with the latest message).

        The reminder goes in only when at least one non-system raw message follows it, so it can never
        be the last message (the actor would answer the reminder itself).
        """
        lead = 0
        while lead < len(raw_messages) and raw_messages[lead].get("role") == "system":
            lead += 1
        head, rest = list(raw_messages[:lead]), list(raw_messages[lead:])
        memory: list[dict[str, Any]] = [{"role": "system", "content": text} for text in self.system_messages]
        reminder: list[dict[str, Any]] = (
            [{"role": "user", "content": self.continuation_reminder}]
            if self.continuation_reminder and rest
            else []
        )
        return head + memory + reminder + rest


class RenderedLogCache:
    """The rendered observation block of recent logs, so a turn does not render an unchanged log again.

    Rendering (dropping low-value text, annotating relative dates) walks the whole log: about 12 ms for a
    15k-token log, paid on both calls of every turn, which made a turn late in a thread cost more than an
    early one. The log changes only at activation and reflection, and the rendering depends on nothing
    else but the local date and the retrieval guidance, so those are the key (the log by its digest: the
    key stays small). Each piece of the log (between message boundaries) renders on its own, so pieces
    are kept too: an activation appends a piece, and only that piece is rendered then. The two stores
    share the budget, each bounded by the rendered strings' real size (a string holding one emoji takes
    four bytes a character, and logs carry emoji); each engine has its own.
    """

    def __init__(self, max_bytes: int) -> None:
        self._lru: SizedLRU[tuple[bytes, date, str, str | None], tuple[str, ...]] = SizedLRU(max_bytes // 2)
        self._pieces: SizedLRU[tuple[bytes, date, str, bool], str] = SizedLRU(max_bytes // 2)

    def rendered(
        self, observations: str, now: datetime, tz: str, retrieval_guidance: str | None
    ) -> list[str]:
        key = (_digest(observations), local_date(now, tz), tz, retrieval_guidance)
        hit = self._lru.get(key)
        if hit is not None:
            return list(hit)
        stable = _render_stable(observations, now, tz, retrieval_guidance, self._piece)
        self._lru.put(key, tuple(stable), sum(sys.getsizeof(piece) for piece in stable))
        return stable

    def _piece(self, piece: str, now: datetime, tz: str, with_ranges: bool) -> str:
        key = (_digest(piece), local_date(now, tz), tz, with_ranges)
        hit = self._pieces.get(key)
        if hit is None:
            hit = _render_piece(piece, now, tz, with_ranges)
            self._pieces.put(key, hit, sys.getsizeof(hit))
        return hit

    @property
    def size_bytes(self) -> int:
        return self._lru.size_bytes + self._pieces.size_bytes

    def __len__(self) -> int:
        return len(self._lru)


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def _render_piece(piece: str, now: datetime, tz: str, with_ranges: bool) -> str:
    # Group ranges are only worth their tokens to an actor that has the recall tool to follow them.
    return annotate_relative_times(
        optimize_for_actor(render_for_actor(piece, with_ranges=with_ranges)), now, tz
    )


def _render_stable(
    observations: str,
    now: datetime,
    tz: str,
    retrieval_guidance: str | None,
    render_piece: Callable[[str, datetime, str, bool], str] = _render_piece,
) -> list[str]:
    stable = [build_memory_preamble(retrieval_guidance), "<observations>"]
    for piece in split_log_chunks(observations):
        rendered = render_piece(piece, now, tz, retrieval_guidance is not None)
        if rendered:
            stable.append(rendered)
    stable.append("</observations>")
    return stable


def build_actor_context(
    *,
    active_observations: str,
    current_task: str | None,
    suggested_response: str | None,
    now: datetime,
    tz: str,
    has_unobserved_history: bool,
    other_conversations: str | None = None,
    retrieval_guidance: str | None = None,
    extra_values: Mapping[str, str] | None = None,
    rendered_logs: RenderedLogCache | None = None,
    guidance_without_memory: bool = False,
    working_memory: Sequence[str] = (),
    working_memory_as_signal: bool = False,
) -> ActorContext:
    """Assemble the memory messages for one actor step.

    `has_unobserved_history` says whether raw messages follow the memory in the actor's input; the
    continuation reminder is only produced when they do (and when there is memory at all).
    `other_conversations` (resource scope) is the already rendered `<other-conversation>` sections;
    `retrieval_guidance` is appended to the preamble in retrieval mode; `extra_values` are carried-forward
    custom extractor values rendered as `<slug>` blocks after the built-in hints. `rendered_logs` keeps
    the rendered log between calls (the engine passes its own). `guidance_without_memory` (resource-scope
    recall, behaviour §9.4) shows the retrieval guidance even with no observation yet, as a message of its
    own, so the actor can look into the user's other conversations from its first message.
    `working_memory` are the working memory's messages (`om_core.working_memory.document.actor_messages`):
    never in the stable part, so a memory update leaves the cached prefix as it was; shown even before the
    first observation, without a continuation reminder then (there is no compressed history to continue).
    """
    others = bool(other_conversations and other_conversations.strip())
    standalone = bool(guidance_without_memory and retrieval_guidance and not active_observations.strip())
    if not active_observations.strip() and not others and not standalone:
        memory = list(working_memory)
        return (
            ActorContext(system_messages=memory, hints_block="\n\n".join(memory))
            if memory
            else ActorContext()
        )

    # The other conversations are shown before the first observation too: in resource scope they are
    # the only memory a new thread has of the user's other threads until the Observer runs.
    stable: list[str] = [retrieval_guidance.strip()] if standalone and retrieval_guidance else []
    if active_observations.strip():
        stable = (
            rendered_logs.rendered(active_observations, now, tz, retrieval_guidance)
            if rendered_logs is not None
            else _render_stable(active_observations, now, tz, retrieval_guidance)
        )

    volatile: list[str] = [] if working_memory_as_signal else list(working_memory)
    if other_conversations and others:
        volatile.append(
            "For reference only, recent messages from the user's other conversations that are not yet part "
            "of your memory:\n"
            f"{OTHER_CONVERSATIONS_START}\n{other_conversations.strip()}\n{OTHER_CONVERSATIONS_END}"
        )
    hint_pairs = [("current-task", current_task), ("suggested-response", suggested_response)]
    hint_pairs += list((extra_values or {}).items())
    volatile += [block for tag, value in hint_pairs if (block := _tagged(tag, value)) is not None]
    if working_memory_as_signal:
        volatile += working_memory

    reminder = (
        build_continuation_reminder(bool(suggested_response and suggested_response.strip()))
        if has_unobserved_history
        else ""
    )
    return ActorContext(
        system_messages=stable + volatile,
        observation_block="\n\n".join(stable),
        hints_block="\n\n".join(volatile),
        continuation_reminder=reminder,
        stable_count=len(stable),
    )
