"""Turns first in the embedded stack (`embedded_stack`, what `om demo` runs; `om up` starts the same
services, tests/integration/test_embedded_up.py checks its priorities): real processes, real Redis, the
offline local model.

- the background worker and beat run below the API's CPU priority, every thread of them, and (under
  Linux's autogroup scheduler) so do their sessions; the API, the turn worker and Redis do not;
- the background worker runs at most `BACKGROUND_CONCURRENCY` tasks at once, and a turn that must wait
  for a synchronous observation gets it while every one of those slots is held: it is answered blocked,
  observed and not degraded (with one worker for every queue it waited out the blocking deadline).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from om_api.client import OMClient
from om_app.embedded import AUTOGROUP_SWITCH, BACKGROUND_CONCURRENCY, Stack, embedded_stack
from om_app.sample_conversation import generate
from tests.support import held_tasks
from tests.support.workers import wait_until

#: The background worker starts at the lowered priority: on a machine busy with other work its start-up
#: (importing the model stack) takes a while, by design.
pytestmark = pytest.mark.timeout(600)

CONFIG = (
    '{"model": "om-local/extractive", "observation": {"messageTokens": 1500, "bufferTokens": false},'
    ' "reflection": {"observationTokens": 100000}}'
)
LOWERED = {"worker", "beat"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    env = {
        "OM_CONFIG": CONFIG,
        "OM_WORKER_IMPORTS": held_tasks.__name__,
        "OM_WORKER_METRICS_PORT": "0",  # tests running at once would share the default port
        "OM_BLOCKING_DEADLINE_S": "30",
    }
    with embedded_stack(workdir=tmp_path_factory.mktemp("stack"), extra_env=env, nice=10) as running:
        yield running


def nices(pid: int) -> set[int]:
    """The niceness of each thread of the process (field 19 of /proc/<pid>/task/<tid>/stat)."""
    found = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        found.add(int((task / "stat").read_text().rsplit(")", 1)[1].split()[16]))
    return found


def autogroup_nice(pid: int) -> int | None:
    """The niceness of the process's session's autogroup; None where the autogroup scheduler is off."""
    try:
        if AUTOGROUP_SWITCH.read_text().strip() != "1":
            return None
    except OSError:
        return None
    return int(Path(f"/proc/{pid}/autogroup").read_text().split()[-1])


def test_background_worker_and_beat_run_below_the_api(stack: Stack) -> None:
    own = os.getpriority(os.PRIO_PROCESS, 0)
    assert set(stack.processes) == {"redis", "turn-worker", "worker", "beat", "api"}
    for name, process in stack.processes.items():
        lowered = name in LOWERED
        assert nices(process.pid) == {min(19, own + 10) if lowered else own}, name
        group = autogroup_nice(process.pid)
        assert group in (None, 10 if lowered else 0), (name, group)


def test_a_turn_gets_its_synchronous_observation_while_every_background_slot_is_held(stack: Stack) -> None:
    client = redis.Redis.from_url(stack.redis_url)
    prefix = "slots"
    held = 2 * BACKGROUND_CONCURRENCY
    held_tasks.send_held(stack.redis_url, "om.buffer", prefix, held)
    try:
        wait_until(
            lambda: held_tasks.counts(client, prefix)["running"] == BACKGROUND_CONCURRENCY,
            deadline_s=300,
            what="the background worker to take as many held tasks as it runs at once",
        )
        messages = generate(seed=29, target_tokens=6000).messages
        with OMClient(stack.api_url, timeout=120) as om:
            for message in messages:
                turn = om.post_turn("t-turns-first", [message], resource_id="user-1", context="none")
                assert not turn.degraded, turn.degraded_reason
                if turn.blocked:
                    break
            else:
                pytest.fail(f"no turn of {len(messages)} messages waited for an observation")
            memory = om.observations("t-turns-first")
        assert memory.active is not None and memory.active.observations, "the turn was observed"
        assert held_tasks.counts(client, prefix)["running"] == BACKGROUND_CONCURRENCY, "slots still held"
        assert client.llen("om.buffer") == held - BACKGROUND_CONCURRENCY, "the rest still queued"
    finally:
        client.rpush(held_tasks.key(prefix, "release"), *["go"] * held)
    wait_until(
        lambda: held_tasks.counts(client, prefix)["done"] == held,
        deadline_s=60,
        what="every held task to finish once released",
    )
    assert held_tasks.counts(client, prefix)["most"] == BACKGROUND_CONCURRENCY
