"""The offline model's extraction answers (spec §8.4, §8.5): deterministic, simple, honest heuristics.

- Inline extractors (the Observer prompt's OPTIONAL EXTRA SECTIONS): for each `<slug>` the prompt asks
  for, the most recent user sentence sharing a word of at least four letters with the slug or its
  instructions becomes the section's content; no such sentence, no section.
- Structured extraction (a prompt with a "Structured Extraction Request"): for each requested slug whose
  schema is an object, each string property `name` is filled from the most recent user sentence of the
  form "my <name> is X", "<name>: X" or "<name> is X" (underscores read as spaces), X cut at the first
  comma, semicolon or sentence end; properties never stated are omitted, and a slug with none is
  omitted. A string schema gets the most recent user sentence sharing a word with its slug or
  instructions, as inline extractors do. Nothing else is inferred.
"""

from __future__ import annotations

import json
import re
from typing import Any

from om_core.models.local.observer import split_sentences

STRUCTURED_HEADING_RE = re.compile(r"^#{1,6}[ \t]*Structured Extraction Request\b", re.MULTILINE)
_SECTION_RE = re.compile(r"^#{1,6}[ \t]*(?P<title>.+?)[ \t]*$", re.MULTILINE)
_INLINE_LINE_RE = re.compile(
    r"^- <(?P<slug>[a-z][a-z0-9-]*)> \.\.\. </(?P=slug)>: (?P<text>.*)$", re.MULTILINE
)
_USER_LINE_RE = re.compile(r"^User(?: \([^)\n]*\))?:[ \t]*(?P<text>.*)$")
_WORD_RE = re.compile(r"[a-z]{4,}")
_STOP = frozenset(
    {
        "extract",
        "user",
        "users",
        "their",
        "they",
        "them",
        "that",
        "this",
        "with",
        "from",
        "what",
        "when",
        "which",
        "about",
        "should",
        "value",
        "values",
        "short",
        "phrase",
        "current",
        "keep",
        "only",
        "stated",
        "there",
        "have",
        "will",
        "into",
        "each",
        "more",
        "most",
        "recent",
        "conversation",
        "assistant",
    }
)


def is_structured_prompt(user: str) -> bool:
    return STRUCTURED_HEADING_RE.search(user) is not None


def _sections(text: str) -> dict[str, str]:
    """The user message's `## Title` sections by title."""
    out: dict[str, str] = {}
    matches = list(_SECTION_RE.finditer(text))
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(text)
        out[match.group("title").strip()] = text[match.end() : end].strip()
    return out


def user_sentences(transcript: str) -> list[str]:
    """The user's sentences in a rendered transcript, oldest first: the text of lines titled `User`
    and their continuation lines."""
    sentences: list[str] = []
    current: list[str] | None = None
    for line in transcript.split("\n"):
        match = _USER_LINE_RE.match(line.strip())
        if match:
            if current:
                sentences.extend(split_sentences(" ".join(current)))
            current = [match.group("text")]
        elif re.match(r"^\S.*?:\s", line) and not line.startswith(" "):
            if current:
                sentences.extend(split_sentences(" ".join(current)))
            current = None
        elif current is not None and line.strip():
            current.append(line.strip())
    if current:
        sentences.extend(split_sentences(" ".join(current)))
    return [s.strip() for s in sentences if s.strip()]


def _keywords(*texts: str) -> set[str]:
    words: set[str] = set()
    for text in texts:
        words.update(w for w in _WORD_RE.findall(text.lower().replace("-", " ")) if w not in _STOP)
    return words


def sentence_for(sentences: list[str], *texts: str) -> str | None:
    """The most recent sentence sharing a keyword with `texts`."""
    wanted = _keywords(*texts)
    for sentence in reversed(sentences):
        if wanted & set(_WORD_RE.findall(sentence.lower())):
            return sentence
    return None


def inline_sections(system: str, transcript: str) -> list[str]:
    """The `<slug>` sections the offline Observer adds for the inline extractors its prompt lists."""
    sentences = user_sentences(transcript)
    out: list[str] = []
    for match in _INLINE_LINE_RE.finditer(system):
        slug = match.group("slug")
        sentence = sentence_for(sentences, slug, match.group("text"))
        if sentence:
            out.append(f"<{slug}>{sentence}</{slug}>")
    return out


def _stated(sentences: list[str], name: str) -> str | None:
    label = re.escape(name.replace("_", " ").strip()).replace(r"\ ", r"[ _]")
    pattern = re.compile(
        rf"(?:\bmy {label} is|\b{label}\s*:|\b{label} is)\s+(?P<value>[^,;.!?]+)", re.IGNORECASE
    )
    for sentence in reversed(sentences):
        match = pattern.search(sentence)
        if match:
            value = match.group("value").strip()
            if value:
                return value
    return None


def structured_reply(user: str) -> str:
    """The JSON object answering a structured extraction request."""
    sections = _sections(user)
    sentences = user_sentences(sections.get("Source Conversation", ""))
    try:
        schema = json.loads(sections.get("Response Schema", "").split("\n\n")[0])
    except ValueError:
        schema = {}
    instructions = {
        m.group(1): m.group(2)
        for m in re.finditer(
            r"^- ([a-z][a-z0-9-]*): (.*)$", sections.get("Structured Extraction Request", ""), re.M
        )
    }
    answer: dict[str, Any] = {}
    for slug, spec in (schema.get("properties") or {}).items():
        if not isinstance(spec, dict):
            continue
        if spec.get("type") == "object":
            value = {
                name: found
                for name, prop in (spec.get("properties") or {}).items()
                if isinstance(prop, dict)
                and _allows_string(prop)
                and (found := _stated(sentences, name)) is not None
            }
            if value:
                answer[slug] = value
        elif _allows_string(spec):
            sentence = sentence_for(sentences, slug, instructions.get(slug, ""))
            if sentence:
                answer[slug] = sentence
    return json.dumps(answer, ensure_ascii=False, sort_keys=True)


def _allows_string(prop: dict[str, Any]) -> bool:
    kind = prop.get("type")
    if isinstance(kind, list):
        return "string" in kind
    if kind is None and isinstance(prop.get("anyOf"), list):
        return any(isinstance(p, dict) and p.get("type") == "string" for p in prop["anyOf"])
    return bool(kind == "string")
