"""`RedisCoordination` on a real Redis: the same contract as `LocalCoordination`, plus what only the
shared one has (short leases kept alive by a heartbeat, locks that vanish when their holder stops)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest
import redis

from om_adapters.redis_coordination import RedisCoordination
from om_core.coordination import Coordination, LocalCoordination
from tests.support.workers import redis_db_url, wait_until

pytestmark = pytest.mark.redis


@pytest.fixture(scope="module")
def client(redis_url: str) -> Iterator[redis.Redis]:
    connection = redis.Redis.from_url(redis_db_url(redis_url, 5))
    connection.flushdb()
    yield connection
    connection.close()


def name() -> str:
    return f"om:lock:test:{uuid.uuid4().hex[:8]}"


@pytest.fixture(params=["local", "redis"])
def coordination(request: pytest.FixtureRequest, client: redis.Redis) -> Iterator[Coordination]:
    if request.param == "local":
        yield LocalCoordination()
        return
    shared = RedisCoordination(client, lease_s=None)
    yield shared
    shared.close()


def test_a_lock_is_owned_by_its_token(coordination: Coordination) -> None:
    lock = name()
    token = coordination.try_lock(lock, 30)
    assert token is not None and coordination.is_locked(lock)
    assert coordination.try_lock(lock, 30) is None, "taken"
    coordination.release(lock, "someone-else")
    assert coordination.is_locked(lock), "only the owner releases"
    assert coordination.extend(lock, "someone-else", 30) is False
    assert coordination.extend(lock, token, 30) is True
    coordination.release(lock, token)
    assert not coordination.is_locked(lock)
    assert coordination.extend(lock, token, 30) is False, "a released lock cannot be extended"


def test_a_lock_expires_after_its_ttl(coordination: Coordination) -> None:
    lock = name()
    assert coordination.try_lock(lock, 0.2) is not None
    wait_until(lambda: not coordination.is_locked(lock), deadline_s=5, what="the lock to expire")
    assert coordination.try_lock(lock, 30) is not None


@pytest.mark.parametrize(
    ("operations", "expected"),
    [
        ([("set", 5, None)], 5),
        ([("set", 5, None), ("set", None, None)], None),
        ([("incr", None, None), ("incr", None, None)], 2),
        ([("set", 7, None), ("incr", None, 60)], 8),
    ],
)
def test_shared_integers(
    coordination: Coordination, operations: list[tuple[str, int | None, float | None]], expected: int | None
) -> None:
    key = f"om:test:{uuid.uuid4().hex[:8]}"
    for operation, value, ttl in operations:
        if operation == "set":
            coordination.set_int(key, value, ttl)
        else:
            coordination.incr(key, ttl)
    assert coordination.get_int(key) == expected


def test_a_peek_reads_locks_and_integers_as_their_single_reads_do(coordination: Coordination) -> None:
    held, free, counted, missing = (f"om:test:{uuid.uuid4().hex[:8]}" for _ in range(4))
    assert coordination.try_lock(held, 30) is not None
    coordination.set_int(counted, 42)
    view = coordination.peek([held, free], [counted, missing])
    assert (view.is_locked(held), view.is_locked(free)) == (True, False)
    assert (view.get_int(counted), view.get_int(missing)) == (42, None)
    assert [view.is_locked(n) for n in (held, free)] == [coordination.is_locked(n) for n in (held, free)]
    with pytest.raises(KeyError):
        view.is_locked(counted)  # not asked for as a lock: a programming error, not "free"
    empty = coordination.peek([], [])
    assert (dict(empty.locks), dict(empty.values)) == ({}, {})


def test_integers_with_a_ttl_expire(coordination: Coordination) -> None:
    key = f"om:test:{uuid.uuid4().hex[:8]}"
    coordination.set_int(key, 3, ttl_s=0.2)
    assert coordination.get_int(key) == 3
    wait_until(lambda: coordination.get_int(key) is None, deadline_s=5, what="the value to expire")


def held_for(check: Callable[[], bool], seconds: float) -> bool:
    """`check` stays true for `seconds` (sampled every 50 ms)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not check():
            return False
        time.sleep(0.05)
    return True


def test_the_heartbeat_keeps_a_short_lease_alive_while_the_holder_lives(client: redis.Redis) -> None:
    shared = RedisCoordination(client, lease_s=0.3)
    lock = name()
    token = shared.try_lock(lock, 300)
    assert token is not None
    assert 0 < int(client.pttl(lock)) <= 300, "the key lives one lease, not the engine's full lifetime"
    assert held_for(lambda: shared.is_locked(lock), 1.5), "renewed well past several leases"
    shared.close()  # the holder "dies": no more heartbeats
    wait_until(lambda: not client.exists(lock), deadline_s=3, what="the dead holder's lock to vanish")


def test_a_holder_that_lost_its_lock_cannot_release_the_new_owners(client: redis.Redis) -> None:
    stalled = RedisCoordination(client, lease_s=0.3)
    rival = RedisCoordination(client, lease_s=None)
    lock = name()
    old = stalled.try_lock(lock, 300)
    assert old is not None
    client.delete(lock)  # the lease ran out while the holder was stalled
    new = rival.try_lock(lock, 30)
    assert new is not None
    wait_until(
        lambda: lock not in stalled.held_locks(), deadline_s=3, what="the heartbeat to notice the loss"
    )
    stalled.release(lock, old)
    assert client.get(lock) == new.encode(), "the new owner's lock survives the old holder's release"
    rival.release(lock, new)
    stalled.close()


def test_now_is_a_utc_clock_shared_by_every_process(coordination: Coordination) -> None:
    """Redis runs on this host here, so its clock reads as this process's within scheduling noise; what
    matters elsewhere is that every worker reads the same one."""
    before = datetime.now(UTC)
    now = coordination.now()
    after = datetime.now(UTC)
    assert now.utcoffset() == timedelta(0)
    assert before - timedelta(seconds=1) <= now <= after + timedelta(seconds=1)
