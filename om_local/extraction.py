"""The offline model's extraction answers (behaviour §8.4, §8.5): deterministic, simple, honest heuristics.

- Inline extractors (the Observer prompt's OPTIONAL EXTRA SECTIONS): for each `<slug>` the prompt asks
  for, the most recent user sentence sharing a word of at least four letters with the slug or its
  instructions becomes the section's content; no such sentence, no section.
- Structured extraction (a prompt with a "Structured Extraction Request"): for each requested slug whose
  schema is an object, each string property `name` is filled from the most recent user sentence of the
  form "my <name> is X", "<name>: X" or "<name> is X" (underscores read as spaces), X cut at the first
  comma, semicolon or sentence end; properties never stated are omitted, and a slug with none is
  omitted. A string schema gets the most recent user sentence sharing a word with its slug or
  instructions, as inline extractors do. Nothing else is inferred.
- The `working-memory` extractor (§8.7) keeps the memory its instructions show and adds to it: Markdown
  mode appends each user sentence stating a durable fact ("my <x> is ...", "I live in ...", "I am ...",
  "I work ...", "I like/love/prefer ...", "call me ...") that the memory does not already hold, as a
  `- ` line; schema mode sets each string property stated as above over the current object. Nothing new,
  no value (the memory is left as it is).
"""

from __future__ import annotations

import json
import re
from typing import Any

from om_local.observer import split_sentences

STRUCTURED_HEADING_RE = re.compile(r"^#{1,6}[ \t]*Structured Extraction Request\b", re.MULTILINE)
_SECTION_RE = re.compile(r"^#{1,6}[ \t]*(?P<title>.+?)[ \t]*$", re.MULTILINE)
_INLINE_LINE_RE = re.compile(
    r"^- <(?P<slug>[a-z][a-z0-9-]*)> \.\.\. </(?P=slug)>: (?P<text>.*)$", re.MULTILINE
)
#: A user's transcript line, with the speaker's name after "User" when several people share the thread.
_USER_LINE_RE = re.compile(
    r"^User(?: [\w.'-](?:[\w .'-]{0,62}?[\w.'-])?)?(?: \([^)\n]*\))?:[ \t]*(?P<text>.*)$"
)
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
        if slug == WORKING_MEMORY_SLUG:
            value = working_memory_markdown(_current_memory(system[match.start() :], "inline"), sentences)
        else:
            value = sentence_for(sentences, slug, match.group("text"))
        if value:
            out.append(f"<{slug}>{value}</{slug}>")
    return out


WORKING_MEMORY_SLUG = "working-memory"
#: A user sentence that states a durable fact about the user.
_FACT_RE = re.compile(
    r"\b(?:my [a-z][a-z ]{1,30} (?:is|are)|i live in|i am|i'm|i work|i like|i love|i prefer|call me)\b",
    re.IGNORECASE,
)
#: Where the working-memory instructions show the memory as stored (`om_core.working_memory.extractor`), up to
#: the next extractor's line or the next heading of the prompt: an upper-case line in the Observer's system
#: prompt (a Markdown memory may hold `#` headings of its own), a `#` heading in a structured request
#: (schema mode: the memory is JSON).
_CURRENT_MEMORY_RE = re.compile(r"^Current working memory:\n", re.M)
_MEMORY_END = {
    "inline": re.compile(r"\n- <|\n\n[A-Z][A-Z ]+\n"),
    "structured": re.compile(r"\n- [a-z][a-z0-9-]*: |\n\n#"),
}


def _current_memory(text: str, where: str) -> str:
    start = _CURRENT_MEMORY_RE.search(text)
    if start is None:
        return ""
    rest = text[start.end() :]
    end = _MEMORY_END[where].search(rest)
    memory = (rest[: end.start()] if end else rest).strip()
    return "" if memory == "(empty)" else memory


def working_memory_markdown(current: str, sentences: list[str]) -> str | None:
    """The memory with each newly stated fact appended as a `- ` line; None when nothing is new."""
    known = current.lower()
    new: list[str] = []
    for sentence in sentences:
        if _FACT_RE.search(sentence) and sentence.lower() not in known and sentence not in new:
            new.append(sentence)
    if not new:
        return None
    return "\n".join([*([current.rstrip()] if current.strip() else []), *(f"- {fact}" for fact in new)])


def _working_memory_object(user: str, spec: dict[str, Any], sentences: list[str]) -> dict[str, Any] | None:
    """Schema mode: the current object with each stated string property set; None when nothing changes."""
    branch = next(
        (b for b in spec.get("anyOf") or [spec] if isinstance(b, dict) and b.get("type") == "object"), None
    )
    if branch is None:
        return None
    try:
        current = json.loads(_current_memory(user, "structured") or "{}")
    except ValueError:
        current = {}
    current = current if isinstance(current, dict) else {}
    updated = dict(current)
    for name, prop in (branch.get("properties") or {}).items():
        if isinstance(prop, dict) and _allows_string(prop):
            found = _stated(sentences, name)
            if found is not None:
                updated[name] = found
    return updated if updated != current else None


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
        if slug == WORKING_MEMORY_SLUG:
            if (memory := _working_memory_object(user, spec, sentences)) is not None:
                answer[slug] = memory
        elif spec.get("type") == "object":
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
