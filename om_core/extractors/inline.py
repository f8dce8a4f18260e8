"""Inline extraction (behaviour §8.4): values the Observer or Reflector writes inside its own output, as
`<slug>…</slug>` sections or `<extracted-values>{...}</extracted-values>` blocks.

Every such section is stripped before observations are parsed (`section_tags`), so an extracted value
never leaks into the log.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from om_core.errors import public_text
from om_core.extractors.definition import Extractor, RunContext, validate_value
from om_core.extractors.signals import Signal
from om_core.observer.prompt import InlineExtractorPrompt

EXTRACTED_VALUES_TAG = "extracted-values"
_JSON_START_RE = re.compile(r"^(?:[\[{\"\-0-9]|true\b|false\b|null\b)")


@dataclass(frozen=True)
class Extraction:
    """Values by slug and failures `{slug, error}` of one run (or one step of it)."""

    values: dict[str, Any] = field(default_factory=dict)
    failures: list[dict[str, str]] = field(default_factory=list)
    #: Signals `on_extracted` callbacks sent (`om_core.extractors.signals`), written with the values.
    signals: tuple[Signal, ...] = ()

    def merged(self, later: Extraction) -> Extraction:
        """`later` wins by slug (§8.6.1); failures and signals of both kept."""
        return Extraction(
            {**self.values, **later.values},
            [*self.failures, *later.failures],
            (*self.signals, *later.signals),
        )


@dataclass(frozen=True)
class InlineSpec:
    """An inline extractor resolved for one run: its slug, instructions and schema (None: a string)."""

    slug: str
    instructions: str
    schema: dict[str, Any] | None


def resolve_inline(extractors: Sequence[Extractor], ctx: RunContext) -> tuple[list[InlineSpec], Extraction]:
    """The run's inline extractors with their instructions and schemas resolved; a callable that fails
    is that extractor's failure for this run, not the cycle's. A refused entry (`Extractor.refusal`) is
    reported here, for inline and structured alike, so it is reported once, on the run's end event."""
    specs: list[InlineSpec] = []
    failures: list[dict[str, str]] = []
    for extractor in extractors:
        if extractor.refusal is not None:
            failures.append({"slug": extractor.slug, "error": extractor.refusal})
            continue
        if extractor.structured:
            continue
        try:
            specs.append(InlineSpec(extractor.slug, extractor.instructions_for(ctx), None))
        except Exception as exc:
            failures.append(
                {"slug": extractor.slug, "error": public_text(exc, context=f"extractor {extractor.slug}")}
            )
    return specs, Extraction(failures=failures)


def prompts(specs: Sequence[InlineSpec]) -> tuple[InlineExtractorPrompt, ...]:
    """How the system prompt describes each inline extractor (its optional `<slug>` section)."""
    return tuple(
        InlineExtractorPrompt(s.slug, s.instructions, json.dumps(s.schema) if s.schema is not None else None)
        for s in specs
    )


def section_tags(specs: Sequence[InlineSpec]) -> tuple[str, ...]:
    """Every tag an inline extraction may write: stripped from the output before observations are parsed."""
    return (*(s.slug for s in specs), EXTRACTED_VALUES_TAG) if specs else ()


def _blocks(text: str, tag: str) -> list[str]:
    pattern = re.compile(rf"<{re.escape(tag)}>(.*?)</{re.escape(tag)}>", re.DOTALL | re.IGNORECASE)
    return [m.group(1).strip() for m in pattern.finditer(text)]


def parse_inline(text: str, specs: Sequence[InlineSpec]) -> Extraction:
    """The inline values of one output (§8.4): from `<extracted-values>` blocks when there are any, else
    from the last `<slug>` section of each extractor, its content tried as JSON or as a string in the
    spec's order. Null and empty values are skipped; a value its schema refuses is a failure."""
    values: dict[str, Any] = {}
    failures: list[dict[str, str]] = []
    if not specs:
        return Extraction()
    blocks = _blocks(text, EXTRACTED_VALUES_TAG)
    if blocks:
        by_slug = {s.slug: s for s in specs}
        for block in blocks:
            try:
                obj = json.loads(block)
            except ValueError:
                obj = None
            if not isinstance(obj, dict):
                failures.append({"slug": EXTRACTED_VALUES_TAG, "error": "the block is not a JSON object"})
                continue
            for slug, value in obj.items():
                spec = by_slug.get(slug)
                if spec is None or _empty(value):
                    continue
                problem = validate_value(spec.schema, value)
                if problem is None:
                    values[slug] = value
                else:
                    failures.append({"slug": slug, "error": problem})
        return Extraction(values, failures)
    for spec in specs:
        found = _blocks(text, spec.slug)
        if not found or not found[-1]:
            continue
        accepted, problem = _first_accepted(found[-1], spec.schema)
        if problem is None:
            values[spec.slug] = accepted
        else:
            failures.append({"slug": spec.slug, "error": problem})
    return Extraction(values, failures)


def _first_accepted(content: str, schema: Mapping[str, Any] | None) -> tuple[Any, str | None]:
    """The first candidate the schema accepts: JSON first when the content looks like JSON, else the
    raw string first."""
    as_json: list[Any] = []
    with contextlib.suppress(ValueError):
        as_json = [json.loads(content)]
    candidates = [*as_json, content] if _JSON_START_RE.match(content) else [content, *as_json]
    problem: str | None = "no candidate"
    for candidate in candidates:
        problem = validate_value(schema, candidate)
        if problem is None:
            return candidate, None
    return None, problem


def _empty(value: Any) -> bool:
    return value is None or value == "" or value == [] or value == {}
