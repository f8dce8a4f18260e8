"""Text plans for committing a reflection against the stored log (spec §3.5(6) and §3.5(8)).

Both run inside the storage transaction, on the stored text, so observations appended while the Reflector
was running (an activation, a sync observation) are kept after the reflection instead of being lost.
"""

from __future__ import annotations


def compose_after_reflection(snapshot_text: str, stored_text: str, reflection: str) -> str | None:
    """The successor's text, or None when the stored log was rewritten (then nothing may be committed).

    Equal texts: the reflection alone. Stored text that extends the snapshot (only appends happened): the
    reflection followed by the appended tail. Anything else is a rewrite we cannot reconcile.
    """
    if stored_text == snapshot_text:
        return reflection
    if stored_text.startswith(snapshot_text):
        tail = stored_text[len(snapshot_text) :].strip()
        return f"{reflection}\n\n{tail}" if tail else reflection
    return None


def replace_leading_lines(active: str, reflected_line_count: int, reflection: str) -> str:
    """Swap the first `reflected_line_count` lines of `active` for `reflection`, keeping later lines."""
    tail = "\n".join(active.split("\n")[reflected_line_count:]).strip()
    return f"{reflection}\n\n{tail}" if tail else reflection
