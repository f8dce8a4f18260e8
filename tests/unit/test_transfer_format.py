"""The transfer format (`om_core.transfer.records`), SQLite's JSONB (`sqlite_jsonb`) and the original's parts
(`mastra`), without a database: lines round-trip, a line this version does not know is refused by name, and
a JSONB blob the original wrote decodes to its JSON.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import ValidationError

from om_core.messages import Part
from om_core.transfer import importer, mastra
from om_core.transfer.records import (
    FORMAT,
    VERSION,
    HeaderLine,
    MessageLine,
    RecordLine,
    dump_line,
    parse_line,
)
from om_core.transfer.sqlite_jsonb import JsonbError, decode, looks_like_jsonb

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "mastra" / "thread-30-turns.db"
NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def test_a_message_line_round_trips_with_its_parts() -> None:
    line = MessageLine(
        thread_id="t1",
        id="m1",
        role="assistant",
        created_at=NOW,
        parts=[
            Part(type="text", text="hi", seq=3),
            Part(
                type="tool-invocation",
                tool_call_id="c1",
                tool_name="search",
                state="result",
                result={"n": 1},
                seq=4,
            ),
        ],
    )
    text = dump_line(line)
    assert text.endswith("\n") and "\n" not in text[:-1]
    assert '"toolCallId":"c1"' in text, "parts are written as stored (camelCase, no nulls)"
    assert parse_line(text) == line


def test_the_header_names_the_format_and_its_version() -> None:
    header = json.loads(dump_line(HeaderLine(scope="tenant", exported_at=NOW)))
    assert header == {
        "kind": "header",
        "format": FORMAT,
        "version": VERSION,
        "scope": "tenant",
        "source": "om",
        "exported_at": "2026-01-02T03:04:05Z",
    }
    with pytest.raises(ValidationError, match="version"):
        parse_line(json.dumps({**header, "version": 2}))


@pytest.mark.parametrize(
    ("line", "field"),
    [
        (
            {
                "kind": "thread",
                "id": "t",
                "resource_id": "r",
                "created_at": "2026-01-01T00:00:00Z",
                "updated_at": "2026-01-01T00:00:00Z",
                "color": "red",
            },
            "color",
        ),
        (
            {
                "kind": "thread",
                "id": "acme/t",
                "resource_id": "r",
                "created_at": "2026-01-01T00:00:00Z",
                "updated_at": "2026-01-01T00:00:00Z",
            },
            "id",
        ),
        ({"kind": "resource", "id": "r", "created_at": "2026-01-01T00:00:00"}, "created_at"),
        ({"kind": "spaceship"}, "kind"),
    ],
)
def test_a_line_this_version_does_not_know_is_refused_by_field(line: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        parse_line(json.dumps(line))
    assert field in str(caught.value)


def test_a_record_keeps_its_generation_and_chunks() -> None:
    record = RecordLine.model_validate(
        {
            "id": "omrec-1",
            "scope": "thread",
            "thread_id": "t",
            "resource_id": "r",
            "generation_count": 2,
            "superseded_by": None,
            "active_observations": "* 🔴 a fact",
            "last_observed_seq": 7,
            "created_at": NOW,
            "updated_at": NOW,
            "chunks": [
                {
                    "id": "c1",
                    "position": 0,
                    "state": "buffered",
                    "cycle_id": "cy",
                    "observations": "* b",
                    "token_count": 2,
                    "message_tokens": 9,
                    "from_seq": 7,
                    "to_seq": 9,
                    "created_at": NOW,
                }
            ],
        }
    )
    assert parse_line(dump_line(record)) == record


def test_the_importer_counts_lines_against_the_limits() -> None:
    limits = importer.ImportLimits(max_lines=2, max_line_bytes=200)
    header = dump_line(HeaderLine(scope="thread", exported_at=NOW))
    with pytest.raises(importer.ImportRefused) as too_many:
        list(importer._numbered([header, "\n", header, header], limits))
    assert too_many.value.reason == "too_large" and too_many.value.line == 4
    with pytest.raises(importer.ImportRefused) as too_long:
        list(importer._numbered(["{" + " " * 300 + "}"], limits))
    assert too_long.value.reason == "too_large" and "OM_MAX_IMPORT_LINE_BYTES" in str(too_long.value)


# ------------------------------------------------------------------------------------------- JSONB


def _element(kind: int, payload: bytes) -> bytes:
    if len(payload) <= 11:
        return bytes([(len(payload) << 4) | kind]) + payload
    return bytes([(12 << 4) | kind, len(payload)]) + payload


def test_jsonb_decodes_every_element_type() -> None:
    text = _element(7, b"name") + _element(8, b'a\\"b\\n')
    items = _element(1, b"") + _element(2, b"") + _element(0, b"") + _element(3, b"-12") + _element(5, b"2.5")
    items += _element(4, b"0x1F") + _element(9, b"it\\'s") + _element(10, b"raw")
    blob = _element(12, text + _element(7, b"list") + _element(11, items))
    assert looks_like_jsonb(blob)
    assert decode(blob) == {"name": 'a"b\n', "list": [True, False, None, -12, 2.5, 31, "it's", "raw"]}


def test_a_malformed_blob_is_refused_not_misread() -> None:
    with pytest.raises(JsonbError):
        decode(_element(12, _element(7, b"key")))  # a key without its value
    with pytest.raises(JsonbError):
        decode(b"\xcc\x40" + b"{}")  # a size past the end
    # JSON text can parse as JSONB by accident ('{' is an array header of 7 bytes): text is tried first.
    assert looks_like_jsonb(b'{"a": 1}') and mastra._json(b'{"a": 1}') == {"a": 1}


def test_the_originals_thread_metadata_blob_decodes() -> None:
    with sqlite3.connect(f"file:{FIXTURE}?mode=ro", uri=True) as conn:
        blob = conn.execute("SELECT metadata FROM mastra_threads").fetchone()[0]
    assert isinstance(blob, bytes) and looks_like_jsonb(blob)
    om = decode(blob)["mastra"]["om"]
    assert om["currentTask"].startswith("Primary:") and om["suggestedResponse"]


# ------------------------------------------------------------------------------------ the original


def test_the_originals_parts_map_onto_oms() -> None:
    call = mastra._part(
        {
            "type": "tool-invocation",
            "toolInvocation": {
                "state": "result",
                "toolCallId": "c",
                "toolName": "w",
                "args": {"q": 1},
                "result": 2,
            },
        }
    )
    assert call is not None and (call.tool_call_id, call.state, call.result) == ("c", "result", 2)
    reasoning = mastra._part(
        {"type": "reasoning", "reasoning": "", "details": [{"type": "text", "text": "why"}]}
    )
    assert reasoning is not None and reasoning.text == "why"
    image = mastra._part({"type": "file", "mimeType": "image/png", "data": "aGk="})
    assert image is not None and image.type == "image"
    assert mastra._part({"type": "data-om-activation", "data": {}}) is None, (
        "the original's own markers stay out"
    )
    assert mastra._part({"type": "data-note", "data": {"a": 1}}) is not None
