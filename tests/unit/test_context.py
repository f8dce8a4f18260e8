"""Actor context assembly (behaviour §4.11): token optimisation, layout, prompt-cache stability, reminder."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from om_core.context.actor import (
    OTHER_CONVERSATIONS_END,
    OTHER_CONVERSATIONS_START,
    build_actor_context,
    optimize_for_actor,
    split_log_chunks,
)

LOG = "\n".join(
    [
        "Date: Mar 3, 2026",
        "* 🔴 (09:12) User stated their team deploys on Fridays only",
        "* 🟡 (09:15) Agent inspected CI config [ci, tooling]",
        "  * -> viewed deploy.yml, found manual approval step",
        "* 🟢 (09:18) User will present the rollout (meaning March 12, 2026)",
        "* ✅ (09:31) Secret added; user confirmed dry-run is green",
    ]
)
MORNING = datetime(2026, 3, 10, 8, 0, tzinfo=UTC)
EVENING = datetime(2026, 3, 10, 21, 30, tzinfo=UTC)


@pytest.mark.parametrize(
    ("raw", "optimized"),
    [
        ("* 🟡 (09:15) Agent read a file", "* (09:15) Agent read a file"),
        ("* 🟢 (09:15) Minor detail", "* (09:15) Minor detail"),
        ("* 🔴 (09:15) Key fact", "* 🔴 (09:15) Key fact"),
        ("* ✅ (09:15) Done", "* ✅ (09:15) Done"),
        ("* 🔴 User likes tea [preference, drinks]", "* 🔴 User likes tea"),
        ("* 🔴 [12 items collapsed: file views] summary", "* 🔴 [12 items collapsed: file views] summary"),
        (
            "* 🔴 See [the docs](https://x.io/a) for details",
            "* 🔴 See [the docs](https://x.io/a) for details",
        ),
        ("* 🔴 [deploy] Friday rule", "* 🔴 Friday rule"),
        ("* 🔴 read items[0] and Dict[str, int]", "* 🔴 read items[0] and Dict[str, int]"),
        ("  * -> viewed file.py:10-20", "  * viewed file.py:10-20"),
        ("* 🔴 step one -> step two", "* 🔴 step one step two"),
        ("* 🔴 too    many   spaces", "* 🔴 too many spaces"),
        ("first\n\n\n\nsecond", "first\n\nsecond"),
        ("  * nested item keeps indent", "  * nested item keeps indent"),
        ("* parent\n    * deeply nested", "* parent\n    * deeply nested"),
        ("\n\n* 🔴 surrounding blank lines\n\n\n", "* 🔴 surrounding blank lines"),
    ],
)
def test_optimize_for_actor(raw: str, optimized: str) -> None:
    assert optimize_for_actor(raw) == optimized


def _build(observations: str = LOG, now: datetime = MORNING, **kw: Any) -> Any:
    args: dict[str, Any] = {
        "active_observations": observations,
        "current_task": "Primary: document the deploy flow",
        "suggested_response": "Offer a draft of the wiki page.",
        "now": now,
        "tz": "UTC",
        "has_unobserved_history": True,
    }
    args.update(kw)
    return build_actor_context(**args)


def test_layout_and_order() -> None:
    ctx = _build()
    stable = ctx.system_messages[: ctx.stable_count]
    volatile = ctx.system_messages[ctx.stable_count :]
    assert stable[1] == "<observations>"
    assert stable[-1] == "</observations>"
    assert volatile == [
        "<current-task>\nPrimary: document the deploy flow\n</current-task>",
        "<suggested-response>\nOffer a draft of the wiki page.\n</suggested-response>",
    ]
    assert ctx.observation_block == "\n\n".join(stable)
    assert ctx.hints_block == "\n\n".join(volatile)
    rendered = stable[2]
    assert rendered.startswith("Date: Mar 3, 2026 (1 week ago)")
    assert "🟡" not in rendered and "🟢" not in rendered and "[ci, tooling]" not in rendered
    assert "(meaning March 12, 2026 - in 2 days)" in rendered


def test_preamble_states_the_usage_rules() -> None:
    preamble = _build().system_messages[0]
    for phrase in (
        "memory",
        "most recent date",
        '"switched to"',
        "already passed",
        "latest message",
        "<system-reminder>",
        "do not quote it",
    ):
        assert phrase in preamble


def test_stable_block_is_byte_identical_within_a_day() -> None:
    morning = _build(now=MORNING)
    evening = _build(now=EVENING, current_task="Primary: something new", suggested_response=None)
    assert morning.observation_block == evening.observation_block
    assert morning.system_messages[: morning.stable_count] == evening.system_messages[: evening.stable_count]
    assert morning.hints_block != evening.hints_block
    assert "08:00" not in morning.observation_block and "21:30" not in evening.observation_block


def test_stable_block_changes_when_observations_or_day_change() -> None:
    base = _build()
    grown = _build(observations=LOG + "\n* 🔴 (10:02) User asked about rollback")
    next_day = _build(now=datetime(2026, 3, 11, 8, 0, tzinfo=UTC))
    assert grown.observation_block != base.observation_block
    assert grown.system_messages[:2] == base.system_messages[:2]
    assert "(10:02) User asked about rollback" in grown.observation_block
    assert next_day.observation_block != base.observation_block


def test_message_boundaries_give_one_message_per_chunk() -> None:
    log = (
        '<thread id="a">\nDate: Mar 3, 2026\n* 🔴 (09:00) first\n</thread>'
        "\n\n--- message boundary (2026-03-03T09:05:00.000Z) ---\n\n"
        '<thread id="b">\nDate: Mar 3, 2026\n* 🔴 (09:10) second\n</thread>'
    )
    assert split_log_chunks(log) == [
        '<thread id="a">\nDate: Mar 3, 2026\n* 🔴 (09:00) first\n</thread>',
        '<thread id="b">\nDate: Mar 3, 2026\n* 🔴 (09:10) second\n</thread>',
    ]
    ctx = _build(observations=log)
    chunks = ctx.system_messages[2 : ctx.stable_count - 1]
    assert len(chunks) == 2
    assert "message boundary" not in ctx.observation_block
    assert chunks[0].endswith("</thread>") and "second" in chunks[1]


def test_empty_observations_give_no_memory_messages() -> None:
    ctx = _build(observations="  \n ")
    assert ctx.system_messages == []
    assert ctx.observation_block == "" and ctx.hints_block == "" and ctx.continuation_reminder == ""
    assert ctx.is_empty
    raw = [{"role": "user", "content": "hi"}]
    assert ctx.to_openai_messages(raw) == raw


def test_continuation_reminder() -> None:
    ctx = _build()
    reminder = ctx.continuation_reminder
    assert reminder.startswith("<system-reminder>") and reminder.endswith("</system-reminder>")
    for phrase in ("most recent message", "suggested response", "Do not mention memory", "take priority"):
        assert phrase in reminder
    assert "suggested response" not in _build(suggested_response=None).continuation_reminder
    assert _build(has_unobserved_history=False).continuation_reminder == ""


def test_to_openai_messages_order() -> None:
    ctx = _build()
    raw: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What about rollbacks?"},
    ]
    out = ctx.to_openai_messages(raw)
    assert out[0] == raw[0]
    assert [m["content"] for m in out[1 : 1 + len(ctx.system_messages)]] == ctx.system_messages
    assert all(m["role"] == "system" for m in out[1 : 1 + len(ctx.system_messages)])
    assert out[-2] == {"role": "user", "content": ctx.continuation_reminder}
    assert out[-1] == raw[1]
    only_system = ctx.to_openai_messages(raw[:1])
    assert only_system[-1]["role"] == "system"


def test_other_conversations_and_extra_values_stay_out_of_the_stable_block() -> None:
    plain = _build()
    ctx = _build(
        other_conversations='<other-conversation id="t2">\nUser: hello\n</other-conversation>',
        extra_values={"mood": "cheerful"},
        retrieval_guidance="Use the recall tool to read exact wording.",
    )
    volatile = ctx.system_messages[ctx.stable_count :]
    assert volatile[0].startswith("For reference only")
    assert OTHER_CONVERSATIONS_START in volatile[0] and OTHER_CONVERSATIONS_END in volatile[0]
    assert volatile[-1] == "<mood>\ncheerful\n</mood>"
    assert ctx.system_messages[0].endswith("Use the recall tool to read exact wording.")
    assert ctx.system_messages[1 : ctx.stable_count] == plain.system_messages[1 : plain.stable_count]


def test_a_rendered_log_is_reused_until_the_local_date_changes() -> None:
    from om_core.context.actor import RenderedLogCache, _render_stable

    log = "Date: Mar 1, 2026\n* 🔴 (09:00) User said the tent has a broken zip\n* 🟡 (09:05) Assistant: ok"
    cache = RenderedLogCache(1_000_000)
    monday = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
    first = cache.rendered(log, monday, "UTC", None)
    assert first == _render_stable(log, monday, "UTC", None)
    later_that_day = monday.replace(hour=23)
    assert cache.rendered(log, later_that_day, "UTC", None) == first
    next_week = datetime(2026, 3, 9, 8, 0, tzinfo=UTC)
    moved = cache.rendered(log, next_week, "UTC", None)
    assert moved == _render_stable(log, next_week, "UTC", None) and moved != first, "relative dates move"
    first.append("mutated by a caller")
    assert cache.rendered(log, monday, "UTC", None) == _render_stable(log, monday, "UTC", None)


def test_a_grown_log_renders_only_its_new_piece(monkeypatch: pytest.MonkeyPatch) -> None:
    import om_core.context.actor as context

    first = "Date: Mar 1, 2026\n* 🔴 (09:00) User said the tent has a broken zip"
    grown = (
        first
        + "\n\n--- message boundary (2026-03-01T09:30:00Z) ---\n\nDate: Mar 1, 2026\n* 🟡 (09:31) Zip fixed"
    )
    monday = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
    cache = context.RenderedLogCache(1_000_000)
    cache.rendered(first, monday, "UTC", None)
    rendered: list[str] = []
    real = context._render_piece

    def counted(piece: str, now: datetime, tz: str, with_ranges: bool) -> str:
        rendered.append(piece)
        return real(piece, now, tz, with_ranges)

    monkeypatch.setattr(context, "_render_piece", counted)
    assert cache.rendered(grown, monday, "UTC", None) == context._render_stable(grown, monday, "UTC", None)
    assert rendered == ["Date: Mar 1, 2026\n* 🟡 (09:31) Zip fixed"], "only the new piece"
    rendered.clear()
    cache.rendered(grown, datetime(2026, 3, 9, 8, 0, tzinfo=UTC), "UTC", None)
    assert len(rendered) == 2, "another local date renders every piece again"


def test_the_rendered_log_cache_stays_within_its_size() -> None:
    from om_core.context.actor import RenderedLogCache

    cache = RenderedLogCache(max_bytes=24_000)
    now = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
    for i in range(20):
        cache.rendered(f"Date: Mar 1, 2026\n* 🔴 (09:00) fact number {i} " + "x" * 500, now, "UTC", None)
    assert cache.size_bytes <= 24_000 and 0 < len(cache) < 20
