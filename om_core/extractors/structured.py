"""Structured extraction (behaviour §8.5): one follow-up structured-output call after the Observer/Reflector
run, for every extractor with a schema. It is made in the cycle, after the main call and before the
commit (`om_core.engine.extraction.structured_values`), so its values are reported on the cycle's end event.

This module is the pure part: the request (system prompt, user message, `response_format`) and the
reading of the reply. `om_core.engine.extraction` runs it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from om_core.errors import public_text
from om_core.extractors.definition import Extractor, RunContext, dump_value, validate_value
from om_core.extractors.inline import Extraction

CONVERSATION_HEADING = "## Source Conversation"
OUTPUT_HEADING = "## Memory Output of This Run"
REQUEST_HEADING = "## Structured Extraction Request"
PRIORS_HEADING = "## Previous Values"
SCHEMA_HEADING = "## Response Schema"

SYSTEM_PROMPT = (
    "You extract structured values for the memory system of an AI assistant. You read a conversation and "
    "the memory system's output for it, and answer with one JSON object matching the response schema. "
    "Include a value only when the conversation justifies it; when a previous value is still right, carry "
    "it forward unchanged; omit whatever cannot be inferred. Answer with the JSON object only."
)


@dataclass(frozen=True)
class StructuredSpec:
    """A structured extractor resolved for one run."""

    slug: str
    instructions: str
    schema: dict[str, Any]


def resolve_structured(
    extractors: Sequence[Extractor], ctx: RunContext
) -> tuple[list[StructuredSpec], Extraction]:
    """The run's structured extractors with instructions and schemas resolved; a callable that fails is
    that extractor's failure, not the run's. Refused entries are reported by the inline step."""
    specs: list[StructuredSpec] = []
    failures: list[dict[str, str]] = []
    for extractor in extractors:
        if not extractor.structured or extractor.refusal is not None:
            continue
        try:
            schema = extractor.json_schema_for(ctx)
            specs.append(StructuredSpec(extractor.slug, extractor.instructions_for(ctx), schema or {}))
        except Exception as exc:
            failures.append(
                {"slug": extractor.slug, "error": public_text(exc, context=f"extractor {extractor.slug}")}
            )
    return specs, Extraction(failures=failures)


def response_schema(specs: Sequence[StructuredSpec]) -> dict[str, Any]:
    """`{slug: schema}`, every property optional (§8.5)."""
    return {
        "type": "object",
        "properties": {spec.slug: spec.schema for spec in specs},
        "additionalProperties": False,
    }


def response_format(specs: Sequence[StructuredSpec]) -> dict[str, Any]:
    """The litellm/OpenAI `response_format` of the call."""
    return {
        "type": "json_schema",
        "json_schema": {"name": "extracted_values", "schema": response_schema(specs), "strict": False},
    }


def build_user_message(
    *,
    transcript: str,
    output: str,
    specs: Sequence[StructuredSpec],
    priors: Mapping[str, Any],
) -> str:
    """The request (§8.5): the source conversation, the run's output, the extractors with their
    instructions, the previous values as `<slug>` blocks, and the schema. The port takes one user message,
    so the run's output is a section of it rather than an assistant turn."""
    sections = [
        f"{CONVERSATION_HEADING}\n\n{transcript.strip()}",
        f"{OUTPUT_HEADING}\n\n{output.strip() or '(none)'}",
        f"{REQUEST_HEADING}\n\n" + "\n".join(f"- {s.slug}: {s.instructions}" for s in specs),
    ]
    shown = {s.slug: priors[s.slug] for s in specs if s.slug in priors}
    if shown:
        blocks = "\n".join(f"<{slug}>\n{dump_value(value)}\n</{slug}>" for slug, value in shown.items())
        sections.append(f"{PRIORS_HEADING}\n\n{blocks}")
    sections.append(
        f"{SCHEMA_HEADING}\n\n{json.dumps(response_schema(specs), sort_keys=True)}\n\n"
        "Return only values the conversation justifies; carry forward unchanged previous values when they "
        "still hold; omit what cannot be inferred."
    )
    return "\n\n".join(sections)


_FENCE_RE = re.compile(r"^```(?:json)?\s*(?P<body>.*?)\s*```$", re.DOTALL)


def parse_reply(text: str, specs: Sequence[StructuredSpec]) -> Extraction:
    """Values of a structured reply: null or empty values omitted, a value its schema refuses is a failure
    `{slug, error}` and the others are kept. A reply that is not a JSON object fails every extractor."""
    body = text.strip()
    fenced = _FENCE_RE.match(body)
    if fenced:
        body = fenced.group("body")
    try:
        obj = json.loads(body)
    except ValueError:
        obj = None
    if not isinstance(obj, dict):
        error = "the structured reply is not a JSON object"
        return Extraction(failures=[{"slug": s.slug, "error": error} for s in specs])
    values: dict[str, Any] = {}
    failures: list[dict[str, str]] = []
    for spec in specs:
        value = obj.get(spec.slug)
        if value is None or value == "" or value == {} or value == []:
            continue
        problem = validate_value(spec.schema, value)
        if problem is None:
            values[spec.slug] = value
        else:
            failures.append({"slug": spec.slug, "error": problem})
    return Extraction(values, failures)
