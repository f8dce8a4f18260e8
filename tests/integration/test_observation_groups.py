"""Observation groups through the engine (§9.1), on Postgres and SQLite: every observation run, blocking
or buffered, in thread and resource scope, wraps its lines with the range of the raw messages they came
from; the group rows keep every range after reflection rewrote the log; a reflection becomes one group
over the ranges it condensed; models never see wrappers.

Only the remote model is faked (at the engine's model boundary); storage, policy, prompts and parsers are
the real ones.
"""

from __future__ import annotations

import itertools
import re

from sqlalchemy import Engine, select

from om_core.config.options import ObservationalMemoryConfig
from om_core.context.actor import build_actor_context
from om_core.engine.tasks import resource_key
from om_core.store import groups, records, schema
from om_core.store.types import ObservationGroup
from tests.integration.test_engine_inprocess import T0, make, new_thread, play
from tests.integration.test_resource_scope import ids, post
from tests.integration.test_resource_scope import make as make_resource
from tests.support.invariants import check_thread

_OPEN = re.compile(r'<observation-group id="([0-9a-f]{16})" range="([^"]+)">')


def grouped_config(**extra: object) -> ObservationalMemoryConfig:
    return ObservationalMemoryConfig.parse(
        {
            "retrieval": True,
            "observation": {"messageTokens": 3000},
            "reflection": {"observationTokens": 2000},
            **extra,
        }
    )


def message_number(message_id: str) -> int:
    return int(message_id.removeprefix("m"))


def rows(db: Engine, thread_id: str) -> list[ObservationGroup]:
    with db.connect() as conn:
        return groups.of_thread(conn, thread_id)


def test_every_observation_is_grouped_and_the_ranges_tile_the_conversation(engine: Engine) -> None:
    om, fake = make(engine, grouped_config())
    thread_id = new_thread()
    play(om, thread_id, 160)
    assert check_thread(engine, thread_id).violations == []

    stored = rows(engine, thread_id)
    observed = [g for g in stored if g.kind == "observation"]
    assert len(observed) >= 5, "the scenario must observe many times"
    # Each group points at its own stretch of the conversation: in commit order, without gaps or overlaps,
    # starting at the first message.
    spans = [tuple(message_number(i) for i in g.ranges.split(":")) for g in observed]
    assert spans[0][0] == 0
    for (start, end), (next_start, _next_end) in itertools.pairwise(spans):
        assert start <= end < next_start == end + 1
    # Models never see a wrapper, and the observations in the group row are the ones in the log.
    assert not any("observation-group" in text for _role, text in fake.calls)
    head = records.get_head(engine, f"thread:{thread_id}")
    assert head is not None
    in_log = dict(_OPEN.findall(head.active_observations))
    assert in_log, "the live log carries group wrappers"
    by_id = {g.id: g for g in stored}
    assert set(in_log) <= set(by_id), "every group in the log has its row"
    for group_id, ranges in in_log.items():
        assert by_id[group_id].ranges == ranges


def test_a_reflection_becomes_one_group_over_what_it_condensed_and_old_ranges_stay_findable(
    engine: Engine,
) -> None:
    om, _fake = make(engine, grouped_config())
    thread_id = new_thread()
    play(om, thread_id, 160)
    head = records.get_head(engine, f"thread:{thread_id}")
    assert head is not None and head.generation_count >= 1, "the scenario must reflect"

    stored = rows(engine, thread_id)
    reflections = [g for g in stored if g.kind == "reflection"]
    assert reflections
    first_range = _OPEN.search(head.active_observations)
    assert first_range is not None
    # The log starts with a reflection's group whose range starts at the first message of the thread.
    assert first_range.group(1) in {g.id for g in reflections}
    assert first_range.group(2).split(":")[0] == "m0"
    # Every group ever committed is still found by its id, also those the reflections condensed away.
    with engine.connect() as conn:
        for group in stored:
            assert groups.find(conn, group.id, group.resource_id) == group
            assert groups.find(conn, group.id, "another-resource") is None


def test_the_actor_reads_groups_as_headings_with_ranges_only_in_retrieval_mode(engine: Engine) -> None:
    om, _fake = make(engine, grouped_config())
    thread_id = new_thread()
    play(om, thread_id, 80)
    head = records.get_head(engine, f"thread:{thread_id}")
    assert head is not None and _OPEN.search(head.active_observations)

    def rendered(guidance: str | None) -> str:
        context = build_actor_context(
            active_observations=head.active_observations,
            current_task=None,
            suggested_response=None,
            now=T0,
            tz="UTC",
            has_unobserved_history=True,
            retrieval_guidance=guidance,
        )
        return context.observation_block

    with_recall = rendered("use recall")
    group_id, ranges = _OPEN.findall(head.active_observations)[0]
    assert f"## Group `{group_id}`\n_range: `{ranges}`_" in with_recall
    assert "observation-group" not in with_recall
    without = rendered(None)
    assert "## Group" not in without and "observation-group" not in without


def test_without_retrieval_nothing_is_grouped(engine: Engine) -> None:
    om, _fake = make(engine)
    thread_id = new_thread()
    play(om, thread_id, 60)
    head = records.get_head(engine, f"thread:{thread_id}")
    assert head is not None and head.active_observations
    assert "observation-group" not in head.active_observations
    assert rows(engine, thread_id) == []


def test_a_resource_log_groups_each_threads_lines_with_that_threads_range(engine: Engine) -> None:
    config = ObservationalMemoryConfig.parse(
        {
            "scope": "resource",
            "obscureThreadIds": False,
            "retrieval": True,
            "observation": {"messageTokens": 3000},
            "reflection": {"observationTokens": 20_000},
        }
    )
    om, _fake, _executor = make_resource(engine, config)
    resource, threads = ids(3)
    for i in range(24):
        for thread in threads:
            post(om, thread, resource, i)
    log = records.get_head(engine, resource_key(resource))
    assert log is not None
    with engine.connect() as conn:
        stored = conn.execute(
            select(schema.observation_groups).where(schema.observation_groups.c.resource_id == resource)
        ).all()
    assert stored, "the resource's batches made groups"
    for row in stored:
        start, end = row.ranges.split(":")
        # A thread's group names that thread's own messages (`<thread>-m<i>`), first before last.
        assert start.startswith(f"{row.thread_id}-m") and end.startswith(f"{row.thread_id}-m")
        assert int(start.rsplit("m", 1)[1]) <= int(end.rsplit("m", 1)[1])
        assert f'<observation-group id="{row.id}" range="{row.ranges}">' in log.active_observations
    # Inside each thread's section.
    for match in re.finditer(
        r'<thread id="([^"]+)">\n<observation-group id="[0-9a-f]+" range="([^"]+)">', log.active_observations
    ):
        assert match.group(2).startswith(f"{match.group(1)}-m")
