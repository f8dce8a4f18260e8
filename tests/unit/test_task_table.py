"""The engine's task table is the one place a task kind's name, queue, lock and failure event are written,
and the handler table (`engine.handlers`) the one place the function that runs it is: everything else
reads them."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from om_core.coordination import Keys
from om_core.engine import (
    MAINTENANCE_QUEUE,
    MAINTENANCE_TASK,
    QUEUES,
    TASKS,
    BufferObservation,
    BufferReflection,
    MemoryEngine,
    Observe,
    ObserveBatch,
    Reflect,
    kind_of,
    lookup_key,
    resource_key,
    task_from_dict,
    task_to_dict,
)
from om_core.engine import events as ev
from tests.support.packages import SERVER_PACKAGES

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "om_core" / "engine" / "tasks.py"
SHELLS_AND_CORE = [p for p in SERVER_PACKAGES if (ROOT / p).is_dir()]

#: Any `om.<word>` that names a queue or a task, including kinds that do not exist (yet): a queue
#: declared anywhere but the table is exactly what this test is for.
NAMES = {kind.name for kind in TASKS} | set(QUEUES) | {MAINTENANCE_TASK, "om.extract", "om.index"}
PATTERN = re.compile(
    r"(?<![\w.])(" + "|".join(re.escape(n) for n in sorted(NAMES, key=len, reverse=True)) + r")(?![\w])"
)


def _string_constants(tree: ast.AST) -> list[tuple[int, str]]:
    """String literals that are not docstrings (docs may name a queue; code may not) nor logger names
    (the `om.maintenance` logger is not the queue)."""
    docstrings: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docstrings.add(id(body[0].value))
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "getLogger":
            docstrings.update(id(arg) for arg in node.args)
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def test_no_queue_or_task_name_is_written_outside_the_table() -> None:
    found = []
    for package in SHELLS_AND_CORE:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == TABLE:
                continue
            for line, value in _string_constants(ast.parse(path.read_text(), str(path))):
                if PATTERN.search(value):
                    found.append(f"{path.relative_to(ROOT)}:{line}: {value!r}")
    assert not found, "queue or task names written outside om_core/engine/tasks.py:\n" + "\n".join(found)


def test_the_check_above_finds_a_name_written_elsewhere() -> None:
    source = (
        '"""om.reflect in a docstring is fine"""\n'
        'log = logging.getLogger("om.maintenance")\n'
        'QUEUE = "om.observe"\nLIST = "om.buffer,om.index"\n'
    )
    values = [v for _, v in _string_constants(ast.parse(source)) if PATTERN.search(v)]
    assert values == ["om.observe", "om.buffer,om.index"]
    assert not PATTERN.search("om.observed") and not PATTERN.search("xom.observe")


def test_every_kind_has_its_own_name_a_handler_and_a_declared_queue() -> None:
    assert len({kind.name for kind in TASKS}) == len(TASKS)
    assert len({kind.value for kind in TASKS}) == len(TASKS)
    for kind in TASKS:
        assert callable(MemoryEngine.handlers.get(kind.value)), kind.value.__name__
        assert kind.queue in QUEUES and kind.queue != MAINTENANCE_QUEUE
    assert QUEUES[-1] == MAINTENANCE_QUEUE and len(set(QUEUES)) == len(QUEUES)


def test_a_blocking_observation_never_shares_a_queue_with_background_work() -> None:
    observe = kind_of(Observe)
    blocking = [kind for kind in TASKS if kind.queue == observe.queue]
    assert blocking == [observe, kind_of(ObserveBatch)]
    assert all(kind.phase == ev.BLOCKING for kind in blocking)


@pytest.mark.parametrize(
    ("task", "lock", "failed", "operation"),
    [
        (BufferObservation("t", "c", 10), Keys.buffer_lock, ev.BUFFERING_FAILED, "observation"),
        (BufferReflection("t", "r", "c"), Keys.buffered_reflection_lock, ev.BUFFERING_FAILED, "reflection"),
        (Observe("t", "c"), Keys.observe_lock, ev.OBSERVATION_FAILED, "observation"),
        (Reflect("t", "c"), Keys.reflect_lock, ev.OBSERVATION_FAILED, "reflection"),
        (ObserveBatch("t", "c", ("t",)), Keys.observe_lock, ev.OBSERVATION_FAILED, "observation"),
    ],
)
def test_each_kind_names_its_lock_and_failure(task, lock, failed, operation) -> None:  # type: ignore[no-untyped-def]
    kind = kind_of(task)
    assert kind.locks_of(task) == (lock(lookup_key("t")),)
    assert kind.phase.failed == failed
    assert kind.operation == operation


def test_task_values_round_trip_and_old_payloads_with_a_queue_still_load() -> None:
    task = Reflect("t", "reflect-1", trigger="manual", manual_prompt="keep names")
    assert task_from_dict(task_to_dict(task)) == task
    old = {**task_to_dict(task), "queue": "om.reflect"}
    assert task_from_dict(old) == task


def test_a_batch_holds_every_thread_lock_in_one_order_and_a_shared_reflection_the_resource_lock() -> None:
    batch = ObserveBatch("t2", "c", ("t2", "t1", "t2"))
    assert kind_of(batch).locks_of(batch) == (
        Keys.observe_lock(lookup_key("t1")),
        Keys.observe_lock(lookup_key("t2")),
    )
    assert task_from_dict(task_to_dict(batch)) == batch
    shared = Reflect("t1", "c", key=resource_key("u"))
    assert kind_of(shared).locks_of(shared) == (Keys.reflect_lock("resource:u"),)
