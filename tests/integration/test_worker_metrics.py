"""A real Celery worker serves its own Prometheus metrics (issue 19, "Metrics from every process").

One worker (two pool processes or threads, every queue) runs the buffering and observation tasks of real
turns with the offline model; the test then scrapes `OM_WORKER_METRICS_PORT` over HTTP and finds the task
series (per task and queue), the memory-work and model-usage series with the counts of the work that ran,
and the process/GC series. The memory-work counts equal what the outbox recorded for the test's thread:
the worker reports exactly what it ran, nothing read back from the database.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Engine

from om_core.engine import QUEUES, kind_of
from om_core.engine import events as ev
from om_core.messages import Role, text_message
from om_core.store.outbox import list_events
from tests.support.api_server import free_port
from tests.support.workers import (
    Producer,
    WorkerCluster,
    set_thread_config,
    wait_results,
    wait_until,
    worker_cluster,
)

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

WORDS = ["harbor", "lantern", "copper", "meadow", "signal", "orchard", "velvet", "canyon", "ember", "quartz"]
MODEL = "om-local/extractive"

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture(scope="module", params=["prefork", "threads"])
def cluster(
    request: pytest.FixtureRequest,
    postgres_url: str,
    redis_url: str,
    pg_engine: Engine,
    tmp_path_factory: Any,
) -> Iterator[tuple[WorkerCluster, int]]:
    """A worker with each pool the deployment uses: prefork (children write multiprocess files) and
    threads (the webhook queue's)."""
    workdir: Path = tmp_path_factory.mktemp("worker-metrics")
    port = free_port()
    env = {"OM_MODEL": MODEL, "LITELLM_LOG": "ERROR", "OM_WORKER_METRICS_PORT": str(port)}
    with worker_cluster(
        postgres_url=postgres_url, redis_url=redis_url, workdir=workdir, db=15, env=env, pool=request.param
    ) as c:
        c.start_workers([(list(QUEUES), 2)])
        yield c, port


def scrape(port: int) -> Samples:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of `name`'s samples whose labels include `labels`."""
    wanted = set(labels.items())
    return sum(value for (n, found), value in samples.items() if n == name and wanted <= found)


def say(producer: Producer, thread_id: str, index: int) -> None:
    text = f"Note {index}: " + " ".join(WORDS[(index * 3 + k * k) % len(WORDS)] for k in range(180))
    role: Role = "user" if index % 2 == 0 else "assistant"
    message = text_message(f"m{index}", role, text, datetime.now(UTC))
    producer.engine.ingest_turn(thread_id, thread_id, [message])


def test_a_worker_serves_the_task_and_model_series_of_the_work_it_ran(
    cluster: tuple[WorkerCluster, int], pg_engine: Engine
) -> None:
    workers, port = cluster
    producer = workers.producer()
    # One thread buffers in the background (om.buffer), one observes while its turns wait (om.observe).
    buffered, blocking = (f"metrics-{name}-{uuid.uuid4().hex[:8]}" for name in ("buffered", "blocking"))
    set_thread_config(pg_engine, buffered, {"observation": {"messageTokens": 6000, "bufferTokens": 0.1}})
    set_thread_config(pg_engine, blocking, {"observation": {"messageTokens": 600, "bufferTokens": False}})
    sent = []
    for thread in (buffered, blocking):
        for index in range(8):
            say(producer, thread, index)
        sent += producer.sent.take(thread)
    wait_results(sent, deadline_s=120)
    by_task = Counter((kind_of(task).name, kind_of(task).queue) for task, _ in sent)
    assert {queue for _, queue in by_task} >= {"om.buffer", "om.observe"}, by_task

    outbox = Counter(
        e.type
        for thread in (buffered, blocking)
        for e in list_events(pg_engine, thread_id=thread, limit=10_000)
    )
    assert outbox[ev.BUFFERING_END] > 0 and outbox[ev.OBSERVATION_END] > 0, outbox
    cycles_in_outbox = outbox[ev.BUFFERING_END] + outbox[ev.OBSERVATION_END]

    def settled() -> Samples | None:
        # A task's result is stored before Celery's postrun signal counts it: poll until every task the
        # turns sent is counted, and every cycle the outbox holds.
        samples = scrape(port)
        done = all(
            total(samples, "om_tasks_total", task=name, queue=queue, outcome="success") >= count
            for (name, queue), count in by_task.items()
        )
        cycles = total(samples, "om_memory_cycles_total", outcome="end", kind="buffering") + total(
            samples, "om_memory_cycles_total", outcome="end", kind="cycle"
        )
        return samples if done and cycles >= cycles_in_outbox else None

    samples = wait_until(settled, deadline_s=60, what="the worker's metrics to count the tasks", every_s=0.5)
    print(
        "DEBUG",
        by_task,
        outbox,
        {
            k: v
            for k, v in samples.items()
            if k[0].startswith(("om_task", "om_memory", "om_lock", "process_cpu"))
        },
    )

    for (name, queue), count in by_task.items():
        assert total(samples, "om_task_duration_seconds_count", task=name, queue=queue) >= count
        assert total(samples, "om_task_queue_wait_seconds_count", task=name, queue=queue) >= count
    assert total(samples, "om_tasks_total", outcome="failure") == 0

    # Memory work: exactly what the outbox recorded (this worker ran every cycle of the thread).
    assert (
        total(samples, "om_memory_cycles_total", kind="buffering", outcome="end") == outbox[ev.BUFFERING_END]
    )
    assert total(samples, "om_memory_cycles_total", kind="cycle", outcome="end") == outbox[ev.OBSERVATION_END]
    assert total(samples, "om_memory_model_cycles_total", model=MODEL, role="observer", outcome="end") == (
        cycles_in_outbox
    )
    assert total(samples, "om_memory_model_tokens_total", model=MODEL, role="observer", direction="input") > 0
    assert (MODEL, "observer") in {
        (dict(labels)["model"], dict(labels)["role"])
        for (name, labels), _ in samples.items()
        if name == "om_memory_model_cost_usd_total"
    }, "the cost series exists (zero for the offline model)"
    assert (
        total(samples, "om_memory_cycle_duration_seconds_count", kind="buffering") == outbox[ev.BUFFERING_END]
    )

    # The process tree's CPU (the pool children ran the tasks) and the main process's GC.
    assert total(samples, "process_cpu_seconds_total") > 0
    assert total(samples, "process_resident_memory_bytes") > 0
    assert any(name == "python_gc_objects_collected_total" for name, _ in samples)
