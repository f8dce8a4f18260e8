"""The recall tool (behaviour §9.3–§9.4, cases §13.13 1–10) through `MemoryEngine.recall`, on SQLite.

Every thread here is posted through `ingest_turn` with thresholds far away, so nothing is observed and
the tests read exactly the stored messages. Token sizes are measured with the engine's own counter.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine

from om_core.config.options import ObservationalMemoryConfig
from om_core.engine import MemoryEngine
from om_core.engine.turn_reply import actor_context
from om_core.messages import Message, Part
from om_core.models.client import ModelClient
from om_core.recall import (
    RECALL_TOOL,
    RecallInvalid,
    RecallNotFound,
    RecallParams,
    RetrievalDisabled,
    recall_guidance,
)
from om_core.recall.budget import RESULT_BUDGET, cut_to_tokens
from om_core.recall.search_mode import NOT_CONFIGURED, fetch_size
from om_core.search.types import SearchHit, SearchRequest
from om_core.store import records
from tests.bench.sqlcount import counting
from tests.support.workers import HoldingExecutor

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
QUIET = {"observation": {"messageTokens": 200_000}, "reflection": {"observationTokens": 200_000}}
HEADER = re.compile(r"^\*\*(user|assistant) \(\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ\)\*\* \[[^\]]+\]:$")


def make_engine(db: Engine, retrieval: Any = True, **extra: Any) -> MemoryEngine:
    config = ObservationalMemoryConfig.parse({**QUIET, "retrieval": retrieval})
    return MemoryEngine(db, models=ModelClient(), config=config, executor=HoldingExecutor(), **extra)


def text(message_id: str, role: str, body: str, minute: int) -> Message:
    return Message(
        id=message_id,
        role=role,  # type: ignore[arg-type]
        parts=[Part(type="text", text=body)],
        created_at=T0 + timedelta(minutes=minute),
    )


def words(n: int, seed: str = "w") -> str:
    return " ".join(f"{seed}{i}" for i in range(n))


def chat(n: int, prefix: str = "m", start: int = 0) -> list[Message]:
    return [
        text(f"{prefix}{i}", "user" if i % 2 == 0 else "assistant", f"{prefix} says {i}", start + i)
        for i in range(n)
    ]


def ids_in(answer: dict[str, Any]) -> list[str]:
    return re.findall(r"^\*\*\w+ \([^)]*\)\*\* \[([^\]]+)\]:$", answer["messages"], re.MULTILINE)


@pytest.fixture
def engine(sqlite_engine: Engine) -> Iterator[MemoryEngine]:
    yield make_engine(sqlite_engine)


@pytest.fixture
def count(engine: MemoryEngine) -> Callable[[str], int]:
    return engine.counter.count_string


# ------------------------------------------------------------------------------------ validation


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"limit": 25}, "limit"),  # §13.13 case 3
        ({"limit": 0}, "limit"),
        ({"page": 51}, "page"),
        ({"page": -51}, "page"),
        ({"cursor": "m1", "partIndex": -1}, "partIndex"),
        ({"cursor": "m1", "partIndex": 0, "charOffset": -5}, "charOffset"),
        ({"mode": "everything"}, "mode"),
        ({"detail": "medium"}, "detail"),
        ({"partType": "video"}, "partType"),
        ({"mode": "search"}, "query"),
        ({"mode": "search", "query": "   "}, "query"),
        ({"partIndex": 1}, "partIndex"),
        ({"cursor": "m1", "charOffset": 10}, "charOffset"),
        ({"mode": "threads", "before": "last tuesday"}, "before"),
        ({"threadId": "other/t1"}, "threadId"),
        ({"cursr": "m1"}, "cursr"),
    ],
)
def test_a_parameter_out_of_range_is_refused_naming_it(
    engine: MemoryEngine, params: dict[str, Any], field: str
) -> None:
    engine.ingest_turn("t", "r", chat(2))
    with pytest.raises(RecallInvalid) as caught:
        engine.recall("t", params)
    assert caught.value.field == field
    assert str(caught.value).startswith(f"{field}: ")


def test_the_edges_of_every_range_are_accepted(engine: MemoryEngine) -> None:
    engine.ingest_turn("t", "r", chat(3))
    assert engine.recall("t", {"limit": 20, "page": 50})["count"] == 0
    assert engine.recall("t", {"limit": 1, "page": -50, "anchor": "end"})["count"] == 0
    assert engine.recall("t", {"cursor": "m0", "partIndex": 0, "charOffset": 0})["text"] == "m says 0"
    answer = engine.recall("t", {"mode": "threads", "limit": 500, "after": "2020-01-01"})
    assert answer["count"] == 1, "threads mode clamps its limit instead of refusing it"


def test_parameters_sent_as_null_count_as_left_out(engine: MemoryEngine) -> None:
    engine.ingest_turn("t", "r", chat(3))
    nulls = {name: None for name in RECALL_TOOL["function"]["parameters"]["properties"]}
    assert engine.recall("t", {**nulls, "cursor": "m0"}) == engine.recall("t", {"cursor": "m0"})


def test_recall_on_a_thread_with_retrieval_off_is_refused(sqlite_engine: Engine) -> None:
    engine = make_engine(sqlite_engine, retrieval=False)
    engine.ingest_turn("t", "r", chat(2))
    with pytest.raises(RetrievalDisabled, match="retrieval: true"):
        engine.recall("t", {})


# --------------------------------------------------------------------------------- messages mode


def test_a_range_passed_as_cursor_returns_a_hint_naming_its_ends(engine: MemoryEngine) -> None:
    engine.ingest_turn("t", "r", chat(10))
    answer = engine.recall("t", {"cursor": "m1:m9"})  # §13.13 case 1
    assert answer["count"] == 0
    assert 'cursor="m1"' in answer["messages"] and 'cursor="m9"' in answer["messages"]
    merged = engine.recall("t", {"cursor": "m1:m3,m5:m9"})
    assert merged["count"] == 0
    assert 'cursor="m1"' in merged["messages"] and 'cursor="m9"' in merged["messages"]


def test_a_message_id_with_a_colon_is_read_as_an_id_not_a_range(engine: MemoryEngine) -> None:
    engine.ingest_turn("t", "r", [text("user:1", "user", "first", 0), text("user:2", "user", "second", 1)])
    assert ids_in(engine.recall("t", {"cursor": "user:1"})) == ["user:2"]


def test_pages_forward_and_backward_from_a_cursor(engine: MemoryEngine) -> None:
    engine.ingest_turn("t", "r", chat(30))
    first = engine.recall("t", {"cursor": "m10", "limit": 5})
    assert ids_in(first) == [f"m{i}" for i in range(11, 16)]
    assert (first["hasNextPage"], first["hasPrevPage"]) == (True, False)
    assert engine.recall("t", {"cursor": "m10", "limit": 5, "page": 0}) == first  # case 2: 0 reads as 1
    second = engine.recall("t", {"cursor": "m10", "limit": 5, "page": 2})
    assert ids_in(second) == [f"m{i}" for i in range(16, 21)]
    assert (second["hasNextPage"], second["hasPrevPage"]) == (True, True)

    back = engine.recall("t", {"cursor": "m10", "limit": 5, "page": -1})  # case 2: just before the cursor
    assert ids_in(back) == [f"m{i}" for i in range(5, 10)]
    assert (back["hasNextPage"], back["hasPrevPage"]) == (False, True), "flags mirrored going back"
    back2 = engine.recall("t", {"cursor": "m10", "limit": 5, "page": -2})
    assert ids_in(back2) == [f"m{i}" for i in range(0, 5)]
    assert (back2["hasNextPage"], back2["hasPrevPage"]) == (True, False)
    last = engine.recall("t", {"cursor": "m24", "limit": 5})
    assert ids_in(last) == [f"m{i}" for i in range(25, 30)] and last["hasNextPage"] is False
    assert first["cursor"] == "m10" and back["page"] == -1 and first["limit"] == 5


def test_messages_with_nothing_to_show_take_no_page_slot(engine: MemoryEngine) -> None:
    messages = chat(6)
    messages[2] = Message(
        id="m2",
        role="user",
        parts=[Part(type="data-progress", data={"done": 1}), Part(type="step-start")],
        created_at=T0 + timedelta(minutes=2),
    )
    engine.ingest_turn("t", "r", messages)
    assert ids_in(engine.recall("t", {"cursor": "m0", "limit": 3})) == ["m1", "m3", "m4"]


def test_without_a_cursor_a_thread_is_read_from_either_end(engine: MemoryEngine) -> None:
    engine.ingest_turn("t", "r", chat(12))
    start = engine.recall("t", {"limit": 4})
    assert ids_in(start) == ["m0", "m1", "m2", "m3"] and start["cursor"] == "m0"
    assert start["hasNextPage"] is True
    end = engine.recall("t", {"limit": 4, "anchor": "end"})
    assert ids_in(end) == ["m8", "m9", "m10", "m11"] and end["cursor"] == "m8"
    older = engine.recall("t", {"limit": 4, "anchor": "end", "page": 2})
    assert ids_in(older) == ["m4", "m5", "m6", "m7"]
    assert engine.recall("t", {"limit": 4, "threadId": "current"}) == start


def test_the_message_format_shows_every_kind_of_part_with_its_index(engine: MemoryEngine) -> None:
    engine.ingest_turn(
        "t",
        "r",
        [
            text("u1", "user", "Find the March report", 0),
            Message(
                id="a1",
                role="assistant",
                created_at=T0 + timedelta(minutes=1),
                parts=[
                    Part(type="step-start"),
                    Part(type="reasoning", text="Search the archive first"),
                    Part(type="tool-invocation", tool_call_id="c1", tool_name="lookup", state="call",
                         args={"q": "march"}),
                    Part(type="tool-invocation", tool_call_id="c2", tool_name="archive", state="result",
                         args={"q": "march"}, result={"pages": 42}),
                    Part(type="image", url="https://x.test/a.png", filename="chart.png"),
                    Part(type="file", url="https://x.test/b.pdf"),
                    Part(type="data-progress", data={"done": True}),
                    Part(type="text", text="Found it: 42 pages."),
                ],
            ),
        ],
    )  # fmt: skip
    answer = engine.recall("t", {})
    lines = answer["messages"].split("\n")
    assert HEADER.match(lines[0]) and lines[0] == "**user (2026-03-01 09:00:00Z)** [u1]:"
    assert lines[1] == "  [p0] Find the March report"
    assert lines[2] == "" and lines[3] == "**assistant (2026-03-01 09:01:00Z)** [a1]:"
    body = "\n".join(lines[4:])
    assert "  [p1] Search the archive first" in body
    assert "  [p2] [Tool Call: lookup]" in body and '"q"' not in body.split("[p3]")[0], "no args at low"
    assert "  [p3] [Tool Result: archive]\n{" in body and '"pages": 42' in body
    assert "  [p4] [Image: chart.png]" in body and "  [p5] [File]" in body
    assert "[p0]" not in body and "[p6]" not in body, "step-start and data-* parts are not shown"
    assert "  [p7] Found it: 42 pages." in body
    assert answer["count"] == 2 and answer["detail"] == "low"

    only_results = engine.recall("t", {"partType": "tool-result"})
    assert ids_in(only_results) == ["a1"] and "[p3]" in only_results["messages"]
    assert "[p7]" not in only_results["messages"] and "[p2]" not in only_results["messages"]
    only_lookup = engine.recall("t", {"toolName": "lookup"})
    assert "[p2] [Tool Call: lookup]" in only_lookup["messages"] and "[p3]" not in only_lookup["messages"]


def test_a_long_user_text_is_cut_then_re_expanded_within_the_page_budget(
    engine: MemoryEngine, count: Callable[[str], int]
) -> None:
    long_text = words(2000, "fact")
    assert count(long_text) >= 2000
    engine.ingest_turn("t", "r", [text("u0", "user", long_text, 0), text("a0", "assistant", "ok", 1)])
    answer = engine.recall("t", {})  # §13.13 case 4
    line = answer["messages"].split("\n")[1]
    hint = '[recall cursor="u0" partIndex=0 detail="high" for more]'
    assert line.endswith(hint)
    shown = line.removeprefix("  [p0] ").removesuffix(" " + hint)
    assert 190 <= count(shown) <= 200, "re-expanded up to 200 tokens: the page had room"
    assert long_text.startswith(shown)


def test_without_room_left_cut_parts_stay_at_their_first_budget(
    engine: MemoryEngine, count: Callable[[str], int]
) -> None:
    engine.ingest_turn("t", "r", [text(f"u{i}", "user", words(2000, f"s{i}x"), i) for i in range(20)])
    answer = engine.recall("t", {})
    first = answer["messages"].split("\n")[1]
    shown = first.removeprefix("  [p0] ").split(" [recall ")[0]
    assert 90 <= count(shown) <= 100
    assert answer["truncated"] is True and answer["tokenOffset"] > 0  # §13.13 case 7
    assert re.search(r"\.\.\. \[truncated ~\d+ tokens\]$", answer["messages"])
    assert count(answer["messages"].rsplit("\n", 1)[0]) <= RESULT_BUDGET


def test_high_detail_returns_one_part_and_says_how_to_continue(engine: MemoryEngine) -> None:
    three = Message(
        id="a1",
        role="assistant",
        created_at=T0 + timedelta(minutes=1),
        parts=[
            Part(type="text", text="part zero"),
            Part(type="tool-invocation", tool_call_id="c", tool_name="calc", state="result",
                 args={"x": 6}, result=42),
            Part(type="text", text="part two"),
        ],
    )  # fmt: skip
    later = [text("u2", "user", "next", 2), text("u3", "user", "last", 3)]
    engine.ingest_turn("t", "r", [text("u0", "user", "go", 0), three, *later])
    answer = engine.recall("t", {"cursor": "u0", "detail": "high"})  # §13.13 case 5
    assert answer["count"] == 1 and answer["hasNextPage"] is True
    assert "[p0] part zero" in answer["messages"] and "[p1]" not in answer["messages"]
    assert 'partIndex=1 on cursor="a1"' in answer["messages"]
    part = engine.recall("t", {"cursor": "a1", "partIndex": 1})
    assert part["type"] == "tool-result" and '"x": 6' in part["text"] and part["text"].endswith("42")
    texts = engine.recall("t", {"cursor": "u0", "detail": "high", "partType": "text", "limit": 1})
    assert 'partIndex=2 on cursor="a1"' in texts["messages"], "the next shown part skips filtered ones"
    paged = engine.recall("t", {"cursor": "a1", "detail": "high", "limit": 1})
    assert "[p0] next" in paged["messages"] and "next page: page=2" in paged["messages"]
    assert paged["hasNextPage"] is True
    end = engine.recall("t", {"cursor": "u2", "detail": "high", "limit": 1})
    assert "[p0] last" in end["messages"] and end["hasNextPage"] is False
    assert "To continue" not in end["messages"]


def test_part_index_beyond_the_message_reads_the_next_message(engine: MemoryEngine) -> None:
    three = Message(
        id="a1",
        role="assistant",
        created_at=T0 + timedelta(minutes=1),
        parts=[Part(type="text", text=t) for t in ("zero", "one", "two")],
    )
    engine.ingest_turn(
        "t",
        "r",
        [
            text("u0", "user", "go", 0),
            three,
            Message(
                id="d", role="user", parts=[Part(type="data-x", data=1)], created_at=T0 + timedelta(minutes=2)
            ),
            text("u3", "user", "after", 3),
        ],
    )
    answer = engine.recall("t", {"cursor": "a1", "partIndex": 7})  # §13.13 case 6
    assert (answer["messageId"], answer["partIndex"], answer["text"]) == ("u3", 0, "after")
    assert "a1" in answer["note"] and "p0, p1, p2" in answer["note"]
    with pytest.raises(RecallInvalid, match=r"its parts are: p0\. It is the last message"):
        engine.recall("t", {"cursor": "u3", "partIndex": 3})


def test_part_index_on_a_hidden_part_lists_the_available_indices(engine: MemoryEngine) -> None:
    message = Message(
        id="a1",
        role="assistant",
        created_at=T0,
        parts=[Part(type="step-start"), Part(type="text", text="one"), Part(type="text", text="two")],
    )
    engine.ingest_turn("t", "r", [message, text("u1", "user", "later", 1)])
    with pytest.raises(RecallInvalid, match="its parts are: p1, p2") as caught:
        engine.recall("t", {"cursor": "a1", "partIndex": 0})
    assert caught.value.field == "partIndex"


def test_a_large_part_is_read_in_slices_with_char_offset(
    engine: MemoryEngine, count: Callable[[str], int]
) -> None:
    big = words(5000, "v")
    engine.ingest_turn("t", "r", [text("u0", "user", big, 0)])
    pieces, offset = [], 0
    while True:
        answer = engine.recall("t", {"cursor": "u0", "partIndex": 0, "charOffset": offset})
        pieces.append(answer["text"])
        assert count(answer["text"]) <= RESULT_BUDGET
        if not answer["truncated"]:
            assert "nextCharOffset" not in answer
            break
        assert answer["nextCharOffset"] > offset
        offset = answer["nextCharOffset"]
    assert "".join(pieces) == big and len(pieces) >= 3
    with pytest.raises(RecallInvalid, match="past the end"):
        engine.recall("t", {"cursor": "u0", "partIndex": 0, "charOffset": len(big) + 1})
    high = engine.recall("t", {"cursor": "u0", "page": -1, "detail": "high", "anchor": "end"})
    assert high["count"] == 0  # nothing before the first message
    whole = engine.recall("t", {"detail": "high"})
    assert whole["truncated"] is True and whole["tokenOffset"] > 3000  # §13.13 case 7, high detail
    assert "charOffset" in whole["messages"]


# ---------------------------------------------------------------------------------- access control


def test_a_cursor_of_another_resource_cannot_be_resolved(engine: MemoryEngine) -> None:
    engine.ingest_turn("mine", "r1", chat(4))
    engine.ingest_turn("theirs", "r2", chat(4, prefix="x"))
    with pytest.raises(RecallNotFound, match='could not resolve cursor "x1"'):  # §13.13 case 10
        engine.recall("mine", {"cursor": "x1"})
    with pytest.raises(RecallNotFound, match="not found"):
        engine.recall("mine", {"threadId": "theirs"})


def test_a_cursor_of_a_sibling_thread_names_its_owner_in_resource_scope(engine: MemoryEngine) -> None:
    engine.ingest_turn("t1", "r", chat(4))
    engine.ingest_turn("t2", "r", chat(4, prefix="y"))
    answer = engine.recall("t1", {"cursor": "y2"})
    assert answer["count"] == 0 and 'threadId="t2"' in answer["messages"]
    read = engine.recall("t1", {"cursor": "y2", "threadId": "t2"})
    assert ids_in(read) == ["y3"]
    hint_thread = engine.recall("t1", {"threadId": "t2", "limit": 1})
    assert ids_in(hint_thread) == ["y0"]


def test_thread_scope_reads_only_the_current_thread(sqlite_engine: Engine) -> None:
    engine = make_engine(sqlite_engine, retrieval={"scope": "thread"})
    engine.ingest_turn("t1", "r", chat(4))
    engine.ingest_turn("t2", "r", chat(4, prefix="y"))
    with pytest.raises(RecallNotFound, match='could not resolve cursor "y2"'):
        engine.recall("t1", {"cursor": "y2"})
    with pytest.raises(RecallNotFound, match="limited to the current thread"):
        engine.recall("t1", {"threadId": "t2"})
    answer = engine.recall("t1", {"mode": "threads"})  # §13.13 case 8
    assert answer["count"] == 1 and answer["page"] == 0 and answer["hasMore"] is False
    assert answer["threads"].startswith("- **(untitled)** ← current\n  id: t1\n  updated: ")
    assert "t2" not in answer["threads"]


def test_tenants_thread_ids_never_cross(sqlite_engine: Engine) -> None:
    engine = make_engine(sqlite_engine)
    engine.ingest_turn("alpha/t1", "alpha/r", chat(3), tenant_id="alpha")
    engine.ingest_turn("beta/t2", "beta/r", chat(3, prefix="b"), tenant_id="beta")
    engine.ingest_turn("alpha/t2", "alpha/r", chat(3, prefix="a"), tenant_id="alpha")
    assert ids_in(engine.recall("alpha/t1", {"threadId": "t2", "limit": 1})) == ["a0"]
    with pytest.raises(RecallNotFound):
        engine.recall("alpha/t1", {"cursor": "b1"})
    listed = engine.recall("alpha/t1", {"mode": "threads"})["threads"]
    assert "id: t2" in listed and "beta" not in listed and "alpha/" not in listed


# ----------------------------------------------------------------------------------- threads mode


def test_threads_mode_lists_the_resource_newest_first_in_pages(engine: MemoryEngine) -> None:
    for i in range(5):
        engine.ingest_turn(f"t{i}", "r", chat(1, prefix=f"t{i}m"))
    engine.ingest_turn("t1", "r", [text("late", "user", "back again", 9)])  # t1 updated last
    page0 = engine.recall("t3", {"mode": "threads", "limit": 2})
    assert re.findall(r"id: (\S+)", page0["threads"]) == ["t1", "t4"]
    assert page0["hasMore"] is True and page0["count"] == 2
    page2 = engine.recall("t3", {"mode": "threads", "limit": 2, "page": 2})
    assert re.findall(r"id: (\S+)", page2["threads"]) == ["t0"] and page2["hasMore"] is False
    everything = engine.recall("t3", {"mode": "threads"})["threads"]
    assert "- **(untitled)** ← current\n  id: t3" in everything
    assert everything.count("← current") == 1
    future = engine.recall("t3", {"mode": "threads", "after": "2999-01-01"})
    assert future == {"threads": "No threads found matching the criteria.", "count": 0, "page": 0,
                      "hasMore": False}  # fmt: skip
    assert engine.recall("t3", {"mode": "threads", "before": "2999-01-01T00:00:00Z"})["count"] == 5


# ------------------------------------------------------------------------------------ search mode


def test_search_without_vector_config_is_not_configured(sqlite_engine: Engine) -> None:
    calls: list[SearchRequest] = []
    plain = make_engine(sqlite_engine, searcher=lambda request: calls.append(request) or [])
    plain.ingest_turn("t", "r", chat(2))
    answer = plain.recall("t", {"mode": "search", "query": "porto"})  # §13.13 case 9
    assert answer == {"results": NOT_CONFIGURED, "count": 0} and not calls
    unwired = make_engine(sqlite_engine, retrieval={"vector": True})
    assert unwired.recall("t", {"mode": "search", "query": "porto"})["count"] == 0


def _hit(thread: str, ref: str, score: float, *, kind: str = "group", resource: str = "r") -> SearchHit:
    return SearchHit(
        kind=kind,  # type: ignore[arg-type]
        ref=ref,
        thread_id=thread,
        resource_id=resource,
        text=f"text of {ref}",
        at=T0 + timedelta(hours=1),
        score=score,
        ranges="m1:m3,m5:m8" if kind == "group" and ref != "g-norange" else None,
    )


def test_search_formats_hits_and_keeps_only_what_the_call_may_read(sqlite_engine: Engine) -> None:
    calls: list[SearchRequest] = []
    hits = [
        _hit("t2", "g2", 0.91),
        _hit("t1", "g1", 0.876),
        _hit("t1", "m4", 0.5, kind="message"),
        _hit("x", "gx", 0.99, resource="other"),
        _hit("t2", "g-norange", 0.3),
    ]

    def searcher(request: SearchRequest) -> list[SearchHit]:
        calls.append(request)
        return hits

    engine = make_engine(sqlite_engine, retrieval={"vector": True}, searcher=searcher)
    engine.ingest_turn("t1", "r", chat(6))
    engine.ingest_turn("t2", "r", chat(2, prefix="q"))
    answer = engine.recall("t1", {"mode": "search", "query": " porto cafe "})
    assert calls[-1] == SearchRequest(resource_id="r", query="porto cafe", limit=10)
    assert answer["count"] == 4, "the other resource's hit is dropped"
    results = answer["results"]
    assert "gx" not in results
    blocks = results.split("\n\n")
    assert blocks[0].startswith("### Older memory from another conversation\nthread: t2 (untitled)")
    assert "source: raw messages from ID m1 through ID m8" in blocks[0]
    assert "observation group: g2" in blocks[0] and "score: 0.91" in blocks[0]
    assert 'read the raw messages: recall cursor="m1" threadId="t2"' in blocks[0]
    assert "```\ntext of g2\n```" in blocks[0]
    assert "source: range unavailable" in blocks[1], "grouped by thread: t2's second hit follows"
    assert (
        blocks[2].startswith("### Observation from this conversation\nthread: t1")
        and "score: 0.88" in blocks[2]
    )
    assert blocks[3].startswith("### Raw message from this conversation")
    assert "raw message m4" in blocks[3] and 'recall cursor="m4"' in blocks[3]

    scoped = engine.recall("t1", {"mode": "search", "query": "porto", "threadId": "t2", "limit": 3})
    assert calls[-1].thread_ids == ("t2",) and calls[-1].limit == 13, "over-fetch when filtering"
    assert scoped["count"] == 2 and "thread: t1" not in scoped["results"]
    dated = engine.recall("t1", {"mode": "search", "query": "porto", "after": "2026-03-02"})
    assert calls[-1].limit == 20 and dated == {"results": "No matching messages found.", "count": 0}


def test_thread_scope_search_shows_only_the_current_thread(sqlite_engine: Engine) -> None:
    engine = make_engine(
        sqlite_engine,
        retrieval={"vector": True, "scope": "thread"},
        searcher=lambda request: [_hit("t2", "g2", 0.9), _hit("t1", "g1", 0.8)],
    )
    engine.ingest_turn("t1", "r", chat(2))
    answer = engine.recall("t1", {"mode": "search", "query": "x"})
    assert answer["count"] == 1 and "g1" in answer["results"] and "g2" not in answer["results"]


def test_the_over_fetch_rule() -> None:
    assert fetch_size(10, False) == 10
    assert (fetch_size(3, True), fetch_size(5, True), fetch_size(10, True), fetch_size(1, True)) == (
        13,
        15,
        20,
        11,
    )


# ------------------------------------------------------------------------------ schema, guidance


def test_the_tool_schema_names_exactly_the_parameters_recall_accepts() -> None:
    function = RECALL_TOOL["function"]
    assert RECALL_TOOL["type"] == "function" and function["name"] == "recall"
    schema = function["parameters"]
    accepted = {field.alias or name for name, field in RecallParams.model_fields.items()}
    assert set(schema["properties"]) == accepted
    assert schema["properties"]["page"]["minimum"] == -50 and schema["properties"]["page"]["maximum"] == 50
    assert set(schema["properties"]["partType"]["enum"]) == {
        "text", "tool-call", "tool-result", "reasoning", "image", "file"
    }  # fmt: skip
    assert all(prop.get("description") for prop in schema["properties"].values())


def test_the_guidance_routes_modes_by_scope_and_search() -> None:
    with_search = recall_guidance("resource", True)
    without = recall_guidance("resource", False)
    thread_only = recall_guidance("thread", False)
    assert 'mode "search"' in with_search and "may not be searchable yet" in with_search
    assert 'mode "search"' not in without and '"search"' not in thread_only
    assert 'mode "threads"' in without and "other conversations" in without
    assert "other conversations" not in thread_only
    for text_ in (with_search, without, thread_only):
        assert "partIndex" in text_ and "charOffset" in text_ and "nextCharOffset" in text_
    extra = recall_guidance("thread", True, "Always quote invoice numbers exactly.")
    assert extra.endswith("### Additional guidance\n\nAlways quote invoice numbers exactly.")


def test_cut_to_tokens_is_exact_and_bounded(count: Callable[[str], int]) -> None:
    sample = words(600)
    cut = cut_to_tokens(sample, 100, count)
    assert cut is not None and sample.startswith(cut)
    assert count(cut) <= 100 < count(sample[: len(cut) + 3])
    assert cut_to_tokens("short", 100, count) is None
    probes: list[int] = []
    cut_to_tokens("x" * 2_000_000, 50, lambda s: probes.append(len(s)) or count(s))
    assert max(probes) <= 50 * 32, "a huge part is never counted whole"


# ---------------------------------------------------------------------------------- the turn path


def test_a_turn_offers_the_tool_and_guidance_only_with_retrieval_on(sqlite_engine: Engine) -> None:
    on = make_engine(sqlite_engine)
    turn = on.ingest_turn("t-on", "r", chat(2))
    assert turn.tools == [RECALL_TOOL]
    # Resource scope: the guidance is there before any observation exists (behaviour §9.4).
    assert len(turn.system_messages) == 1 and turn.system_messages[0] == recall_guidance("resource", False)
    assert turn.context.stable_count == 1

    thread_scope = make_engine(sqlite_engine, retrieval={"scope": "thread"})
    quiet = thread_scope.ingest_turn("t-thread", "r2", chat(2))
    assert quiet.tools == [RECALL_TOOL] and quiet.system_messages == [], "no memory yet: nothing to guide"

    off = make_engine(sqlite_engine, retrieval=False)
    plain = off.ingest_turn("t-off", "r3", chat(2))
    assert plain.tools == [] and plain.system_messages == []


def test_the_guidance_follows_the_preamble_once_there_is_memory(sqlite_engine: Engine) -> None:
    engine = make_engine(sqlite_engine, retrieval={"scope": "thread", "instructions": "Quote ids."})
    engine.ingest_turn("t", "r", chat(2))
    head = records.get_head(sqlite_engine, "thread:t")
    assert head is not None
    object.__setattr__(head, "active_observations", "Date: Mar 1, 2026\n* 🔴 (09:00) User likes tea")
    guidance = recall_guidance("thread", False, "Quote ids.")
    context = actor_context(engine, None, head, has_unobserved=True, retrieval_guidance=guidance)
    assert context.system_messages[0].endswith(guidance)
    assert context.system_messages[0].startswith("The messages that follow hold your memory")


def test_retrieval_adds_no_statement_to_a_turn(sqlite_engine: Engine) -> None:
    counts = []
    for name, retrieval in (("off", False), ("thread", {"scope": "thread"}), ("resource", True)):
        engine = make_engine(sqlite_engine, retrieval=retrieval)
        engine.ingest_turn(f"t-{name}", f"r-{name}", chat(2, prefix=name))
        with counting(sqlite_engine) as count:
            engine.ingest_turn(f"t-{name}", f"r-{name}", [text(f"{name}-new", "user", "and one more", 5)])
        counts.append(count.statements)
    assert sum(counts[0].values()) > 0
    assert counts[0] == counts[1] == counts[2], "the tool and its guidance cost no database work"


def test_a_huge_part_is_not_counted_whole_to_report_what_was_cut(
    engine: MemoryEngine, count: Callable[[str], int]
) -> None:
    big = words(120_000, "h")  # ~800k characters
    engine.ingest_turn("t", "r", [text("u0", "user", big, 0)])
    answer = engine.recall("t", {"detail": "high"})
    assert answer["truncated"] is True
    assert abs(answer["tokenOffset"] - (count(big) - RESULT_BUDGET)) < 0.1 * count(big)
