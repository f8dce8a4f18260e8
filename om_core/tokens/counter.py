"""Message and conversation token counts (behaviour §7.1, §7.2, §7.4).

Counts are computed per part and summed per message, so storage can persist each part's contribution
(`PartCount`) when the part is appended and rebuild a message's total with `message_total` without
tokenising again. Per-message (3.8) and per-conversation (24) overheads are never cached.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pydantic_core

from om_core.messages import Message, Part
from om_core.tokens.attachments import (
    NAMESPACES,
    Attachment,
    ModelContext,
    attachment_from_block,
    attachment_from_part,
    model_context,
    normalize_mime,
    plan_attachment,
)
from om_core.tokens.cache import (
    ESTIMATE_KEY,
    Entry,
    cache_key,
    client_estimate,
    finite_tokens,
    make_entry,
    own_entries,
    store_dimensions,
    store_entries,
)
from om_core.tokens.estimators import CACHE_VERSION, TextEstimator, default_estimator, estimator_source
from om_core.tokens.rounding import round_half_up

MESSAGE_OVERHEAD = 3.8
CONVERSATION_OVERHEAD = 24
#: Structured (JSON) tool payloads are counted as serialised text, which overstates them; the reference
#: corrects each by this many tokens.
JSON_ADJUSTMENT = -12.0
#: `encryptedContent` strings longer than this are opaque provider blobs, not context; they are dropped.
ENCRYPTED_CONTENT_LIMIT = 256

DENIED_TEXT = "Tool call was not approved by the user"
ERROR_TEXT = "Tool execution failed"

_CALL_STATES = frozenset({"call", "partial-call", "approval-requested", "approval-responded"})
_IMAGE_BLOCKS = frozenset({"image", "image-data"})
_FILE_BLOCKS = frozenset({"audio", "file-data"})


@dataclass(frozen=True, slots=True)
class PartCount:
    """One part's contribution to its message: payload tokens, overhead change, extra framed messages."""

    tokens: float
    overhead_delta: float = 0.0
    extra_messages: int = 0


ZERO = PartCount(0.0)


def _compact_json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _pretty_json(value: object) -> str:
    """The indented form the original counts (`JSON.stringify(value, null, 2)`). pydantic-core writes it
    several times faster than the standard library, whose C encoder does not indent; exponents come out
    as JavaScript writes them (`1e-7`). Values it cannot encode take the standard library's path."""
    try:
        return pydantic_core.to_json(value, indent=2, fallback=str).decode()
    except (ValueError, TypeError):
        return json.dumps(value, ensure_ascii=False, indent=2, default=str)


def strip_encrypted_content(value: Any) -> Any:
    """`value` without long `encryptedContent` strings; unchanged subtrees are shared, not copied."""
    if isinstance(value, dict):
        changed = False
        out: dict[Any, Any] = {}
        for key, item in value.items():
            if key == "encryptedContent" and isinstance(item, str) and len(item) > ENCRYPTED_CONTENT_LIMIT:
                changed = True
                continue
            stripped = strip_encrypted_content(item)
            changed = changed or stripped is not item
            out[key] = stripped
        return out if changed else value
    if isinstance(value, list):
        items = [strip_encrypted_content(item) for item in value]
        if any(new is not old for new, old in zip(items, value, strict=True)):
            return items
        return value
    return value


def multimodal_blocks(value: object) -> list[Any] | None:
    """The content blocks of a tool result that carries at least one attachment, else None."""
    if not isinstance(value, dict):
        return None
    blocks = value.get("value") if value.get("type") == "content" else None
    if not isinstance(blocks, list):
        blocks = value.get("content")
    if not isinstance(blocks, list):
        return None
    if any(_block_attachment_kind(block) is not None for block in blocks):
        return blocks
    return None


def _block_attachment_kind(block: object) -> Literal["image", "file"] | None:
    if not isinstance(block, dict):
        return None
    block_type = block.get("type")
    if block_type in _IMAGE_BLOCKS:
        return "image"
    if block_type in _FILE_BLOCKS:
        return "file"
    if block_type == "media":
        mime = normalize_mime(block.get("mediaType") or block.get("mimeType")) or ""
        return "image" if mime.startswith("image/") else "file"
    return None


def _is_text_block(block: object) -> bool:
    return isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str)


def _model_output(part: Part) -> Any:
    metadata = part.provider_metadata or {}
    for namespace in NAMESPACES:
        holder = metadata.get(namespace)
        if isinstance(holder, dict) and holder.get("modelOutput") is not None:
            return holder["modelOutput"]
    return None


def _part_json(part: Part) -> str:
    """The part as JSON for kinds without a rule, minus storage bookkeeping and cached estimates.

    `seq`/`createdAt` are assigned by storage and estimates are written by counting itself; leaving any of
    them in would change the count (and the cache key) just because the part was stored or counted.
    """
    data = part.model_dump(mode="json", by_alias=True, exclude_none=True, exclude={"seq", "created_at"})
    metadata = data.get("providerMetadata")
    if isinstance(metadata, dict):
        for namespace in NAMESPACES:
            holder = metadata.get(namespace)
            if isinstance(holder, dict) and ESTIMATE_KEY in holder:
                holder.pop(ESTIMATE_KEY)
                if not holder:
                    metadata.pop(namespace)
        if not metadata:
            data.pop("providerMetadata")
    return _compact_json(data)


class _PartCache:
    """Cache lookups and writes for one part during one count."""

    __slots__ = ("counter", "existing", "fresh", "missed", "part")

    def __init__(self, counter: TokenCounter, part: Part) -> None:
        self.counter = counter
        self.part = part
        self.existing = own_entries(part)
        self.fresh: list[Entry] = []
        self.missed = False

    def tokens(self, kind: str, payload: str, compute: Callable[[], float]) -> float:
        counter = self.counter
        key = cache_key(kind, payload)
        for entry in self.existing:
            if entry.get("key") == key and entry.get("v") == counter.cache_version:
                tokens = finite_tokens(entry)
                if entry.get("source") == counter.source and tokens is not None:
                    counter.cache_hits += 1
                    self.fresh.append(entry)
                    return tokens
        counter.cache_misses += 1
        tokens = compute()
        self.fresh.append(make_entry(counter.cache_version, counter.source, key, tokens))
        self.missed = True
        return tokens

    def text(self, kind: str, text: str) -> float:
        if not text:
            return 0
        return self.tokens(kind, text, lambda: self.counter.count_string(text))

    def flush(self) -> None:
        """Write only after a miss: an all-hit count leaves the part (and its stored row) untouched."""
        if self.missed:
            counter = self.counter
            store_entries(self.part, self.fresh, self.existing, counter.cache_version, counter.source)


class TokenCounter:
    """Counts strings, parts, messages and conversations with one text estimator.

    `model` arguments are `"provider/model-id"` strings; they only matter for images and files, whose
    cost depends on the provider. Without a model the OpenAI defaults apply.
    `cache_hits` / `cache_misses` count cache lookups (one per cached piece of a part).
    """

    def __init__(self, estimator: TextEstimator | None = None) -> None:
        self.estimator: TextEstimator = estimator if estimator is not None else default_estimator()
        self.cache_version = CACHE_VERSION
        self.source = estimator_source(self.estimator, self.cache_version)
        self.cache_hits = 0
        self.cache_misses = 0
        self._role_tokens: dict[str, int] = {}

    # -- strings ----------------------------------------------------------------------------------

    def count_string(self, s: str | None) -> int:
        return self.estimator(s) if s else 0

    # -- messages ---------------------------------------------------------------------------------

    def count_messages(self, ms: Sequence[Message], model: str | None = None) -> int:
        if not ms:
            return 0
        return CONVERSATION_OVERHEAD + sum(self.count_message(m, model) for m in ms)

    def count_message(self, m: Message, model: str | None = None) -> int:
        return self.message_total(m.role, [self.count_part(p, model) for p in m.parts])

    def message_total(self, role: str, part_counts: Sequence[PartCount]) -> int:
        """A message's total from its parts' stored contributions (never below zero).

        The floor at zero is ours: tiny JSON tool calls can otherwise go negative through the −12 JSON
        adjustment, and a negative message would make a longer history count as fewer tokens.
        """
        role_tokens = self._role_tokens.get(role)
        if role_tokens is None:
            role_tokens = self._role_tokens[role] = self.count_string(role)
        payload = role_tokens + math.fsum(pc.tokens for pc in part_counts)
        extra_messages = sum(pc.extra_messages for pc in part_counts)
        deltas = math.fsum(pc.overhead_delta for pc in part_counts)
        overhead = MESSAGE_OVERHEAD * (1 + extra_messages) + deltas
        return max(0, round_half_up(payload + overhead))

    # -- parts ------------------------------------------------------------------------------------

    def count_part(self, part: Part, model: str | None = None) -> PartCount:
        """One part's contribution. May write cache entries into `part.provider_metadata`."""
        if part.is_data or part.type == "reasoning":
            return ZERO
        cache = _PartCache(self, part)
        if part.type in ("image", "file"):
            result = PartCount(self._part_attachment_tokens(part, model_context(model), cache))
        elif part.type == "text":
            result = PartCount(cache.text("text", part.text or ""))
        elif part.type == "tool-invocation":
            result = self._tool_invocation(part, model, cache)
        else:
            payload = _part_json(part)
            result = PartCount(cache.text(f"part-{part.type}", payload))
        cache.flush()
        return result

    def _part_attachment_tokens(self, part: Part, ctx: ModelContext, cache: _PartCache) -> float:
        client = client_estimate(part.provider_metadata)
        if client is not None:
            return client
        plan = plan_attachment(attachment_from_part(part), ctx)
        if plan.decoded_dimensions is not None:
            store_dimensions(part, *plan.decoded_dimensions)
        if plan.text is not None:
            return cache.text(plan.kind, plan.text)
        fixed = float(plan.fixed_tokens or 0)
        return cache.tokens(plan.kind, plan.payload, lambda: fixed)

    def _tool_invocation(self, part: Part, model: str | None, cache: _PartCache) -> PartCount:
        state = part.state or "call"
        if state in _CALL_STATES:
            tokens = cache.text("tool-call-name", part.tool_name or "")
            delta = 0.0
            args = part.args
            if isinstance(args, str):
                tokens += cache.text("tool-call-args", args)
            elif args is not None:
                tokens += cache.text("tool-call-args-json", _compact_json(args))
                delta = JSON_ADJUSTMENT
            if state != "approval-responded":
                return PartCount(tokens, delta, 0)
            tokens += cache.text("tool-approval-reason", part.approval_reason or "")
            return PartCount(tokens, delta, 1)
        if state == "result":
            return self._tool_result(part, model, cache)
        if state == "output-denied":
            return PartCount(cache.text("tool-result-denied", part.approval_reason or DENIED_TEXT), 0.0, 1)
        return PartCount(cache.text("tool-result-error", part.error_text or ERROR_TEXT), 0.0, 1)

    def _tool_result(self, part: Part, model: str | None, cache: _PartCache) -> PartCount:
        value = _model_output(part)
        kind = "tool-result-json"
        if value is not None:
            kind = "tool-result-model-output-json"
        else:
            value = part.result
        if value is None:
            return PartCount(0.0, 0.0, 1)
        if isinstance(value, str):
            # Own kind, so a string result never shares a key with an object whose JSON is the same text.
            return PartCount(cache.text(kind.replace("-json", "-text"), value), 0.0, 1)
        blocks = multimodal_blocks(value)
        if blocks is not None:
            ctx = model_context(model)
            payload = f"{ctx.family}/{ctx.model_id}\n{_compact_json(value)}"
            tokens = cache.tokens(
                "tool-result-multimodal-content", payload, lambda: self._blocks_tokens(blocks, ctx)
            )
            return PartCount(tokens, JSON_ADJUSTMENT, 1)
        # The key hashes the compact form (C encoder); the slower indented form is built only on a miss.
        tokens = cache.tokens(
            kind,
            _compact_json(value),
            lambda: self.count_string(_pretty_json(strip_encrypted_content(value))),
        )
        return PartCount(tokens, JSON_ADJUSTMENT, 1)

    # -- attachments inside tool results ------------------------------------------------------------

    def _blocks_tokens(self, blocks: Sequence[Any], ctx: ModelContext) -> float:
        total = 0.0
        for block in blocks:
            kind = _block_attachment_kind(block)
            if kind is not None:
                total += self._attachment_tokens(attachment_from_block(block, kind), ctx)
            elif _is_text_block(block):
                total += self.count_string(block["text"])
            else:
                total += self.count_string(_compact_json(block))
        return total

    def _attachment_tokens(self, att: Attachment, ctx: ModelContext) -> float:
        client = client_estimate(att.provider_metadata)
        if client is not None:
            return client
        plan = plan_attachment(att, ctx)
        if plan.text is not None:
            return self.count_string(plan.text)
        return float(plan.fixed_tokens or 0)
