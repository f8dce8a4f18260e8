"""A maintenance pass in one process (the embedded mode's storage, SQLite): whose clock it reads and how a
backlog of passes thins out. The fleet version, with real workers, beat and a skewed worker clock, is
`test_faults_services.py::test_a_worker_whose_clock_jumps_…`."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine, select

from om_core.coordination import LocalCoordination
from om_core.engine import MemoryEngine, lookup_key
from om_core.maintenance.sweep import MaintenancePolicy, run_maintenance
from om_core.maintenance.triggers import IDLE, schedule
from om_core.store import schema
from tests.support.fake_models import FakeModels
from tests.support.workers import wait_until


class SharedClock(LocalCoordination):
    """Coordination whose shared clock runs `offset` away from this process's clock."""

    def __init__(self) -> None:
        super().__init__()
        self.offset = timedelta(0)

    def now(self) -> datetime:
        return datetime.now(UTC) + self.offset


def armed_trigger(db: Engine, due_at: datetime) -> str:
    key = lookup_key(f"t-{uuid.uuid4().hex[:10]}")
    with db.begin() as conn:  # no thread behind it: a claim is counted and nothing else runs
        schedule(conn, lookup_key=key, kind=IDLE, thread_id=None, resource_id=None, due_at=due_at)
    return key


def due_at(db: Engine, key: str) -> datetime | None:
    with db.connect() as conn:
        query = select(schema.triggers.c.due_at).where(schema.triggers.c.lookup_key == key)
        value: datetime | None = conn.execute(query).scalar()
    return value


def test_triggers_are_due_by_the_shared_clock_not_the_local_one(sqlite_engine: Engine) -> None:
    clock = SharedClock()
    om = MemoryEngine(sqlite_engine, models=FakeModels(), coordination=clock)  # type: ignore[arg-type]
    key = armed_trigger(sqlite_engine, datetime.now(UTC) + timedelta(hours=1))

    assert run_maintenance(om, MaintenancePolicy()).triggers_claimed == 0
    assert due_at(sqlite_engine, key) is not None, "not due yet by either clock"

    clock.offset = timedelta(hours=2)  # the fleet's clock says the hour has passed; this host's does not
    assert run_maintenance(om, MaintenancePolicy()).triggers_claimed == 1
    assert due_at(sqlite_engine, key) is None, "claimed (disarmed) by the shared clock"

    key = armed_trigger(sqlite_engine, datetime.now(UTC) - timedelta(minutes=5))
    clock.offset = timedelta(hours=-2)  # due by this host's clock, not yet by the fleet's
    assert run_maintenance(om, MaintenancePolicy()).triggers_claimed == 0
    assert due_at(sqlite_engine, key) is not None


def test_passes_closer_than_the_minimum_gap_skip_and_direct_calls_always_run(sqlite_engine: Engine) -> None:
    om = MemoryEngine(sqlite_engine, models=FakeModels())  # type: ignore[arg-type]
    spaced = MaintenancePolicy(min_gap_s=60)
    assert not run_maintenance(om, spaced).skipped
    assert run_maintenance(om, spaced).skipped, "a backlog's second pass within the gap skips"
    assert not run_maintenance(om, MaintenancePolicy()).skipped, "no gap asked: every pass runs"

    short = MaintenancePolicy(min_gap_s=0.05)
    other = MemoryEngine(sqlite_engine, models=FakeModels())  # type: ignore[arg-type]
    assert not run_maintenance(other, short).skipped
    wait_until(  # the marker expires in the store after the gap
        lambda: not run_maintenance(other, short).skipped, deadline_s=10, what="a pass after the gap"
    )
