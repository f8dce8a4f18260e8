"""Resource scope's shared log: one `<thread id>` section per observed stretch of a thread, message
boundaries between them, and the thread labels models see (spec §4.12, `obscureThreadIds`).

Pure text functions: the store calls `compose_section` under the log's row lock, so the text it extends
is always the stored one.
"""

from __future__ import annotations

import re
from datetime import datetime

import xxhash

from om_core.observation_text import DATE_HEADER_RE
from om_core.scoped_ids import public_id

#: A `<thread>` tag line the Observer may have written itself; sections are made here, not by the model.
_THREAD_TAG_LINE_RE = re.compile(r"^[ \t]*</?thread\b[^>\n]*>[ \t]*$", re.MULTILINE | re.IGNORECASE)
_SECTION_RE = re.compile(r'<thread id="(?P<id>[^"\n]+)">\n(?P<body>.*?)\n</thread>', re.DOTALL)


def thread_label(thread_id: str, *, obscure: bool) -> str:
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
    """`log` with a thread's new observations added (spec §4.12).

    When the thread's last section already holds the date the new lines start with, they join that
    section (without repeating the date line); otherwise they become a new section after a message
    boundary. Empty observations leave the log as it is.
    """
    body = strip_thread_tags(observations)
    if not body:
        return log
    joined = _join_same_date(log, label, body)
    if joined is not None:
        return joined
    section = f'<thread id="{label}">\n{body}\n</thread>'
    existing = log.rstrip()
    return f"{existing}{boundary(observed_at)}{section}" if existing else section


def _join_same_date(log: str, label: str, body: str) -> str | None:
    first_date = DATE_HEADER_RE.search(body)
    if first_date is None:
        return None
    last = None
    for match in _SECTION_RE.finditer(log):
        if match.group("id") == label:
            last = match
    if last is None:
        return None
    header = first_date.group(0).strip()
    if header not in (line.strip() for line in last.group("body").split("\n")):
        return None
    rest = (body[: first_date.start()] + body[first_date.end() :]).strip("\n")
    if not rest.strip():
        return log
    end = last.end("body")
    return f"{log[:end]}\n{rest}{log[end:]}"
