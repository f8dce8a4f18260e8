"""Observer transcript rendering and attachment forwarding (§5.3, §5.5, §13.9 items 1-3)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from om_core.messages import Message, Part, text_message
from om_core.observer.transcript import (
    TOOL_RESULT_TOKEN_CAP,
    AttachmentCounter,
    AttachmentRef,
    filter_attachments,
    render_transcript,
)
from om_core.tokens import default_estimator

T0 = datetime(2025, 12, 4, 14, 30, tzinfo=UTC)


def _tool(call_id: str, state: str, **fields: Any) -> Part:
    return Part(type="tool-invocation", tool_call_id=call_id, tool_name="search", state=state, **fields)


def _assistant(message_id: str, parts: list[Part], at: datetime = T0) -> Message:
    return Message(id=message_id, role="assistant", parts=parts, created_at=at)


def _render_tool(part: Part) -> str:
    return render_transcript([_assistant("a1", [part])], "UTC").text


# --- lines, dates and times ---------------------------------------------------------------------------


def test_same_minute_messages_show_date_once_and_time_once() -> None:
    # §13.9.1
    messages = [
        text_message("m1", "user", "first", T0),
        text_message("m2", "user", "second", T0 + timedelta(seconds=30)),
    ]
    text = render_transcript(messages, "UTC").text
    assert text == "Dec 4 2025:\nUser (2:30 PM): first\n\nUser: second"


def test_tool_lines_always_show_their_time() -> None:
    # §13.9.1: a tool call and its result in the same minute both carry the time.
    messages = [
        text_message("m1", "user", "find it", T0),
        _assistant("a1", [_tool("c1", "call", args={"q": "x"})], T0),
        _assistant("a2", [_tool("c1", "result", result="found")], T0 + timedelta(seconds=5)),
    ]
    lines = render_transcript(messages, "UTC").text.split("\n")
    assert "Tool Call search (2:30 PM): {" in lines
    assert "Tool Result search (2:30 PM): found" in lines


def test_new_date_prints_a_date_line_and_resets_the_time() -> None:
    messages = [
        text_message("m1", "user", "day one", T0),
        text_message("m2", "assistant", "reply", T0),
        text_message("m3", "user", "day two", T0 + timedelta(days=1)),
    ]
    text = render_transcript(messages, "UTC").text
    assert text == (
        "Dec 4 2025:\nUser (2:30 PM): day one\n\nAssistant: reply\n\nDec 5 2025:\nUser (2:30 PM): day two"
    )


def test_times_and_dates_use_the_given_time_zone() -> None:
    late = datetime(2026, 1, 10, 2, 5, tzinfo=UTC)  # 9:05 PM on Jan 9 in New York
    text = render_transcript([text_message("m1", "user", "hi", late)], "America/New_York").text
    assert text == "Jan 9 2026:\nUser (9:05 PM): hi"


def test_part_timestamps_win_over_the_message_time() -> None:
    message = Message(
        id="a1",
        role="assistant",
        created_at=T0,
        parts=[
            Part(type="text", text="early"),
            Part(type="text", text="later", created_at=T0 + timedelta(minutes=2)),
        ],
    )
    text = render_transcript([message], "UTC").text
    assert text == "Dec 4 2025:\nAssistant (2:30 PM): early\nAssistant (2:32 PM): later"


@pytest.mark.parametrize(
    ("hour", "minute", "label"),
    [(0, 5, "12:05 AM"), (9, 0, "9:00 AM"), (12, 0, "12:00 PM"), (23, 59, "11:59 PM")],
)
def test_twelve_hour_labels(hour: int, minute: int, label: str) -> None:
    at = datetime(2025, 3, 1, hour, minute, tzinfo=UTC)
    assert f"User ({label}): x" in render_transcript([text_message("m", "user", "x", at)], "UTC").text


def test_reasoning_lines_and_skipped_parts() -> None:
    message = _assistant(
        "a1",
        [
            Part(type="step-start", model="openai/gpt-5"),
            Part(type="reasoning", text="weighing options"),
            Part(type="reasoning", text="   "),
            Part(type="data-om-observation-start", data={"cycleId": "c"}),
            Part(type="data-progress", data={"pct": 50}),
            Part(type="text", text="answer"),
        ],
    )
    text = render_transcript([message], "UTC").text
    assert text == "Dec 4 2025:\nReasoning (2:30 PM): weighing options\nAssistant: answer"


def test_message_with_only_data_parts_renders_nothing() -> None:
    messages = [
        text_message("m1", "user", "hello", T0),
        _assistant("a1", [Part(type="data-om-status", data={}), Part(type="step-start")]),
        text_message("m2", "assistant", "hi", T0),
    ]
    assert render_transcript(messages, "UTC").text == "Dec 4 2025:\nUser (2:30 PM): hello\n\nAssistant: hi"


def test_temporal_marker_renders_as_untitled_gap_line() -> None:
    marker = Message(
        id="__temporal_gap_123",
        role="user",
        created_at=datetime(2025, 12, 4, 17, 29, 59, 999000, tzinfo=UTC),
        parts=[
            Part(
                type="text",
                text='<system-reminder type="temporal-gap" precedesMessageId="m2">3 hours later — '
                "12/04/2025, 5:30 PM UTC</system-reminder>",
            )
        ],
        metadata={"reminderType": "temporal-gap", "gapText": "3 hours later"},
    )
    messages = [
        text_message("m1", "user", "before", T0),
        marker,
        text_message("m2", "user", "after", datetime(2025, 12, 4, 17, 30, tzinfo=UTC)),
    ]
    lines = render_transcript(messages, "UTC").text.split("\n")
    assert "(5:29 PM): 3 hours later" in lines
    assert "User (5:30 PM): after" in lines
    assert not any("system-reminder" in line for line in lines)


def test_temporal_marker_gap_text_falls_back_to_the_reminder_text() -> None:
    marker = Message(
        id="__temporal_gap_9",
        role="user",
        created_at=T0,
        parts=[
            Part(type="text", text='<system-reminder type="temporal-gap">2 days later — x</system-reminder>')
        ],
    )
    assert render_transcript([marker], "UTC").text == "Dec 4 2025:\n(2:30 PM): 2 days later"


def test_runtime_reminders_are_never_labelled_as_the_user() -> None:
    reminder = text_message("r1", "user", "<system-reminder>keep answers short</system-reminder>", T0)
    flagged = Message(
        id="r2",
        role="user",
        created_at=T0,
        parts=[Part(type="text", text="continue")],
        metadata={"systemReminder": {"type": "x"}},
    )
    text = render_transcript([reminder, flagged], "UTC").text
    assert text == "Dec 4 2025:\nsystem-reminder (2:30 PM): keep answers short\n\nsystem-reminder: continue"


@pytest.mark.parametrize(
    ("signal", "title"),
    [
        ({"type": "user"}, "User"),
        ({"type": "state", "tagName": "working-memory"}, "working-memory"),
        ("alert", "alert"),
    ],
)
def test_signal_messages_take_the_signal_name(signal: Any, title: str) -> None:
    message = Message(
        id="s1", role="user", created_at=T0, parts=[Part(type="text", text="x")], metadata={"signal": signal}
    )
    assert render_transcript([message], "UTC").text == f"Dec 4 2025:\n{title} (2:30 PM): x"


def test_part_char_cap_cuts_text_and_reports_the_cut() -> None:
    message = text_message("m1", "user", "a" * 520, T0)
    text = render_transcript([message], "UTC", part_char_cap=500).text
    assert text.endswith("User (2:30 PM): " + "a" * 500 + "\n... [truncated 20 characters]")


# --- tools --------------------------------------------------------------------------------------------


def test_tool_call_and_result_are_deduplicated_across_messages() -> None:
    messages = [
        _assistant("a1", [_tool("c1", "call", args={"q": "x"})]),
        _assistant("a2", [_tool("c1", "call", args={"q": "x"}), _tool("c1", "result", result={"n": 1})]),
        _assistant("a3", [_tool("c1", "result", result={"n": 1})]),
    ]
    text = render_transcript(messages, "UTC").text
    assert text.count("Tool Call search") == 1
    assert text.count("Tool Result search") == 1
    assert 'Tool Result search (2:30 PM): {\n  "n": 1\n}' in text


def test_a_single_terminal_part_prints_call_and_result() -> None:
    text = _render_tool(_tool("c1", "result", args={"q": 1}, result=[1, 2]))
    assert text == (
        'Dec 4 2025:\nTool Call search (2:30 PM): {\n  "q": 1\n}\n'
        "Tool Result search (2:30 PM): [\n  1,\n  2\n]"
    )


@pytest.mark.parametrize(
    ("part", "line"),
    [
        (_tool("c1", "call"), "Tool Call search (2:30 PM): [arguments unavailable]"),
        (_tool("c1", "output-error", args={}), "Tool Error search (2:30 PM): Tool execution failed"),
        (_tool("c1", "output-error", args={}, error_text="timeout"), "Tool Error search (2:30 PM): timeout"),
        (
            _tool("c1", "output-denied", args={}),
            "Tool Denied search (2:30 PM): Tool call was not approved by the user",
        ),
        (_tool("c1", "output-denied", args={}, approval_reason="no"), "Tool Denied search (2:30 PM): no"),
        (_tool("c1", "result", args={}, result=""), "Tool Result search (2:30 PM): [empty result]"),
        (_tool("c1", "result", args={}, result={}), "Tool Result search (2:30 PM): [empty result]"),
        (_tool("c1", "result", args={}, result="plain text"), "Tool Result search (2:30 PM): plain text"),
    ],
)
def test_tool_outcomes(part: Part, line: str) -> None:
    assert line in render_transcript([_assistant("a1", [part])], "UTC").text.split("\n")


def test_intermediate_tool_states_print_nothing_more() -> None:
    messages = [
        _assistant("a1", [_tool("c1", "partial-call", args={"q": "x"})]),
        _assistant("a2", [_tool("c1", "approval-requested", args={"q": "x"})]),
    ]
    text = render_transcript(messages, "UTC").text
    assert text.count("Tool ") == 1


def test_large_tool_results_are_truncated_with_the_default_estimate() -> None:
    result = "r" * 50_000  # 12 500 tokens at len/4
    text = render_transcript([_assistant("a1", [_tool("c1", "result", args={}, result=result)])], "UTC").text
    body = text.split("Tool Result search (2:30 PM): ", 1)[1]
    assert body == "r" * 40_000 + "\n... [truncated ~2500 tokens]"


def test_large_tool_results_are_truncated_with_the_given_counter() -> None:
    def words(text: str) -> int:
        return len(text.split())

    result = " ".join(["w"] * 10_050)
    text = render_transcript(
        [_assistant("a1", [_tool("c1", "result", args={}, result=result)])], "UTC", counter=words
    ).text
    body = text.split("Tool Result search (2:30 PM): ", 1)[1]
    kept, suffix = body.rsplit("\n", 1)
    assert words(kept) == 10_000
    assert suffix == "... [truncated ~50 tokens]"


def _tool_results() -> dict[str, str]:
    rows = [
        {"id": i, "name": f"item {i}", "tags": ["alpha", "beta"], "price": i * 1.25} for i in range(1_400)
    ]
    prose = " ".join(
        f"Sentence {i} talks about harbors, lanterns and the {i % 7}th copper meadow." for i in range(5_000)
    )
    return {
        "json": json.dumps(rows, indent=2),
        "prose": prose,
        "cjk and emoji": "東京の天気は晴れです。🌤️ " * 6_000,
        "one repeated letter": "r" * 120_000,
        "digits": "".join(str(i) for i in range(40_000)),
    }


@pytest.mark.parametrize("kind", list(_tool_results()))
def test_the_tool_result_cut_is_the_largest_prefix_within_the_cap_in_a_few_counts(kind: str) -> None:
    """The search interpolates: it needs a handful of counts of a 10k-token prefix where bisection needs
    ~17, and cuts where one more character would pass the cap."""
    result = _tool_results()[kind]
    estimator = default_estimator()
    calls: list[int] = []

    def counting(text: str) -> int:
        calls.append(len(text))
        return estimator(text)

    rendered = render_transcript(
        [_assistant("a1", [_tool("c1", "result", args={}, result=result)])], "UTC", counter=counting
    ).text
    kept = rendered.split("Tool Result search (2:30 PM): ", 1)[1].rsplit("\n... [truncated ~", 1)[0]
    assert result.startswith(kept)
    assert estimator(kept) <= TOOL_RESULT_TOKEN_CAP < estimator(result[: len(kept) + 1])
    probes = len(calls) - 1  # the whole result is counted once first
    assert probes <= 8, f"{probes} prefix counts"


def test_results_under_the_cap_are_untouched() -> None:
    result = "r" * 40_000
    text = render_transcript([_assistant("a1", [_tool("c1", "result", args={}, result=result)])], "UTC").text
    assert text.endswith("r" * 40_000)


def test_long_encrypted_content_is_stripped_short_is_kept() -> None:
    result = {"items": [{"encryptedContent": "e" * 300}, {"encryptedContent": "short"}]}
    args = {"encryptedContent": "a" * 257}
    text = _render_tool(_tool("c1", "result", args=args, result=result))
    assert "[stripped encryptedContent: 300 characters]" in text
    assert "[stripped encryptedContent: 257 characters]" in text
    assert '"encryptedContent": "short"' in text
    assert "e" * 300 not in text


# --- attachments --------------------------------------------------------------------------------------


def _attachment_messages() -> list[Message]:
    user = Message(
        id="u1",
        role="user",
        created_at=T0,
        parts=[
            Part(type="image", data="iVBORw0KGgo=", mime_type="image/png", filename="photo.png"),
            Part(type="file", data="JVBERi0=", mime_type="application/pdf", filename="report.pdf"),
            Part(type="text", text="what do you see?"),
        ],
    )
    tool_result = {
        "type": "content",
        "value": [
            {"type": "text", "text": "screenshot taken"},
            {"type": "image-data", "data": "iVBORw0KGgo=", "mediaType": "image/png"},
        ],
    }
    assistant = _assistant("a1", [_tool("c1", "result", args={"url": "x"}, result=tool_result)])
    return [user, assistant]


def test_placeholders_are_numbered_per_kind() -> None:
    # §13.9.2
    transcript = render_transcript(_attachment_messages(), "UTC")
    text = transcript.text
    assert "Image (2:30 PM): [Image #1: photo.png]" in text
    assert "File: [File #1: report.pdf]" in text
    assert '"attachment": "[Image #2: image/png]"' in text
    assert [ref.placeholder for ref in transcript.attachments] == [
        "[Image #1: photo.png]",
        "[File #1: report.pdf]",
        "[Image #2: image/png]",
    ]
    tool_ref = transcript.attachments[2]
    assert tool_ref.block is not None and tool_ref.part is None and tool_ref.tool_call_id == "c1"


@pytest.mark.parametrize(
    ("setting", "forwarded"),
    [
        (True, ["[Image #1: photo.png]", "[File #1: report.pdf]", "[Image #2: image/png]"]),
        ("auto", ["[Image #1: photo.png]", "[File #1: report.pdf]", "[Image #2: image/png]"]),
        (False, []),
        ([], []),
        (["image/*"], ["[Image #1: photo.png]", "[Image #2: image/png]"]),
        (["IMAGE/*"], ["[Image #1: photo.png]", "[Image #2: image/png]"]),
        (["application/pdf"], ["[File #1: report.pdf]"]),
        (["*"], ["[Image #1: photo.png]", "[File #1: report.pdf]", "[Image #2: image/png]"]),
        (["*/*"], ["[Image #1: photo.png]", "[File #1: report.pdf]", "[Image #2: image/png]"]),
        (["image/jpeg", "text/plain"], []),
    ],
)
def test_observe_attachments_filter(setting: Any, forwarded: list[str]) -> None:
    transcript = render_transcript(_attachment_messages(), "UTC")
    assert [ref.placeholder for ref in filter_attachments(transcript.attachments, setting)] == forwarded
    # Placeholders stay in the transcript whatever is forwarded.
    assert "[File #1: report.pdf]" in transcript.text


def test_filter_rejects_unknown_strings() -> None:
    with pytest.raises(ValueError):
        filter_attachments([], "image/*")


def test_file_with_image_url_data_and_no_mime_is_image_like() -> None:
    # §13.9.3
    message = Message(id="u1", role="user", created_at=T0, parts=[Part(type="file", data="https://x/a.JPG")])
    transcript = render_transcript([message], "UTC")
    assert transcript.text == "Dec 4 2025:\nImage (2:30 PM): [Image #1: a.JPG]"
    ref = transcript.attachments[0]
    assert ref.kind == "image"
    assert ref.filter_mime_type == "image/*"
    assert filter_attachments([ref], ["image/*"]) == [ref]


@pytest.mark.parametrize(
    ("part", "placeholder", "filter_mime"),
    [
        (Part(type="file", data="data:image/webp;base64,AAAA"), "[Image #1: image/webp]", "image/webp"),
        (
            Part(type="file", url="https://h/docs/My%20Report.pdf"),
            "[File #1: My Report.pdf]",
            "application/octet-stream",
        ),
        (Part(type="file", data="AAAA", filename="scan.HEIC"), "[Image #1: scan.HEIC]", "image/*"),
        (Part(type="file", data="AAAA", mime_type="text/csv"), "[File #1: text/csv]", "text/csv"),
        (Part(type="file", data="AAAA"), "[File #1]", "application/octet-stream"),
        (Part(type="image", data="AAAA"), "[Image #1]", "image/*"),
        (Part(type="image", url="https://h/img/"), "[Image #1]", "image/*"),
    ],
)
def test_labels_and_mime_types(part: Part, placeholder: str, filter_mime: str) -> None:
    message = Message(id="u1", role="user", created_at=T0, parts=[part])
    transcript = render_transcript([message], "UTC")
    assert transcript.text.endswith(placeholder)
    assert transcript.attachments[0].filter_mime_type == filter_mime


def test_attachment_offsets_point_after_their_message() -> None:
    messages = [*_attachment_messages(), text_message("m3", "user", "thanks", T0)]
    transcript = render_transcript(messages, "UTC")
    user_end = transcript.text.index("what do you see?") + len("what do you see?")
    assert [ref.text_offset for ref in transcript.attachments[:2]] == [user_end, user_end]
    tool_end = transcript.text.index("\n\nUser: thanks")
    assert transcript.attachments[2].text_offset == tool_end


def test_unavailable_attachment_urls_are_not_forwarded() -> None:
    message = Message(
        id="u1",
        role="user",
        created_at=T0,
        parts=[Part(type="image", url="https://h/gone.png"), Part(type="image", url="https://h/ok.png")],
        metadata={"mastra": {"unavailableAttachments": [{"url": "https://h/gone.png"}]}},
    )
    transcript = render_transcript([message], "UTC")
    assert "[Image #1: gone.png]" in transcript.text
    assert [ref.placeholder for ref in transcript.attachments] == ["[Image #2: ok.png]"]


def test_numbering_continues_across_transcripts_of_one_call() -> None:
    numbers = AttachmentCounter()
    first = render_transcript(_attachment_messages(), "UTC", attachment_counter=numbers)
    second = render_transcript(_attachment_messages(), "UTC", attachment_counter=numbers)
    assert first.attachments[-1].placeholder == "[Image #2: image/png]"
    assert [ref.placeholder for ref in second.attachments] == [
        "[Image #3: photo.png]",
        "[File #2: report.pdf]",
        "[Image #4: image/png]",
    ]


def test_tool_result_attachment_kinds() -> None:
    result = {
        "files": [
            {"type": "file-url", "url": "https://h/chart.png"},
            {"type": "file-data", "data": "AAAA", "mediaType": "application/zip", "filename": "a.zip"},
            {"type": "media", "data": "AAAA", "mediaType": "audio/mpeg"},
            {"type": "image-url", "url": "https://h/pic"},
        ]
    }
    transcript = render_transcript([_assistant("a1", [_tool("c1", "result", args={}, result=result)])], "UTC")
    body = json.loads(transcript.text.split("Tool Result search (2:30 PM): ", 1)[1])
    assert [item["attachment"] for item in body["files"]] == [
        "[Image #1: chart.png]",
        "[File #1: a.zip]",
        "[File #2: audio/mpeg]",
        "[Image #2: pic]",
    ]
    assert all(isinstance(ref, AttachmentRef) for ref in transcript.attachments)
    assert [ref.filter_mime_type for ref in filter_attachments(transcript.attachments, ["image/*"])] == [
        "image/*",
        "image/*",
    ]
