"""Resident memory of the stack's processes: now (RSS) and at its peak (the kernel's high-water mark).

Read from `/proc/<pid>/status` (Linux, like the deployment targets), so no extra dependency is needed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.bench.harness import Bench
from tests.bench.results import FigureDef, Target
from tests.bench.stack import REPO

SECTION = "memory"
API_TARGET_MB = 150.0
API_AT_START = FigureDef("API process resident memory (at start)", "MB")
API_PEAK = FigureDef("API process resident memory (peak)", "MB")
WORKER_PEAK = FigureDef("worker process resident memory (peak)", "MB")


def figures(quick: bool) -> list[FigureDef]:
    """The figures `run` reports, in order."""
    return [API_AT_START, API_PEAK, WORKER_PEAK]


@dataclass(frozen=True)
class Resident:
    pid: int
    rss_mb: float
    peak_mb: float
    threads: int


def resident(pid: int) -> Resident:
    """`VmRSS` (resident now), `VmHWM` (the most it ever held resident) and the thread count."""
    fields: dict[str, str] = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    except OSError:
        return Resident(pid, float("nan"), float("nan"), 0)

    def megabytes(key: str) -> float:
        value = fields.get(key, "")
        return int(value.split()[0]) / 1024 if value else float("nan")

    return Resident(pid, megabytes("VmRSS"), megabytes("VmHWM"), int(fields.get("Threads", "0")))


#: What the API process loads, in the order it loads it. "o200k" is the token encoding (loaded on first
#: use); `om_core.models.client` is where litellm comes in, so its step shows litellm's weight and the
#: import watcher names the line that imports it.
IMPORT_STEPS = (
    "sqlalchemy",
    "fastapi",
    "redis",
    "om_core.engine",
    "o200k",
    "om_core.models.client",
    "celery",
    "om_api.app",
)
_IMPORT_SCRIPT = """
import builtins, json, sys
first_importer = {}
plain_import = builtins.__import__
def watching_import(name, globals=None, locals=None, fromlist=(), level=0):
    if name.split(".")[0] == "litellm" and not first_importer and "litellm" not in sys.modules:
        frame = sys._getframe(1)
        while frame is not None and "/om_" not in frame.f_code.co_filename:
            frame = frame.f_back
        if frame is not None:
            first_importer["litellm"] = [frame.f_code.co_filename, frame.f_lineno]
    return plain_import(name, globals, locals, fromlist, level)
builtins.__import__ = watching_import
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
steps = [["python", rss()]]
for name in sys.argv[1:]:
    if name == "o200k":
        from om_core.tokens import default_estimator
        default_estimator()("load the encoding")
    else:
        __import__(name)
    steps.append([name, rss()])
print(json.dumps({"steps": steps, "litellm_from": first_importer.get("litellm")}))
"""


def _run_import_script(steps: tuple[str, ...]) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    done = subprocess.run(
        [sys.executable, "-c", _IMPORT_SCRIPT, *steps],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        check=True,
        timeout=300,
    )
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def import_breakdown() -> tuple[list[tuple[str, float]], str]:
    """Resident MB each step adds in a fresh interpreter (what the API's memory is made of), and the om
    line that imports litellm."""
    report = _run_import_script(IMPORT_STEPS)
    steps = report["steps"]
    deltas = [
        (str(name), float(mb) - float(before))
        for (name, mb), (_, before) in zip(steps[1:], steps, strict=False)
    ]
    origin = report.get("litellm_from")
    return deltas, f"{str(origin[0]).removeprefix(str(REPO) + '/')}:{origin[1]}" if origin else "nothing"


def run(bench: Bench) -> None:
    api = resident(bench.api.process.pid)
    breakdown, litellm_from = import_breakdown()
    heavy = ", ".join(f"{name} +{mb:.0f} MB" for name, mb in sorted(breakdown, key=lambda s: -s[1])[:4])
    workers = [resident(p.popen.pid) for p in bench.cluster.processes if p.alive()]
    bench.section_meta(
        SECTION,
        api=vars(api),
        workers=[vars(w) for w in workers],
        api_import_breakdown_mb=breakdown,
        litellm_imported_by=litellm_from,
    )
    at_start = bench.results.sections.get(SECTION, {}).get("api_at_start") or {}
    bench.results.add(
        SECTION,
        API_AT_START,
        float(at_start.get("rss_mb", float("nan"))),
        note="read once the API answered its readiness check, before any section ran",
    )
    bench.results.add(
        SECTION,
        API_PEAK,
        api.peak_mb,
        target=Target.at_most(API_TARGET_MB, " MB"),
        why=lambda: (
            f"largest pieces, each measured in a fresh interpreter: {heavy} "
            f"(litellm is imported at start by {litellm_from})"
        ),
        note=f"RSS now {api.rss_mb:.0f} MB, {api.threads} threads",
    )
    if workers:
        worker = max(workers, key=lambda w: w.peak_mb)
        bench.results.add(
            SECTION,
            WORKER_PEAK,
            worker.peak_mb,
            note=f"threads pool, {worker.threads} threads; RSS now {worker.rss_mb:.0f} MB "
            f"(largest of {len(workers)} worker processes)",
        )
