"""The per-part estimate cache (behaviour §7.5).

Counting runs on every turn over every unobserved part, and the expensive step (tokenising large tool
results) gives the same answer each time for an append-only part. Estimates are therefore stored on the
part itself, in `provider_metadata["om"]["tokenEstimate"]`, and persisted with it. An entry is trusted
only if its version, estimator source and content-hash key all match, so a rule change, a different
tokenizer or an edited payload silently falls back to recounting.

Client-supplied entries (`source == "client"`) are authoritative for image/file parts, are never
overwritten, and may also sit under the reference implementation's `mastra` namespace.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from typing import Any

from om_core.messages import Part

ESTIMATE_KEY = "tokenEstimate"
OWN_NAMESPACE = "om"
CLIENT_NAMESPACES = ("om", "mastra")
CLIENT_SOURCE = "client"

Entry = dict[str, Any]


def cache_key(kind: str, payload: str) -> str:
    digest = hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{kind}:{digest}"


def make_entry(version: int, source: str, key: str, tokens: float) -> Entry:
    return {"v": version, "source": source, "key": key, "tokens": tokens}


def finite_tokens(entry: Mapping[str, Any]) -> float | None:
    tokens = entry.get("tokens")
    if isinstance(tokens, bool) or not isinstance(tokens, int | float) or not math.isfinite(tokens):
        return None
    return tokens


def entries_of(value: object) -> list[Entry]:
    """The entries in a `tokenEstimate` value, which is one entry or a map of entries by key."""
    if not isinstance(value, dict):
        return []
    if "tokens" in value and not isinstance(value.get("tokens"), dict):
        return [value]
    return [entry for entry in value.values() if isinstance(entry, dict)]


def client_estimate(provider_metadata: Mapping[str, Any] | None) -> float | None:
    """A client-supplied estimate with finite `tokens >= 0`, if any namespace holds one."""
    if not provider_metadata:
        return None
    for namespace in CLIENT_NAMESPACES:
        holder = provider_metadata.get(namespace)
        if not isinstance(holder, Mapping):
            continue
        for entry in entries_of(holder.get(ESTIMATE_KEY)):
            if entry.get("source") != CLIENT_SOURCE:
                continue
            tokens = finite_tokens(entry)
            if tokens is not None and tokens >= 0:
                return tokens
    return None


def own_entries(part: Part) -> list[Entry]:
    metadata = part.provider_metadata
    if not metadata:
        return []
    holder = metadata.get(OWN_NAMESPACE)
    return entries_of(holder.get(ESTIMATE_KEY)) if isinstance(holder, dict) else []


def _kind(entry: Entry) -> str:
    key = entry.get("key")
    return key.split(":", 1)[0] if isinstance(key, str) else ""


def store_entries(part: Part, fresh: list[Entry], existing: list[Entry], version: int, source: str) -> None:
    """Record `fresh` on the part, keeping client entries and current entries of other kinds.

    Entries of the same kind are replaced (one per kind keeps the map bounded), stale versions or sources
    are dropped, and nothing is written when the result equals what is already stored.
    """
    fresh_kinds = {_kind(entry) for entry in fresh}
    kept = [
        entry
        for entry in existing
        if entry.get("source") == CLIENT_SOURCE
        or (entry.get("v") == version and entry.get("source") == source and _kind(entry) not in fresh_kinds)
    ]
    merged: dict[str, Entry] = {}
    for entry in [*kept, *fresh]:
        merged[str(entry.get("key"))] = entry
    value: Entry = next(iter(merged.values())) if len(merged) == 1 else merged
    metadata = part.provider_metadata or {}
    holder = metadata.get(OWN_NAMESPACE)
    holder = holder if isinstance(holder, dict) else {}
    if holder.get(ESTIMATE_KEY) == value:
        return
    # New dicts rather than in-place edits: a shallow model_copy may share these dicts with another part.
    part.provider_metadata = {**metadata, OWN_NAMESPACE: {**holder, ESTIMATE_KEY: value}}


def store_dimensions(part: Part, width: int, height: int) -> None:
    """Persist decoded image dimensions so later counts skip the header decode."""
    metadata = part.provider_metadata or {}
    holder = metadata.get(OWN_NAMESPACE)
    holder = holder if isinstance(holder, dict) else {}
    part.provider_metadata = {
        **metadata,
        OWN_NAMESPACE: {**holder, "imageDimensions": {"width": width, "height": height}},
    }
