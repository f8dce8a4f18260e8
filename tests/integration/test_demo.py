"""`om demo` (what `make demo` runs) end to end at a reduced size: the embedded stack starts, the sample
conversation plays through the real HTTP API with the offline model, the summary read back from the API
is printed, and nothing the demo started is left running."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil  # type: ignore[import-untyped]
import pytest

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
    assert "om demo --keep" in output and "/ui/#/threads/<thread id>" in output, output[-1000:]
    leftovers = [p.pid for p in psutil.process_iter() if _mentions(p, str(scratch))]
    assert leftovers == [], f"processes the demo started are still running: {leftovers}"


def _ctrl_c_as_a_terminal_gives_it() -> None:
    """Ctrl-C at its default in the demo, as a terminal gives it: a child inherits an ignored SIGINT, and
    Python started with SIGINT ignored never raises KeyboardInterrupt; code run in this process by an
    earlier test may have left it ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_the_demo_says_where_its_thread_is_in_the_dashboard_and_keep_serves_it(tmp_path: Path) -> None:
    """Without --keep the last lines say how to see the thread (the stack is gone after); with --keep the
    stack stays up at the printed page's server, with the thread, until Ctrl-C stops everything."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OM_")}
    env["TMPDIR"] = str(scratch)
    output_path = tmp_path / "demo.out"
    with output_path.open("wb") as out:
        demo = subprocess.Popen(
            [str(OM), "demo", "--turns", "6", "--port", str(free_port()), "--keep"],
            env={**env, "PYTHONFAULTHANDLER": "1"},
            cwd=tmp_path,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=_ctrl_c_as_a_terminal_gives_it,
        )
    try:
        page = re.compile(r"Dashboard: open (http://127\.0\.0\.1:\d+)/ui/#/threads/(demo-[0-9a-f]{8})\n")
        deadline = time.monotonic() + 300
        while (found := page.search(output_path.read_text(errors="replace"))) is None:
            assert demo.poll() is None, output_path.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, output_path.read_text(errors="replace")[-3000:]
            time.sleep(0.2)  # polling the demo's output for its last line; the deadline bounds it
        api_url, thread_id = found.groups()
        thread = httpx.get(f"{api_url}/v1/threads/{thread_id}", timeout=30)
        assert thread.status_code == 200 and thread.json()["messages"] == 6, thread.text
        demo.send_signal(signal.SIGINT)
        try:
            code = demo.wait(timeout=120)
        except subprocess.TimeoutExpired:
            demo.send_signal(signal.SIGABRT)  # faulthandler prints where every thread is
            demo.wait(timeout=30)
            output = output_path.read_text(errors="replace")[-6000:]
            pytest.fail(f"the demo did not stop on Ctrl-C:\n{output}")
        assert code == 0, output_path.read_text(errors="replace")[-3000:]
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait(timeout=30)
    assert "stopping the demo's stack" in output_path.read_text(errors="replace")
    leftovers = [p.pid for p in psutil.process_iter() if _mentions(p, str(scratch))]
    assert leftovers == [], f"processes the demo started are still running: {leftovers}"
