"""The Observer keeps working memory current across turns (behaviour §8.7), end to end with the offline model
through litellm: buffered observations update the memory while the chat goes on, activations move the log,
and between two activations the actor's stable prefix stays byte-identical however the memory changes.
Postgres and SQLite."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from itertools import pairwise

from sqlalchemy import Engine

from om_core.config.options import ObservationalMemoryConfig
from om_core.engine import EngineSettings, MemoryEngine
from om_core.messages import text_message
from om_core.models.client import ModelClient
from om_core.store import history, records
from om_core.working_memory import document as wm

CONFIG = {
    "model": "om-local/extractive",
    "observation": {"messageTokens": 600, "bufferTokens": 0.25, "manageWorkingMemory": True},
    "reflection": {"observationTokens": 100_000},
    "workingMemory": {"enabled": True, "scope": "thread"},
}
FACTS = {
    3: "My name is Ada Lovelace.",
    11: "I live in London near the river.",
    19: "My favourite tea is Earl Grey.",
}
FILLER = ("harbor", "lantern", "copper", "meadow", "signal", "orchard", "velvet", "canyon", "ember", "quartz")
T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def said(i: int) -> str:
    words = " ".join(FILLER[(i * 7 + k * k) % len(FILLER)] for k in range(45))
    return f"{FACTS[i]} Also, about the trip: {words}." if i in FACTS else f"About the trip ({i}): {words}."


def test_the_observer_updates_working_memory_and_the_prefix_holds_between_activations(engine: Engine) -> None:
    om = MemoryEngine(
        engine,
        models=ModelClient(),
        config=ObservationalMemoryConfig.parse(CONFIG),
        settings=EngineSettings(),
    )
    thread, resource = f"t-{uuid.uuid4().hex[:10]}", f"user-{uuid.uuid4().hex[:10]}"
    turns: list[tuple[str, int, str, list[str]]] = []  # (log, memory version, memory, stable prefix)
    for i in range(28):
        role = "user" if i % 2 == 1 else "assistant"
        message = text_message(f"m{i}", role, said(i), T0 + timedelta(minutes=i))
        result = om.ingest_turn(thread, resource, [message])
        head = records.get_head(engine, f"thread:{thread}")
        row = history.get_thread(engine, thread)
        assert head is not None and row is not None
        cfg = om.thread_config(thread)
        memory = wm.read(engine, wm.target_for_thread(row, cfg), cfg)
        stable = list(result.context.system_messages[: result.context.stable_count])
        turns.append((head.active_observations, memory.version, str(memory.content), stable))
        if memory.version:
            assert memory.updated_by == "observer"
            shown = result.context.system_messages[result.context.stable_count :]
            assert any(str(memory.content) in text for text in shown), "the actor sees the memory as stored"

    final = turns[-1][2]
    for fact in FACTS.values():
        assert fact in final, f"the Observer kept {fact!r} in the working memory"
    assert turns[-1][1] >= 2, "the memory was updated on more than one turn"
    assert not any("Ada Lovelace" in log and "<working-memory>" in log for log, *_ in turns)

    activations = sum(1 for a, b in pairwise(turns) if a[0] != b[0])
    updates_between = [(a, b) for a, b in pairwise(turns) if a[0] == b[0] and a[0] and a[1] != b[1]]
    assert activations >= 2, "the log moved on more than one activation"
    assert updates_between, "some memory update landed between two activations"
    for before, after in updates_between:
        assert before[3] == after[3], "the stable prefix changed while only the working memory did"
