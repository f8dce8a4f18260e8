"""Benchmark conversations: the sample conversation plus tool calls with large results, 10k to 1M+ tokens.

`om_app.sample_conversation.generate` already gives multi-session chats over weeks of simulated time,
user turns of 50–600 words, assistant replies, and planted facts with later corrections. Issue 7 also
needs what makes real agent threads heavy: now and then the assistant calls a tool and gets a large
result (a file, a search dump, query rows). This module adds those, deterministically from the seed,
and trims the conversation to the requested size measured with the real o200k counter, so "a 1M-token
thread" means one million counted tokens, not an estimate.

The key file (`write_key_file`) records every planted fact and correction with the message it is in,
so a benchmark can check what survived into the final context.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from om_app.sample_conversation import CORRECTIONS, PLANTED
from om_app.sample_conversation import generate as generate_sample
from om_core.messages import Message, Part
from om_core.tokens import TokenCounter

#: Share of assistant replies that call a tool first.
TOOL_SHARE = 0.06
#: Result sizes in words; most results are moderate, a few are very large (a whole file or log).
RESULT_WORDS = (300, 800, 1500, 3000, 8000)
RESULT_WEIGHTS = (30, 30, 20, 15, 5)

_TOOLS = ("search_web", "read_file", "query_orders", "fetch_page", "list_calendar")
_WORDS = [
    "alpha",
    "bridge",
    "cedar",
    "delta",
    "ember",
    "fjord",
    "granite",
    "harbor",
    "island",
    "juniper",
    "kettle",
    "lantern",
    "meadow",
    "nickel",
    "orchard",
    "pepper",
    "quartz",
    "river",
    "saddle",
    "timber",
    "umber",
    "valley",
    "willow",
    "xenon",
    "yarrow",
    "zephyr",
]


@dataclass
class BenchConversation:
    messages: list[Message] = field(default_factory=list)
    #: Fact key -> the needle its latest statement contains (corrections replace the original).
    facts: dict[str, str] = field(default_factory=dict)
    #: Every planted statement: message id, key, needle, and whether it corrects an earlier one.
    fact_log: list[dict[str, Any]] = field(default_factory=list)
    seed: int = 0
    target_tokens: int = 0
    #: o200k tokens of the message contents (text and tool payloads), without per-message overheads.
    content_tokens: int = 0
    tool_calls: int = 0

    def turns(self) -> Iterator[Message]:
        return iter(self.messages)

    def exchanges(self) -> list[tuple[Message, Message]]:
        """(user message, assistant reply) pairs in order; the sample alternates strictly."""
        pairs = []
        for user, reply in zip(self.messages[0::2], self.messages[1::2], strict=False):
            pairs.append((user, reply))
        return pairs


def _words(rng: random.Random, count: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(count))


def _tool_result(rng: random.Random, tool: str, words: int) -> Any:
    """A large result: file text for some tools, rows of records for others (counted as JSON)."""
    if tool in ("read_file", "fetch_page"):
        lines: list[str] = []
        produced = 0
        while produced < words:
            line_words = rng.randint(6, 14)
            lines.append(f"{len(lines) + 1:04d}: {_words(rng, line_words)}")
            produced += line_words + 1
        return "\n".join(lines)
    rows: list[dict[str, Any]] = []
    produced = 0
    while produced < words:
        note_words = rng.randint(4, 12)
        rows.append(
            {
                "id": rng.randint(10_000, 99_999),
                "name": _words(rng, 2),
                "note": _words(rng, note_words),
                "amount": round(rng.uniform(1, 999), 2),
                "day": f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
            }
        )
        produced += 8 + note_words
    return {"rows": rows, "count": len(rows)}


def _with_tool_call(rng: random.Random, reply: Message, index: int) -> Message:
    tool = rng.choice(_TOOLS)
    words = rng.choices(RESULT_WORDS, weights=RESULT_WEIGHTS)[0]
    call = Part(
        type="tool-invocation",
        tool_call_id=f"call-{index}",
        tool_name=tool,
        state="result",
        args={"query": _words(rng, 4), "limit": rng.randint(5, 200)},
        result=_tool_result(rng, tool, words),
        created_at=reply.created_at,
    )
    return reply.model_copy(update={"parts": [call, *reply.parts]})


def _content_tokens(counter: TokenCounter, message: Message) -> int:
    """Tokens of a message's payloads, counted on strings so no estimate is cached on the parts (a cached
    estimate would be sent to the server and spare it the counting the benchmarks measure)."""
    total = 0
    for part in message.parts:
        if part.text:
            total += counter.count_string(part.text)
        if part.result is not None:
            payload = part.result if isinstance(part.result, str) else json.dumps(part.result)
            total += counter.count_string(payload)
        if part.args is not None:
            total += counter.count_string(json.dumps(part.args))
    return total


def generate(seed: int, target_tokens: int, *, tool_share: float = TOOL_SHARE) -> BenchConversation:
    """About `target_tokens` counted tokens of conversation (whole exchanges; the last one may overshoot).

    Same seed and size, same conversation. Facts planted by the sample generator are kept; a conversation
    too short to hold them all holds the ones it reached.
    """
    # The sample generator estimates 1.3 tokens per word and comes in under o200k counts; ask for more and
    # trim by real counts.
    base = generate_sample(seed, int(target_tokens * 1.25) + 2_000)
    rng = random.Random(seed * 7919 + 17)
    counter = TokenCounter()
    conversation = BenchConversation(seed=seed, target_tokens=target_tokens)
    produced = 0
    for index in range(0, len(base.messages) - 1, 2):
        user, reply = base.messages[index], base.messages[index + 1]
        if rng.random() < tool_share:
            reply = _with_tool_call(rng, reply, index)
            conversation.tool_calls += 1
        conversation.messages.extend([user, reply])
        produced += _content_tokens(counter, user) + _content_tokens(counter, reply)
        if produced >= target_tokens:
            break
    conversation.content_tokens = produced
    _record_facts(conversation)
    return conversation


def with_exchanges(seed: int, exchanges: int, *, tool_share: float = TOOL_SHARE) -> BenchConversation:
    """A conversation of at least `exchanges` exchanges (sizes vary with the seed, so grow until it fits)."""
    target = exchanges * 700
    while True:
        conversation = generate(seed, target, tool_share=tool_share)
        if len(conversation.exchanges()) >= exchanges:
            return conversation
        target = int(target * 1.3) + 1_000


def _record_facts(conversation: BenchConversation) -> None:
    sentences = [(key, sentence, needle, False) for key, sentence, needle in PLANTED]
    sentences += [(key, sentence, needle, True) for key, sentence, needle in CORRECTIONS]
    for message in conversation.messages:
        if message.role != "user":
            continue
        text = message.parts[0].text or ""
        for key, sentence, needle, correction in sentences:
            if text.startswith(sentence):
                conversation.facts[key] = needle
                conversation.fact_log.append(
                    {"message_id": message.id, "key": key, "needle": needle, "correction": correction}
                )


def write_key_file(conversation: BenchConversation, path: Path) -> None:
    """The answer key: what was planted where, and what the final context should still say."""
    path.parent.mkdir(parents=True, exist_ok=True)
    key = {
        "seed": conversation.seed,
        "target_tokens": conversation.target_tokens,
        "content_tokens": conversation.content_tokens,
        "messages": len(conversation.messages),
        "tool_calls": conversation.tool_calls,
        "facts": conversation.facts,
        "planted": conversation.fact_log,
    }
    path.write_text(json.dumps(key, indent=2) + "\n")


def message_body(message: Message) -> dict[str, Any]:
    """The `/turns` JSON of a message (what `OMClient` sends), built once so timing excludes it."""
    parts = [
        p.model_dump(mode="json", by_alias=True, exclude_none=True, exclude={"seq"}) for p in message.parts
    ]
    return {
        "id": message.id,
        "role": message.role,
        "parts": parts,
        "created_at": message.created_at.isoformat(),
    }
