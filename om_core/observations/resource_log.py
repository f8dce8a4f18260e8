"""Resource scope's shared log: one `<thread id>` section per observed stretch of a thread, message
boundaries between them, and the thread labels models see (behaviour §4.12, `obscureThreadIds`).

Pure text functions: the store calls `compose_section` under the log's row lock, so the text it extends
is always the stored one.
"""

from __future__ import annotations

import re
from datetime import datetime

import xxhash

from om_core.observations.text import DATE_HEADER_RE
from om_core.tenancy.scoped_ids import StoredId, public_id

#: A `<thread>` tag line the Observer may have written itself; sections are made here, not by the model.
_THREAD_TAG_LINE_RE = re.compile(r"^[ \t]*</?thread\b[^>\n]*>[ \t]*$", re.MULTILINE | re.IGNORECASE)
_SECTION_RE = re.compile(r'<thread id="(?P<id>[^"\n]+)">\n(?P<body>.*?)\n</thread>', re.DOTALL)


def thread_label(thread_id: StoredId, *, obscure: bool) -> str:
    """What models see for a thread: its public id, or a stable 32-bit xxhash of it (hex) when ids are
    obscured, so neither a prompt nor the log it produces carries the id."""
    public = public_id(thread_id)
    return xxhash.xxh32_hexdigest(public.encode()) if obscure else public


def boundary(observed_at: datetime) -> str:
    """The delimiter between sections; the actor's context is split into messages at it (§4.11)."""
    return f"\n\n--- message boundary ({observed_at.isoformat()}) ---\n\n"


def strip_thread_tags(observations: str) -> str:
    return _THREAD_TAG_LINE_RE.sub("", observations).strip()


def compose_section(log: str, label: str, observations: str, observed_at: datetime) -> str:
    """`log` with a thread's new observations appended (behaviour §4.12).

    When the log ends with a section of the same thread that holds the date the new lines start with,
    they continue it: a new section of that thread follows directly, without a message boundary and
    without repeating the date line. Otherwise they become a new section after a message boundary. The
    reference inserts the lines into the earlier section instead; appending keeps the log growing only
    at its end, which the reflection text plans (the log's prefix, its first N lines) rely on while
    batches of other threads commit during a reflection. Empty observations leave the log as it is.
    """
    body = strip_thread_tags(observations)
    if not body:
        return log
    existing = log.rstrip()
    if not existing:
        return _section(label, body)
    continued = _continuing(existing, label, body)
    if continued is not None:
        return f"{existing}\n{_section(label, continued)}" if continued.strip() else log
    return f"{existing}{boundary(observed_at)}{_section(label, body)}"


def _section(label: str, body: str) -> str:
    return f'<thread id="{label}">\n{body}\n</thread>'


def _continuing(existing: str, label: str, body: str) -> str | None:
    """`body` without its first date line when the log's last section is the same thread on that date."""
    first_date = DATE_HEADER_RE.search(body)
    last = None
    for match in _SECTION_RE.finditer(existing):
        last = match
    if first_date is None or last is None or last.end() != len(existing) or last.group("id") != label:
        return None
    dates = [m.group(0).strip() for m in DATE_HEADER_RE.finditer(_text_since_boundary(existing))]
    if not dates or dates[-1] != first_date.group(0).strip():
        return None
    return (body[: first_date.start()] + body[first_date.end() :]).strip("\n")


def _text_since_boundary(existing: str) -> str:
    """The log after its last message boundary: the run of sections a continuation extends."""
    marker = existing.rfind("\n--- message boundary (")
    return existing if marker < 0 else existing[marker:]
