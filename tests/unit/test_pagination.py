"""The cursor half of the one pagination convention: opaque, tied to its list, refused when damaged."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime

import pytest

from om_core.pagination import CursorError, decode_cursor, encode_cursor

MOMENT = datetime(2026, 3, 1, 9, 30, 0, 123456, tzinfo=UTC)


def test_a_cursor_gives_back_the_key_it_was_made_from() -> None:
    cursor = encode_cursor("resource-threads", (MOMENT.isoformat(), "t-1"))
    assert set(cursor) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    assert decode_cursor("resource-threads", cursor, (datetime, str)) == (MOMENT.isoformat(), "t-1")
    assert decode_cursor("messages", encode_cursor("messages", (41,)), (int,)) == (41,)


def _raw(value: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "cursor",
    [
        "",
        "!!!",
        "x" * 3000,
        _raw({"not": "a list"}),
        _raw(["threads", "t-1"]),  # another list's cursor
        _raw(["resource-threads", "t-1"]),  # too short
        _raw(["resource-threads", "yesterday", "t-1"]),
        _raw(["resource-threads", "2026-03-01T09:30:00", "t-1"]),  # no time zone
        _raw(["resource-threads", MOMENT.isoformat(), 7]),
    ],
)
def test_a_cursor_this_list_did_not_hand_out_is_refused(cursor: str) -> None:
    with pytest.raises(CursorError):
        decode_cursor("resource-threads", cursor, (datetime, str))


@pytest.mark.parametrize("value", [True, "41", 4.5, None])
def test_a_key_of_the_wrong_type_is_refused(value: object) -> None:
    with pytest.raises(CursorError):
        decode_cursor("messages", _raw(["messages", value]), (int,))
