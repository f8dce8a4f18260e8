"""The recall tool as a chat model sees it: its function schema (`RECALL_TOOL`) and the guidance added to
the memory preamble (behaviour §9.4, last paragraph), both in our own words.

The guidance depends on the scope and on whether search can run: a model is never sent to a mode that
would only answer "not configured". Guidance strings are built once per combination (`lru_cache`), so the
turn path pays a dictionary lookup.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Literal

from om_core.recall.params import MAX_LIMIT, MAX_PAGE, PART_TYPES

__all__ = ["RECALL_TOOL", "RECALL_TOOL_NAME", "recall_guidance"]

RECALL_TOOL_NAME = "recall"

_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "mode": {
            "type": "string",
            "enum": ["messages", "threads", "search"],
            "description": (
                '"messages" (default) reads raw messages of a conversation page by page; "threads" lists '
                'the conversations you can read; "search" finds matching memories and messages by meaning '
                "(only when search is enabled)."
            ),
        },
        "query": {
            "type": "string",
            "description": 'What to look for; required with mode "search".',
        },
        "cursor": {
            "type": "string",
            "description": (
                "Id of the message to read around: one end of an observation group's range (for "
                '_range: `a:b`_ pass "a" or "b", never the whole range) or an id shown in [brackets] by '
                "an earlier recall."
            ),
        },
        "threadId": {
            "type": "string",
            "description": (
                'Read another conversation (ids come from mode "threads"); "current" is this one. '
                "Without a cursor, reading starts at that conversation's beginning."
            ),
        },
        "anchor": {
            "type": "string",
            "enum": ["start", "end"],
            "description": (
                'Without a cursor: page from the oldest ("start", default) or the newest ("end") message.'
            ),
        },
        "page": {
            "type": "integer",
            "minimum": -MAX_PAGE,
            "maximum": MAX_PAGE,
            "description": (
                "Messages: 1 (default) is the page right after the cursor, 2 the one after it; -1 is the "
                "page right before the cursor. Threads: 0-based page number."
            ),
        },
        "limit": {
            "type": "integer",
            "minimum": 1,
            "maximum": 50,
            "description": (
                f"Items per page: messages and search at most {MAX_LIMIT} (defaults 20 and 10), threads "
                "up to 50 (default 20)."
            ),
        },
        "detail": {
            "type": "string",
            "enum": ["low", "high"],
            "description": (
                '"low" (default) shows every part shortened, with [pN] part numbers; "high" shows one '
                "part in full, with tool arguments and results, and says how to get the next one."
            ),
        },
        "partType": {
            "type": "string",
            "enum": list(PART_TYPES),
            "description": "Messages mode: show only parts of this kind.",
        },
        "toolName": {
            "type": "string",
            "description": "Messages mode: show only calls and results of this tool.",
        },
        "partIndex": {
            "type": "integer",
            "minimum": 0,
            "description": "With a cursor: return part N ([pN]) of that message in full.",
        },
        "charOffset": {
            "type": "integer",
            "minimum": 0,
            "description": (
                "With partIndex: start reading the part at this character; pass the nextCharOffset of a "
                "truncated answer to read on."
            ),
        },
        "before": {
            "type": "string",
            "description": (
                "ISO-8601 date or time (2026-03-15, 2026-03-10T00:00:00Z). Threads: only conversations "
                "started before it. Search: only what was observed or written before it."
            ),
        },
        "after": {
            "type": "string",
            "description": "Like before, for things after the given date or time.",
        },
    },
}

#: The tool in the OpenAI chat-completions `tools` format, ready to pass to a chat model.
RECALL_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": RECALL_TOOL_NAME,
        "description": (
            "Look up the raw conversation history behind your memory: exact wording, numbers, code, "
            "links, file paths, tool output; list the user's conversations; search them when enabled."
        ),
        "parameters": _PARAMETERS,
    },
}


@lru_cache(maxsize=64)
def recall_guidance(
    scope: Literal["thread", "resource"], search: bool, instructions: str | None = None
) -> str:
    """The recall section of the memory preamble for a thread's retrieval settings."""
    lines = [
        "## Looking things up with the recall tool",
        "",
        "Your memory may group observations as `## Group <id>` with a `_range: <first>:<last>_` line: the "
        "ids of the first and last raw messages the group was written from. The recall tool reads those raw "
        "messages.",
        "",
        "Call recall when the user asks you to repeat, show or quote something said earlier; when they need "
        "an exact value (code, a command, a URL, a file path, a number, a name, a date); when your memory "
        "mentions something without the detail you need; or to check a fact before relying on it. When the "
        "user points at specific earlier content, look it up rather than answer from the summary.",
        "",
        "Which mode to use:",
    ]
    if scope == "resource" and search:
        lines += [
            '- You do not know which conversation holds it: mode "search" with a query.',
            '- You know the conversation: mode "messages" with a cursor (or threadId).',
            '- To see the user\'s conversations: mode "threads".',
            '- If search finds nothing relevant, list conversations with "threads" and read them with '
            '"messages": recent or short conversations may not be searchable yet.',
        ]
    elif scope == "resource":
        lines += [
            '- To see the user\'s other conversations: mode "threads" (titles, ids, dates).',
            '- To read one: mode "messages" with threadId, or with a cursor from a range.',
        ]
    else:
        lines += [
            '- To read this conversation: mode "messages" with a cursor, or anchor "start" / "end".',
        ]
        if search:
            lines.append('- To find something in it by meaning: mode "search" with a query.')
        lines.append('- For this conversation\'s title and dates: mode "threads".')
    lines += [
        "",
        "Reading messages:",
        '- cursor is one message id: take the first or last id of a range ("a" or "b" of `a:b`), not the '
        "range itself.",
        "- page 1 reads forward from the cursor, page -1 backward, 2 / -2 the pages beyond; hasNextPage and "
        "hasPrevPage say whether there is more.",
        '- detail "low" (default) shortens every part and numbers it [p0], [p1], ...; detail "high" shows '
        "one part in full and says how to reach the next.",
        "- partIndex with a cursor returns that one part in full; when the answer is truncated, call again "
        "with charOffset set to its nextCharOffset until it is not.",
        "- When an answer carries a hint such as [recall cursor=... partIndex=...], follow it exactly.",
        "",
        "Recall is not needed when your memory already answers the question at the level asked, for "
        "general preferences you already know, or when nothing earlier is relevant",
    ]
    lines[-1] += (
        "; but before concluding that nothing earlier is relevant, check the user's other conversations too."
        if scope == "resource"
        else "."
    )
    if instructions and instructions.strip():
        lines += ["", "### Additional guidance", "", instructions.strip()]
    return "\n".join(lines)
