"""om's own memory messages, recognised when a chat backend posts them back as conversation.

A turn answers with the actor's context: the memory preamble, the observation log between `<observations>`
tags (a message per piece, each opening with a `Date:` header), the working memory (its own system message,
§8.7's state signal), the hints and the continuation reminder. A backend that keeps that context as its
history and posts it again in a later turn (or stores every message it sent its model) hands om its own
words as if someone had said them. Observed again, they come back as facts "the user stated": the
original's Observer recorded its own control prompt as the user's current priority, and re-observed the
working-memory state signal, so its working-memory extractor rewrote the memory from a copy of itself (and
lost what the copy had shortened).

So the Observer's transcript leaves these messages out (`om_core.observer.transcript`), whatever role they
were posted with: they are stored like any message (a turn never drops what it was sent), but never
source material. Recognition is by their exact openings, whole tag blocks and the log's line format, so a
user quoting a word of them is still observed.
"""

from __future__ import annotations

import re

__all__ = [
    "CONTINUATION_LEAD",
    "MEMORY_PREAMBLE_LEAD",
    "WORKING_MEMORY_LEAD",
    "is_own_memory_message",
]

#: The first sentence of the memory preamble (`om_core.context.actor.build_memory_preamble`).
MEMORY_PREAMBLE_LEAD = (
    "The messages that follow hold your memory: observations you made during earlier conversations "
    "with this user."
)
#: The first line of the continuation reminder (`om_core.context.actor.build_continuation_reminder`).
CONTINUATION_LEAD = "Continue the conversation naturally and respond to the user's most recent message."
#: The line before the `<working-memory>` block (`om_core.working_memory.document.actor_messages`).
WORKING_MEMORY_LEAD = (
    "Your working memory: what you know about the user, kept up to date across conversations."
)

#: The memory's own tags: a message that is one whole block of one of them is ours.
_OWN_TAGS = (
    "observations",
    "working-memory",
    "working-memory-instructions",
    "current-task",
    "suggested-response",
)
_WHOLE_BLOCK_RE = re.compile(
    rf"\A<(?P<tag>{'|'.join(_OWN_TAGS)})>.*</(?P=tag)>\Z|\A</?observations>\Z", re.DOTALL
)
_REMINDER_RE = re.compile(r"\A<system-reminder>\s*(?P<body>.*?)\s*</system-reminder>\Z", re.DOTALL)
#: A piece of the observation log as the actor gets it: a date header first, then only observation lines,
#: date headers, group tags and message boundaries.
_LOG_DATE_RE = re.compile(r"\ADate: [A-Z][a-z]{2} \d{1,2}, \d{4}\b")
_LOG_LINE_RE = re.compile(
    r"\A(?:Date: .+|[ \t]*[*-] .+|</?observation-group\b[^>]*>|--- message boundary \([^)]*\) ---)\Z"
)


def is_own_memory_message(text: str) -> bool:
    """Whether `text` is one of the memory messages om puts in the actor's context (not conversation)."""
    stripped = text.strip()
    if not stripped:
        return False
    if stripped.startswith((MEMORY_PREAMBLE_LEAD, WORKING_MEMORY_LEAD)):
        return True
    if _WHOLE_BLOCK_RE.match(stripped):
        return True
    reminder = _REMINDER_RE.match(stripped)
    if reminder is not None:
        return reminder.group("body").startswith(CONTINUATION_LEAD)
    return _is_log_piece(stripped)


def _is_log_piece(text: str) -> bool:
    """A message holding a piece of the observation log (between the `<observations>` tags)."""
    if not _LOG_DATE_RE.match(text):
        return False
    return all(_LOG_LINE_RE.match(line) for line in text.splitlines() if line.strip())
