"""Entering several context managers at the same time: starting processes in parallel.

Each API or worker process spends most of its start-up importing (litellm alone takes seconds), so a
stack of several processes comes up in the time of its slowest one instead of the sum of all.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


def enter_all(
    stack: contextlib.ExitStack, managers: Sequence[contextlib.AbstractContextManager[T]]
) -> list[T]:
    """Enter every manager in its own thread; each one entered is registered on `stack` for exit.

    When any fails, its error is raised after the others have been entered (and are exited with `stack`).
    """
    if not managers:
        return []
    with ThreadPoolExecutor(len(managers)) as pool:
        futures = [pool.submit(manager.__enter__) for manager in managers]
    values: list[T] = []
    failure: BaseException | None = None
    for manager, future in zip(managers, futures, strict=True):
        error = future.exception()
        if error is not None:
            failure = failure or error
            continue
        stack.push(manager.__exit__)
        values.append(future.result())
    if failure is not None:
        raise failure
    return values


def call_all(calls: Sequence[Callable[[], Any]]) -> list[Any]:
    """Run each call in its own thread and return their results in order (the first error is raised)."""
    if not calls:
        return []
    with ThreadPoolExecutor(len(calls)) as pool:
        futures = [pool.submit(call) for call in calls]
    return [future.result() for future in futures]
