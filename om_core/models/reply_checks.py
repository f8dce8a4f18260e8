"""Whether a model reply can be used at all, before its content is parsed.

Two kinds of reply look like text but must never be committed: one the provider cut at the output limit
(the observations or the condensed log would silently lose their end, and a cut reflection would replace
the whole log), and one the database cannot store (NUL characters, unpaired surrogates), which would fail
the commit after the work had been reported as started. Both are treated like a degenerate reply: retried,
then reported as a failure, with nothing removed from the actor's context.
"""

from __future__ import annotations

#: Finish reasons that mean "stopped at the output-token limit" (OpenAI's spelling and others').
TRUNCATED_FINISH_REASONS = frozenset({"length", "max_tokens", "max_output_tokens"})


def unusable_reply(text: str, finish_reason: str | None) -> str | None:
    """Why the reply cannot be used, or None when it can."""
    if finish_reason is not None and finish_reason.lower() in TRUNCATED_FINISH_REASONS:
        return f"a reply cut at the output-token limit (finish reason {finish_reason!r})"
    if "\x00" in text:
        return "a reply containing NUL characters, which cannot be stored"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "a reply containing unpaired surrogates, which cannot be stored"
    return None
