"""Observer prompts, previous-observations context, output parsing and log utilities (§5, §13.9)."""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable

import pytest

from om_core.observations.text import (
    DATE_HEADER_RE,
    OBSERVATION_LINE_RE,
    extract_tag_block,
    parse_observation_sections,
    sort_by_time,
)
from om_core.observer.prompt import (
    InlineExtractorPrompt,
    ObserverPromptOptions,
    PriorThreadMetadata,
    build_observer_system_prompt,
    build_observer_user_message,
    combine_for_observer,
    looks_like_control_text,
    parse_multi_thread_output,
    parse_observer_output,
    prepare_observer_context,
    render_thread_blocks,
    thread_title_update,
)
from om_core.tokens import default_estimator
from om_core.tokens.memo import RememberedCounts


def chars4(text: str) -> int:
    """The spec's deterministic test estimator: ceil(len / 4)."""
    return math.ceil(len(text) / 4)


# --- system prompt ------------------------------------------------------------------------------------

LEGEND_LINES = (
    "- 🔴 High: explicit user facts and preferences, unresolved goals, critical context",
    "- 🟡 Medium: project details, learned information, tool results",
    "- 🟢 Low: minor details, uncertain observations",
)


def test_prompt_has_role_legend_and_output_format() -> None:
    prompt = build_observer_system_prompt(ObserverPromptOptions(thread_title=False))
    assert "memory of an AI assistant" in prompt
    for line in LEGEND_LINES:
        assert line in prompt
    assert "- ✅ Completed: a concrete task finished" in prompt
    assert "<observations>" in prompt and "</observations>" in prompt
    assert '"Date: <Mon> <D>, <YYYY>"' in prompt
    assert '"* <marker> (<HH:MM>) <text>"' in prompt
    assert '"  * -> <step or finding>"' in prompt
    assert "Only the message history you are given to observe is source material" in prompt
    for number in range(1, 13):
        assert f"\n{number}. " in prompt


def test_prompt_sections_follow_the_options() -> None:
    hints = build_observer_system_prompt(ObserverPromptOptions(thread_title=False))
    assert "<current-task>" in hints and "<suggested-response>" in hints
    assert "<thread-title>" not in hints
    assert "<current-task> must make it the priority" in hints

    titled = build_observer_system_prompt(ObserverPromptOptions(thread_title=True))
    assert "<thread-title>: a 2-5 word noun phrase" in titled

    bare = build_observer_system_prompt(ObserverPromptOptions(thread_title=True, include_hints=False))
    for tag in ("<current-task>", "<suggested-response>", "<thread-title>"):
        assert tag not in bare
    assert "Output only the <observations> block." in bare
    # The closing reminder keeps only the sentences about enabled sections.
    assert "must make it the priority" not in bare
    assert "The user's messages are the most important input." in bare


def test_custom_instruction_is_appended_after_everything() -> None:
    # §13.9.11
    prompt = build_observer_system_prompt(
        ObserverPromptOptions(thread_title=True, instruction="  Track allergies carefully.  ")
    )
    assert prompt.endswith("=== CUSTOM INSTRUCTIONS ===\nTrack allergies carefully.")
    heading = prompt.index("=== CUSTOM INSTRUCTIONS ===")
    for landmark in ("PRIORITY MARKERS", "OUTPUT FORMAT", "THREAD ATTRIBUTION", "REMEMBER"):
        assert prompt.index(landmark) < heading
    plain = build_observer_system_prompt(ObserverPromptOptions(thread_title=True, instruction="   "))
    assert "CUSTOM INSTRUCTIONS" not in plain


def test_single_thread_prompt_forbids_thread_tags() -> None:
    prompt = build_observer_system_prompt(ObserverPromptOptions(thread_title=False))
    assert "Do not write thread IDs or <thread> tags" in prompt


@pytest.mark.parametrize(
    ("thread_title", "include_hints", "listing"),
    [
        (False, False, "its own observations."),
        (False, True, "its own observations, current-task, and suggested-response."),
        (True, True, "its own observations, current-task, suggested-response, and thread-title."),
    ],
)
def test_multi_thread_prompt_lists_exactly_the_enabled_sections(
    thread_title: bool, include_hints: bool, listing: str
) -> None:
    prompt = build_observer_system_prompt(
        ObserverPromptOptions(thread_title=thread_title, include_hints=include_hints, multi_thread=True)
    )
    assert f"Each thread block contains {listing}" in prompt
    assert '<thread id="thread-1">' in prompt


def test_inline_extractors_are_described_after_the_format() -> None:
    prompt = build_observer_system_prompt(
        ObserverPromptOptions(
            thread_title=False,
            inline_extractors=(
                InlineExtractorPrompt("mood", "The user's mood as a short phrase."),
                InlineExtractorPrompt("todo", "Open items.", json_schema='{"type": "array"}'),
            ),
        )
    )
    assert prompt.index("OUTPUT FORMAT") < prompt.index("<mood> ... </mood>: The user's mood")
    assert 'valid JSON matching this schema: {"type": "array"}' in prompt


# --- user message -------------------------------------------------------------------------------------


def _message(**overrides: object) -> str:
    fields: dict[str, object] = {
        "transcript": "Dec 4 2025:\nUser (2:30 PM): hi",
        "previous_observations": "",
        "previous_truncated": False,
        "prior_current_task": None,
        "prior_suggested_response": None,
        "prior_thread_title": None,
        "include_hints": True,
    }
    fields.update(overrides)
    return build_observer_user_message(**fields)  # type: ignore[arg-type]


def test_user_message_sections_in_order() -> None:
    text = _message(
        previous_observations="Date: Dec 1, 2025\n* 🔴 (09:00) User stated X",
        prior_current_task="Primary: fix CI",
        prior_suggested_response="Ask about logs",
        prior_thread_title="CI fixes",
    )
    headings = ["## Previous Observations", "## Prior Thread Metadata", "## New Message History to Observe"]
    positions = [text.index(h) for h in [*headings, "## Your Task"]]
    assert positions == sorted(positions)
    assert "* 🔴 (09:00) User stated X" in text
    assert "Do not repeat them" in text
    assert "prior current-task: Primary: fix CI" in text
    assert "prior suggested-response: Ask about logs" in text
    assert "prior thread-title: CI fixes" in text
    assert "update them from the new messages" in text
    assert "User (2:30 PM): hi" in text
    assert "Output only the <observations> block." not in text


def test_user_message_without_previous_or_priors() -> None:
    text = _message()
    assert "## Previous Observations" not in text
    assert "## Prior Thread Metadata" not in text
    assert "shortened" not in text
    assert text.startswith("## New Message History to Observe")


def test_truncation_notice_appears_even_without_previous_observations() -> None:
    # §13.9.9: budget 0 -> nothing shown, but the notice is present.
    context, truncated = prepare_observer_context(
        "Date: Dec 1, 2025\n* 🔴 (09:00) User stated X",
        budget=0,
        buffered_reflection=None,
        reflected_line_count=None,
        count=chars4,
    )
    text = _message(previous_observations=context, previous_truncated=truncated)
    assert "## Previous Observations" not in text
    assert "User stated X" not in text
    assert "previous observations were shortened" in text


def test_hints_off_adds_the_observations_only_sentence() -> None:
    text = _message(include_hints=False)
    task = text[text.index("## Your Task") :]
    assert "Output only the <observations> block." in task


def test_prior_extractions_and_multi_thread_priors() -> None:
    text = _message(
        prior_extractions={"mood": "calm", "todo": ["a", "b"], "empty": None},
        multi_thread=True,
        prior_by_thread={
            "t1": PriorThreadMetadata(current_task="write docs"),
            "t2": PriorThreadMetadata(),
        },
        transcript=render_thread_blocks({"t1": "User: a", "t2": "User: b"}),
    )
    assert "<mood>\ncalm\n</mood>" in text
    assert '<todo>\n["a", "b"]\n</todo>' in text
    assert "<empty>" not in text
    assert "- thread t1\n  prior current-task: write docs" in text
    assert "- thread t2" not in text
    assert 'The history below covers 2 threads.\n\n<thread id="t1">\nUser: a\n</thread>' in text
    assert 'Group the observations by <thread id="..."> inside <observations>.' in text


# --- previous-observations context (§5.4) -------------------------------------------------------------


def truncate_observations(text: str, budget: int, count: Callable[[str], int]) -> str:
    """What the Observer is shown of `text` under `budget`, through the service's own call."""
    context, _ = prepare_observer_context(
        text, budget=budget, buffered_reflection=None, reflected_line_count=None, count=count
    )
    return context


def _reference_truncate(text: str, budget: int, count: object) -> str:
    """The spec's algorithm, rendered and counted naively for every tail start."""
    assert callable(count)
    lines = text.split("\n")
    n = len(lines)
    best: tuple[int, int, str] | None = None
    for s in range(1, n):
        tail = list(range(s, n))
        important = [i for i in range(s) if "🔴" in lines[i] or "✅" in lines[i]]
        kept_head = important[len(important) - min(len(important), len(tail)) :]
        out: list[str] = []
        previous = -1
        for index in [*kept_head, *tail]:
            hidden = index - previous - 1
            if hidden == 1:
                out.append(lines[previous + 1])
            elif hidden >= 2:
                out.append(f"[{hidden} observations truncated here]")
            out.append(lines[index])
            previous = index
        candidate = "\n".join(out)
        if count(candidate) <= budget:
            key = (len(kept_head), len(tail), candidate)
            if best is None or key[:2] > best[:2]:
                best = key
    return best[2] if best else f"[{n} observations truncated here]"


def _log(lines: int, seed: int) -> str:
    rng = random.Random(seed)
    out = []
    for i in range(lines):
        roll = rng.random()
        if roll < 0.05:
            out.append(f"Date: Dec {i % 28 + 1}, 2025")
        elif roll < 0.08:
            out.append("")
        else:
            marker = rng.choice(["🔴", "🟡", "🟢", "✅"])
            indent = "  * -> " if rng.random() < 0.3 else "* "
            vocabulary = ["deploy", "user", "config", "asked", "agent", "ran"]
            words = " ".join(rng.choice(vocabulary) for _ in range(8))
            out.append(f"{indent}{marker} ({i % 24:02d}:{i % 60:02d}) {words} {i}")
    return "\n".join(out)


def test_budget_none_returns_existing_unchanged() -> None:
    existing = _log(50, 1)
    assert prepare_observer_context(
        existing, budget=None, buffered_reflection="R", reflected_line_count=10, count=chars4
    ) == (existing, False)


def test_budget_zero_returns_nothing_and_truncated() -> None:
    assert prepare_observer_context(
        _log(5, 1), budget=0, buffered_reflection=None, reflected_line_count=None, count=chars4
    ) == ("", True)


def test_context_within_budget_is_untouched() -> None:
    existing = _log(10, 2)
    assert prepare_observer_context(
        existing, budget=10_000, buffered_reflection=None, reflected_line_count=None, count=chars4
    ) == (existing, False)


def test_buffered_reflection_replaces_the_lines_it_covers() -> None:
    # §13.9.10
    lines = [f"* 🟡 (10:00) old line {i}" for i in range(60)]
    context, truncated = prepare_observer_context(
        "\n".join(lines),
        budget=100_000,
        buffered_reflection="Date: Dec 1, 2025\n* 🔴 (09:00) condensed",
        reflected_line_count=50,
        count=chars4,
    )
    assert not truncated
    assert context == "Date: Dec 1, 2025\n* 🔴 (09:00) condensed\n\n" + "\n".join(lines[50:])
    assert "old line 49" not in context


@pytest.mark.parametrize(
    ("existing", "expected"),
    [("", "REFLECTION"), ("a\nb", "REFLECTION"), ("a\nb\nc", "REFLECTION\n\nc")],
)
def test_buffered_reflection_edge_cases(existing: str, expected: str) -> None:
    context, _ = prepare_observer_context(
        existing, budget=1000, buffered_reflection="REFLECTION", reflected_line_count=2, count=chars4
    )
    assert context == expected


def test_truncation_keeps_newest_lines_and_important_head_lines() -> None:
    # §13.9.9
    head = [f"* 🟢 (08:{i:02d}) minor detail number {i}" for i in range(30)]
    head[3] = "* 🔴 (08:03) User stated they are allergic to nuts"
    head[10] = "* ✅ (08:10) Deployment finished and user confirmed"
    tail = [f"* 🟡 (09:{i:02d}) recent finding {i}" for i in range(10)]
    text = "\n".join(head + tail)
    context, truncated = prepare_observer_context(
        text, budget=120, buffered_reflection=None, reflected_line_count=None, count=chars4
    )
    assert truncated
    assert chars4(context) <= 120
    out = context.split("\n")
    assert out[-1] == tail[-1]
    assert head[3] in out and head[10] in out
    assert re.fullmatch(r"\[\d+ observations truncated here\]", out[0])
    assert any(re.fullmatch(r"\[\d+ observations truncated here\]", line) for line in out[1:])
    assert context == _reference_truncate(text, 120, chars4)


def test_important_lines_never_outnumber_the_tail() -> None:
    important = [f"* 🔴 (08:{i:02d}) fact {i}" for i in range(20)]
    tail = ["* 🟡 (09:00) newest"]
    text = "\n".join(important + tail)
    out = truncate_observations(text, 30, chars4)
    # 28 tokens: tail = [fact 19, newest], so at most two older important lines (the newest) are kept;
    # the next longer tail would need 38 tokens.
    assert out == "\n".join(
        ["[17 observations truncated here]", important[17], important[18], important[19], tail[0]]
    )
    assert out == _reference_truncate(text, 30, chars4)


def test_a_gap_of_one_keeps_the_hidden_line() -> None:
    a, b, c = "* 🔴 (08:00) fact A", "* 🟢 (08:01) b", "* 🔴 (08:02) fact C"
    d, e = "* 🟢 (08:03) " + "d" * 200, "* 🟢 (08:04) " + "e" * 200
    f, g = "* 🟡 (08:05) F", "* 🟡 (08:06) G"
    text = "\n".join([a, b, c, d, e, f, g])
    # Tail [F, G] keeps both important lines; the lone hidden line b is shown instead of a marker.
    out = truncate_observations(text, 40, chars4)
    assert out == "\n".join([a, b, c, "[2 observations truncated here]", f, g])
    assert out == _reference_truncate(text, 40, chars4)


def test_nothing_fits_returns_a_single_marker() -> None:
    text = "\n".join(f"* 🟡 (10:00) a rather long observation line number {i}" for i in range(7))
    assert truncate_observations(text, 3, chars4) == "[7 observations truncated here]"


@pytest.mark.parametrize("seed", range(12))
def test_truncation_matches_the_reference_algorithm(seed: int) -> None:
    rng = random.Random(seed)
    text = _log(rng.randint(5, 70), seed)
    budget = rng.randint(10, chars4(text))
    expected = _reference_truncate(text, budget, chars4)
    assert truncate_observations(text, budget, chars4) == expected


def test_truncation_with_a_word_counter_matches_the_reference() -> None:
    def words(text: str) -> int:
        return len(text.split())

    for seed in range(8):
        text = _log(60, 100 + seed)
        for budget in (30, 120, 300):
            assert truncate_observations(text, budget, words) == _reference_truncate(text, budget, words)


def test_truncation_of_a_3000_line_log() -> None:
    text = _log(3000, 7)
    lines = text.split("\n")
    context, truncated = prepare_observer_context(
        text, budget=2000, buffered_reflection=None, reflected_line_count=None, count=chars4
    )
    assert truncated
    assert chars4(context) <= 2000
    out = context.split("\n")
    assert out[-1] == lines[-1]
    markers = [line for line in out if re.fullmatch(r"\[\d+ observations truncated here\]", line)]
    assert markers
    # Expanding every marker back into the lines it hides walks the original log exactly once.
    position = 0
    kept_head_important = 0
    for line in out:
        if line in markers:
            position += int(line[1:].split(" ", 1)[0])
            continue
        assert lines[position] == line
        position += 1
    assert position == len(lines)
    # The kept important head lines never outnumber the raw tail (the lines after the last marker).
    tail_length = len(out) - 1 - out.index(markers[-1])
    kept_head_important = sum(1 for line in out[: out.index(markers[-1])] if "🔴" in line or "✅" in line)
    assert 0 < kept_head_important <= tail_length
    assert chars4(context) > 1900  # the budget is actually used


# --- combine_for_observer -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("active", "chunks", "expected"),
    [
        ("A", [], "A"),
        ("A", ["", "  "], "A"),
        ("A", ["B1", "B2"], "A\n\n--- BUFFERED (pending activation) ---\n\nB1\n\nB2"),
        ("", ["B1"], "--- BUFFERED (pending activation) ---\n\nB1"),
    ],
)
def test_combine_for_observer(active: str, chunks: list[str], expected: str) -> None:
    assert combine_for_observer(active, chunks) == expected


# --- output parsing (§5.6) ----------------------------------------------------------------------------


def test_two_observation_blocks_are_joined() -> None:
    # §13.9.4
    text = (
        "<observations>\nDate: Dec 4, 2025\n* 🔴 (10:00) first\n</observations>\n"
        "some chatter\n"
        "<observations>\n* 🟡 (10:05) second\n</observations>"
    )
    expected = "Date: Dec 4, 2025\n* 🔴 (10:00) first\n* 🟡 (10:05) second"
    assert parse_observer_output(text).observations == expected


def test_inline_tag_mentions_in_prose_are_ignored() -> None:
    text = (
        "User discussed <observations> tags in the docs </observations> yesterday.\n"
        "<observations>\n* 🔴 (10:00) real one\n</observations>"
    )
    assert parse_observer_output(text).observations == "* 🔴 (10:00) real one"


def test_without_tags_only_list_lines_are_kept() -> None:
    text = (
        "Here are my notes:\n* 🔴 (10:00) User stated A\nsome prose\n- 🟡 (10:01) B\n1. numbered C\n"
        "<current-task>\n- Primary: do A\n</current-task>"
    )
    result = parse_observer_output(text)
    assert result.observations == "* 🔴 (10:00) User stated A\n- 🟡 (10:01) B\n1. numbered C"
    assert result.current_task == "- Primary: do A"


def test_continuation_sections_are_parsed() -> None:
    text = (
        "<observations>\n* 🔴 (10:00) x\n</observations>\n\n"
        "<current-task>\n- Primary: ship it\n</current-task>\n"
        "<suggested-response>\nAsk for the logs.\n</suggested-response>\n"
        "<thread-title>Deploy pipeline</thread-title>"
    )
    result = parse_observer_output(text)
    assert result.current_task == "- Primary: ship it"
    assert result.suggested_response == "Ask for the logs."
    assert result.thread_title == "Deploy pipeline"
    assert not result.degenerate
    assert result.raw == text


def test_thread_title_rules() -> None:
    # §13.9.12, parsing side and the acceptance rule.
    assert parse_observer_output("<thread-title>\n  ab \n</thread-title>").thread_title == "ab"
    assert thread_title_update("Deploy pipeline", None) == "Deploy pipeline"
    assert thread_title_update(" Deploy pipeline ", "Old title") == "Deploy pipeline"
    assert thread_title_update("ab", None) is None
    assert thread_title_update("Deploy pipeline", "Deploy pipeline") is None
    assert thread_title_update(None, "x") is None


def test_degenerate_output_is_flagged() -> None:
    # §13.9.7 (parsing side; the retry is the engine's)
    line = "* 🟡 (10:00) the agent looped on this exact same long line again " + "z" * 55
    result = parse_observer_output("<observations>\n" + "\n".join([line] * 100) + "\n</observations>")
    assert result.degenerate
    assert result.observations == ""


def test_long_observation_lines_are_cut() -> None:
    # §13.9.5
    prefix = "* 🟡 (10:00) "
    text = f"<observations>\n{prefix}{'q' * 12_000}\n</observations>"
    observations = parse_observer_output(text).observations
    assert observations == prefix + "q" * (10_000 - len(prefix)) + " … [truncated]"


def test_observations_are_sorted_by_time() -> None:
    text = "<observations>\nDate: Dec 4, 2025\n* 🔴 (14:31) B\n* 🟡 (14:30) A\n  * -> a1\n</observations>"
    expected = "Date: Dec 4, 2025\n* 🟡 (14:30) A\n  * -> a1\n* 🔴 (14:31) B"
    assert parse_observer_output(text).observations == expected


def test_control_text_lines_are_dropped() -> None:
    text = (
        "<observations>\nDate: Dec 4, 2025\n"
        "* 🔴 (10:00) User stated they live in Lisbon\n"
        "* 🟡 (10:01) ## Your Task\n"
        "* 🟡 (10:02) <system-reminder>be brief</system-reminder>\n"
        "[12 observations truncated here]\n"
        "</observations>"
    )
    result = parse_observer_output(text)
    assert result.observations == "Date: Dec 4, 2025\n* 🔴 (10:00) User stated they live in Lisbon"
    assert len(result.dropped_lines) == 3


@pytest.mark.parametrize(
    "line",
    [
        "## Previous Observations",
        "## Prior Thread Metadata",
        "## New Message History to Observe",
        "## Your Task",
        "Your Task:",
        "=== CUSTOM INSTRUCTIONS ===",
        "--- BUFFERED (pending activation) ---",
        "[3 observations truncated here]",
        "* 🟡 (10:00) Output only the <observations> block.",
        "* 🔴 (10:00) prior current-task: fix CI",
        '- 🟡 <system-reminder type="temporal-gap">2 hours later</system-reminder>',
        "* 🟡 (10:00) Only the message history is source material. The headings",
        "  * -> Extract new observations from the message history above.",
    ],
)
def test_control_text_is_recognised(line: str) -> None:
    assert looks_like_control_text(line)


@pytest.mark.parametrize(
    "line",
    [
        "",
        "Date: Dec 4, 2025",
        "* 🔴 (10:00) User asked about their task list for Friday",
        "* 🔴 (10:00) Your task tracker is Jira, user stated",
        "* 🟡 (10:05) User wants a Previous Observations panel in the app",
        "* 🟡 (10:06) Agent explained what a system reminder is",
        "  * -> viewed README.md:10-42",
    ],
)
def test_ordinary_observations_are_not_control_text(line: str) -> None:
    assert not looks_like_control_text(line)


def test_multi_thread_output_is_split_per_thread() -> None:
    # §13.13 (parsing side)
    text = (
        "<observations>\n"
        '<thread id="t1">\nDate: Dec 4, 2025\n* 🔴 (10:00) one\n'
        "<current-task>\n- Primary: a\n</current-task>\n</thread>\n"
        '<thread id="t2">\nDate: Dec 4, 2025\n* 🟡 (11:00) two\n'
        "<thread-title>Second thread</thread-title>\n</thread>\n"
        "</observations>"
    )
    result = parse_multi_thread_output(text)
    assert result.for_thread("t1").observations == "Date: Dec 4, 2025\n* 🔴 (10:00) one"
    assert result.for_thread("t1").current_task == "- Primary: a"
    assert result.for_thread("t2").observations == "Date: Dec 4, 2025\n* 🟡 (11:00) two"
    assert result.for_thread("t2").thread_title == "Second thread"
    assert result.for_thread("t3").observations == ""
    assert not result.degenerate


# --- observations.text utilities ----------------------------------------------------------------------


def test_extract_tag_block_modes() -> None:
    text = "prose <a>inline</a>\n<a>\nfirst\n</a>\n  <a>second</a>"
    assert extract_tag_block(text, "a") == "first"
    assert extract_tag_block(text, "a", all_blocks=True) == ["first", "second"]
    assert extract_tag_block(text, "a", line_anchored=False) == "inline"
    assert extract_tag_block(text, "b") is None
    assert extract_tag_block("<A>\nX\n</A>", "a") == "X"


def test_parse_observation_sections_strips_extra_sections_in_fallback() -> None:
    text = "* 🔴 (10:00) fact\n<mood>\n- happy\n</mood>"
    assert parse_observation_sections(text, extra_sections=("mood",)).observations == "* 🔴 (10:00) fact"


def test_regexes() -> None:
    match = DATE_HEADER_RE.search("x\nDate: Dec 4, 2025\n")
    assert match is not None and match.group("date") == "Dec 4, 2025"
    line = OBSERVATION_LINE_RE.match("  * ✅ (14:30) done it")
    assert line is not None
    assert (line.group("indent"), line.group("marker"), line.group("time"), line.group("text")) == (
        "  ",
        "✅",
        "14:30",
        "done it",
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # §13.9.6: A (with its nested line) moves before B.
        (
            "Date: Dec 4, 2025\n* 🔴 (14:31) B\n* 🟡 (14:30) A\n  * -> a1",
            "Date: Dec 4, 2025\n* 🟡 (14:30) A\n  * -> a1\n* 🔴 (14:31) B",
        ),
        # Groups are sorted independently; text before the first header is untouched.
        (
            "preamble\n* (9:00) z\nDate: Dec 4, 2025\n* 🔴 (10:00) B\n* 🔴 (09:00) A\nDate: Dec 5, 2025\n"
            "- 🟡 (08:00) D\n- 🟡 (07:00) C",
            "preamble\n* (9:00) z\nDate: Dec 4, 2025\n* 🔴 (09:00) A\n* 🔴 (10:00) B\nDate: Dec 5, 2025\n"
            "- 🟡 (07:00) C\n- 🟡 (08:00) D",
        ),
        # AM/PM times sort as times of day.
        (
            "Date: Dec 4, 2025\n* 🔴 (1:05 PM) B\n* 🔴 (11:50 a.m.) A",
            "Date: Dec 4, 2025\n* 🔴 (11:50 a.m.) A\n* 🔴 (1:05 PM) B",
        ),
        # Stable: equal times keep their order; blank-line gaps stay in place.
        (
            "Date: Dec 4, 2025\n* (10:00) second\n\n* (09:00) first\n* (10:00) third\n",
            "Date: Dec 4, 2025\n* (09:00) first\n\n* (10:00) second\n* (10:00) third\n",
        ),
        # One-digit hours sharing the same hour are unambiguous.
        ("Date: Dec 4, 2025\n* (1:40) B\n* (1:35) A", "Date: Dec 4, 2025\n* (1:35) A\n* (1:40) B"),
    ],
)
def test_sort_by_time_sorts(text: str, expected: str) -> None:
    assert sort_by_time(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "Date: Dec 4, 2025\n* 🔴 (13:35) B\n* 🟡 (1:35) A",  # §13.9.6: 1:35 mixed with 13:35
        "Date: Dec 4, 2025\n* (01:40) B\n* (1:35) A",  # one-digit with zero-padded
        "Date: Dec 4, 2025\n* (2:10) B\n* (1:35) A",  # one-digit hours that differ
        "Date: Dec 4, 2025\n* (10:00) B\n* no time here",  # an item without a time
        "Date: Dec 4, 2025\n* (1:00 PM) B\n* (09:00) A",  # AM/PM mixed with 24-hour
        "Date: Dec 4, 2025\n* (10:00) B\nprose line\n* (09:00) A",  # a stray non-bullet line
        "Date: Dec 4, 2025\n* 🔴 User said at (09:00) hello\n* (08:00) A",  # time not at the start
    ],
)
def test_sort_by_time_leaves_unsortable_groups_alone(text: str) -> None:
    assert sort_by_time(text) == text


def test_a_long_log_is_shortened_from_remembered_line_counts_without_counting_it_whole() -> None:
    """Each Observer call shows the log again; the second call counts no old line again and never the
    whole log (only its new line, markers and the short candidates it renders), and answers exactly as
    counting everything would."""
    counted: list[str] = []

    def counting(text: str) -> int:
        counted.append(text)
        return chars4(text)

    remembered = RememberedCounts(counting)
    log, new_line = _log(3000, 7), "* 🟡 (11:00) one more line"
    for text in (log, f"{log}\n{new_line}"):
        counted.clear()
        context, truncated = prepare_observer_context(
            text,
            budget=2000,
            buffered_reflection=None,
            reflected_line_count=None,
            count=counting,
            count_line=remembered,
        )
        assert (context, truncated) == (_reference_truncate(text, 2000, chars4), True)
    single_lines = {line for line in counted if "\n" not in line}
    assert single_lines - {new_line} <= {line for line in single_lines if line.startswith("[")}, single_lines
    assert max(map(len, counted)) < len(log) / 10, "the whole log was counted"


def test_the_shortcut_past_a_whole_count_gives_the_reference_answer_with_tiktoken() -> None:
    estimator = default_estimator()
    for seed, lines, budget in [(3, 400, 2000), (4, 120, 900), (5, 60, 2000)]:
        text = _log(lines, seed)
        context, truncated = prepare_observer_context(
            text,
            budget=budget,
            buffered_reflection=None,
            reflected_line_count=None,
            count=estimator,
            count_line=RememberedCounts(estimator),
        )
        if estimator(text) <= budget:
            assert (context, truncated) == (text, False)
        else:
            assert (context, truncated) == (_reference_truncate(text, budget, estimator), True)
