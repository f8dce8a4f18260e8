"""The Observer's user message with attachments spliced in as content parts (behaviour §5.3, §5.5)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from om_core.messages import Message, Part, text_message
from om_core.observer.input import (
    attachment_content,
    forwarding_rule,
    observer_user_content,
    render_histories,
)
from om_core.observer.prompt import build_observer_user_message, render_thread_blocks
from om_core.observer.transcript import render_transcript

T0 = datetime(2026, 3, 3, 9, 0, tzinfo=UTC)
PNG_B64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="


def _user(message_id: str, *parts: Part, minute: int = 0) -> Message:
    return Message(id=message_id, role="user", parts=list(parts), created_at=T0 + timedelta(minutes=minute))


def _single(texts: Sequence[str]) -> str:
    return build_observer_user_message(
        transcript=texts[0],
        previous_observations="* 🔴 (08:00) User likes tea",
        previous_truncated=False,
        prior_current_task="packing",
        prior_suggested_response=None,
        prior_thread_title=None,
        include_hints=True,
    )


def _text(content: Any) -> str:
    return content if isinstance(content, str) else "".join(p["text"] for p in content if p["type"] == "text")


def _chat() -> list[Message]:
    return [
        _user(
            "a",
            Part(type="text", text="Photo of the tent"),
            Part(type="image", data=PNG_B64, filename="tent.jpg"),
        ),
        text_message("b", "assistant", "Nice tent.", T0 + timedelta(minutes=1)),
        _user(
            "c",
            Part(type="file", url="https://x.test/docs/manual.pdf", mime_type="application/pdf"),
            minute=2,
        ),
    ]


def test_nothing_to_forward_leaves_the_message_a_plain_string_as_before() -> None:
    messages = _chat()
    before = _single([render_transcript(messages, "UTC").text])
    content = observer_user_content(render_histories([messages], "UTC"), _single, False)
    assert content == before


def test_each_attachment_follows_the_lines_of_its_message_and_the_text_is_unchanged() -> None:
    messages = _chat()
    content = observer_user_content(render_histories([messages], "UTC"), _single, True)
    assert isinstance(content, list)
    assert [p["type"] for p in content] == ["text", "image_url", "text", "file", "text"]
    assert _text(content) == _single([render_transcript(messages, "UTC").text])
    assert content[0]["text"].endswith("Image: [Image #1: tent.jpg]")
    assert content[1]["image_url"] == {"url": f"data:image/jpeg;base64,{PNG_B64}"}
    assert content[2]["text"].strip().startswith("Assistant") and content[2]["text"].endswith("manual.pdf]")
    assert content[3] == {
        "type": "file",
        "file": {"file_id": "https://x.test/docs/manual.pdf", "format": "application/pdf"},
    }
    assert "## Your Task" in content[4]["text"] and "manual.pdf" not in content[4]["text"]


def test_a_pattern_list_forwards_matching_attachments_only() -> None:
    content = observer_user_content(render_histories([_chat()], "UTC"), _single, ["application/pdf"])
    assert [p["type"] for p in content] == ["text", "file", "text"]
    assert "[Image #1: tent.jpg]" in _text(content)


def test_threads_share_numbering_and_each_attachment_stays_in_its_thread_block() -> None:
    first = [_user("a", Part(type="image", url="https://x.test/one.png"))]
    second = [_user("b", Part(type="text", text="another"), Part(type="image", url="https://x.test/two.png"))]
    histories = render_histories([first, second], "UTC")

    def multi(texts: Sequence[str]) -> str:
        blocks = render_thread_blocks({"t1": texts[0], "t2": texts[1]})
        return build_observer_user_message(
            transcript=blocks,
            previous_observations="",
            previous_truncated=False,
            prior_current_task=None,
            prior_suggested_response=None,
            prior_thread_title=None,
            include_hints=True,
            multi_thread=True,
        )

    content = observer_user_content(histories, multi, True)
    assert [p["type"] for p in content] == ["text", "image_url", "text", "image_url", "text"]
    assert content[0]["text"].endswith("[Image #1: one.png]")
    assert content[2]["text"].startswith("\n</thread>") and content[2]["text"].endswith("[Image #2: two.png]")
    assert content[3]["image_url"]["url"] == "https://x.test/two.png"
    assert _text(content) == multi([h.text for h in histories])


def test_an_attachment_inside_a_tool_result_is_forwarded_after_its_message() -> None:
    result = {"type": "content", "value": [{"type": "image-data", "data": PNG_B64, "mediaType": "image/png"}]}
    tool = Part(
        type="tool-invocation",
        tool_call_id="c1",
        tool_name="screenshot",
        state="result",
        args={},
        result=result,
    )
    messages = [Message(id="a", role="assistant", parts=[tool], created_at=T0)]
    content = observer_user_content(render_histories([messages], "UTC"), _single, ["image/*"])
    assert [p["type"] for p in content] == ["text", "image_url", "text"]
    assert content[1]["image_url"]["url"] == f"data:image/png;base64,{PNG_B64}"
    assert '"attachment": "[Image #1: image/png]"' in content[0]["text"]


def test_an_attachment_without_data_or_url_is_not_sent_and_keeps_its_placeholder() -> None:
    messages = [_user("a", Part(type="file", filename="empty.txt", mime_type="text/plain"))]
    content = observer_user_content(render_histories([messages], "UTC"), _single, True)
    assert isinstance(content, str) and "[File #1: empty.txt]" in content


@pytest.mark.parametrize(
    ("part", "expected"),
    [
        (
            Part(type="image", url="https://x.test/a.png", detail="low"),
            {"url": "https://x.test/a.png", "detail": "low"},
        ),
        (
            Part(type="image", data=f"data:image/gif;base64,{PNG_B64}"),
            {"url": f"data:image/gif;base64,{PNG_B64}"},
        ),
        (Part(type="image", data=PNG_B64), {"url": f"data:image/png;base64,{PNG_B64}"}),
    ],
)
def test_image_sources(part: Part, expected: dict[str, Any]) -> None:
    [ref] = render_transcript([_user("a", part)], "UTC").attachments
    assert attachment_content(ref) == {"type": "image_url", "image_url": expected}


def test_inline_files_travel_as_data_uris_with_their_name() -> None:
    part = Part(type="file", data="JVBERi0=", mime_type="Application/PDF", filename="a.pdf")
    [ref] = render_transcript([_user("a", part)], "UTC").attachments
    assert attachment_content(ref) == {
        "type": "file",
        "file": {
            "file_data": "data:application/pdf;base64,JVBERi0=",
            "filename": "a.pdf",
            "format": "application/pdf",
        },
    }


def test_a_builder_that_drops_or_repeats_a_history_is_refused() -> None:
    histories = render_histories([_chat(), _chat()], "UTC")
    with pytest.raises(ValueError, match="left out"):
        observer_user_content(histories, lambda texts: texts[0], True)
    with pytest.raises(ValueError, match="twice"):
        observer_user_content(histories, lambda texts: texts[0] + texts[0] + texts[1], True)


def test_auto_asks_the_capability_only_for_auto() -> None:
    asked: list[bool] = []

    def knows(answer: bool | None) -> Any:
        def ask() -> bool | None:
            asked.append(True)
            return answer

        return ask

    assert forwarding_rule("auto", knows(True)) is True
    assert forwarding_rule("auto", knows(None)) is True, "no capability data: forward everything"
    assert forwarding_rule("auto", knows(False)) is False
    assert len(asked) == 3
    assert forwarding_rule(["image/*"], knows(False)) == ["image/*"]
    assert forwarding_rule(False, knows(True)) is False
    assert len(asked) == 3
    with pytest.raises(ValueError, match="observeAttachments"):
        forwarding_rule("images", knows(True))
