"""`om demo` (what `make demo` runs) end to end at a reduced size: the embedded stack starts, the sample
conversation plays through the real HTTP API with the offline model, the summary read back from the API
is printed, and nothing the demo started is left running."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import psutil  # type: ignore[import-untyped]

from tests.support.api_server import free_port

OM = Path(sys.executable).parent / "om"
TURNS = 80


def _mentions(process: psutil.Process, marker: str) -> bool:
    try:
        return marker in " ".join(process.cmdline()) or any(marker in v for v in process.environ().values())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False


def test_the_demo_plays_the_conversation_prints_its_summary_and_stops_everything(tmp_path: Path) -> None:
    scratch = tmp_path / "tmp"  # the embedded stack's folder (SQLite, Redis) is created under TMPDIR
    scratch.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OM_")}
    env["TMPDIR"] = str(scratch)
    result = subprocess.run(
        [str(OM), "demo", "--turns", str(TURNS), "--port", str(free_port())],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=420,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert "om demo: summary (numbers read back from the API)" in output, output[-3000:]
    rows = dict(re.findall(r"│\s*([a-z][^│]*?)\s*│\s*([^│]*?)\s*│", output))
    assert rows["messages played (user + assistant)"] == str(TURNS), rows
    assert int(rows["observer calls (completed)"]) >= 1, rows
    # How many turns waited on a model call depends on how busy the machine is; that it is counted does not.
    assert 0 <= int(rows["blocked turns"].split()[0]) <= TURNS, rows
    assert "Observation log (first lines):" in output and "(empty)" not in output
    leftovers = [p.pid for p in psutil.process_iter() if _mentions(p, str(scratch))]
    assert leftovers == [], f"processes the demo started are still running: {leftovers}"
