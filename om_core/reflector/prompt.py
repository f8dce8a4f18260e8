"""The Reflector: rewrite the whole observation log into a shorter one (behaviour §6).

The Reflector's output *replaces* the log, so two things matter more than style: it must never commit
an empty or looping rewrite over a non-empty log, and it must keep pushing for compression when a model
transcribes instead of condensing. The retry ladder (§6.3) handles both: each attempt raises the
compression level, bad attempts are discarded, and when every level is spent the smallest acceptable
candidate wins (the docs' rule, see behaviour Appendix A1).

This module also holds the pure text arithmetic storage and the engine use when a reflection is
committed over a log that may have grown meanwhile (§3.5 (6) and (8)).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from om_core.errors import OMError
from om_core.observations.degenerate import degenerate_diagnosis, sanitize_lines
from om_core.observations.text import extract_tag_block, parse_observation_sections, strip_tag_blocks

__all__ = [
    "COMPRESSION_LEVELS",
    "CUSTOM_INSTRUCTIONS_HEADING",
    "HINTS_SKIPPED_SENTENCE",
    "MAX_LEVEL",
    "OBSERVATIONS_HEADING",
    "CompressionLevel",
    "LadderResult",
    "ModelReply",
    "ReflectionEmptyError",
    "ReflectorOutput",
    "ReflectorPromptOptions",
    "RetryInfo",
    "append_tail_after_reflection",
    "build_reflector_system_prompt",
    "build_reflector_user_message",
    "parse_reflector_output",
    "reflect_with_ladder",
    "replace_leading_lines",
    "split_lines",
]

MAX_LEVEL = 4
#: The user message's input heading. The offline local model locates the input by it: do not reword.
OBSERVATIONS_HEADING = "## Observations to Reflect On"
CUSTOM_INSTRUCTIONS_HEADING = "=== CUSTOM INSTRUCTIONS ==="
HINTS_SKIPPED_SENTENCE = "Output only the <observations> block."


# --------------------------------------------------------------------------------------------------
# Prompts
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReflectorPromptOptions:
    """What the system prompt depends on.

    `observer_instructions` is the Observer's system prompt exactly as in effect (custom observer
    instruction included), so the Reflector knows how the lines it rewrites were produced.
    `include_hints` False (buffered reflection) drops the current-task / suggested-response sections.
    """

    observer_instructions: str
    instruction: str | None = None
    include_hints: bool = True
    resource_scope: bool = False


def _output_format_section(include_hints: bool) -> str:
    lines = [
        "== OUTPUT FORMAT ==",
        "",
        "Write the rewritten memory inside <observations> and </observations>, each tag on its own line. "
        "Use the same layout the observer uses:",
        "- group lines under date headers of the form `Date: Mon D, YYYY`, oldest date first;",
        "- start every line with its priority marker (🔴, 🟡, 🟢) or ✅ and its time, e.g. "
        "`* 🔴 (14:30) ...`;",
        "- nest related details under their parent with two spaces of indentation (`  * -> ...`, "
        "`  * ✅ ...`);",
        "- keep resolved dates at the end of a line, such as `(meaning June 17, 2026)`.",
    ]
    if include_hints:
        lines += [
            "",
            "After the observations add:",
            "<current-task>",
            "The primary task being worked on now, then any secondary or pending tasks (say when one is "
            "waiting for the user).",
            "</current-task>",
            "<suggested-response>",
            "A short hint for the assistant's next message: what to say, a concrete next action, or to wait "
            "for the user.",
            "</suggested-response>",
            "",
            "Messages from the user matter most. If the latest user message asks a question or sets a new "
            "task, <current-task> must put that first, and if the assistant owes the user an answer, "
            "<suggested-response> must say to answer and then wait for the user's reply before continuing "
            "other work.",
        ]
    else:
        lines += ["", "Do not add any other section: " + HINTS_SKIPPED_SENTENCE]
    return "\n".join(lines)


def build_reflector_system_prompt(opts: ReflectorPromptOptions) -> str:
    """The Reflector's system prompt (§6.1 points 1–8, in our words)."""
    intro = (
        "You are the reflective half of an AI assistant's memory. Another part of the same memory, the "
        "observer, watches conversations and writes dated observation lines."
    )
    sections = [intro]
    if opts.observer_instructions.strip():
        sections[0] += (
            " Below are the observer's instructions, exactly as it follows them, so you know what its "
            "lines mean and how they were produced:"
        )
        sections.append(
            "<observational-memory-instruction>\n"
            + opts.observer_instructions.strip()
            + "\n</observational-memory-instruction>"
        )
    sections += [
        "== YOUR JOB ==\n"
        "\n"
        "Read all of the observations and reflect on them. Reorganise and streamline them, link related "
        "facts, and draw the conclusions they support. If the assistant drifted away from what the user "
        "was trying to achieve, note that, why it happened, and how to get back on track. Then rewrite the "
        "log so the assistant can carry on from it alone.\n"
        "\n"
        "What you write becomes the assistant's ENTIRE memory. Anything you leave out is forgotten for "
        "good, and the assistant knows nothing beyond what you keep.",
        "== HOW TO CONSOLIDATE ==\n"
        "\n"
        "- Keep dates and times: when things started and finished, and when key events happened.\n"
        "- Merge related lines into one, for example many similar tool calls become a single line such as "
        '"read config.yaml 5 times while tracing the timeout".\n'
        "- Keep every ✅ line together with the concrete result it records.\n"
        "- Compress older material harder than recent material; recent detail is what the next turns "
        "need.\n"
        "- A statement by the user outweighs a later question about the same thing. If the log says "
        '"User stated: has two kids" and later "User asked: how many kids do I have?", keep the '
        "statement.",
    ]
    if opts.resource_scope:
        sections.append(
            "== THREADS ==\n"
            "\n"
            'The log covers several conversations, marked with <thread id="..."> blocks. Keep the thread '
            "block around anything that belongs to one conversation (its ongoing tasks, preferences that "
            "only apply there) and around recent observations. Move stable facts that hold everywhere "
            "(the user's profile, general preferences) out of the thread blocks and state them once."
        )
    sections.append(_output_format_section(opts.include_hints))
    if opts.instruction and opts.instruction.strip():
        sections.append(f"{CUSTOM_INSTRUCTIONS_HEADING}\n\n{opts.instruction.strip()}")
    return "\n\n".join(sections)


@dataclass(frozen=True)
class CompressionLevel:
    """One rung of the ladder: how hard to push, and roughly how much detail should survive."""

    level: int
    name: str
    guidance: str
    target_detail: float | None


COMPRESSION_LEVELS: dict[int, CompressionLevel] = {
    0: CompressionLevel(0, "none", "", None),
    1: CompressionLevel(
        1,
        "gentle",
        "Your rewrite has to come out smaller than its input. Condense the early material into "
        "higher-level reflections while keeping recent detail. Merge related items, and fold repeated tool "
        "calls into one summary line. Never lose names, places, events or people, and keep every ✅ line. "
        "Aim to keep about 8/10 of the detail.",
        0.8,
    ),
    2: CompressionLevel(
        2,
        "aggressive",
        "The memory is still too large. Condense the early material heavily and keep the recent material "
        "detailed. Merge observations that overlap. Give each file or module that keeps coming up a single "
        "entry that covers its whole story. Drop anything redundant, and keep every ✅ line. Aim to keep "
        "about 6/10 of the detail.",
        0.6,
    ),
    3: CompressionLevel(
        3,
        "critical",
        "Several rewrites have failed to shrink the memory enough. Summarise the oldest 50-70% as short "
        "paragraphs of key facts, decisions and outcomes. Keep the newest 30-50% condensed but detailed. "
        "Where ten lines cover one topic, write one or two. Drop procedural steps and facts that were later "
        "superseded. Keep names, dates, decisions, errors, user preferences, architectural choices and ✅ "
        "outcomes. Aim to keep about 4/10 of the detail.",
        0.4,
    ),
    4: CompressionLevel(
        4,
        "extreme",
        "The input may already be dense, so cut the number of observations drastically while keeping the "
        "standard format. Turn every tool-call sequence into lines that state only the outcome. Use at most "
        "2-3 date groups per day and one or two lines per older topic. For work that progressed step by "
        "step, keep only where it ended up. Keep preferences, decisions, architecture, unresolved problems "
        "and ✅ outcomes. A few general lines that fit the budget are better than many specific ones that "
        "do not. Aim to keep about 2/10 of the detail.",
        0.2,
    ),
}


def build_reflector_user_message(
    observations: str,
    *,
    level: int,
    target_tokens: int | None,
    manual_prompt: str | None,
    include_hints: bool,
) -> str:
    """One attempt's user message: the input, the request, optional guidance, the level's pressure."""
    parts = [
        f"{OBSERVATIONS_HEADING}\n\n{observations.strip()}",
        "---",
        "Rewrite the observations above into a refined, condensed version. Your rewrite will be the "
        "assistant's entire memory from now on, so keep everything it will need.",
    ]
    if manual_prompt and manual_prompt.strip():
        parts.append(f"## Specific Guidance\n\n{manual_prompt.strip()}")
    compression = COMPRESSION_LEVELS[max(0, min(level, MAX_LEVEL))]
    pressure = [compression.guidance] if compression.guidance else []
    if target_tokens is not None:
        pressure.append(f"Target size: under {target_tokens} tokens (compression level {level} of 4).")
    if pressure:
        parts.append("## Compression\n\n" + "\n\n".join(pressure))
    if not include_hints:
        parts.append(
            "Leave out current-task and suggested-response sections this time. " + HINTS_SKIPPED_SENTENCE
        )
    return "\n\n".join(parts)


# --------------------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReflectorOutput:
    """A parsed Reflector reply. `degenerate` replies carry no observations."""

    observations: str = ""
    current_task: str | None = None
    suggested_response: str | None = None
    degenerate: bool = False
    raw: str = ""
    #: Which degenerate-output strategy fired and on what (for logs); None for usable replies.
    diagnosis: str | None = None


_HINT_TAGS = ("current-task", "suggested-response")


def parse_reflector_output(text: str) -> ReflectorOutput:
    """§6.3 parsing: degenerate check on the raw text; line-anchored `<observations>` blocks, else list
    items, else the whole reply; hints read from anywhere in the reply (first match)."""
    diagnosis = degenerate_diagnosis(text)
    if diagnosis is not None:
        return ReflectorOutput(degenerate=True, raw=text, diagnosis=diagnosis)
    observations = parse_observation_sections(text).observations
    has_block = bool(extract_tag_block(text, "observations", all_blocks=True))
    if not observations and not has_block:
        observations = strip_tag_blocks(text, _HINT_TAGS, line_anchored=False).strip()
    return ReflectorOutput(
        observations=sanitize_lines(observations).strip(),
        current_task=extract_tag_block(text, "current-task", line_anchored=False) or None,
        suggested_response=extract_tag_block(text, "suggested-response", line_anchored=False) or None,
        raw=text,
    )


# --------------------------------------------------------------------------------------------------
# The retry ladder
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelReply:
    """What the model layer returns for one Reflector call."""

    text: str
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float | None = None
    provider_metadata: dict[str, Any] | None = None
    #: Why the reply must not be used at all (cut at the output limit, unstorable), from
    #: `models.reply_checks`.
    unusable: str | None = None


@dataclass(frozen=True)
class RetryInfo:
    """Reported before escalating, so the caller can emit a failed marker (retrying) and a new start."""

    level: int
    next_level: int
    original: int
    size: int
    target: int
    message: str


@dataclass(frozen=True)
class LadderResult:
    output: ReflectorOutput
    tokens: int
    attempts: int
    levels: list[int]
    input_tokens: int
    output_tokens: int
    cost: float | None
    reached_target: bool
    #: The last attempt's provider metadata (what hooks report, §6.3).
    provider_metadata: dict[str, Any] | None = None

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


class ReflectionEmptyError(OMError, RuntimeError):
    """No attempt produced usable observations for a non-empty input; nothing may be committed.

    Carries the attempts' usage so hooks can still report what the failed cycle cost.
    """

    def __init__(
        self,
        message: str,
        *,
        attempts: int,
        levels: list[int],
        input_tokens: int,
        output_tokens: int,
        cost: float | None,
    ) -> None:
        super().__init__("REFLECTION_EMPTY", message)
        self.message = message
        self.attempts = attempts
        self.levels = levels
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self.cost = cost

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _rebuild_reflection_empty,
            (self.message, self.attempts, self.levels, self.input_tokens, self.output_tokens, self.cost),
        )


def _rebuild_reflection_empty(
    message: str, attempts: int, levels: list[int], input_tokens: int, output_tokens: int, cost: float | None
) -> ReflectionEmptyError:
    """Unpickling hook (errors cross Celery process boundaries)."""
    return ReflectionEmptyError(
        message,
        attempts=attempts,
        levels=levels,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cost=cost,
    )


@dataclass
class _Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float | None = None
    levels: list[int] = field(default_factory=list)
    provider_metadata: dict[str, Any] | None = None

    def add(self, level: int, reply: ModelReply) -> None:
        self.levels.append(level)
        self.provider_metadata = reply.provider_metadata
        self.input_tokens += reply.input_tokens
        self.output_tokens += reply.output_tokens
        if reply.cost is not None:
            self.cost = (self.cost or 0.0) + reply.cost


def reflect_with_ladder(
    observations: str,
    *,
    target: int,
    start_level: int,
    include_hints: bool,
    call: Callable[[str, str], ModelReply],
    count: Callable[[str], int],
    manual_prompt: str | None = None,
    on_retry: Callable[[RetryInfo], None] | None = None,
    system_prompt: str | None = None,
) -> LadderResult:
    """Run the §6.3 ladder: at most four attempts from `start_level`, stopping at the first result
    strictly under `target`; otherwise the smallest acceptable candidate.

    `system_prompt` is the prompt built by `build_reflector_system_prompt`; when None a prompt without
    observer instructions is used (only sensible in tests).
    """
    system = system_prompt or build_reflector_system_prompt(
        ReflectorPromptOptions(observer_instructions="", include_hints=include_hints)
    )
    original = count(observations)
    input_is_empty = not observations.strip()
    max_level = min(MAX_LEVEL, start_level + 3)
    level = start_level
    usage = _Usage()
    best: tuple[ReflectorOutput, int] | None = None
    while True:
        user = build_reflector_user_message(
            observations,
            level=level,
            target_tokens=target,
            manual_prompt=manual_prompt,
            include_hints=include_hints,
        )
        reply = call(system, user)
        usage.add(level, reply)
        parsed = parse_reflector_output(reply.text)
        bad = (
            reply.unusable is not None
            or parsed.degenerate
            or (not input_is_empty and not parsed.observations.strip())
        )
        size = original if bad else count(parsed.observations)
        if not bad and (best is None or size < best[1]):
            best = (parsed, size)
        if not bad and size < target:
            return _result(parsed, size, usage, reached_target=True)
        if level >= max_level:
            break
        if on_retry is not None:
            on_retry(
                RetryInfo(
                    level=level,
                    next_level=level + 1,
                    original=original,
                    size=size,
                    target=target,
                    message=(
                        f"did not compress below threshold ({original} -> {size}, target {target}), "
                        f"retrying at level {level + 1}"
                    ),
                )
            )
        level += 1
    if best is None:
        raise ReflectionEmptyError(
            f"reflector produced no usable observations in {len(usage.levels)} attempts "
            f"(levels {usage.levels})",
            attempts=len(usage.levels),
            levels=list(usage.levels),
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cost=usage.cost,
        )
    return _result(best[0], best[1], usage, reached_target=False)


def _result(output: ReflectorOutput, size: int, usage: _Usage, *, reached_target: bool) -> LadderResult:
    return LadderResult(
        output=output,
        tokens=size,
        attempts=len(usage.levels),
        levels=list(usage.levels),
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cost=usage.cost,
        reached_target=reached_target,
        provider_metadata=usage.provider_metadata,
    )


# --------------------------------------------------------------------------------------------------
# Reflection text arithmetic (storage and engine)
# --------------------------------------------------------------------------------------------------


def split_lines(text: str) -> list[str]:
    """The log's lines as line counts refer to them (`split("\\n")`); the empty log has no lines."""
    return text.split("\n") if text else []


def _join_tail(reflection: str, tail: str) -> str:
    tail = tail.strip()
    return f"{reflection}\n\n{tail}" if tail else reflection


def replace_leading_lines(active: str, reflected_line_count: int, reflection: str) -> str:
    """§3.5 (8): the buffered reflection stands in for the first `reflected_line_count` lines; lines added
    after the slice was taken follow it after a blank line."""
    tail = "\n".join(split_lines(active)[max(0, reflected_line_count) :])
    return _join_tail(reflection, tail)


def append_tail_after_reflection(snapshot_text: str, stored_text: str, reflection: str) -> str | None:
    """§3.5 (6) text plan. Unchanged log → the reflection. Log only grew (an activation appended during
    the Reflector call) → the reflection plus the appended tail. Anything else was a rewrite the
    reflection knows nothing about → None (commit nothing)."""
    if stored_text == snapshot_text:
        return reflection
    if stored_text.startswith(snapshot_text):
        return _join_tail(reflection, stored_text[len(snapshot_text) :])
    return None
