"""What every benchmark section gets: the running stack, the mode, and where results go.

One API process and its workers serve every HTTP section in turn (each section uses its own threads and,
where it needs other OM settings, per-thread config overrides, exactly as a tenant would). Sections wait
for the workers to go idle before timing anything, so work left over by one section never lands in the
next one's figures.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.bench.cpu import CpuSpan, postgres_pids
from tests.bench.results import Results
from tests.bench.stack import Services, ThreadPoolCluster
from tests.support.api_server import ApiServer
from tests.support.workers import wait_until

#: Worker layout of the main stack, as docs/operations.md (Scale) suggests: synchronous observation and
#: reflection apart from background buffering, so a chat never waits behind buffering.
MAIN_WORKERS: list[tuple[list[str], int]] = [(["om.observe", "om.reflect"], 8), (["om.buffer"], 8)]


@dataclass
class Bench:
    quick: bool
    services: Services
    cluster: ThreadPoolCluster
    api: ApiServer
    api_key: str
    #: The key's tenant: a thread `t` is stored as `scoped_id(tenant, t)`.
    tenant: str
    workdir: Path
    results: Results
    log: list[str] = field(default_factory=list)
    #: What lives until the end of the run (clusters a section started early).
    resources: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    #: Work a section's start-up began during an earlier section, by section name (see `run.EARLY_STARTS`).
    early: dict[str, Any] = field(default_factory=dict)
    #: Prefix of every thread and resource id of this run: a reused database (`testenv.py run -- ...`
    #: around several runs) must never hand one run's resource to another run's tenant.
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])

    @property
    def mode(self) -> str:
        return "quick" if self.quick else "full"

    def say(self, text: str) -> None:
        line = f"[{time.strftime('%H:%M:%S')}] {text}"
        self.log.append(line)
        print(line, flush=True)

    def wait_idle(self, deadline_s: float = 300.0) -> float:
        """Wait until no OM work is queued or running; returns the seconds waited."""
        started = time.monotonic()
        wait_until(self.cluster.drained, deadline_s=deadline_s, what="the workers to go idle", every_s=0.1)
        return time.monotonic() - started

    def cpu_span(self) -> CpuSpan:
        """CPU accounting for the API process, the workers, this run's Postgres, and this process."""
        port = self.postgres_port
        return CpuSpan(
            {
                "api": lambda: [self.api.process.pid],
                "workers": lambda: [p.popen.pid for p in self.cluster.processes if p.alive()],
                "postgres": lambda: postgres_pids(port),
            }
        )

    @property
    def postgres_port(self) -> int:
        return int(self.services.database_url.rsplit(":", 1)[1].split("/")[0])

    def section_meta(self, name: str, **values: Any) -> None:
        self.results.sections.setdefault(name, {}).update({"loadavg": list(os.getloadavg()), **values})
