"""Waiting until the Celery workers have nothing left to do: no message queued, none delivered but not
acknowledged (running, or reserved by a worker), no OM lock held.

Suites that check stored state after a burst of distributed work wait on this first, so the checker never
reads a change half-made.
"""

from __future__ import annotations

import time

from om_core.engine import QUEUES
from tests.support.workers import WorkerCluster

#: The queues must stay empty this long to count as drained: kombu moves a delivered message from its list
#: to the unacked hash in two steps, and one look could fall between them; this long a gap practically
#: cannot. (A false "drained" could only make a checker read a half-finished change and fail, never hide a
#: loss.)
QUIET_S = 0.5


def pending_work(cluster: WorkerCluster) -> list[str]:
    """What is still queued, delivered but unacknowledged, or holding a lock (empty: nothing)."""
    client = cluster.redis
    busy = []
    for queue in QUEUES:
        # kombu's Redis transport keeps one list per queue plus one per priority step.
        names = [queue, *(f"{queue}\x06\x16{step}" for step in (3, 6, 9))]
        queued = sum(int(client.llen(name)) for name in names)
        if queued:
            busy.append(f"{queue}: {queued} queued")
    unacked = int(client.hlen("unacked"))
    if unacked:
        busy.append(f"{unacked} delivered, not acknowledged")
    locks = sorted(k.decode() for k in client.scan_iter("om:lock:*"))
    if locks:
        busy.append(f"locks held: {', '.join(locks[:4])}")
    return busy


def drain(cluster: WorkerCluster, deadline_s: float, quiet_s: float = QUIET_S) -> str | None:
    """Wait until nothing is queued, running or locked for `quiet_s`. None when drained; otherwise why not
    (a worker process exited, or the deadline passed with work still pending)."""
    end = time.monotonic() + deadline_s
    quiet_since: float | None = None
    while True:
        dead = [p.name for p in cluster.processes if not p.alive()]
        if dead:
            return f"worker process(es) exited: {', '.join(dead)}"
        busy = pending_work(cluster)
        now = time.monotonic()
        if busy:
            quiet_since = None
        elif quiet_since is None:
            quiet_since = now
        elif now - quiet_since >= quiet_s:
            return None
        if now >= end:
            return f"not drained after {deadline_s:.0f} s: {'; '.join(busy)}"
        time.sleep(0.05)  # polling Redis for a condition; the deadline bounds it
