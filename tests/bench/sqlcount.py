"""Counting what a piece of engine work asks of Postgres: statements by kind, their time, pool checkouts.

Round trips are the cost that does not shrink with a faster CPU: each statement is one, and each pool
checkout adds a rollback on return (and a pre-ping, on an engine that pre-pings its checkouts). Counting
them per turn or per observation makes a regression visible even on a machine whose timings are noisy.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine, event


def statement_kind(statement: str) -> str:
    """`SELECT om_parts`, `INSERT om_events`, `UPDATE om_threads`... (verb and first table)."""
    words = statement.split()
    upper = [w.upper() for w in words]
    verb = upper[0] if upper else "?"
    if verb == "UPDATE" and len(words) > 1:
        return f"UPDATE {words[1]}"
    for keyword in ("FROM", "INTO"):
        if keyword in upper:
            index = upper.index(keyword)
            if index + 1 < len(words):
                return f"{verb} {words[index + 1].strip('(')}"
    return verb


@dataclass
class SqlCount:
    statements: Counter[str] = field(default_factory=Counter)
    seconds: Counter[str] = field(default_factory=Counter)
    checkouts: int = 0

    def clear(self) -> None:
        self.statements.clear()
        self.seconds.clear()
        self.checkouts = 0

    def per(self, n: int) -> dict[str, Any]:
        n = max(n, 1)
        return {
            "sql_statements": sum(self.statements.values()) / n,
            "sql_ms": sum(self.seconds.values()) * 1000 / n,
            "pool_checkouts": self.checkouts / n,
            "sql_by_kind": {k: round(v / n, 2) for k, v in self.statements.most_common()},
            "sql_ms_by_kind": {k: round(v * 1000 / n, 2) for k, v in self.seconds.most_common()},
        }


@contextlib.contextmanager
def counting(db: Engine) -> Iterator[SqlCount]:
    """Count every statement and checkout on `db` inside the block."""
    count = SqlCount()

    def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        conn.info["om_bench_started"] = time.perf_counter()

    def after(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        kind = statement_kind(statement)
        count.statements[kind] += 1
        count.seconds[kind] += time.perf_counter() - conn.info.pop("om_bench_started", time.perf_counter())

    def checkout(*args: Any) -> None:
        count.checkouts += 1

    event.listen(db, "before_cursor_execute", before)
    event.listen(db, "after_cursor_execute", after)
    event.listen(db.pool, "checkout", checkout)
    try:
        yield count
    finally:
        event.remove(db, "before_cursor_execute", before)
        event.remove(db, "after_cursor_execute", after)
        event.remove(db.pool, "checkout", checkout)
