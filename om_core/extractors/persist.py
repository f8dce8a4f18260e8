"""After a run's values are parsed (behaviour §8.6): `on_extracted`, then where each value is persisted in the
thread's OM metadata, and what the next run is shown as priors.

A failing extractor drops only its own value: the cycle goes on and other values are kept.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from om_core.errors import public_text
from om_core.extractors.definition import (
    ExtractedContext,
    Extractor,
    RunContext,
    dump_value,
    validate_value,
)
from om_core.extractors.inline import Extraction
from om_core.extractors.signals import Outbox
from om_core.store.payloads import ExtractionFields

log = logging.getLogger("om.extractors")


def get_path(meta: Mapping[str, Any], path: str) -> Any:
    """The value at a dotted path of the OM metadata, None when any step is missing."""
    node: Any = meta
    for key in path.split("."):
        if not isinstance(node, Mapping) or key not in node:
            return None
        node = node[key]
    return node


def _nest(path: str, value: Any) -> dict[str, Any]:
    keys = path.split(".")
    out: dict[str, Any] = {keys[-1]: value}
    for key in reversed(keys[:-1]):
        out = {key: out}
    return out


def apply_on_extracted(
    extractors: Sequence[Extractor], extraction: Extraction, ctx: RunContext
) -> Extraction:
    """Each present value of a user extractor with `on_extracted` handed to it (§8.6.2): None keeps the
    value, another value replaces it when the extractor's schema accepts it, a raise drops it with a
    failure `{slug, error}`. Built-ins never reach here.

    The callback is operator code (registered by name), but whatever it raises stays that extractor's
    failure: `SystemExit` included, so a callback calling `sys.exit` cannot end the request or the worker
    task it runs in. Only `KeyboardInterrupt` (the operator stopping the process) goes through."""
    values = dict(extraction.values)
    failures = list(extraction.failures)
    outbox = Outbox()
    for extractor in extractors:
        if extractor.builtin or extractor.on_extracted is None or extractor.slug not in values:
            continue
        current = values[extractor.slug]
        previous = (
            get_path(ctx.om_metadata, extractor.metadata_key_path) if extractor.metadata_key_path else None
        )
        sent_before = len(outbox.sent)
        try:
            replaced = extractor.on_extracted(
                ExtractedContext(
                    ctx.source,
                    extractor,
                    ctx.thread_id,
                    ctx.resource_id,
                    previous,
                    current,
                    ctx.memory,
                    send_signal=outbox.sender(extractor.slug),
                )
            )
        except (Exception, SystemExit) as exc:
            del outbox.sent[sent_before:]  # a failed extractor's signals go with its value
            log.warning("onExtracted of %s raised: %r", extractor.slug, exc, exc_info=True)
            values.pop(extractor.slug)
            # A SystemExit's text is its exit code: say what happened instead.
            text = (
                public_text(exc, context=f"onExtracted of {extractor.slug}")
                if isinstance(exc, Exception)
                else ""
            )
            failures.append(
                {"slug": extractor.slug, "error": text or f"onExtracted raised {type(exc).__name__}"}
            )
            continue
        if replaced is None:
            continue
        try:
            problem = validate_value(extractor.json_schema_for(ctx), replaced)
        except Exception as exc:
            problem = public_text(exc, context=f"validating what onExtracted of {extractor.slug} returned")
        if problem is None:
            values[extractor.slug] = replaced
        else:
            del outbox.sent[sent_before:]
            values.pop(extractor.slug)
            failures.append(
                {"slug": extractor.slug, "error": f"onExtracted returned an invalid value: {problem}"}
            )
    return Extraction(values, failures, (*extraction.signals, *outbox.sent))


def metadata_patch(extractors: Sequence[Extractor], values: Mapping[str, Any]) -> dict[str, Any]:
    """The OM metadata patch of present values at each extractor's `metadata_key_path` (§8.6.3), nested
    so a deep merge creates intermediate objects and keeps what is stored beside them. An extractor
    without a path (`metadataKeyPath: false`) writes nothing; an absent value erases nothing."""
    patch: dict[str, Any] = {}
    for extractor in extractors:
        if extractor.metadata_key_path is None or extractor.slug not in values:
            continue
        value = values[extractor.slug]
        if value is None or value == "":
            continue
        _merge_into(patch, _nest(extractor.metadata_key_path, value))
    return patch


def _merge_into(base: dict[str, Any], patch: Mapping[str, Any]) -> None:
    for key, value in patch.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _merge_into(base[key], value)
        else:
            base[key] = value


def priors(extractors: Sequence[Extractor], meta: Mapping[str, Any]) -> dict[str, Any]:
    """What the next run is shown as previous values (§8.6.5): each extractor with
    `include_previous` and a path, its value read from that path."""
    out: dict[str, Any] = {}
    for extractor in extractors:
        if not extractor.include_previous or extractor.metadata_key_path is None:
            continue
        value = get_path(meta, extractor.metadata_key_path)
        if value is not None and value != "":
            out[extractor.slug] = value
    return out


def context_values(extractors: Sequence[Extractor], meta: Mapping[str, Any]) -> dict[str, str]:
    """The persisted values of extractors marked `context`, as text for the actor's `<slug>` blocks."""
    out: dict[str, str] = {}
    for extractor in extractors:
        if not extractor.context or extractor.metadata_key_path is None:
            continue
        value = get_path(meta, extractor.metadata_key_path)
        if value is not None and value != "":
            out[extractor.slug] = dump_value(value)
    return out


def persisted_values(extractors: Sequence[Extractor], meta: Mapping[str, Any]) -> dict[str, Any]:
    """Each extractor's persisted value by slug (what `GET /v1/threads/{id}` shows as `extracted`)."""
    out: dict[str, Any] = {}
    for extractor in extractors:
        if extractor.metadata_key_path is None:
            continue
        value = get_path(meta, extractor.metadata_key_path)
        if value is not None:
            out[extractor.slug] = value
    return out


def end_fields(extraction: Extraction) -> ExtractionFields:
    """`extractedValues` / `extractionFailures` for an end event; each only when it has something."""
    fields: ExtractionFields = {}
    if extraction.values:
        fields["extractedValues"] = dict(extraction.values)
    if extraction.failures:
        fields["extractionFailures"] = list(extraction.failures)
    return fields
