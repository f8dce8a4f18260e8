"""Token counting (behaviour §7, test cases §13.10) plus the service's own additions.

Everything except the tiktoken section uses the spec's deterministic estimator `ceil(len(s) / 4)`.
"""

from __future__ import annotations

import base64
import json
import math
import os
import struct
import subprocess
import sys
from typing import Any

import pytest

from om_core.messages import Message, Part, text_message
from om_core.tokens import (
    CACHE_VERSION,
    CharRatioEstimator,
    PartCount,
    TextEstimator,
    TiktokenEstimator,
    TokenCounter,
    ensure_offline_tiktoken_cache,
    estimator_source,
    file_tokens,
    image_dimensions,
    image_tokens,
    is_image_like_file,
    model_context,
    round_half_up,
)
from om_core.tokens import counter as counter_module
from om_core.tokens.attachments import normalize_mime
from om_core.tokens.body import classify_body


def est(s: str) -> int:
    return math.ceil(len(s) / 4)


@pytest.fixture
def counter() -> TokenCounter:
    return TokenCounter(CharRatioEstimator())


def msg(role: Any, *parts: Part) -> Message:
    return Message(id="m", role=role, parts=list(parts))


def tool(state: Any, **fields: Any) -> Part:
    fields.setdefault("tool_name", "search")
    fields.setdefault("tool_call_id", "call-1")
    return Part(type="tool-invocation", state=state, **fields)


def estimate_entry(part: Part) -> Any:
    return (part.provider_metadata or {}).get("om", {}).get("tokenEstimate")


# ---------------------------------------------------------------------------------------------------
# image bytes built by hand (headers only; the parser never reads past them)


def png(width: int, height: int) -> bytes:
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + ihdr + b"\0\0\0\0" + b"\0" * 32


def gif(width: int, height: int) -> bytes:
    return b"GIF89a" + struct.pack("<HH", width, height) + b"\0" * 16


def jpeg(width: int, height: int, padding_segments: int = 0) -> bytes:
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\0" + b"\0" * 9
    # Big APPn segments (EXIF/ICC) push the frame header far into the file.
    padding = (b"\xff\xe1" + struct.pack(">H", 60_002) + b"\0" * 60_000) * padding_segments
    sof0 = b"\xff\xc0" + struct.pack(">HBHHB", 17, 8, height, width, 3) + b"\0" * 9
    return b"\xff\xd8" + app0 + padding + sof0 + b"\xff\xd9"


def webp_vp8x(width: int, height: int) -> bytes:
    body = b"VP8X" + struct.pack("<I", 10) + b"\0\0\0\0" + (width - 1).to_bytes(3, "little")
    body += (height - 1).to_bytes(3, "little")
    return b"RIFF" + struct.pack("<I", len(body) + 4) + b"WEBP" + body


def webp_vp8l(width: int, height: int) -> bytes:
    bits = (width - 1) | ((height - 1) << 14)
    body = b"VP8L" + struct.pack("<I", 5) + b"\x2f" + struct.pack("<I", bits)
    return b"RIFF" + struct.pack("<I", len(body) + 4) + b"WEBP" + body


def webp_vp8(width: int, height: int) -> bytes:
    body = b"VP8 " + struct.pack("<I", 10) + b"\0\0\0" + b"\x9d\x01\x2a" + struct.pack("<HH", width, height)
    return b"RIFF" + struct.pack("<I", len(body) + 4) + b"WEBP" + body


def bmp(width: int, height: int) -> bytes:
    return b"BM" + b"\0" * 12 + struct.pack("<Iii", 40, width, -height) + b"\0" * 24


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# ---------------------------------------------------------------------------------------------------
# §13.10.1–3: messages, conversations, rounding


def test_single_text_message_is_role_plus_text_plus_framing(counter: TokenCounter) -> None:
    m = text_message("1", "user", "abcdefghij" * 4)
    # role 1 + text 10 + 3.8 = 14.8 -> 15
    assert counter.count_message(m) == 15


def test_conversation_adds_24_once_and_empty_is_zero(counter: TokenCounter) -> None:
    m = text_message("1", "user", "abcdefghij" * 4)
    assert counter.count_messages([m, m]) == 24 + 15 + 15
    assert counter.count_messages([]) == 0


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (14.5, 15),
        (14.4, 14),
        (14.6, 15),
        (15.5, 16),
        (0.5, 1),
        (0.0, 0),
        (2.5, 3),
        (-14.5, -15),
        (-0.4, 0),
        # the largest double below 0.5: adding 0.5 first rounds it up to 1.0 (one of the old helpers did)
        (0.49999999999999994, 0),
        (-0.49999999999999994, 0),
        (1.4999999999999998, 1),
        (4503599627370495.5, 4503599627370496),
    ],
)
def test_round_half_up_rounds_ties_away_from_zero(value: float, expected: int) -> None:
    assert round_half_up(value) == expected


def test_configuration_policy_and_durations_round_with_the_one_helper() -> None:
    """Three helpers once disagreed at 0.49999999999999994; every rounding now goes through one."""
    from om_core.config import durations, options
    from om_core.policy import decisions
    from om_core.tokens import rounding

    one = rounding.round_half_up
    assert options.round_half_up is durations.round_half_up is decisions.round_half_up is one
    assert durations.parse_duration_ms("0.0005s", field="activateAfterIdle") == 1


def test_round_half_up_differs_from_builtin_round_on_even_ties() -> None:
    assert round(14.5) == 14  # the behaviour we must not inherit
    assert round_half_up(14.5) == 15


def test_count_string_handles_empty_and_none(counter: TokenCounter) -> None:
    assert counter.count_string(None) == 0
    assert counter.count_string("") == 0
    assert counter.count_string("abcde") == 2


# ---------------------------------------------------------------------------------------------------
# §13.10.4: parts that are never counted nor cached


@pytest.mark.parametrize(
    "part",
    [
        Part(type="data-om-status", data={"tokens": 1234, "threshold": 30000}),
        Part(type="reasoning", text="thinking " * 500),
        Part(type="data-custom", data="payload " * 100),
    ],
)
def test_data_and_reasoning_parts_count_zero_and_write_nothing(counter: TokenCounter, part: Part) -> None:
    assert counter.count_part(part) == PartCount(0.0, 0.0, 0)
    assert part.provider_metadata is None
    assert counter.cache_hits == counter.cache_misses == 0


def test_message_with_only_non_content_parts_is_role_plus_framing(counter: TokenCounter) -> None:
    m = msg("assistant", Part(type="reasoning", text="x" * 400), Part(type="data-om-status", data={}))
    assert counter.count_message(m) == round_half_up(est("assistant") + 3.8)


# ---------------------------------------------------------------------------------------------------
# §13.10.5 and the §7.2 table: tool invocations


def test_tool_result_object_adds_a_framed_message_and_the_json_adjustment(counter: TokenCounter) -> None:
    result = {"hits": ["a", "b"], "total": 2}
    part = tool("result", args={"q": "x"}, result=result)
    pretty = json.dumps(result, indent=2)
    assert counter.count_part(part) == PartCount(est(pretty), -12.0, 1)
    m = msg("assistant", part)
    assert counter.count_message(m) == round_half_up(est("assistant") + est(pretty) + 3.8 + 3.8 - 12)


def test_tool_result_string_is_counted_as_is_without_adjustment(counter: TokenCounter) -> None:
    part = tool("result", args={"q": "x"}, result="plain text result")
    assert counter.count_part(part) == PartCount(est("plain text result"), 0.0, 1)


@pytest.mark.parametrize(
    ("part", "expected"),
    [
        (tool("call", args={"q": "cats"}), PartCount(est("search") + est('{"q":"cats"}'), -12.0, 0)),
        (tool("partial-call", args='{"q": "ca'), PartCount(est("search") + est('{"q": "ca'), 0.0, 0)),
        (tool("call"), PartCount(est("search"), 0.0, 0)),
        (tool("approval-requested", args={"q": "x"}), PartCount(est("search") + est('{"q":"x"}'), -12.0, 0)),
        (
            tool("approval-responded", args={"q": "x"}, approval_reason="looks safe to me"),
            PartCount(est("search") + est('{"q":"x"}') + est("looks safe to me"), -12.0, 1),
        ),
        (tool("approval-responded", args="raw"), PartCount(est("search") + est("raw"), 0.0, 1)),
        (tool("output-denied"), PartCount(est("Tool call was not approved by the user"), 0.0, 1)),
        (tool("output-denied", approval_reason="no"), PartCount(est("no"), 0.0, 1)),
        (tool("output-error"), PartCount(est("Tool execution failed"), 0.0, 1)),
        (tool("output-error", error_text="timeout after 30s"), PartCount(est("timeout after 30s"), 0.0, 1)),
    ],
)
def test_tool_invocation_states_follow_the_table(
    counter: TokenCounter, part: Part, expected: PartCount
) -> None:
    assert counter.count_part(part) == expected


def test_model_output_is_counted_instead_of_the_raw_result(counter: TokenCounter) -> None:
    model_output = {"type": "text", "value": "short summary"}
    part = tool(
        "result",
        result={"huge": "x" * 10_000},
        provider_metadata={"mastra": {"modelOutput": model_output}},
    )
    assert counter.count_part(part) == PartCount(est(json.dumps(model_output, indent=2)), -12.0, 1)


def test_long_encrypted_content_is_stripped_short_is_kept(counter: TokenCounter) -> None:
    long_blob = {"summary": "s", "encryptedContent": "e" * 300}
    short_blob = {"summary": "s", "encryptedContent": "e" * 200}
    long_part = tool("result", result={"items": [long_blob]})
    short_part = tool("result", result={"items": [short_blob]})
    assert counter.count_part(long_part).tokens == est(json.dumps({"items": [{"summary": "s"}]}, indent=2))
    assert counter.count_part(short_part).tokens == est(json.dumps({"items": [short_blob]}, indent=2))
    assert long_part.result["items"][0]["encryptedContent"] == "e" * 300  # the part itself is untouched


def test_multimodal_tool_result_counts_blocks_not_base64(counter: TokenCounter) -> None:
    image_data = b64(png(1024, 1024)) + "A" * 40_000
    result = {
        "type": "content",
        "value": [
            {"type": "text", "text": "Screenshot of the page"},
            {"type": "media", "data": image_data, "mediaType": "image/png"},
            {"type": "custom", "x": 1},
        ],
    }
    part = tool("result", result=result)
    count = counter.count_part(part, model="openai/gpt-4o")
    expected = est("Screenshot of the page") + 765 + est('{"type":"custom","x":1}')
    assert count == PartCount(expected, -12.0, 1)


def test_multimodal_content_array_honours_client_estimate_and_files(counter: TokenCounter) -> None:
    client = {"mastra": {"tokenEstimate": {"v": 0, "source": "client", "key": "client", "tokens": 42}}}
    audio = b64(b"\0" * 4000)
    result = {
        "content": [
            {"type": "image", "data": "AAAA", "mimeType": "image/png", "providerOptions": client},
            {"type": "audio", "data": audio, "mimeType": "audio/wav"},
        ],
        "isError": False,
    }
    assert counter.count_part(tool("result", result=result)).tokens == 42 + 1000


def test_result_without_attachments_is_plain_json_even_with_content_array(counter: TokenCounter) -> None:
    result = {"content": [{"type": "text", "text": "only text"}]}
    assert counter.count_part(tool("result", result=result)).tokens == est(json.dumps(result, indent=2))


def test_other_parts_are_counted_as_their_json(counter: TokenCounter) -> None:
    part = Part(type="step-start", model="openai/gpt-4o", seq=7)
    expected = est('{"type":"step-start","model":"openai/gpt-4o"}')
    assert counter.count_part(part) == PartCount(expected, 0.0, 0)
    # The cache entry written by the first count must not change the second count.
    assert counter.count_part(part) == PartCount(expected, 0.0, 0)
    assert counter.cache_hits == 1


# ---------------------------------------------------------------------------------------------------
# §13.10.6: client-provided estimates


CLIENT_ENTRY = {"v": 0, "source": "client", "key": "client", "tokens": 100_000}


@pytest.mark.parametrize("namespace", ["mastra", "om"])
def test_client_estimate_on_file_part_is_used_verbatim(counter: TokenCounter, namespace: str) -> None:
    part = Part(
        type="file",
        data="storage://bucket/large-report.pdf",
        mime_type="application/pdf",
        filename="large-report.pdf",
        provider_metadata={namespace: {"tokenEstimate": dict(CLIENT_ENTRY)}},
    )
    assert counter.count_part(part).tokens == 100_000
    assert counter.count_message(msg("user", part)) == round_half_up(1 + 100_000 + 3.8)
    assert part.provider_metadata == {namespace: {"tokenEstimate": CLIENT_ENTRY}}


def test_client_estimate_in_a_map_on_image_part(counter: TokenCounter) -> None:
    entries = {"client": {"v": 0, "source": "client", "key": "client", "tokens": 7.5}}
    part = Part(type="image", data="AAAA", provider_metadata={"mastra": {"tokenEstimate": entries}})
    assert counter.count_part(part).tokens == 7.5


@pytest.mark.parametrize("tokens", [-1, float("inf"), float("nan"), "12", True])
def test_invalid_client_estimates_are_ignored(counter: TokenCounter, tokens: Any) -> None:
    entry = {"v": 0, "source": "client", "key": "client", "tokens": tokens}
    part = Part(type="image", width=100, height=100, provider_metadata={"mastra": {"tokenEstimate": entry}})
    assert counter.count_part(part, model="openai/gpt-4o").tokens == 85


def test_client_estimate_on_text_part_is_ignored_and_kept(counter: TokenCounter) -> None:
    part = Part(
        type="text", text="hello world, again", provider_metadata={"om": {"tokenEstimate": CLIENT_ENTRY}}
    )
    assert counter.count_part(part).tokens == est("hello world, again")
    stored = estimate_entry(part)
    assert stored["client"] == CLIENT_ENTRY  # never overwritten, now alongside our own entry
    assert len(stored) == 2


def test_client_estimate_on_tool_part_is_ignored(counter: TokenCounter) -> None:
    part = tool("result", result="r" * 40, provider_metadata={"mastra": {"tokenEstimate": CLIENT_ENTRY}})
    assert counter.count_part(part).tokens == 10


# ---------------------------------------------------------------------------------------------------
# §13.10.7: image heuristics


@pytest.mark.parametrize(
    ("model", "dims", "byte_size", "detail", "resolution", "expected"),
    [
        # the spec's worked examples
        ("openai/gpt-4o", (1024, 1024), None, None, None, 765),
        ("anthropic/claude-sonnet-4", (1000, 1000), None, None, None, 1334),
        ("google/gemini-3-pro-preview", None, None, None, None, 1120),
        ("google/gemini-2.5-flash", (1536, 768), None, None, None, 516),
        # OpenAI detail resolution
        ("openai/gpt-4o", (1024, 1024), None, "low", None, 85),
        ("openai/gpt-4o", (512, 512), None, "auto", None, 85),
        ("openai/gpt-4o", (512, 512), None, "high", None, 85 + 170),
        ("openai/gpt-4o", (4096, 2048), None, "high", None, 85 + 6 * 170),  # 2048x1024 -> 1536x768
        ("openai/gpt-4o", None, 2 * 1024 * 1024, None, None, 85 + 4 * 170),  # auto -> high by size
        ("openai/gpt-4o", None, 1024 * 1024, None, None, 85),  # exactly 1 MiB stays low
        ("openai/gpt-4o", None, 3 * 1024 * 1024, "high", None, 85 + 6 * 170),
        ("openai/gpt-4o", None, 5 * 1024 * 1024, "high", None, 85 + 8 * 170),
        ("openai/gpt-4o", None, 100, "high", None, 85 + 170),
        ("openai/gpt-4o", None, None, None, None, 85),
        ("openai/gpt-4o", None, None, "high", None, 85 + 4 * 170),
        ("openai/gpt-4o", (1024, 1024), None, "whatever", None, 765),
        # OpenAI model families
        ("openai/gpt-5-mini", (1024, 1024), None, None, None, 70 + 4 * 140),
        ("openai/gpt-4o-mini", (1024, 1024), None, None, None, 2833 + 4 * 5667),
        ("openai/gpt-4o-mini", None, None, "high", None, 2833 + 5667),
        ("openai/o3", (1024, 1024), None, None, None, 75 + 4 * 150),
        ("openai/o1-preview", None, None, "high", None, 75 + 4 * 150),
        ("openai/computer-use-preview", (1024, 1024), None, None, None, 65 + 4 * 129),
        (None, (1024, 1024), None, None, None, 765),
        ("azure/gpt-4o", (1024, 1024), None, None, None, 765),
        # Anthropic
        ("anthropic/claude-sonnet-4", (3136, 1568), None, None, None, math.ceil(1568 * 784 / 750)),
        ("anthropic/claude-sonnet-4", (1, 1), None, None, None, 1),
        ("anthropic/claude-sonnet-4", None, 512 * 1024, None, None, 341),
        ("anthropic/claude-sonnet-4", None, 2 * 1024 * 1024, None, None, 1366),
        ("anthropic/claude-sonnet-4", None, 4 * 1024 * 1024, None, None, 2048),
        ("anthropic/claude-sonnet-4", None, 4 * 1024 * 1024 + 1, None, None, 2731),
        ("anthropic/claude-sonnet-4", None, None, None, None, 1600),
        ("bedrock/anthropic.claude-3-5-sonnet", None, None, None, None, 1600),
        # Google
        ("google/gemini-3-pro-preview", (4000, 4000), None, None, "low", 280),
        ("google/gemini-3-flash", None, None, None, "medium", 560),
        ("google/gemini-3-flash", None, None, None, "high", 1120),
        ("google/gemini-3-flash", None, None, None, "ultra_high", 2240),
        ("google/gemini-3-flash", None, None, None, "unspecified", 1120),
        ("google/gemini-2.5-flash", None, None, None, None, 258),
        ("vertex_ai/gemini-2.5-pro", (769, 769), None, None, None, 4 * 258),
        ("gemini-2.0-flash", (300, 300), None, None, None, 258),
    ],
)
def test_image_heuristics(
    model: str | None,
    dims: tuple[int, int] | None,
    byte_size: int | None,
    detail: str | None,
    resolution: str | None,
    expected: int,
) -> None:
    assert image_tokens(model_context(model), dims, byte_size, detail, resolution) == expected


def test_image_part_with_dimensions_uses_the_model_heuristic(counter: TokenCounter) -> None:
    part = Part(type="image", url="https://example.com/a.png", width=1000, height=1000)
    assert counter.count_part(part, model="openai/gpt-4o").tokens == 765
    assert counter.count_part(part, model="anthropic/claude-sonnet-4").tokens == 1334
    assert counter.count_part(part, model="google/gemini-2.5-flash").tokens == 4 * 258
    assert counter.count_part(part).tokens == 765  # no model: OpenAI defaults


def test_detail_and_resolution_are_read_from_part_and_provider_metadata(counter: TokenCounter) -> None:
    low = Part(type="image", width=1024, height=1024, detail="low")
    meta_low = Part(
        type="image", width=1024, height=1024, provider_metadata={"openai": {"imageDetail": "low"}}
    )
    om_low = Part(type="image", width=1024, height=1024, provider_metadata={"om": {"imageDetail": "low"}})
    gemini_low = Part(type="image", provider_metadata={"google": {"mediaResolution": "MEDIA_RESOLUTION_LOW"}})
    for part in (low, meta_low, om_low):
        assert counter.count_part(part, model="openai/gpt-4o").tokens == 85
    assert counter.count_part(gemini_low, model="google/gemini-3-pro-preview").tokens == 280


def test_dimensions_from_om_or_mastra_metadata(counter: TokenCounter) -> None:
    stored = Part(
        type="image", provider_metadata={"mastra": {"imageDimensions": {"width": 1000, "height": 1000}}}
    )
    pair = Part(type="image", provider_metadata={"om": {"imageWidth": 1000, "imageHeight": 1000}})
    for part in (stored, pair):
        assert counter.count_part(part, model="anthropic/claude-sonnet-4").tokens == 1334


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (png(2048, 1024), (2048, 1024)),
        (gif(320, 200), (320, 200)),
        (jpeg(1600, 900), (1600, 900)),
        (webp_vp8x(3000, 2000), (3000, 2000)),
        (webp_vp8l(640, 480), (640, 480)),
        (webp_vp8(800, 600), (800, 600)),
        (bmp(100, 50), (100, 50)),
        (b"not an image at all", None),
        (png(2048, 1024)[:20], None),  # truncated header
        (b"", None),
    ],
)
def test_image_header_dimensions(data: bytes, expected: tuple[int, int] | None) -> None:
    assert image_dimensions(data) == expected


@pytest.mark.parametrize(
    "data",
    [
        b64(png(2048, 1024)),
        "data:image/png;base64," + b64(png(2048, 1024)),
        base64.urlsafe_b64encode(png(2048, 1024)).decode(),
    ],
)
def test_image_part_dimensions_are_decoded_and_persisted(counter: TokenCounter, data: str) -> None:
    part = Part(type="image", data=data)
    # 2048x1024 high -> short side 768 -> 1536x768 -> 3 x 2 tiles
    assert counter.count_part(part, model="openai/gpt-4o").tokens == 85 + 6 * 170
    assert part.provider_metadata is not None
    assert part.provider_metadata["om"]["imageDimensions"] == {"width": 2048, "height": 1024}


def test_jpeg_frame_header_beyond_the_first_read_is_found(counter: TokenCounter) -> None:
    part = Part(type="image", data=b64(jpeg(1000, 1000, padding_segments=2)))
    assert counter.count_part(part, model="anthropic/claude-sonnet-4").tokens == 1334


def test_base64_image_payload_is_not_counted_as_text(counter: TokenCounter) -> None:
    payload = b64(os.urandom(1536 * 1024))  # 1.5 MiB of noise: no header, 2M base64 chars
    part = Part(type="image", data=payload, mime_type="image/png")
    # No dimensions; 1.5 MiB > 1 MiB -> auto is high; <= 2 MiB -> 4 tiles.
    assert counter.count_part(part, model="openai/gpt-4o").tokens == 85 + 4 * 170
    assert counter.count_message(msg("user", part), model="openai/gpt-4o") == round_half_up(1 + 765 + 3.8)


@pytest.mark.parametrize(
    ("mime", "data", "url", "filename", "expected"),
    [
        ("image/png", None, None, None, True),
        ("IMAGE/JPEG", None, None, None, True),
        (None, "data:image/webp;base64,AAAA", None, None, True),
        (None, None, "https://cdn.example.com/photos/cat.JPG?size=large", None, True),
        (None, "https://cdn.example.com/scan.tiff", None, None, True),
        (None, None, None, "diagram.heic", True),
        ("application/pdf", None, "https://x.test/report.pdf", "report.pdf", False),
        (None, None, "https://x.test/png", None, False),
        (None, None, None, "png", False),
        ("text/plain", "data:text/plain;base64,aGk=", None, "notes.txt", False),
    ],
)
def test_image_like_file_detection(
    mime: str | None, data: str | None, url: str | None, filename: str | None, expected: bool
) -> None:
    assert is_image_like_file(mime, data, url, filename) is expected


def test_image_like_file_part_uses_the_image_heuristic(counter: TokenCounter) -> None:
    part = Part(type="file", data=b64(png(1000, 1000)), mime_type="image/png", filename="board.png")
    assert counter.count_part(part, model="anthropic/claude-sonnet-4").tokens == 1334
    assert estimate_entry(part)["key"].startswith("image-like-file:")


# ---------------------------------------------------------------------------------------------------
# §13.10.8: non-image files


def test_pdf_200kib_base64_for_openai(counter: TokenCounter) -> None:
    pdf = b64(b"%PDF-1.7\n" + b"\0" * (200 * 1024 - 9))
    part = Part(type="file", data=pdf, mime_type="application/pdf", filename="doc.pdf")
    assert counter.count_part(part, model="openai/gpt-4o").tokens == max(500, math.ceil(204800 / 4)) == 51200


@pytest.mark.parametrize(
    ("model", "mime", "size", "expected"),
    [
        ("openai/gpt-4o", "application/pdf", 204_800, 51_200),
        ("openai/gpt-4o", "application/pdf", 100, 500),
        ("anthropic/claude-sonnet-4", "application/pdf", 204_800, math.ceil(204_800 / 3)),
        ("anthropic/claude-sonnet-4", "application/pdf", 100, 1500),
        ("google/gemini-2.5-flash", "application/pdf", 204_800, 10_240),
        ("google/gemini-2.5-flash", "Application/PDF; charset=binary", 100, 258),
        ("openai/gpt-4o", "text/markdown", 4001, 1001),
        ("openai/gpt-4o", "application/json", 0, 1),
        ("anthropic/claude-sonnet-4", "application/octet-stream", 4000, 1000),
        ("google/gemini-2.5-flash", None, 4000, 1000),
    ],
)
def test_file_byte_heuristics(model: str, mime: str | None, size: int, expected: int) -> None:
    assert file_tokens(model_context(model), normalize_mime(mime), size) == expected


@pytest.mark.parametrize(
    ("data", "expected_size"),
    [
        (b64(b"x" * 10), 10),
        (b64(b"x" * 11), 11),
        (b64(b"x" * 12), 12),
        ("data:application/pdf;base64," + b64(b"x" * 100), 100),
        ("data:text/plain,hello%20world", 11),
        (b"raw bytes", 9),
        (list(b"abc"), 3),
        ({"type": "Buffer", "data": [1, 2, 3, 4]}, 4),
        ("https://example.com/file.pdf", None),
        ("storage://bucket/file.pdf", None),
    ],
)
def test_byte_size_of_attachment_bodies(data: Any, expected_size: int | None) -> None:
    assert classify_body(data).byte_size == expected_size


def test_remote_file_counts_its_descriptor(counter: TokenCounter) -> None:
    part = Part(
        type="file", url="https://files.example.com/q3/Quarterly%20Report.pdf", mime_type="application/pdf"
    )
    descriptor = '{"type":"file","mimeType":"application/pdf","filename":"Quarterly Report.pdf"}'
    assert counter.count_part(part, model="openai/gpt-4o").tokens == est(descriptor)
    bare = Part(type="file", data="storage://bucket/")
    assert counter.count_part(bare).tokens == est('{"type":"file","mimeType":null,"filename":null}')


def test_text_file_with_body_uses_bytes_not_text(counter: TokenCounter) -> None:
    part = Part(type="file", data="data:text/plain;base64," + b64(b"a" * 8000), filename="notes.txt")
    assert counter.count_part(part).tokens == 2000


# ---------------------------------------------------------------------------------------------------
# §13.10.9: the estimate cache


def test_second_count_reads_the_cached_entry(counter: TokenCounter) -> None:
    part = Part(type="text", text="cached text " * 10)
    first = counter.count_part(part)
    entry = estimate_entry(part)
    assert entry["v"] == CACHE_VERSION
    assert entry["source"] == f"v{CACHE_VERSION}:chars4" == counter.source
    assert entry["key"].startswith("text:") and len(entry["key"]) == len("text:") + 64
    assert entry["tokens"] == first.tokens
    assert (counter.cache_hits, counter.cache_misses) == (0, 1)

    assert counter.count_part(part) == first
    assert (counter.cache_hits, counter.cache_misses) == (1, 1)


def test_cache_entry_is_really_used(counter: TokenCounter) -> None:
    part = Part(type="text", text="abcd" * 10)
    counter.count_part(part)
    entry = estimate_entry(part)
    # A tampered value proves the count comes from the entry, not from re-estimating.
    part.provider_metadata = {"om": {"tokenEstimate": {**entry, "tokens": 999}}}
    assert counter.count_part(part).tokens == 999


def test_cache_survives_persistence_round_trip() -> None:
    writer = TokenCounter(CharRatioEstimator())
    m = msg(
        "assistant", Part(type="text", text="hello " * 20), tool("result", args={"a": 1}, result={"b": 2})
    )
    total = writer.count_message(m)
    stored = Message.model_validate(json.loads(m.model_dump_json(by_alias=True)))
    reader = TokenCounter(CharRatioEstimator())
    assert reader.count_message(stored) == total
    assert (reader.cache_hits, reader.cache_misses) == (2, 0)


def test_changing_estimator_id_invalidates_entries(counter: TokenCounter) -> None:
    part = Part(type="text", text="x" * 30)
    counter.count_part(part)
    other = TokenCounter(CharRatioEstimator(3))
    assert other.count_part(part).tokens == 10
    assert (other.cache_hits, other.cache_misses) == (0, 1)
    assert estimate_entry(part)["source"] == f"v{CACHE_VERSION}:chars3"  # overwritten


def test_changing_cache_version_invalidates_entries(
    counter: TokenCounter, monkeypatch: pytest.MonkeyPatch
) -> None:
    part = Part(type="text", text="x" * 30)
    counter.count_part(part)
    monkeypatch.setattr(counter_module, "CACHE_VERSION", CACHE_VERSION + 1)
    bumped = TokenCounter(CharRatioEstimator())
    assert bumped.source == f"v{CACHE_VERSION + 1}:chars4"
    bumped.count_part(part)
    assert (bumped.cache_hits, bumped.cache_misses) == (0, 1)
    assert estimate_entry(part)["v"] == CACHE_VERSION + 1


def test_changed_payload_misses_and_replaces_the_entry(counter: TokenCounter) -> None:
    part = Part(type="text", text="first version")
    counter.count_part(part)
    old_key = estimate_entry(part)["key"]
    part.text = "second version, longer"
    assert counter.count_part(part).tokens == est("second version, longer")
    assert estimate_entry(part)["key"] != old_key
    assert counter.cache_misses == 2


def test_non_finite_cached_tokens_are_recomputed(counter: TokenCounter) -> None:
    part = Part(type="text", text="abcdefgh")
    counter.count_part(part)
    entry = estimate_entry(part)
    part.provider_metadata = {"om": {"tokenEstimate": {**entry, "tokens": float("nan")}}}
    assert counter.count_part(part).tokens == 2
    assert estimate_entry(part)["tokens"] == 2


def test_several_kinds_on_one_part_become_a_map(counter: TokenCounter) -> None:
    part = tool("call", args={"query": "weather in Paris"})
    counter.count_part(part)
    stored = estimate_entry(part)
    assert sorted(k.split(":")[0] for k in stored) == ["tool-call-args-json", "tool-call-name"]
    assert all(stored[k]["key"] == k for k in stored)
    counter.count_part(part)
    assert (counter.cache_hits, counter.cache_misses) == (2, 2)


def test_client_entry_is_never_overwritten(counter: TokenCounter) -> None:
    part = Part(
        type="file", data=b64(b"x" * 4000), provider_metadata={"mastra": {"tokenEstimate": CLIENT_ENTRY}}
    )
    for model in (None, "anthropic/claude-sonnet-4", "google/gemini-2.5-flash"):
        assert counter.count_part(part, model=model).tokens == 100_000
    assert part.provider_metadata == {"mastra": {"tokenEstimate": CLIENT_ENTRY}}
    om_part = Part(type="image", data="AAAA", provider_metadata={"om": {"tokenEstimate": CLIENT_ENTRY}})
    counter.count_part(om_part)
    assert om_part.provider_metadata == {"om": {"tokenEstimate": CLIENT_ENTRY}}


def test_image_entries_key_on_the_model_context(counter: TokenCounter) -> None:
    part = Part(type="image", width=1000, height=1000)
    assert counter.count_part(part, model="anthropic/claude-sonnet-4").tokens == 1334
    assert counter.count_part(part, model="openai/gpt-4o").tokens == 765  # not the cached 1334
    assert counter.count_part(part, model="openai/gpt-4o").tokens == 765
    assert (counter.cache_hits, counter.cache_misses) == (1, 2)


def test_cache_writes_do_not_share_dicts_with_copies(counter: TokenCounter) -> None:
    metadata: dict[str, Any] = {"om": {"other": 1}}
    part = Part(type="text", text="abc", provider_metadata=metadata)
    counter.count_part(part)
    assert metadata == {"om": {"other": 1}}
    assert part.provider_metadata is not None and part.provider_metadata["om"]["other"] == 1


def test_source_names_the_estimator() -> None:
    assert estimator_source(TiktokenEstimator()) == f"v{CACHE_VERSION}:tiktoken-o200k_base"
    assert estimator_source(CharRatioEstimator()) == f"v{CACHE_VERSION}:chars4"


# ---------------------------------------------------------------------------------------------------
# count_message == message_total(role, per-part counts)


def _shapes() -> list[Message]:
    return [
        text_message("a", "user", "hello there"),
        msg("assistant"),
        msg("system", Part(type="text", text="")),
        msg(
            "assistant",
            Part(type="step-start", model="openai/gpt-4o"),
            Part(type="reasoning", text="hmm"),
            Part(type="text", text="Let me look that up."),
            tool("result", args={"q": "x"}, result={"rows": list(range(50))}),
            tool("output-error", error_text="boom"),
            Part(type="data-om-status", data={"x": 1}),
        ),
        msg(
            "user",
            Part(type="text", text="see attached"),
            Part(type="image", data=b64(png(3000, 1000))),
            Part(type="file", data=b64(b"%PDF" + b"\0" * 5000), mime_type="application/pdf"),
            Part(type="file", url="https://x.test/a.docx"),
        ),
        msg("assistant", tool("call", args={}), tool("approval-responded", args="a", approval_reason="ok")),
        msg("assistant", tool("output-denied"), tool("result", result="done")),
    ]


@pytest.mark.parametrize("model", [None, "openai/gpt-4o", "anthropic/claude-sonnet-4", "google/gemini-3-pro"])
@pytest.mark.parametrize("index", range(len(_shapes())))
def test_count_message_equals_message_total_of_part_counts(index: int, model: str | None) -> None:
    m = _shapes()[index]
    fresh = TokenCounter(CharRatioEstimator())
    expected = fresh.count_message(m, model)
    reread = TokenCounter(CharRatioEstimator())
    assert expected == reread.message_total(m.role, [reread.count_part(p, model) for p in m.parts])
    assert reread.cache_misses == 0  # second pass over the same parts only reads the cache


def test_message_total_never_goes_below_zero(counter: TokenCounter) -> None:
    # role 3 + name 1 + "{}" 1 + 3.8 - 12 would be negative.
    assert counter.count_message(msg("assistant", tool("call", tool_name="x", args={}))) == 0


# ---------------------------------------------------------------------------------------------------
# tiktoken (the production estimator, offline from litellm's bundled files)


def test_tiktoken_counts_known_strings() -> None:
    estimator = TiktokenEstimator()
    assert estimator.id == "tiktoken-o200k_base"
    assert estimator("hello world") == 2
    assert estimator("<|endoftext|>") > 0  # special-token text is plain text, not an error
    assert os.environ.get("TIKTOKEN_CACHE_DIR")


def test_tiktoken_counter_is_stable_and_nonzero() -> None:
    counter = TokenCounter()
    m = text_message("1", "user", "The quick brown fox jumps over the lazy dog.")
    first = counter.count_message(m)
    assert first > 3
    assert TokenCounter().count_message(m.model_copy(deep=True)) == first
    assert counter.count_message(m) == first


def test_large_tool_result_is_counted_in_full() -> None:
    counter = TokenCounter()
    rows = [f"row {i}: value {i * 7919 % 100_003} status ok" for i in range(10_750)]
    result = {"rows": rows}
    part = tool("result", result=result)
    count = counter.count_part(part)
    full = counter.count_string(json.dumps(result, indent=2))
    assert count.tokens == full
    assert 140_000 < count.tokens < 160_000  # the whole payload, not a preview
    assert counter.count_part(part).tokens == full and counter.cache_hits == 1


def test_importing_tokens_loads_neither_litellm_nor_tiktoken() -> None:
    code = "import sys, om_core.tokens; print('litellm' in sys.modules, 'tiktoken' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_offline_cache_dir_points_at_litellm_unless_already_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR", raising=False)
    ensure_offline_tiktoken_cache()
    chosen = os.environ["TIKTOKEN_CACHE_DIR"]
    assert chosen.endswith(os.path.join("litellm", "litellm_core_utils", "tokenizers"))
    assert os.path.isdir(chosen)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "/somewhere/else")
    ensure_offline_tiktoken_cache()
    assert os.environ["TIKTOKEN_CACHE_DIR"] == "/somewhere/else"


def test_estimators_satisfy_the_protocol() -> None:
    assert isinstance(CharRatioEstimator(), TextEstimator)
    assert isinstance(TiktokenEstimator(), TextEstimator)
    assert CharRatioEstimator()("abcde") == 2
