"""The Observer's prompts, its previous-observations context, and the parsing of its output (§5).

The Observer is one model call: a system prompt that says what to record and how to format it, and one user
message holding previous observations, prior thread metadata, the new transcript and, last, the task.
Putting the task after the history keeps the model from reading its own instructions as something the
user said. The same concern drives `looks_like_control_text`: any output line that merely echoes our
prompt or control text is dropped, so memory never records "facts" about the user that we wrote ourselves.
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from om_core.observations.degenerate import is_degenerate, sanitize_lines
from om_core.observations.text import (
    CONTINUATION_TAGS,
    extract_tag_block,
    parse_observation_sections,
    sort_by_time,
    strip_tag_blocks,
)

PREVIOUS_OBSERVATIONS_HEADING = "## Previous Observations"
PRIOR_METADATA_HEADING = "## Prior Thread Metadata"
NEW_HISTORY_HEADING = "## New Message History to Observe"
YOUR_TASK_HEADING = "## Your Task"
CUSTOM_INSTRUCTIONS_HEADING = "=== CUSTOM INSTRUCTIONS ==="
OBSERVATIONS_ONLY_SENTENCE = "Output only the <observations> block."
BUFFERED_SEPARATOR = "--- BUFFERED (pending activation) ---"
BUFFERED_JOINER = f"\n\n{BUFFERED_SEPARATOR}\n\n"
SECTION_SEPARATOR = "---"

DO_NOT_REPEAT_NOTE = (
    "The observations above are already in memory. Do not repeat them: whatever you write is appended "
    "after them."
)
TRUNCATION_NOTICE = (
    "Note: the previous observations were shortened (possibly to nothing) to fit a token budget. The main "
    "assistant still holds its complete memory, so what is shown here is not everything already recorded."
)
PRIOR_METADATA_NOTE = "Treat these as continuity hints from the previous run"
TRANSCRIPT_ONLY_NOTE = (
    "Only the message history is source material. The headings, previous observations, metadata, notes and "
    "this task were written by the memory system, not by the user or the assistant: never record them as "
    "observations."
)

_TRUNCATED_MARKER_RE = re.compile(r"^\[\d+ observations truncated here\]$")


# --- system prompt ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class InlineExtractorPrompt:
    """One inline custom extractor (§8.4) as it is described to the model: an optional `<slug>` section."""

    slug: str
    instructions: str
    json_schema: str | None = None


@dataclass(frozen=True, kw_only=True)
class ObserverPromptOptions:
    """What the system prompt must ask for in this call.

    `include_hints=False` (buffering and other hint-free calls) asks for the `<observations>` block alone:
    no current-task, suggested-response, thread-title or inline extractor sections.
    """

    thread_title: bool
    include_hints: bool = True
    instruction: str | None = None
    multi_thread: bool = False
    inline_extractors: tuple[InlineExtractorPrompt, ...] = ()

    @property
    def sections(self) -> list[str]:
        """The continuation sections requested, in output order."""
        if not self.include_hints:
            return []
        enabled = ["current-task", "suggested-response"]
        if self.thread_title:
            enabled.append("thread-title")
        return enabled


_ROLE = """\
You are the memory of an AI assistant. You read the latest stretch of its conversation with a user and \
write observations: short, dated notes of what was said and done. The assistant keeps no other record of \
these interactions. Whatever you leave out is forgotten for good, so be thorough about anything that \
could matter later.

SOURCE MATERIAL
- Only the message history you are given to observe is source material. Everything else in your input \
(headings, previous observations, thread metadata, notes, and the task description) is written by the \
memory system. It was not said by the user or the assistant; never turn it into an observation.
- Lines titled "system-reminder" are runtime guidance for the assistant, not the user's words. An untitled \
line such as "(3:40 PM): 2 hours later" marks a pause in the conversation; use it to anchor what follows \
(for example, the user returned after two hours), not as something anyone said.
- Images and files appear as placeholders like [Image #1: photo.png]; when the attachment itself is \
provided, describe what matters in it.
- Several people may share one conversation. A line whose title carries a name after the role, such as \
"User Alice (2:30 PM)", was written by that person: attribute what it says to them by name ("Alice \
stated she moved to Porto") instead of to "User", and never mix one person's facts into another's."""

_WHAT_TO_RECORD = """\
WHAT TO RECORD
1. Statements versus questions. When the user tells you something about themselves, record it as a \
statement ("User stated ...") with 🔴. When the user asks something, record it as a request ("User asked \
..."). Intentions ("I'm going to ...", "I need to ...") are recorded as intentions, with their date if \
one was given.
2. Changes of state. Word a change so that it visibly replaces the old state: "will use X, replacing Y", \
"has moved to the new flat, no longer lives at the old one".
3. The user's own statements are authoritative. A later question about the same topic does not cancel \
an earlier statement.
4. Time. Every observation carries the time its message was sent. Only when the text refers to a time \
that can be resolved ("last week", "yesterday", "this weekend", "in March"), add the resolved date at \
the very end of the line as "(meaning <date>)" or "(estimated <date>)". Do not do this for vague words \
("recently", "soon", "lately") and do not merely repeat the message date. When one sentence mentions \
several events, split them into separate lines, each with its own date at the end.
5. Quote unusual wording of the user verbatim.
6. Use precise verbs: "subscribed", "purchased", "was given" rather than "got" or "getting". When the \
assistant's wording clarifies what the user meant and the user agrees, adopt that wording.
7. Keep the distinguishing details of assistant output the user asked for: in lists and recommendations, \
the attribute that sets each item apart; names, handles and identifiers; for creative work, its \
structure and key lines; numbers, measurements and quantities (count first); the user's role at events \
(presenter, volunteer, ...).
8. Conversation context: what the user is working on, how topics ended, open questions, constraints, \
explanations the assistant gave (in enough detail to give them again), relevant code snippets, \
preferences, specially formatted text that must be reproduced exactly (copy it verbatim), sequences and \
units, who/what/where/when, and the identifying attributes of every named person, place or thing.
9. User messages: record short and medium messages nearly word for word; summarise long ones and quote \
their key sentences.
10. No repetition. Do not record again what memory already holds. Group repeated, similar agent actions \
(for example many file views) under one parent line with one nested line per new finding; add a new line \
for a repeated action only when its result changes the picture.
11. Actionable insight: what worked, what needs follow-up, stated goals and next steps. If the user says \
not to do a next step, or asks for something specific, mark the other next steps "waiting for user" \
unless the user explicitly said to carry on.
12. Completion with ✅. A ✅ line states concretely what is now done: a task finished, a question \
answered and the user moved on, the user confirmed something works, a subtask or deliverable completed. \
Do not use ✅ for an assistant reply the user has not confirmed, for paused topics, or for ambiguous \
reactions. A ✅ may be nested under the observation it completes or stand alone when it closes a larger \
task."""

_GUIDELINES = """\
GUIDELINES
- Be specific enough that someone could act on the observation.
- Roughly one to five observations per exchange; terse, dense wording.
- Every observation starts with a priority marker or ✅.
- For tool calls, record what was called, why, and what was learned; include file line numbers when \
useful.
- Capture detailed assistant answers well enough that they can be repeated.
- Observe what the agent did and what it means for the user's goals."""

_LEGEND = """\
PRIORITY MARKERS
- 🔴 High: explicit user facts and preferences, unresolved goals, critical context
- 🟡 Medium: project details, learned information, tool results
- 🟢 Low: minor details, uncertain observations
- ✅ Completed: a concrete task finished, a question answered, an issue resolved, a goal or subtask \
achieved"""

_LOG_FORMAT = """\
- Group observations by date under a header line "Date: <Mon> <D>, <YYYY>", for example "Date: Jan 9, \
2026".
- Within a date, write one observation per line, in the order things happened (not by importance): \
"* <marker> (<HH:MM>) <text>", with a 24-hour time.
- Nest related observations (such as the steps of a tool sequence) with two spaces of indentation: \
"  * -> <step or finding>" and "  * ✅ <what is done>"."""

_SINGLE_THREAD_EXAMPLE = """\
<observations>
Date: Jan 9, 2026
* 🔴 (10:02) User stated they run a bakery with 3 staff and open at 6 AM
* 🟡 (10:05) Agent searched supplier catalogue for rye flour
  * -> 2 suppliers deliver before 5 AM; MillCo is cheapest at 1.20 EUR/kg
* 🔴 (10:09) User asked to switch to MillCo, replacing the current supplier
* ✅ (10:14) Order form for MillCo filled in; user confirmed it was sent
</observations>"""

_SECTION_DESCRIPTIONS = {
    "current-task": (
        "<current-task>: the primary task being worked on, then any secondary pending tasks. Mark tasks "
        '"waiting for user" where that applies, and say so when the agent started something the user did '
        "not approve."
    ),
    "suggested-response": (
        "<suggested-response>: a hint for the assistant's very next message: a sentence to say, "
        '"wait for the user", or a concrete next tool action.'
    ),
    "thread-title": (
        "<thread-title>: a 2-5 word noun phrase naming the conversation. Change it only when the topic "
        "meaningfully shifts."
    ),
}


def build_observer_system_prompt(opts: ObserverPromptOptions) -> str:
    """The Observer's system prompt (§5.2), with the custom instruction appended last."""
    parts = [_ROLE, _WHAT_TO_RECORD, _GUIDELINES, _LEGEND, _output_format(opts)]
    if opts.include_hints and opts.inline_extractors:
        parts.append(inline_extractor_section(opts.inline_extractors, multi_thread=opts.multi_thread))
    parts.append(_thread_attribution(opts))
    parts.append(_closing_reminder(opts))
    instruction = (opts.instruction or "").strip()
    if instruction:
        parts.append(f"{CUSTOM_INSTRUCTIONS_HEADING}\n{instruction}")
    return "\n\n".join(parts)


def _output_format(opts: ObserverPromptOptions) -> str:
    lines = ["OUTPUT FORMAT"]
    if opts.multi_thread:
        lines.append(
            'Put everything inside <observations> ... </observations>, with one <thread id="..."> ... '
            "</thread> block per thread (details under THREAD ATTRIBUTION). Inside each thread block:"
        )
    else:
        lines.append("Put all observations inside <observations> ... </observations>.")
    lines.append(_LOG_FORMAT)
    sections = opts.sections
    if sections:
        where = "inside each thread block" if opts.multi_thread else "after </observations>"
        lines.append(f"Then, {where}, write these sections, each with its own opening and closing tag:")
        lines.extend(f"- {_SECTION_DESCRIPTIONS[name]}" for name in sections)
    else:
        lines.append(f"Write nothing outside the <observations> block. {OBSERVATIONS_ONLY_SENTENCE}")
    lines.append("")
    lines.append("Example of the expected shape (the content is invented):")
    lines.append(_example(opts))
    return "\n".join(lines)


def _example(opts: ObserverPromptOptions) -> str:
    sections = opts.sections
    extra = {
        "current-task": "- Primary: confirm MillCo delivery time\n- Secondary: update the price sheet "
        "(waiting for user)",
        "suggested-response": "Ask whether the first delivery should arrive on Monday.",
        "thread-title": "Bakery flour supplier",
    }
    tail = "\n\n".join(f"<{name}>\n{extra[name]}\n</{name}>" for name in sections)
    if not opts.multi_thread:
        return _SINGLE_THREAD_EXAMPLE + (f"\n\n{tail}" if tail else "")
    body = _SINGLE_THREAD_EXAMPLE.removeprefix("<observations>\n").removesuffix("\n</observations>")
    inner = body + (f"\n\n{tail}" if tail else "")
    return f'<observations>\n<thread id="thread-1">\n{inner}\n</thread>\n</observations>'


def inline_extractor_section(
    extractors: Sequence[InlineExtractorPrompt], *, multi_thread: bool = False
) -> str:
    """The system prompt's description of inline extractors (§8.4); the Reflector's prompt ends with it.
    In a multi-thread call the sections go inside each thread block, so each thread gets its own values."""
    where = (
        "Inside each thread block, after that thread's observations"
        if multi_thread
        else "After </observations>"
    )
    lines = [
        "OPTIONAL EXTRA SECTIONS",
        f"{where}, you may add the sections below. Add one only when the conversation holds "
        "relevant information for it; otherwise leave it out.",
    ]
    for extractor in extractors:
        lines.append(f"- <{extractor.slug}> ... </{extractor.slug}>: {extractor.instructions.strip()}")
        if extractor.json_schema:
            lines.append(f"  Its content must be valid JSON matching this schema: {extractor.json_schema}")
    return "\n".join(lines)


def _thread_attribution(opts: ObserverPromptOptions) -> str:
    if not opts.multi_thread:
        return (
            "THREAD ATTRIBUTION\nThe history comes from a single conversation. Do not write thread IDs or "
            "<thread> tags; the system attributes your observations itself."
        )
    per_thread = _english_list(["observations", *opts.sections])
    return (
        'THREAD ATTRIBUTION\nThe history holds several <thread id="..."> blocks, one per conversation. '
        'Process each thread on its own. Inside <observations>, write one <thread id="..."> block per '
        "thread, using exactly the id from the input, containing that thread's dated observations. Each "
        f"thread block contains its own {per_thread}. Never mix facts from one thread into another."
    )


def _closing_reminder(opts: ObserverPromptOptions) -> str:
    lines = [
        "REMEMBER",
        "The user's messages are the most important input. Only the message history is source material.",
    ]
    if "current-task" in opts.sections:
        lines.append(
            "If the user asks a question or gives a new task, <current-task> must make it the priority."
        )
    if "suggested-response" in opts.sections:
        lines.append(
            "If the assistant should answer the user, <suggested-response> must say to pause for the "
            "user's reply before continuing other work."
        )
    return "\n".join(lines)


def _english_list(items: Sequence[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    if len(items) == 2:
        return f"{items[0]} and {items[1]}"
    return ", ".join(items[:-1]) + f", and {items[-1]}"


# --- user message ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PriorThreadMetadata:
    """Continuity values of one thread from the previous run (None/empty = not shown)."""

    current_task: str | None = None
    suggested_response: str | None = None
    thread_title: str | None = None
    extractions: Mapping[str, Any] = field(default_factory=dict)

    @property
    def is_empty(self) -> bool:
        return not (self.current_task or self.suggested_response or self.thread_title or self.extractions)


def build_observer_user_message(
    *,
    transcript: str,
    previous_observations: str,
    previous_truncated: bool,
    prior_current_task: str | None,
    prior_suggested_response: str | None,
    prior_thread_title: str | None,
    include_hints: bool,
    prior_extractions: Mapping[str, Any] | None = None,
    multi_thread: bool = False,
    prior_by_thread: Mapping[str, PriorThreadMetadata] | None = None,
) -> str:
    """The Observer's user message (§5.3): previous observations, priors, the history, then the task.

    Pass `prior_thread_title` only when thread titles are enabled. `prior_extractions` holds the previous
    values of extractors with `includePreviousExtraction` (slug → value). For multi-thread calls pass the
    output of `render_thread_blocks` as `transcript` and the per-thread priors in `prior_by_thread`.
    """
    sections: list[str] = []
    if previous_observations.strip():
        sections.append(
            f"{PREVIOUS_OBSERVATIONS_HEADING}\n\n{previous_observations.strip()}\n\n"
            f"{SECTION_SEPARATOR}\n\n{DO_NOT_REPEAT_NOTE}"
        )
    if previous_truncated:
        sections.append(TRUNCATION_NOTICE)
    priors = _prior_metadata_section(
        PriorThreadMetadata(
            prior_current_task, prior_suggested_response, prior_thread_title, dict(prior_extractions or {})
        ),
        prior_by_thread or {},
        include_hints,
    )
    if priors:
        sections.append(priors)
    sections.append(f"{NEW_HISTORY_HEADING}\n\n{transcript.strip()}")
    task = _task_text(include_hints, multi_thread)
    sections.append(f"{SECTION_SEPARATOR}\n\n{YOUR_TASK_HEADING}\n\n{task}")
    return "\n\n".join(sections)


def render_thread_blocks(transcripts: Mapping[str, str]) -> str:
    """The multi-thread history: how many threads follow, then one `<thread id>` block per thread."""
    count = len(transcripts)
    intro = f"The history below covers {count} thread{'s' if count != 1 else ''}."
    blocks = [f'<thread id="{thread}">\n{text.strip()}\n</thread>' for thread, text in transcripts.items()]
    return "\n\n".join([intro, *blocks])


def _prior_metadata_section(
    single: PriorThreadMetadata, by_thread: Mapping[str, PriorThreadMetadata], include_hints: bool
) -> str:
    body: list[str] = []
    if not single.is_empty:
        body.extend(_prior_lines(single))
    for thread_id, prior in by_thread.items():
        if prior.is_empty:
            continue
        body.append(f"- thread {thread_id}")
        body.extend(f"  {line}" if line else line for line in "\n".join(_prior_lines(prior)).split("\n"))
    if not body:
        return ""
    use = " and update them from the new messages." if include_hints else " (context only)."
    note = PRIOR_METADATA_NOTE + use
    return f"{PRIOR_METADATA_HEADING}\n\n" + "\n".join(body) + f"\n\n{note}"


def _prior_lines(prior: PriorThreadMetadata) -> list[str]:
    lines: list[str] = []
    if prior.current_task:
        lines.append(f"prior current-task: {prior.current_task.strip()}")
    if prior.suggested_response:
        lines.append(f"prior suggested-response: {prior.suggested_response.strip()}")
    if prior.thread_title:
        lines.append(f"prior thread-title: {prior.thread_title.strip()}")
    for slug, value in prior.extractions.items():
        if value is None or value == "":
            continue
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        lines.append(f"<{slug}>\n{text}\n</{slug}>")
    return lines


def _task_text(include_hints: bool, multi_thread: bool) -> str:
    lines = [
        "Extract new observations from the message history above. Do not repeat observations that are "
        "already recorded. Use the output format from your instructions.",
    ]
    if multi_thread:
        lines.append('Group the observations by <thread id="..."> inside <observations>.')
    if not include_hints:
        lines.append(f"{OBSERVATIONS_ONLY_SENTENCE} It must always be present.")
    lines.append(TRANSCRIPT_ONLY_NOTE)
    return "\n".join(lines)


# --- previous-observations context -----------------------------------------------------------------------


def combine_for_observer(active: str, buffered_chunks: Sequence[str]) -> str:
    """The active log plus the not-yet-activated chunks, marked as pending (§4.3).

    The Observer must see buffered chunks too, or it would record the same facts again; the separator tells
    it (and a human reading logs) which part is not active yet.
    """
    chunks = "\n\n".join(chunk.strip() for chunk in buffered_chunks if chunk.strip())
    if not chunks:
        return active
    if not active.strip():
        return BUFFERED_JOINER.lstrip("\n") + chunks
    return active + BUFFERED_JOINER + chunks


def prepare_observer_context(
    existing: str,
    *,
    budget: int | None,
    buffered_reflection: str | None,
    reflected_line_count: int | None,
    count: Callable[[str], int],
    count_line: Callable[[str], int] | None = None,
) -> tuple[str, bool]:
    """Previous observations to show the Observer, and whether they were shortened (§5.4).

    `budget` None means no truncation (`previousObserverTokens: false`): `existing` is returned unchanged.
    A pending buffered reflection replaces the lines it covers first, so the Observer sees the condensed
    form the log is about to take. `count_line` counts single lines (the engine passes remembered counts:
    the log's lines recur on every call); a log whose lines alone cannot fit the budget is shortened
    without counting it whole, so a long log costs no tokenising beyond its new lines.
    """
    if budget is None:
        return existing, False
    context = _apply_buffered_reflection(existing, buffered_reflection, reflected_line_count)
    if budget <= 0:
        return "", True
    lines = context.split("\n")
    line_cost = count_line if count_line is not None else count
    costs = [line_cost(line) for line in lines]
    if sum(costs) - (len(lines) - 1) <= budget and count(context) <= budget:
        return context, False
    return _Truncator(lines, count, costs).best(budget), True


def _apply_buffered_reflection(existing: str, reflection: str | None, line_count: int | None) -> str:
    if not reflection or line_count is None:
        return existing
    if not existing:
        return reflection
    remaining = "\n".join(existing.split("\n")[line_count:]).strip()
    return f"{reflection}\n\n{remaining}" if remaining else reflection


def truncation_marker(hidden: int) -> str:
    return f"[{hidden} observations truncated here]"


def _is_important(line: str) -> bool:
    return "🔴" in line or "✅" in line


@dataclass(frozen=True)
class _Candidate:
    tail_start: int
    kept_important: int
    lower_bound: int


class _Truncator:
    """Evaluates every tail start in O(1) from prefix sums of per-line token counts.

    Counting each of n candidates in full would cost O(n²) tokenizer work on logs of thousands of lines.
    Instead a candidate's size is estimated from below as the sum of its lines' counts minus one token per
    line break (joining lines merges at most about one token per break for tiktoken and for `ceil(len/4)`),
    candidates are ranked by preference (most kept important lines, then longest tail), those that cannot
    fit are skipped without rendering, and the rest are rendered and counted exactly, in order, until one
    fits. With a valid lower bound this is exactly the spec's answer; were a counter ever to merge more,
    the result would still fit the budget, it might just keep a little less.
    """

    def __init__(self, lines: list[str], count: Callable[[str], int], costs: list[int] | None = None) -> None:
        self.lines = lines
        self.count = count
        self.cost = costs if costs is not None else [count(line) for line in lines]
        self.important = [i for i, line in enumerate(lines) if _is_important(line)]
        n = len(lines)
        self.suffix_cost = [0] * (n + 1)
        for i in range(n - 1, -1, -1):
            self.suffix_cost[i] = self.suffix_cost[i + 1] + self.cost[i]
        self._markers: dict[int, int] = {}
        # Prefix sums over important lines: their own cost, and the cost/lines of the gap after each one
        # up to the next important line.
        self.imp_cost = [0]
        self.gap_cost = [0]
        self.gap_lines = [0]
        for j, index in enumerate(self.important):
            self.imp_cost.append(self.imp_cost[-1] + self.cost[index])
            if j + 1 < len(self.important):
                cost, visible = self._gap(index + 1, self.important[j + 1])
            else:
                cost, visible = 0, 0
            self.gap_cost.append(self.gap_cost[-1] + cost)
            self.gap_lines.append(self.gap_lines[-1] + visible)

    def _marker_cost(self, hidden: int) -> int:
        if hidden not in self._markers:
            self._markers[hidden] = self.count(truncation_marker(hidden))
        return self._markers[hidden]

    def _gap(self, start: int, end: int) -> tuple[int, int]:
        """(cost, visible lines) of hiding lines[start:end]."""
        hidden = end - start
        if hidden <= 0:
            return 0, 0
        if hidden == 1:
            return self.cost[start], 1
        return self._marker_cost(hidden), 1

    def _kept_range(self, tail_start: int) -> tuple[int, int]:
        """Indexes [first, last) into `important` of the head lines kept for this tail start."""
        below = bisect.bisect_left(self.important, tail_start)
        kept = min(below, len(self.lines) - tail_start)
        return below - kept, below

    def candidate(self, tail_start: int) -> _Candidate:
        first, last = self._kept_range(tail_start)
        tail_lines = len(self.lines) - tail_start
        cost, visible = self.suffix_cost[tail_start], tail_lines
        if first == last:
            gap_cost, gap_visible = self._gap(0, tail_start)
            cost, visible = cost + gap_cost, visible + gap_visible
        else:
            lead_cost, lead_visible = self._gap(0, self.important[first])
            trail_cost, trail_visible = self._gap(self.important[last - 1] + 1, tail_start)
            # Kept important lines, the gaps between them (after important[j], j in [first, last - 1)),
            # and the gaps before the first one and up to the tail.
            cost += self.imp_cost[last] - self.imp_cost[first]
            cost += self.gap_cost[last - 1] - self.gap_cost[first] + lead_cost + trail_cost
            visible += (last - first) + self.gap_lines[last - 1] - self.gap_lines[first]
            visible += lead_visible + trail_visible
        return _Candidate(tail_start, last - first, cost - max(visible - 1, 0))

    def render(self, tail_start: int) -> str:
        first, last = self._kept_range(tail_start)
        kept = [*self.important[first:last], *range(tail_start, len(self.lines))]
        out: list[str] = []
        previous = -1
        for index in kept:
            hidden = index - previous - 1
            if hidden == 1:
                out.append(self.lines[previous + 1])
            elif hidden >= 2:
                out.append(truncation_marker(hidden))
            out.append(self.lines[index])
            previous = index
        return "\n".join(out)

    def best(self, budget: int) -> str:
        candidates = [self.candidate(s) for s in range(1, len(self.lines))]
        fitting = [c for c in candidates if c.lower_bound <= budget]
        fitting.sort(key=lambda c: (-c.kept_important, c.tail_start))
        for candidate in fitting:
            text = self.render(candidate.tail_start)
            if self.count(text) <= budget:
                return text
        return truncation_marker(len(self.lines))


# --- output parsing --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ObserverOutput:
    observations: str
    current_task: str | None = None
    suggested_response: str | None = None
    thread_title: str | None = None
    degenerate: bool = False
    raw: str = ""
    #: Observation lines dropped because they echoed our own prompt or control text.
    dropped_lines: tuple[str, ...] = ()


def parse_observer_output(text: str, *, extra_sections: Sequence[str] = ()) -> ObserverOutput:
    """Observations and continuation sections from one (single-thread) Observer response (§5.6).

    `extra_sections` are inline extractor slugs whose sections must not leak into the observations (their
    values are parsed elsewhere).
    """
    if is_degenerate(sanitize_lines(text)):
        return ObserverOutput(observations="", degenerate=True, raw=text)
    sections = parse_observation_sections(text, extra_sections=extra_sections)
    kept, dropped = _drop_control_lines(sanitize_lines(sections.observations))
    return ObserverOutput(
        observations=sort_by_time(kept).strip(),
        current_task=sections.current_task or None,
        suggested_response=sections.suggested_response or None,
        thread_title=sections.thread_title or None,
        raw=text,
        dropped_lines=dropped,
    )


MIN_THREAD_TITLE_CHARS = 3


def thread_title_update(candidate: str | None, current: str | None) -> str | None:
    """The new thread title to apply, or None: it must have ≥ 3 characters and differ from the current one.

    Only meaningful when `observation.threadTitle` is enabled; the caller checks that.
    """
    title = (candidate or "").strip()
    if len(title) < MIN_THREAD_TITLE_CHARS or title == (current or "").strip():
        return None
    return title


@dataclass(frozen=True)
class MultiThreadObserverOutput:
    """Per-thread results of a multi-thread (resource scope) Observer response."""

    threads: dict[str, ObserverOutput]
    degenerate: bool = False
    raw: str = ""

    def for_thread(self, thread_id: str) -> ObserverOutput:
        """The thread's result; a thread the model wrote no block for gets empty observations."""
        return self.threads.get(thread_id) or ObserverOutput(observations="", raw="")


_THREAD_BLOCK_RE = re.compile(
    r"<thread\s+id\s*=\s*[\"'](?P<id>[^\"']+)[\"']\s*>(?P<body>.*?)</thread>", re.DOTALL | re.IGNORECASE
)


def parse_multi_thread_output(text: str, *, extra_sections: Sequence[str] = ()) -> MultiThreadObserverOutput:
    """Split a multi-thread response into its `<thread id>` blocks and parse each like a single thread."""
    if is_degenerate(sanitize_lines(text)):
        return MultiThreadObserverOutput(threads={}, degenerate=True, raw=text)
    # The whole text is searched, not only the <observations> block: models sometimes nest an
    # <observations> block inside each thread, which would end an outer block early.
    threads: dict[str, ObserverOutput] = {}
    for match in _THREAD_BLOCK_RE.finditer(text):
        thread_id, body = match.group("id").strip(), match.group("body")
        parsed = parse_observer_output(_as_single_thread(body, extra_sections), extra_sections=extra_sections)
        threads[thread_id] = _merge(threads.get(thread_id), replace(parsed, raw=body))
    return MultiThreadObserverOutput(threads=threads, raw=text)


def thread_bodies(text: str) -> dict[str, str]:
    """Each `<thread id>` block's text of a multi-thread response, by id (blocks of one id joined)."""
    bodies: dict[str, list[str]] = {}
    for match in _THREAD_BLOCK_RE.finditer(text):
        bodies.setdefault(match.group("id").strip(), []).append(match.group("body"))
    return {thread_id: "\n".join(parts) for thread_id, parts in bodies.items()}


def _as_single_thread(body: str, extra_sections: Sequence[str]) -> str:
    """A thread block's body as a single-thread output: the log wrapped in tags, the sections kept."""
    if extract_tag_block(body, "observations") is not None:
        return body
    log = strip_tag_blocks(body, (*CONTINUATION_TAGS, *extra_sections)).strip()
    return f"<observations>\n{log}\n</observations>\n{body}"


def _merge(earlier: ObserverOutput | None, later: ObserverOutput) -> ObserverOutput:
    """Two blocks for the same thread: observations concatenated, later hints win."""
    if earlier is None:
        return later
    return ObserverOutput(
        observations="\n".join(part for part in (earlier.observations, later.observations) if part),
        current_task=later.current_task or earlier.current_task,
        suggested_response=later.suggested_response or earlier.suggested_response,
        thread_title=later.thread_title or earlier.thread_title,
        raw=f"{earlier.raw}\n{later.raw}",
        dropped_lines=earlier.dropped_lines + later.dropped_lines,
    )


# --- control text ----------------------------------------------------------------------------------------

#: Our headings: a line that consists of one of them (any case, with or without `#`/`:`) is ours.
_CONTROL_HEADINGS = frozenset(
    heading.strip("#= ").lower()
    for heading in (
        PREVIOUS_OBSERVATIONS_HEADING,
        PRIOR_METADATA_HEADING,
        NEW_HISTORY_HEADING,
        YOUR_TASK_HEADING,
        CUSTOM_INSTRUCTIONS_HEADING,
        "SOURCE MATERIAL",
        "WHAT TO RECORD",
        "GUIDELINES",
        "PRIORITY MARKERS",
        "OUTPUT FORMAT",
        "THREAD ATTRIBUTION",
        "OPTIONAL EXTRA SECTIONS",
        "REMEMBER",
    )
)
#: Distinctive opening words of our sentences and metadata lines: a line starting with one is an echo.
_CONTROL_PHRASES = tuple(
    phrase.lower()
    for phrase in (
        BUFFERED_SEPARATOR,
        OBSERVATIONS_ONLY_SENTENCE,
        DO_NOT_REPEAT_NOTE[:48],
        TRUNCATION_NOTICE[:48],
        TRANSCRIPT_ONLY_NOTE[:48],
        PRIOR_METADATA_NOTE,
        "prior current-task:",
        "prior suggested-response:",
        "prior thread-title:",
        "Extract new observations from the message history above",
        "The history below covers",
        "=== CUSTOM INSTRUCTIONS",
    )
)
_CONTROL_ANYWHERE = ("<system-reminder", "</system-reminder>", "<observational-memory-instruction")
#: What may precede the content of an observation line: indentation, bullet, markers, a time.
_LINE_PREFIX_RE = re.compile(
    r"^\s*(?:[-*]|\d+\.)?\s*(?:(?:🔴|🟡|🟢|✅|->)\s*)*"
    r"(?:\(\d{1,2}:\d{2}[^)]{0,6}\)\s*)?(?:(?:🔴|🟡|🟢|✅)\s*)*"
)


def looks_like_control_text(line: str) -> bool:
    """True when an output line only echoes our own prompt or control text rather than the conversation.

    Such a line says nothing about the user; stored in memory it would be read back as a fact. Matching is
    deliberately narrow (the line is one of our headings, starts with one of our distinctive phrases, is
    a truncation marker or separator, or carries a `<system-reminder>` tag), so an observation that
    merely mentions similar words ("User asked about their task list") survives.
    """
    stripped = line.strip()
    if not stripped:
        return False
    if any(token in stripped.lower() for token in _CONTROL_ANYWHERE):
        return True
    if stripped in (SECTION_SEPARATOR, BUFFERED_SEPARATOR):
        return True
    content = _LINE_PREFIX_RE.sub("", stripped, count=1).strip()
    if _TRUNCATED_MARKER_RE.match(content) or content in (SECTION_SEPARATOR, BUFFERED_SEPARATOR):
        return True
    lowered = content.lower()
    if lowered.strip("#=: ") in _CONTROL_HEADINGS:
        return True
    return any(lowered.lstrip("# ").startswith(phrase) for phrase in _CONTROL_PHRASES)


def _drop_control_lines(observations: str) -> tuple[str, tuple[str, ...]]:
    kept: list[str] = []
    dropped: list[str] = []
    for line in observations.split("\n"):
        (dropped if looks_like_control_text(line) else kept).append(line)
    return "\n".join(kept), tuple(dropped)
