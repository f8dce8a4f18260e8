"""Failed observation events carry the partial observations (issue 33; behaviour §10.1, the original's
`observations` field of `data-om-observation-failed` and `data-om-buffering-failed`).

An Observer reply cut at the output-token limit cannot be committed (the log would silently lose its
end), so the cycle fails; what the reply did observe is shown on the failed event, and nothing of it
reaches the log. A call that never happened (an input above the largest `ModelByInputTokens` tier) has
nothing to show. Driven through `MemoryEngine` on SQLite with the inline executor; the model boundary is
a fake that answers every call with the same cut reply.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine

from om_core.config.options import ObservationalMemoryConfig
from om_core.engine import MemoryEngine, lookup_key
from om_core.engine import events as ev
from om_core.messages import Message, text_message
from om_core.store import records
from om_core.store.outbox import list_events
from om_core.tenancy.scoped_ids import StoredId
from tests.support.fake_models import FakeCompletion

T0 = datetime(2026, 3, 3, 9, 0, tzinfo=UTC)
CUT_REPLY = (
    "<observations>\n"
    "Date: Mar 3, 2026\n"
    "* 🔴 (09:00) User's beagle is named Rufus\n"
    "* 🟡 (09:01) User lives in Lisbon\n"
    "* 🟡 (09:02) User is planning a trip to"
)


@dataclass
class CutModels:
    """Every call answers with a reply the provider cut at the output-token limit."""

    calls: int = 0
    models: list[Any] = field(default_factory=list)

    def complete(self, model: Any, **_: Any) -> FakeCompletion:
        self.calls += 1
        self.models.append(model)
        return FakeCompletion(CUT_REPLY, 1000, 4000, 0.0, "fake/observer", finish_reason="length")

    def accepts_images(self, model: str) -> bool | None:
        return None


def message(i: int) -> Message:
    words = " ".join(f"{w}{i}" for w in ("harbor", "lantern", "copper", "meadow", "signal") * 20)
    return text_message(
        f"m{i}", "assistant" if i % 2 else "user", f"Message {i}: {words}", T0 + timedelta(minutes=i)
    )


def config(**observation: Any) -> ObservationalMemoryConfig:
    return ObservationalMemoryConfig.parse(
        {
            "model": "fake/observer",
            "observation": {"messageTokens": 1000, **observation},
            "reflection": {"observationTokens": 50_000},
        }
    )


@pytest.mark.parametrize(
    ("observation", "failed_type"),
    [
        ({"bufferTokens": False}, ev.OBSERVATION_FAILED.value),
        ({"bufferTokens": 0.25, "blockAfter": 10.0}, ev.BUFFERING_FAILED.value),
    ],
    ids=["blocking", "buffered"],
)
def test_a_reply_cut_at_the_output_limit_fails_and_its_observations_are_on_the_failed_event(
    sqlite_engine: Engine, observation: dict[str, Any], failed_type: str
) -> None:
    models = CutModels()
    om = MemoryEngine(sqlite_engine, models=models, config=config(**observation))  # type: ignore[arg-type]
    thread = StoredId(f"t-{uuid.uuid4().hex[:8]}")
    for i in range(12):
        om.ingest_turn(thread, thread, [message(i)])
        if models.calls:
            break
    assert models.calls == 2, "one retry after an unusable reply, then the cycle fails"

    failed = list_events(sqlite_engine, thread_id=thread, types=[failed_type])
    assert failed, f"no {failed_type}"
    payload = failed[-1].payload
    assert "output-token limit" in payload["error"]
    assert payload["errorCode"] == "OBSERVER_DEGENERATE"
    shown = payload["observations"]
    assert "User's beagle is named Rufus" in shown
    assert "User lives in Lisbon" in shown
    head = records.get_head(sqlite_engine, lookup_key(thread))
    assert head is not None
    assert "Rufus" not in head.active_observations, "a cut reply is never committed"
    assert all("Rufus" not in chunk.observations for chunk in head.chunks)


def test_a_call_that_never_ran_has_no_partial_observations(sqlite_engine: Engine) -> None:
    """Above the largest tier no model is called (MODEL_TIER_EXCEEDED): nothing was observed."""
    models = CutModels()
    cfg = ObservationalMemoryConfig.parse(
        {
            "observation": {
                "model": {"upTo": {"500": "fake/small"}},
                "messageTokens": 1000,
                "bufferTokens": False,
            },
            "reflection": {"model": "fake/reflector", "observationTokens": 50_000},
        }
    )
    om = MemoryEngine(sqlite_engine, models=models, config=cfg)  # type: ignore[arg-type]
    thread = StoredId(f"t-{uuid.uuid4().hex[:8]}")
    failed: list[dict[str, Any]] = []
    for i in range(12):
        result = om.ingest_turn(thread, thread, [message(i)])
        failed = [e.payload for e in result.events if e.type == ev.OBSERVATION_FAILED.value]
        if failed:
            break
    assert failed and failed[0]["errorCode"] == "MODEL_TIER_EXCEEDED"
    assert "observations" not in failed[0]
    assert models.calls == 0
    assert result.degraded
