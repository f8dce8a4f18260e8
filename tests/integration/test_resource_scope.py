"""Resource scope through the engine, on Postgres and SQLite: one log shared by a resource's threads,
per-thread cursors, the other-conversations block, batches, obscured ids and per-resource config.

Only the remote model is faked (at the engine's model boundary); storage, policy, prompts and parsers are
the real ones.
"""

from __future__ import annotations

import re
import uuid
from datetime import timedelta

import pytest
from sqlalchemy import Engine

from om_api.openai_format import to_openai
from om_core.config.options import ObservationalMemoryConfig
from om_core.engine import EngineSettings, InlineExecutor, MemoryEngine
from om_core.engine.tasks import ObserveBatch, resource_key
from om_core.messages import text_message
from om_core.observations.resource_log import thread_label
from om_core.queries import set_config_overrides, set_resource_config_overrides
from om_core.store import history, records
from om_core.store.outbox import list_events
from tests.integration.test_engine_inprocess import T0, chatter
from tests.integration.test_tool_exchanges import (
    answering,
    assert_every_result_follows_its_call,
    calling,
    tool_seqs,
)
from tests.support.fake_models import FakeModels
from tests.support.invariants import check_thread

_SECTION = re.compile(r'<thread id="([^"]+)">')


def resource_config(**observation: object) -> ObservationalMemoryConfig:
    """Resource scope with readable thread ids; `reflection` replaces the default reflection block."""
    reflection = observation.pop("reflection", {"observationTokens": 20_000})
    return ObservationalMemoryConfig.parse(
        {
            "scope": "resource",
            "obscureThreadIds": False,
            "observation": {"messageTokens": 3000, **observation},
            "reflection": reflection,
        }
    )


def make(db: Engine, config: ObservationalMemoryConfig) -> tuple[MemoryEngine, FakeModels, InlineExecutor]:
    fake = FakeModels()
    executor = InlineExecutor()
    engine = MemoryEngine(db, models=fake, config=config, executor=executor, settings=EngineSettings())
    return engine, fake, executor


def post(engine: MemoryEngine, thread: str, resource: str, i: int, words: int = 60) -> object:
    role = "user" if i % 2 == 0 else "assistant"
    # Each thread says different things (the same lines in every thread would look like a repetition
    # loop to the degenerate-output check).
    variant = i + 37 * (sum(map(ord, thread)) % 53)
    message = text_message(f"{thread}-m{i}", role, chatter(variant, words), T0 + timedelta(minutes=i))
    return engine.ingest_turn(thread, resource, [message])


def ids(n: int) -> tuple[str, list[str]]:
    tag = uuid.uuid4().hex[:8]
    return f"user-{tag}", [f"t{k}-{tag}" for k in range(n)]


def test_five_threads_share_one_log_and_every_message_is_covered_once(engine: Engine) -> None:
    om, fake, _executor = make(engine, resource_config())
    resource, threads = ids(5)
    for i in range(24):
        for thread in threads:
            post(om, thread, resource, i)

    log = records.get_head(engine, resource_key(resource))
    assert log is not None and log.scope == "resource" and log.thread_id is None
    sections = set(_SECTION.findall(log.active_observations))
    assert sections == set(threads), "every thread's observations sit in its own section"
    for thread in threads:
        report = check_thread(engine, thread)
        assert not report.violations, (thread, report.violations)
        assert report.cursor > 0, f"{thread} was never observed"
        own = records.get_head(engine, f"thread:{thread}")
        assert own is not None and own.active_observations == "", "a cursor record holds no log"
    assert any("The history below covers" in user for kind, user in fake.calls if kind == "observer")
    starts = [
        e
        for t in threads
        for e in list_events(engine, thread_id=t, limit=10_000)
        if e.type == "data-om-observation-start"
    ]
    assert any(len(e.payload["threadIds"]) > 1 for e in starts), "one Observer call covered several threads"
    assert all(e.payload["threadIds"] for e in starts)


def test_a_turn_sees_the_other_threads_and_counts_them_toward_pending(engine: Engine) -> None:
    om, _fake, _executor = make(engine, resource_config())
    resource, (first, second) = ids(2)
    post(om, first, resource, 0)
    post(om, first, resource, 1)
    alone = post(om, second, resource, 2, words=10)
    own_only = om.ingest_turn(
        f"solo-{uuid.uuid4().hex[:6]}", None, [text_message("s", "user", chatter(2, 10), T0)]
    )

    assert any(f'<other-conversation id="{first}">' in m for m in alone.system_messages)  # type: ignore[attr-defined]
    assert any("START_OTHER_CONVERSATIONS_BLOCK" in m for m in alone.system_messages)  # type: ignore[attr-defined]
    assert not any(second in m for m in alone.system_messages)  # type: ignore[attr-defined]
    pending = alone.status["windows"]["active"]["messages"]["tokens"]  # type: ignore[attr-defined]
    solo = own_only.status["windows"]["active"]["messages"]["tokens"]
    assert pending > solo + 100, "the other thread's messages count toward pending"


def test_batches_are_planned_per_max_tokens_and_run_as_separate_tasks(engine: Engine) -> None:
    om, _fake, executor = make(engine, resource_config(messageTokens=1500, maxTokensPerBatch=700))
    resource, threads = ids(4)
    for i in range(8):
        for thread in threads:
            post(om, thread, resource, i)

    batches = [t for t in executor.submitted if isinstance(t, ObserveBatch)]
    assert batches, "observation ran as batch tasks"
    runs: dict[str, list[ObserveBatch]] = {}
    for batch in batches:
        runs.setdefault(batch.cycle_id.rsplit("-b", 1)[0], []).append(batch)
    assert any(len(run) > 1 for run in runs.values()), "one observation was split into several batches"
    for run in runs.values():
        covered = [t for b in run for t in b.thread_ids]
        assert len(covered) == len(set(covered)), "no thread is in two batches of one observation"
    for thread in threads:
        assert not check_thread(engine, thread).violations


def test_obscured_thread_ids_never_reach_a_prompt_or_the_log(engine: Engine) -> None:
    config = ObservationalMemoryConfig.parse(
        {
            "scope": "resource",
            "observation": {"messageTokens": 3000},
            "reflection": {"observationTokens": 20_000},
        }
    )
    om, fake, _executor = make(engine, config)
    resource, threads = ids(3)
    for i in range(16):
        for thread in threads:
            post(om, thread, resource, i)
    log = records.get_head(engine, resource_key(resource))
    assert log is not None and log.active_observations
    labels = {thread_label(t, obscure=True) for t in threads}
    assert set(_SECTION.findall(log.active_observations)) <= labels
    assert all(re.fullmatch(r"[0-9a-f]{8}", label) for label in labels)
    for thread in threads:
        assert thread not in log.active_observations
        for _kind, user in fake.calls:
            assert thread not in user, "a thread id reached a model prompt"
    context = post(om, threads[0], resource, 99, words=5)
    assert not any(threads[1] in m for m in context.system_messages)  # type: ignore[attr-defined]


def test_resource_overrides_apply_to_every_thread_and_a_thread_override_wins(engine: Engine) -> None:
    om, _fake, _executor = make(
        engine, ObservationalMemoryConfig.parse({"observation": {"messageTokens": 3000}})
    )
    resource, (first, second) = ids(2)
    post(om, first, resource, 0)
    post(om, second, resource, 0)
    effective = set_resource_config_overrides(om, resource, {"scope": "resource", "obscureThreadIds": False})
    assert effective["scope"] == "resource"
    set_config_overrides(om, second, {"scope": "thread"})
    assert om.thread_config(first).scope == "resource"
    assert om.thread_config(second).scope == "thread"
    assert om.thread_config(second).obscure_thread_ids is False, "the resource's other options still apply"
    for i in range(1, 50):
        post(om, first, resource, i)
    log = records.get_head(engine, resource_key(resource))
    assert log is not None and first in log.active_observations
    assert second not in log.active_observations


def test_reflection_condenses_the_shared_log_and_keeps_every_thread_covered(engine: Engine) -> None:
    om, _fake, _executor = make(
        engine, resource_config(messageTokens=1500, reflection={"observationTokens": 1200})
    )
    resource, threads = ids(3)
    for i in range(30):
        for thread in threads:
            post(om, thread, resource, i)
    log = records.get_head(engine, resource_key(resource))
    assert log is not None and log.generation_count >= 1, "the shared log was reflected"
    for thread in threads:
        assert not check_thread(engine, thread).violations
        own = records.get_head(engine, f"thread:{thread}")
        assert own is not None and own.generation_count == 0, "reflection never touches a thread's cursor"


@pytest.mark.parametrize("trigger", ["manual"])
def test_observe_now_observes_every_thread_of_the_resource(engine: Engine, trigger: str) -> None:
    om, _fake, _executor = make(engine, resource_config())
    resource, threads = ids(3)
    for thread in threads:
        post(om, thread, resource, 0)
        post(om, thread, resource, 1)
    assert om.observe_now(threads[0]).applied
    for thread in threads:
        own = records.get_head(engine, f"thread:{thread}")
        assert own is not None and own.last_observed_seq > 0
        assert not check_thread(engine, thread).violations


def test_buffering_in_resource_scope_activates_each_thread_into_the_shared_log(engine: Engine) -> None:
    # The reference refuses async buffering in resource scope; om buffers per thread when asked.
    om, _fake, _executor = make(engine, resource_config(bufferTokens=0.2))
    resource, threads = ids(3)
    for i in range(30):
        for thread in threads:
            post(om, thread, resource, i)

    log = records.get_head(engine, resource_key(resource))
    assert log is not None
    assert set(_SECTION.findall(log.active_observations)) == set(threads)
    for thread in threads:
        report = check_thread(engine, thread)
        assert not report.violations, (thread, report.violations)
        kinds = {e.type for e in list_events(engine, thread_id=thread, limit=10_000)}
        assert {"data-om-buffering-end", "data-om-activation"} <= kinds, (thread, kinds)
        own = records.get_head(engine, f"thread:{thread}")
        assert own is not None and own.active_observations == "" and own.last_observed_seq > 0
        meta = history.get_thread(engine, thread)
        assert meta is not None and meta.om_metadata["lastObservedMessageCursor"] == own.last_observed_seq


def test_buffered_reflection_of_the_shared_log_keeps_every_thread_covered(engine: Engine) -> None:
    om, _fake, _executor = make(
        engine,
        resource_config(
            messageTokens=1500,
            bufferTokens=0.25,
            reflection={"observationTokens": 1200, "bufferActivation": 0.5},
        ),
    )
    resource, threads = ids(3)
    for i in range(36):
        for thread in threads:
            post(om, thread, resource, i)
    log = records.get_head(engine, resource_key(resource))
    assert log is not None and log.generation_count >= 1
    events = [e for t in threads for e in list_events(engine, thread_id=t, limit=10_000)]
    assert any(
        e.type == "data-om-buffering-end" and e.payload.get("operationType") == "reflection" for e in events
    ), "the shared log was reflected in the background"
    for thread in threads:
        assert not check_thread(engine, thread).violations


def test_a_batch_never_splits_a_tool_exchange_in_any_of_its_threads(engine: Engine) -> None:
    """The requester's newest message (a tool result) stays raw with its call; another thread's open
    call (no result yet) holds that thread's cut back before it."""
    om, fake, _executor = make(engine, resource_config(messageTokens=1800))
    resource, (first, second) = ids(2)
    for i in range(10):
        post(om, second, resource, i)
    om.ingest_turn(second, resource, [calling("b-call", 30, "open-1")])
    for i in range(10):
        post(om, first, resource, i)
    before = len(fake.calls)
    result = om.ingest_turn(
        first, resource, [calling("a-call", 40, "c1"), answering("a-res", 41, "c1", words=400)]
    )
    assert len(fake.calls) > before, "the turn crossed the threshold and observed a batch"
    seqs = tool_seqs(result.messages, "c1")
    assert set(seqs) == {"call", "result"}, "the requester's call and result are both raw"
    first_cursor = records.get_head(engine, f"thread:{first}")
    second_cursor = records.get_head(engine, f"thread:{second}")
    assert first_cursor is not None and second_cursor is not None
    assert 0 < first_cursor.last_observed_seq < seqs["call"]
    second_view = om.ingest_turn(second, resource, [])
    open_call = tool_seqs(second_view.messages, "open-1")
    assert set(open_call) == {"call"}, "the other thread's open call is still raw"
    assert 0 < second_cursor.last_observed_seq < open_call["call"]
    assert_every_result_follows_its_call(to_openai(result.messages))
    for thread in (first, second):
        assert not check_thread(engine, thread).violations
