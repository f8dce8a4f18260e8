"""Resource-scope bugs found by the interleaving fuzz (`tests/fuzz`, resource-scope seeds), each pinned by a
deterministic test built from its root cause.

- A batch delivered again (a queue redelivery, a task queued twice) commits what came after its first
  commit under the same cycle id; its end event was dropped as a repeat of the first run's (events are
  unique per key, type and cycle), so the thread's cursor moved without a reported range.
- A batch whose Observer reply had no block for any thread raised a bare `OperationFailed`, unlike
  thread scope, which chains the `ObserverDegenerateError` (the fuzz and a waiting turn read the cause).
- A turn reads the shared log and the threads' cursors in separate statements (READ COMMITTED): a batch
  committing in between left its messages out of the turn's context (the other thread's) or showed them
  twice (the turn's own thread, when the result is read again after the turn's work). The turn now reads
  the log and its own cursor again after the other reads and repeats the read when either changed.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Engine

from om_core.config.options import ObservationalMemoryConfig
from om_core.engine import EngineSettings, InlineExecutor, MemoryEngine, ObserverDegenerateError, turn_reply
from om_core.engine import resource as resource_module
from om_core.engine.tasks import ObserveBatch, lookup_key
from om_core.errors import OperationFailed
from om_core.messages import text_message
from om_core.store import records
from om_core.store.outbox import list_events
from tests.fuzz.fake_model import FakeCompletion, marker, markers_in
from tests.integration.test_engine_inprocess import T0, chatter
from tests.support.fake_models import FakeModels
from tests.support.invariants import check_thread


def quiet_config() -> ObservationalMemoryConfig:
    """Resource scope with a threshold no test reaches: only the batches a test runs observe anything."""
    return ObservationalMemoryConfig.parse(
        {
            "scope": "resource",
            "obscureThreadIds": False,
            "observation": {"messageTokens": 30_000},
            "reflection": {"observationTokens": 90_000},
        }
    )


def make(db: Engine, models: Any = None) -> MemoryEngine:
    executor = InlineExecutor()
    om = MemoryEngine(
        db, models=models or FakeModels(), config=quiet_config(), executor=executor, settings=EngineSettings()
    )
    executor.bind(om.run_task)
    return om


def post(om: MemoryEngine, thread: str, resource: str, number: int) -> Any:
    """A message whose text starts with the fuzz's marker, so its way into the context can be traced."""
    text = f"{marker(number, 0)} {chatter(number + 37 * len(thread), 40)}"
    message = text_message(f"m{number}", "user", text, T0 + timedelta(minutes=number))
    return om.ingest_turn(thread, resource, [message])


def ids() -> tuple[str, str, str]:
    tag = uuid.uuid4().hex[:8]
    return f"user-{tag}", f"a-{tag}", f"b-{tag}"


def shown(result: Any) -> list[str]:
    """Every marker the actor is shown: raw messages, then the system messages (log and other threads)."""
    raw = [m for message in result.messages for part in message.parts for m in markers_in(part.text)]
    return raw + [m for text in result.system_messages for m in markers_in(text)]


def test_a_batch_delivered_again_reports_the_range_it_commits(engine: Engine) -> None:
    om = make(engine)
    resource, first, second = ids()
    for n in range(2):
        post(om, first, resource, n)
        post(om, second, resource, 10 + n)
    batch = ObserveBatch(first, "observe-redelivered", (first, second))
    assert om.run_task(batch)
    post(om, first, resource, 2)
    post(om, first, resource, 3)

    assert om.run_task(batch), "the redelivered batch observes what came after its first commit"

    cursor = records.get_head(engine, lookup_key(first))
    assert cursor is not None and cursor.last_observed_seq == 4
    report = check_thread(engine, first)
    assert report.violations == []
    assert report.covered_ranges == [(0, 2), (2, 4)]


class _NoThreadBlocks:
    """An Observer that answers a multi-thread prompt without any `<thread id>` block."""

    def complete(self, model: Any, *, system: str, user: Any, **_: Any) -> FakeCompletion:
        text = "<observations>\n* 🔴 (09:00) The user talked about several things\n</observations>"
        return FakeCompletion(text, len(str(user)) // 4, len(text) // 4, 0.0, str(model))

    def accepts_images(self, model: str) -> bool | None:
        return None


def test_a_batch_with_no_observations_for_any_thread_fails_with_the_degenerate_cause(engine: Engine) -> None:
    om = make(engine, _NoThreadBlocks())
    resource, first, second = ids()
    post(om, first, resource, 0)
    post(om, second, resource, 1)

    with pytest.raises(OperationFailed) as failed:
        om.run_task(ObserveBatch(first, "observe-nothing", (first, second)))

    assert isinstance(failed.value.__cause__, ObserverDegenerateError)
    for thread in (first, second):
        cursor = records.get_head(engine, lookup_key(thread))
        assert cursor is not None and cursor.last_observed_seq == 0, "the messages stay raw"
        failures = list_events(engine, thread_id=thread, types=["data-om-observation-failed"])
        assert len(failures) == 1


def _commit_first(run: Callable[[], object]) -> None:
    """`run` (a batch commit) in another thread, waited for: a worker committing while the turn reads."""
    errors: list[BaseException] = []

    def target() -> None:
        try:
            run()
        except BaseException as exc:  # reported below
            errors.append(exc)

    worker = threading.Thread(target=target)
    worker.start()
    worker.join(timeout=60)
    assert not worker.is_alive(), "the batch commit waited on the turn's transaction"
    assert errors == []


def test_a_batch_committing_while_a_turn_reads_does_not_hide_the_other_threads_messages(
    pg_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    om = make(pg_engine)
    resource, first, second = ids()
    post(om, first, resource, 0)
    for n in range(1, 4):
        post(om, second, resource, n)
    windows = resource_module.thread_windows
    fired: list[bool] = []

    def batch_commits_between_the_reads(*args: Any, **kwargs: Any) -> Any:
        # Called by the turn of `first` after it read the shared log, in the same transaction.
        if not fired:
            fired.append(True)
            _commit_first(lambda: om.run_task(ObserveBatch(second, "observe-meanwhile", (second,))))
        return windows(*args, **kwargs)

    monkeypatch.setattr(resource_module, "thread_windows", batch_commits_between_the_reads)
    result = post(om, first, resource, 4)

    assert fired
    assert sorted(shown(result)) == ["m0.0", "m1.0", "m2.0", "m3.0", "m4.0"]


def test_a_batch_committing_while_a_turn_reads_again_does_not_show_its_messages_twice(
    pg_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    om = make(pg_engine)
    resource, first, second = ids()
    for n in range(3):
        post(om, first, resource, n)
    post(om, second, resource, 9)
    read_log = resource_module.read_log
    fired: list[bool] = []

    def batch_commits_before_the_log_is_read(*args: Any, **kwargs: Any) -> Any:
        # Called by the turn's second read (`_read_current`) after it read the thread's cursor.
        if not fired:
            fired.append(True)
            _commit_first(lambda: om.run_task(ObserveBatch(first, "observe-meanwhile", (first,))))
        return read_log(*args, **kwargs)

    cfg = om.thread_config(first)
    monkeypatch.setattr(resource_module, "read_log", batch_commits_before_the_log_is_read)
    # What a turn whose background work changed the memory returns: everything read again (`current=None`).
    result = turn_reply.turn_result(om, first, cfg, 0, False, None, [], current=None)

    assert fired
    assert sorted(shown(result)) == ["m0.0", "m1.0", "m2.0", "m9.0"]
