"""`shareTokenBudget` with async buffering, through the engine (behaviour §4.2, issue 14).

Messages may use what the observation log leaves of `messageTokens + observationTokens`, so the message
threshold moves with the log, and with it the buffering interval and `blockAfter`. These tests drive
conversations through `MemoryEngine` and hold them to the invariants the fuzz checks.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine

from om_core.config.options import ObservationalMemoryConfig
from om_core.engine import EngineSettings, MemoryEngine, TurnResult
from om_core.engine.tasks import InlineExecutor, Task
from om_core.messages import text_message
from om_core.store.outbox import list_events
from tests.fuzz.runner import fuzz_engine
from tests.fuzz.scenario import ScenarioSettings, run_seed
from tests.support.fake_models import FakeModels
from tests.support.invariants import check_thread

T0 = datetime(2026, 3, 3, 9, 0, tzinfo=UTC)
WORDS = ["harbor", "lantern", "copper", "meadow", "signal", "orchard", "velvet", "canyon", "ember", "quartz"]
MIN, OBSERVATION_TOKENS = 1000, 1500
MAX = MIN + OBSERVATION_TOKENS


def shared_config(observation_tokens: int = OBSERVATION_TOKENS) -> ObservationalMemoryConfig:
    return ObservationalMemoryConfig.parse(
        {
            "shareTokenBudget": True,
            "observation": {"messageTokens": MIN},
            "reflection": {"observationTokens": observation_tokens},
        }
    )


def chatter(i: int, words: int = 30) -> str:
    return f"Message {i} says " + " ".join(WORDS[(i * 7 + k * k) % len(WORDS)] for k in range(words))


def play(om: MemoryEngine, thread_id: str, turns: int) -> list[TurnResult]:
    results = []
    for i in range(turns):
        role = "user" if i % 2 == 0 else "assistant"
        message = text_message(f"m{i}", role, chatter(i), T0 + timedelta(minutes=i))
        results.append(om.ingest_turn(thread_id, "res-1", [message]))
    return results


def windows(result: TurnResult) -> tuple[int, int, int]:
    """(pending message tokens, message threshold, observation tokens) after the turn."""
    active = result.status["windows"]["active"]
    return active["messages"]["tokens"], active["messages"]["threshold"], active["observations"]["tokens"]


class BlockingOnly(InlineExecutor):
    """Runs what a turn waits for and never the background work it submits: with no buffering, only
    `blockAfter` bounds the raw history, which shows where it stands."""

    def submit(self, task: Task) -> None:
        return None


def test_buffered_observations_are_activated_and_the_threshold_moves_with_the_log(engine: Engine) -> None:
    """A budget of 1000 + 4000: the threshold starts at 5000 and falls towards 1000 as the log grows, and
    the buffering interval (0.2 of it) with it: a fixed interval (0.2 of 5000) would cut chunks of
    500-1000 tokens where the threshold is near 1000, and activate them seldom and coarsely."""
    observation_tokens = 4000
    config = shared_config(observation_tokens)
    om = MemoryEngine(engine, models=FakeModels(), config=config, settings=EngineSettings())  # type: ignore[arg-type]
    thread_id = f"t-{uuid.uuid4().hex[:10]}"
    results = play(om, thread_id, 300)

    thresholds = set()
    low_runs: list[tuple[int, int]] = []
    for result in results:
        _, threshold, observation_tokens_now = windows(result)
        assert threshold == max(MIN + observation_tokens - observation_tokens_now, MIN), "§4.2 threshold"
        thresholds.add(threshold)
        for event in result.events:
            if event.type == "data-om-buffering-start" and threshold < 1.5 * MIN:
                low_runs.append((threshold, event.payload["tokensToBuffer"]))
    assert len(thresholds) >= 5, f"the threshold must move with the log: {sorted(thresholds)}"
    assert len(low_runs) >= 3, f"buffering must run where the threshold is low: {low_runs}"
    for threshold, tokens in low_runs:
        assert tokens <= 0.2 * threshold + 100, f"interval not scaled to the threshold {threshold}: {tokens}"
    events = list_events(engine, thread_id=thread_id, limit=10_000)
    kinds = {e.type for e in events}
    assert {"data-om-buffering-end", "data-om-activation"} <= kinds, kinds
    report = check_thread(engine, thread_id)
    assert report.violations == []
    assert report.cursor > 0 and report.generations >= 1


def test_block_after_follows_the_threshold_of_the_moment(engine: Engine) -> None:
    """With the budget's `max` at 2500 a fixed `blockAfter` would be 3000; as the log grows the
    threshold falls towards 1000 and the turn must wait at 1.2 times that."""
    om = MemoryEngine(
        engine,
        models=FakeModels(),
        config=shared_config(),
        executor=BlockingOnly(),
        settings=EngineSettings(),
    )  # type: ignore[arg-type]
    thread_id = f"t-{uuid.uuid4().hex[:10]}"
    results = play(om, thread_id, 160)
    lowered = [r for r in results if windows(r)[1] < MAX]
    assert lowered, "the log must have grown enough to lower the threshold"
    for result in results:
        pending, threshold, _ = windows(result)
        assert pending < round(1.2 * threshold), (pending, threshold)
    assert any(r.blocked for r in lowered), "observation must have blocked at a lowered threshold"
    assert check_thread(engine, thread_id).violations == []


@pytest.mark.parametrize("seed", range(8))
def test_shared_budget_interleavings_keep_every_fuzz_invariant(postgres_url: str, seed: int) -> None:
    """The interleaving fuzz (two instances, three threads, faults, redeliveries) with a shared budget on
    every seed: coverage exactly once, no discarded chunk, chunk order, monotonic cursor, one head."""
    dbs = [fuzz_engine(postgres_url), fuzz_engine(postgres_url)]
    try:
        result = run_seed(10_000 + seed, dbs, ScenarioSettings(share_token_budget=True))
    finally:
        for db in dbs:
            db.dispose()
    assert result.report.violations == [], result.report.violations
    assert result.report.stats["chunks:activated"] > 0 or result.report.stats["sync-commits"] > 0
