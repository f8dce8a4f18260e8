"""The dashboard's read models (`om_core.dashboard`, `history.page_threads`' search and counts) on both
databases: Postgres (served) and SQLite (`om up`). The SQL differs per dialect (substr, JSON paths, LIKE
escapes), so each case runs on both, with rows written by the storage layer as the engine writes them."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine, insert, update

from om_core import dashboard, queries
from om_core.messages import Part, text_message
from om_core.pagination import CursorError
from om_core.reflector.prompt import append_tail_after_reflection
from om_core.store import history, records, schema
from om_core.store.types import ChunkInput
from om_core.tenancy.scoped_ids import scoped_id

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


def count_part(part: Part) -> tuple[float, float, int]:
    return (float(len(part.text or "")), 0.0, 0)


def tenant_name() -> str:
    return f"tenant-{uuid.uuid4().hex[:8]}"


def say(db: Engine, tenant: str | None, thread: str, resource: str, count: int, at: datetime = T0) -> None:
    """Store `count` messages as a turn does, and its activity time (the turn path sets it)."""
    with db.begin() as conn:
        history.append_messages(
            conn,
            thread_id=scoped_id(tenant, thread),
            resource_id=scoped_id(tenant, resource),
            incoming=[text_message(f"m{i}", "user", f"message {i}") for i in range(count)],
            count_part=count_part,
            tenant_id=tenant,
        )
        conn.execute(
            update(schema.threads)
            .where(schema.threads.c.id == scoped_id(tenant, thread))
            .values(last_activity_at=at)
        )


def spend(db: Engine, stored_thread: str, cost: float) -> None:
    with db.begin() as conn:
        conn.execute(
            insert(schema.usage_threads).values(
                thread_id=stored_thread,
                input_tokens=10,
                output_tokens=5,
                cost_usd=cost,
                cycles=1,
                updated_at=T0,
            )
        )


def test_resources_are_summed_paged_and_searched(engine: Engine) -> None:
    tenant, other = tenant_name(), tenant_name()
    say(engine, tenant, "t1", "Alpha_1", 3)
    say(engine, tenant, "t2", "Alpha_1", 2, at=T0 + timedelta(hours=1))
    say(engine, tenant, "t3", "alphabet", 1)
    say(engine, tenant, "t4", "zeta", 4)
    say(engine, other, "t1", "Alpha_1", 9)
    spend(engine, scoped_id(tenant, "t1"), 0.25)
    spend(engine, scoped_id(tenant, "t2"), 0.5)

    first = dashboard.resources_page(engine, tenant_id=tenant, limit=2)
    assert [r.id for r in first.items] == ["Alpha_1", "alphabet"] and first.next_cursor
    second = dashboard.resources_page(engine, tenant_id=tenant, limit=2, cursor=first.next_cursor)
    assert [r.id for r in second.items] == ["zeta"] and second.next_cursor is None
    alpha = first.items[0]
    assert (alpha.threads, alpha.messages, alpha.cost_usd) == (2, 5, pytest.approx(0.75))
    assert alpha.last_activity_at == T0 + timedelta(hours=1), "the newest of its threads"

    assert [r.id for r in dashboard.resources_page(engine, tenant_id=tenant, q="ALPHA").items] == [
        "Alpha_1",
        "alphabet",
    ]
    assert [r.id for r in dashboard.resources_page(engine, tenant_id=tenant, q="a_").items] == ["Alpha_1"], (
        "`_` matches only itself, not any character"
    )
    assert dashboard.resources_page(engine, tenant_id=tenant, q=tenant).items == []
    [theirs] = dashboard.resources_page(engine, tenant_id=other).items
    assert (theirs.id, theirs.messages, theirs.cost_usd) == ("Alpha_1", 9, 0.0)
    with pytest.raises(CursorError):
        dashboard.resources_page(engine, tenant_id=tenant, cursor=queries.messages_cursor(5))


def test_threads_are_searched_by_id_and_either_title(engine: Engine) -> None:
    tenant = tenant_name()
    say(engine, tenant, "support-7", "u", 2)
    say(engine, tenant, "chat-1", "u", 3)
    say(engine, tenant, "chat-2", "v", 1)
    with engine.begin() as conn:
        conn.execute(
            update(schema.threads)
            .where(schema.threads.c.id == scoped_id(tenant, "chat-1"))
            .values(title="Trip to LISBON")
        )
        conn.execute(  # the Observer's title, kept in OM's metadata, when the caller set none
            update(schema.threads)
            .where(schema.threads.c.id == scoped_id(tenant, "chat-2"))
            .values(om_metadata={"threadTitle": "Lisbon hotels"})
        )
    spend(engine, scoped_id(tenant, "chat-1"), 0.125)

    def ids(**kwargs: object) -> list[str]:
        page = queries.threads_page(engine, tenant_id=tenant, **kwargs)  # type: ignore[arg-type]
        return [listing.thread.id for listing in page.items]

    assert ids(q="lisbon") == [scoped_id(tenant, "chat-1"), scoped_id(tenant, "chat-2")]
    assert ids(q="PORT") == [scoped_id(tenant, "support-7")]
    assert ids(q=tenant) == [], "the tenant's name is not part of a thread's id"
    assert ids(q="lisbon", resource_id=scoped_id(tenant, "v")) == [scoped_id(tenant, "chat-2")]
    listed = {
        listing.thread.id: (listing.messages, listing.cost_usd)
        for listing in queries.threads_page(engine, tenant_id=tenant).items
    }
    assert listed == {
        scoped_id(tenant, "chat-1"): (3, 0.125),
        scoped_id(tenant, "chat-2"): (1, 0.0),
        scoped_id(tenant, "support-7"): (2, 0.0),
    }


def test_recent_failures_are_the_tenants_own_newest_first(engine: Engine) -> None:
    tenant, other = tenant_name(), tenant_name()
    say(engine, tenant, "t", "r", 1)
    say(engine, other, "t", "r", 1)

    def event(thread: str | None, resource: str, kind: str, error: str, at: datetime) -> dict[str, object]:
        return {
            "thread_id": thread,
            "resource_id": resource,
            "lookup_key": f"thread:{thread or resource}",
            "type": kind,
            "payload": {"error": error},
            "created_at": at,
        }

    mine, shared = scoped_id(tenant, "t"), scoped_id(tenant, "r")
    with engine.begin() as conn:
        conn.execute(
            insert(schema.events),
            [
                event(mine, shared, "data-om-buffering-failed", "first", T0),
                event(mine, shared, "data-om-buffering-end", "not a failure", T0),
                event(scoped_id(other, "t"), scoped_id(other, "r"), "data-om-observation-failed", "x", T0),
                event(None, shared, "data-om-observation-failed", "the shared log", T0 + timedelta(1)),
                event(mine, shared, "data-om-extraction-failed", "newest", T0 + timedelta(2)),
            ],
        )
    failures = dashboard.recent_failures(engine, tenant_id=tenant)
    assert [(f.thread_id, f.type, f.error) for f in failures] == [
        ("t", "data-om-extraction-failed", "newest"),
        (None, "data-om-observation-failed", "the shared log"),
        ("t", "data-om-buffering-failed", "first"),
    ]
    assert len(dashboard.recent_failures(engine, tenant_id=tenant, limit=2)) == 2


def test_tenant_usage_adds_the_deltas_not_folded_yet(engine: Engine) -> None:
    tenant = tenant_name()
    assert dashboard.tenant_om_usage(engine, tenant).cost_usd == 0.0
    with engine.begin() as conn:
        conn.execute(
            insert(schema.usage_tenants).values(
                tenant_id=tenant, input_tokens=100, output_tokens=10, cost_usd=1.0, cycles=2, updated_at=T0
            )
        )
        conn.execute(
            insert(schema.usage_tenant_deltas),
            [
                {"tenant_id": tenant, "input_tokens": 5, "output_tokens": 1, "cost_usd": 0.5, "cycles": 1},
                {
                    "tenant_id": "someone-else",
                    "input_tokens": 7,
                    "output_tokens": 7,
                    "cost_usd": 9,
                    "cycles": 1,
                },
            ],
        )
    usage = dashboard.tenant_om_usage(engine, tenant)
    assert (usage.input_tokens, usage.output_tokens, usage.cost_usd, usage.cycles) == (105, 11, 1.5, 3)


def test_a_generation_is_diffed_against_the_one_it_replaced(engine: Engine) -> None:
    thread = f"t-{uuid.uuid4().hex[:10]}"
    key = f"thread:{thread}"
    lines = ["Date: Nov 30", "* 🔴 (09:00) name is Ada", "* 🟡 (09:01) likes tea", "* 🟢 (09:02) weather"]
    with engine.begin() as conn:
        history.ensure_thread(conn, thread, "r")
        first = records.initialize(
            conn,
            lookup_key=key,
            scope="thread",
            thread_id=thread,
            resource_id="r",
            config={},
            observed_timezone="UTC",
        )
        records.append_chunk(
            conn,
            first.id,
            ChunkInput(
                cycle_id="c1",
                observations="\n".join(lines),
                token_count=40,
                message_ids=["m1"],
                message_tokens=100,
                from_seq=0,
                to_seq=1,
                last_observed_at=T0,
            ),
        )
        records.activate(conn, first.id, choose_count=lambda chunks: 1, pending_tokens=None)
    snapshot = records.get_head(engine, key)
    assert snapshot is not None
    with engine.begin() as conn:
        successor, applied, _ = records.create_reflection_generation(
            conn,
            snapshot,
            reflection="Date: Nov 30\n* 🔴 (09:00) name is Ada, likes tea",
            token_count=10,
            compose=append_tail_after_reflection,
        )
    assert applied and successor is not None
    thread_row = history.get_thread(engine, thread)
    assert thread_row is not None

    diff = dashboard.generation_diff(engine, thread_row, successor.generation_count)
    assert diff is not None and diff.previous_generation == snapshot.generation_count
    assert [(d.op, d.text) for d in diff.lines] == [
        ("kept", "Date: Nov 30"),
        ("removed", "* 🔴 (09:00) name is Ada"),
        ("removed", "* 🟡 (09:01) likes tea"),
        ("removed", "* 🟢 (09:02) weather"),
        ("added", "* 🔴 (09:00) name is Ada, likes tea"),
    ]
    opening = dashboard.generation_diff(engine, thread_row, snapshot.generation_count)
    assert opening is not None and opening.previous_generation is None
    assert [d.text for d in opening.lines] == lines and {d.op for d in opening.lines} == {"added"}
    assert dashboard.generation_diff(engine, thread_row, successor.generation_count + 1) is None
