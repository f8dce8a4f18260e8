"""The Reflector: prompts, output parsing, the retry ladder (§6, §13.6 cases 6–10 and 14) and the
reflection text arithmetic used by storage (§3.5 (6), (8))."""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field

import pytest

from om_core.errors import OMError
from om_core.observations.degenerate import is_degenerate
from om_core.observer.prompt import ObserverPromptOptions, build_observer_system_prompt
from om_core.reflector.prompt import (
    COMPRESSION_LEVELS,
    MAX_LEVEL,
    LadderResult,
    ModelReply,
    ReflectionEmptyError,
    ReflectorPromptOptions,
    RetryInfo,
    append_tail_after_reflection,
    build_reflector_system_prompt,
    build_reflector_user_message,
    parse_reflector_output,
    reflect_with_ladder,
    replace_leading_lines,
    split_lines,
)

# --- helpers -----------------------------------------------------------------------------------------

TOKENS_PER_LINE = 100


def count(text: str) -> int:
    """Fake token counter: 100 tokens per observation line, so sizes are easy to script."""
    return TOKENS_PER_LINE * sum(1 for line in text.split("\n") if line.lstrip().startswith("* "))


def log_of(lines: int, label: str = "fact") -> str:
    body = "\n".join(f"* 🔴 (09:{i % 60:02d}) {label} {i}" for i in range(lines))
    return f"Date: Mar 3, 2026\n{body}"


def reply_of(tokens: int, label: str = "fact") -> str:
    return f"<observations>\n{log_of(tokens // TOKENS_PER_LINE, label)}\n</observations>"


DEGENERATE = "<observations>\n" + "* 🔴 (09:00) the agent looked at the very same file again\n" * 400
INPUT = log_of(10)  # 1000 tokens


@dataclass
class ScriptedModel:
    replies: list[str]
    costs: list[float | None] = field(default_factory=list)
    calls: list[tuple[str, str]] = field(default_factory=list)

    def __call__(self, system: str, user: str) -> ModelReply:
        index = len(self.calls)
        self.calls.append((system, user))
        cost = self.costs[index] if index < len(self.costs) else None
        return ModelReply(
            text=self.replies[index],
            input_tokens=1000 + index,
            output_tokens=10,
            cost=cost,
            provider_metadata={"attempt": index},
        )

    @property
    def levels(self) -> list[int]:
        return [int(user.split("compression level ")[1].split(" ")[0]) for _, user in self.calls]


def run(
    model: ScriptedModel, *, start_level: int = 1, target: int = 500, manual_prompt: str | None = None
) -> tuple[LadderResult, list[RetryInfo]]:
    retries: list[RetryInfo] = []
    result = reflect_with_ladder(
        INPUT,
        target=target,
        start_level=start_level,
        include_hints=True,
        call=model,
        count=count,
        manual_prompt=manual_prompt,
        on_retry=retries.append,
        system_prompt="SYSTEM",
    )
    return result, retries


def test_degenerate_fixture_is_degenerate() -> None:
    assert is_degenerate(DEGENERATE)


# --- the ladder (§6.3, §13.6) -----------------------------------------------------------------------


def test_case6_every_attempt_over_target_makes_four_calls_and_returns_the_smallest() -> None:
    model = ScriptedModel([reply_of(900), reply_of(700, "best"), reply_of(800), reply_of(950)])
    result, retries = run(model, start_level=1)
    assert len(model.calls) == 4
    assert model.levels == [1, 2, 3, 4]
    assert result.levels == [1, 2, 3, 4] and result.attempts == 4
    assert result.tokens == 700 and "best 0" in result.output.observations
    assert result.reached_target is False
    assert [r.message for r in retries] == [
        "did not compress below threshold (1000 -> 900, target 500), retrying at level 2",
        "did not compress below threshold (1000 -> 700, target 500), retrying at level 3",
        "did not compress below threshold (1000 -> 800, target 500), retrying at level 4",
    ]
    first = retries[0]
    assert (first.level, first.next_level, first.original, first.size, first.target) == (1, 2, 1000, 900, 500)


@pytest.mark.parametrize(
    ("start_level", "levels"), [(0, [0, 1, 2, 3]), (1, [1, 2, 3, 4]), (2, [2, 3, 4]), (3, [3, 4]), (4, [4])]
)
def test_case7_attempts_are_bounded_by_start_level(start_level: int, levels: list[int]) -> None:
    model = ScriptedModel([reply_of(900)] * 4)
    result, retries = run(model, start_level=start_level)
    assert model.levels == levels == result.levels
    assert len(retries) == len(levels) - 1


def test_stops_at_first_result_under_target() -> None:
    model = ScriptedModel([reply_of(900), reply_of(400, "small"), reply_of(100)])
    result, retries = run(model)
    assert len(model.calls) == 2
    assert result.tokens == 400 and result.reached_target is True
    assert "small 0" in result.output.observations
    assert len(retries) == 1


def test_size_equal_to_target_is_not_success() -> None:
    model = ScriptedModel([reply_of(500), reply_of(400)])
    result, _ = run(model, target=500)
    assert len(model.calls) == 2 and result.tokens == 400


def test_case8_degenerate_attempt_escalates() -> None:
    model = ScriptedModel([DEGENERATE, reply_of(300, "good")])
    result, retries = run(model)
    assert len(model.calls) == 2 and model.levels == [1, 2]
    assert "good 0" in result.output.observations and result.reached_target
    assert retries[0].size == 1000  # a bad attempt counts as no compression at all


def test_case9_every_attempt_degenerate_raises_reflection_empty() -> None:
    model = ScriptedModel([DEGENERATE] * 4, costs=[0.5, None, 0.25, 0.25])
    with pytest.raises(ReflectionEmptyError) as caught:
        run(model)
    error = caught.value
    assert error.code == "REFLECTION_EMPTY"
    assert isinstance(error, OMError)
    assert error.attempts == 4 and error.levels == [1, 2, 3, 4]
    assert error.input_tokens == 1000 + 1001 + 1002 + 1003 and error.output_tokens == 40
    assert error.cost == pytest.approx(1.0)
    clone = pickle.loads(pickle.dumps(error))
    assert clone.code == "REFLECTION_EMPTY" and clone.levels == [1, 2, 3, 4] and str(clone) == str(error)


def test_case10_empty_observations_block_for_non_empty_input_escalates() -> None:
    model = ScriptedModel(["<observations>\n</observations>", reply_of(200)])
    result, retries = run(model)
    assert len(model.calls) == 2 and result.tokens == 200
    assert retries[0].size == 1000


def test_only_empty_or_degenerate_attempts_never_win_over_a_real_candidate() -> None:
    model = ScriptedModel([reply_of(900, "real"), "<observations>\n</observations>", DEGENERATE, "   "])
    result, _ = run(model)
    assert result.tokens == 900 and "real 0" in result.output.observations


def test_empty_input_accepts_empty_output() -> None:
    model = ScriptedModel(["<observations>\n</observations>"])
    result = reflect_with_ladder(
        "", target=500, start_level=1, include_hints=True, call=model, count=count, system_prompt="S"
    )
    assert result.output.observations == "" and result.tokens == 0 and result.attempts == 1


def test_usage_is_summed_across_attempts() -> None:
    model = ScriptedModel([reply_of(900), reply_of(400)], costs=[0.01, 0.02])
    result, _ = run(model)
    assert result.input_tokens == 1000 + 1001 and result.output_tokens == 20
    assert result.total_tokens == 2021
    assert result.cost == pytest.approx(0.03)
    assert result.provider_metadata == {"attempt": 1}
    no_cost, _ = run(ScriptedModel([reply_of(400)]))
    assert no_cost.cost is None


def test_case14_manual_guidance_reaches_the_prompt_at_level_zero() -> None:
    model = ScriptedModel([reply_of(300)])
    run(model, start_level=0, manual_prompt="focus on auth")
    system, user = model.calls[0]
    assert system == "SYSTEM"
    assert "## Specific Guidance\n\nfocus on auth" in user
    assert "Target size: under 500 tokens (compression level 0 of 4)." in user
    assert COMPRESSION_LEVELS[1].guidance not in user


def test_ladder_sends_each_levels_guidance_and_the_input() -> None:
    model = ScriptedModel([reply_of(900)] * 4)
    run(model, start_level=1)
    for level, (_, user) in zip([1, 2, 3, 4], model.calls, strict=True):
        assert COMPRESSION_LEVELS[level].guidance in user
        assert user.startswith("## Observations to Reflect On\n\n" + INPUT)


# --- prompts ------------------------------------------------------------------------------------------


def test_compression_levels_table() -> None:
    assert MAX_LEVEL == 4
    assert sorted(COMPRESSION_LEVELS) == [0, 1, 2, 3, 4]
    assert [COMPRESSION_LEVELS[n].name for n in range(5)] == [
        "none",
        "gentle",
        "aggressive",
        "critical",
        "extreme",
    ]
    assert [COMPRESSION_LEVELS[n].target_detail for n in range(5)] == [None, 0.8, 0.6, 0.4, 0.2]
    assert COMPRESSION_LEVELS[0].guidance == ""
    for n, fraction in ((1, "8/10"), (2, "6/10"), (3, "4/10"), (4, "2/10")):
        assert fraction in COMPRESSION_LEVELS[n].guidance and "✅" in COMPRESSION_LEVELS[n].guidance


def test_user_message_shape() -> None:
    text = build_reflector_user_message(
        "Date: Mar 3, 2026\n* 🔴 (09:00) x",
        level=2,
        target_tokens=15000,
        manual_prompt=None,
        include_hints=False,
    )
    assert text.startswith("## Observations to Reflect On\n\nDate: Mar 3, 2026\n* 🔴 (09:00) x\n")
    assert "Target size: under 15000 tokens (compression level 2 of 4)." in text
    assert COMPRESSION_LEVELS[2].guidance in text
    assert "Output only the <observations> block." in text
    assert "entire memory" in text
    assert "Specific Guidance" not in text

    plain = build_reflector_user_message(
        "obs", level=0, target_tokens=None, manual_prompt=None, include_hints=True
    )
    assert "Target size" not in plain
    assert "Output only the <observations> block." not in plain


def test_system_prompt_covers_the_required_points() -> None:
    opts = ReflectorPromptOptions(
        observer_instructions="OBSERVER RULES HERE", instruction="Prefer health facts.", include_hints=True
    )
    prompt = build_reflector_system_prompt(opts)
    assert (
        "<observational-memory-instruction>\nOBSERVER RULES HERE\n</observational-memory-instruction>"
        in prompt
    )
    assert "ENTIRE memory" in prompt and "forgotten" in prompt
    assert "has two kids" in prompt and "how many kids" in prompt
    assert "✅" in prompt and "Date: Mon D, YYYY" in prompt
    assert "<current-task>" in prompt and "<suggested-response>" in prompt
    assert "Messages from the user matter most" in prompt
    assert prompt.endswith("=== CUSTOM INSTRUCTIONS ===\n\nPrefer health facts.")
    assert "<thread id" not in prompt


def test_system_prompt_variants() -> None:
    buffered = build_reflector_system_prompt(
        ReflectorPromptOptions(observer_instructions="X", instruction=None, include_hints=False)
    )
    assert "<current-task>" not in buffered and "<suggested-response>" not in buffered
    assert "Output only the <observations> block." in buffered
    assert "CUSTOM INSTRUCTIONS" not in buffered
    resource = build_reflector_system_prompt(
        ReflectorPromptOptions(observer_instructions="X", instruction="  ", resource_scope=True)
    )
    assert '<thread id="...">' in resource and "CUSTOM INSTRUCTIONS" not in resource


# --- parsing ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "observations"),
    [
        ("<observations>\nDate: Mar 3, 2026\n* 🔴 a\n</observations>", "Date: Mar 3, 2026\n* 🔴 a"),
        ("<observations>\n* a\n</observations>\nprose\n<observations>\n* b\n</observations>", "* a\n* b"),
        ("Here you go:\n* 🔴 a\nsome prose\n- b\n1. c", "* 🔴 a\n- b\n1. c"),
        ("Date: Mar 3, 2026\nUser likes tea.", "Date: Mar 3, 2026\nUser likes tea."),
        ("<observations>\n</observations>", ""),
        ("  whole reply  \n<current-task>\nT\n</current-task>", "whole reply"),
    ],
)
def test_parse_observations(text: str, observations: str) -> None:
    assert parse_reflector_output(text).observations == observations


def test_parse_hints_from_anywhere() -> None:
    text = (
        "<observations>\n* 🔴 a\n</observations>\n"
        "Notes: <current-task>Primary: ship it</current-task> and "
        "<suggested-response>\nAsk about tests.\n</suggested-response>"
    )
    parsed = parse_reflector_output(text)
    assert parsed.current_task == "Primary: ship it"
    assert parsed.suggested_response == "Ask about tests."
    assert parsed.observations == "* 🔴 a"
    assert parsed.raw == text and parsed.degenerate is False
    assert parse_reflector_output("* a").current_task is None


def test_parse_degenerate_and_sanitize() -> None:
    parsed = parse_reflector_output(DEGENERATE)
    assert parsed.degenerate is True and parsed.observations == "" and parsed.diagnosis
    long_line = "* 🔴 " + "x" * 12000
    sanitized = parse_reflector_output(f"<observations>\n{long_line}\n</observations>").observations
    assert sanitized.endswith("[truncated]") and len(sanitized) < 10100


# --- text arithmetic ------------------------------------------------------------------------------------


def test_split_lines() -> None:
    assert split_lines("") == []
    assert split_lines("a") == ["a"]
    assert split_lines("a\n\nb\n") == ["a", "", "b", ""]


def test_replace_leading_lines_keeps_lines_added_after_the_slice() -> None:
    active = "\n".join(f"line {i}" for i in range(240))
    out = replace_leading_lines(active, 200, "REFLECTION")
    assert out == "REFLECTION\n\n" + "\n".join(f"line {i}" for i in range(200, 240))
    assert replace_leading_lines(active, 240, "REFLECTION") == "REFLECTION"
    assert replace_leading_lines("a\nb\n\n  \n", 2, "R") == "R"
    assert replace_leading_lines("a\nb", 0, "R") == "R\n\na\nb"


@pytest.mark.parametrize(
    ("snapshot", "stored", "expected"),
    [
        ("* a\n* b", "* a\n* b", "R"),
        ("* a\n* b", "* a\n* b\n\n* c", "R\n\n* c"),
        ("* a\n* b", "* a\n* b\n\n   ", "R"),
        ("", "* c", "R\n\n* c"),
        ("* a\n* b", "* a\n* B", None),
        ("* a\n* b", "* b", None),
        ("* a\n* b", "", None),
    ],
)
def test_append_tail_after_reflection(snapshot: str, stored: str, expected: str | None) -> None:
    assert append_tail_after_reflection(snapshot, stored, "R") == expected


def test_system_prompt_embeds_the_observer_prompt_in_effect() -> None:
    observer_prompt = build_observer_system_prompt(
        ObserverPromptOptions(thread_title=False, instruction="Track medication names.")
    )
    prompt = build_reflector_system_prompt(
        ReflectorPromptOptions(observer_instructions=observer_prompt, instruction="Keep health facts.")
    )
    block = prompt.split("<observational-memory-instruction>\n", 1)[1].split(
        "\n</observational-memory-instruction>", 1
    )[0]
    assert block == observer_prompt.strip()
    assert "Track medication names." in block
    assert prompt.endswith("=== CUSTOM INSTRUCTIONS ===\n\nKeep health facts.")
