"""Issue 28, item 8: no-auth mode stays local.

`om up` runs the API without authentication (`OM_AUTH=none`) on 127.0.0.1. It answered any `Host`, so a
web page in the user's browser could rebind its own name to 127.0.0.1 and drive the API as a same-origin
page (`Host: rebind.attacker.example`); it answered any `Origin`, so a page could post to 127.0.0.1
directly; and `om serve` with `OM_AUTH=none` bound any address with only a log line. Here such requests
are refused and nothing is stored, local clients still get answers, keys mode does not care, and `om serve`
refuses to start without authentication on an open address unless told `--insecure-no-auth`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from starlette.testclient import TestClient

from om_api.app import create_app
from om_api.settings import ApiSettings
from om_core.store.db import make_engine
from om_core.store.migrate import upgrade
from om_core.tenancy import access
from tests.support.api_server import REPO, free_port

REBINDING_HOSTS = [
    "rebind.attacker.example",
    "rebind.attacker.example:8088",
    "localhost.attacker.example:8088",
    "127.0.0.1.nip.io:8088",
    "0.0.0.0:8088",
    "[::]:8088",
    "192.168.1.20:8088",
    "2130706433:8088",  # 127.0.0.1 as one number: browsers never send it, so it is not trusted either
]
LOCAL_HOSTS = [
    "localhost",
    "localhost:8088",
    "127.0.0.1",
    "127.0.0.1:8088",
    "[::1]:8088",
    "om.localhost:8088",
]
CROSS_SITE_ORIGINS = ["http://attacker.example", "https://rebind.attacker.example:8088", "null"]
TURN = {"messages": [{"id": "m1", "role": "user", "text": "remember that my door code is 4321"}]}


def _database(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'om.db'}"
    engine = make_engine(url)
    upgrade(engine)
    engine.dispose()
    return url


@pytest.fixture
def local_api(tmp_path: Path) -> Iterator[TestClient]:
    """The API as `om up` runs it: no authentication."""
    settings = ApiSettings(database_url=_database(tmp_path), auth="none", model="om-local/extractive")
    with TestClient(create_app(settings), base_url="http://localhost") as client:
        yield client


def _stored(client: TestClient, thread: str) -> bool:
    response = client.get(f"/v1/threads/{thread}/messages", headers={"Host": "127.0.0.1:8088"})
    assert response.status_code in (200, 404), response.text
    return response.status_code == 200


@pytest.mark.parametrize("host", REBINDING_HOSTS)
def test_a_rebinding_page_is_refused_in_no_auth_mode(local_api: TestClient, host: str) -> None:
    listing = local_api.get("/v1/threads", headers={"Host": host})
    posted = local_api.post("/v1/threads/rebound/turns", json=TURN, headers={"Host": host})
    for response in (listing, posted):
        assert response.status_code == 421, response.text
        error = response.json()["error"]
        assert error["code"] == "misdirected_request"
        assert "loopback" in error["message"] and "OM_AUTH=keys" in error["message"]
    assert not _stored(local_api, "rebound"), "a refused turn stores nothing"


@pytest.mark.parametrize("host", LOCAL_HOSTS)
def test_loopback_names_are_answered(local_api: TestClient, host: str) -> None:
    thread = "local-" + host.replace(":", "-").replace("[", "").replace("]", "")
    assert local_api.post(f"/v1/threads/{thread}/turns", json=TURN, headers={"Host": host}).status_code == 200
    assert local_api.get("/v1/threads", headers={"Host": host}).status_code == 200
    assert _stored(local_api, thread)


@pytest.mark.parametrize("origin", CROSS_SITE_ORIGINS)
def test_a_cross_site_page_cannot_post_to_the_local_api(local_api: TestClient, origin: str) -> None:
    headers = {"Host": "127.0.0.1:8088", "Origin": origin}
    posted = local_api.post("/v1/threads/crossed/turns", json=TURN, headers=headers)
    assert posted.status_code == 403, posted.text
    error = posted.json()["error"]
    assert error["code"] == "cross_origin_request" and "OM_AUTH=keys" in error["message"]
    assert local_api.get("/v1/threads", headers=headers).status_code == 403, "nor read"
    assert not _stored(local_api, "crossed")


def test_a_page_served_on_a_loopback_name_may_call_the_local_api(local_api: TestClient) -> None:
    headers = {"Host": "127.0.0.1:8088", "Origin": "http://localhost:3000"}
    assert local_api.post("/v1/threads/dev-page/turns", json=TURN, headers=headers).status_code == 200
    assert _stored(local_api, "dev-page")


def test_keys_mode_is_not_affected(tmp_path: Path) -> None:
    settings = ApiSettings(database_url=_database(tmp_path), auth="keys", model="om-local/extractive")
    app = create_app(settings)
    with TestClient(app, base_url="http://om.example.com") as client:
        key = access.create_key(app.state.runtime.db, "tenant", "front-door").secret
        headers = {"Host": "api.om.example.com", "Origin": "https://app.example.com"}
        anonymous = client.get("/v1/threads", headers=headers)
        assert anonymous.status_code == 401, "a key is still required"
        headers["Authorization"] = f"Bearer {key}"
        assert client.post("/v1/threads/t/turns", json=TURN, headers=headers).status_code == 200
        assert client.get("/v1/threads", headers=headers).status_code == 200


def test_om_up_runs_its_api_without_auth_on_loopback_only() -> None:
    """`om up` needs no `--insecure-no-auth`: its API is bound to 127.0.0.1."""
    from om_app.embedded import services, stack_env

    assert stack_env("sqlite://", "redis://127.0.0.1:1/0", Path("."))["OM_AUTH"] == "none"
    api = services(8088, {})["api"].command
    assert api[api.index("--host") + 1] == "127.0.0.1"
    assert "--insecure-no-auth" not in api


# ----------------------------------------------------------------------------------------- om serve


class Served:
    """An `om serve` process and its output (in a file: a pipe nobody reads could fill and block it)."""

    def __init__(self, process: subprocess.Popen[bytes], log: Path) -> None:
        self.process = process
        self.log = log

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@contextlib.contextmanager
def om_serve(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[Served]:
    """`om serve ARGS` with no authentication, SQLite and the inline executor, and no other OM_ setting."""
    environment = {name: value for name, value in os.environ.items() if not name.startswith("OM_")}
    environment.update(
        {
            "OM_DATABASE_URL": _database(tmp_path),
            "OM_AUTH": "none",
            "OM_EXECUTOR": "inline",
            "OM_MODEL": "om-local/extractive",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "PYTHONPATH": str(REPO),
            **(env or {}),
        }
    )
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "om_app.cli", "serve", *args],
            cwd=REPO,
            env=environment,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield Served(process, log)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=15)


def _listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
        return True
    return False


@pytest.mark.parametrize("where", ["--host", "OM_API_HOST"])
def test_om_serve_refuses_to_run_without_auth_on_an_open_address(tmp_path: Path, where: str) -> None:
    port = free_port()
    args = ["--port", str(port)]
    env: dict[str, str] = {}
    if where == "--host":
        args += ["--host", "0.0.0.0"]
    else:
        env["OM_API_HOST"] = "0.0.0.0"
    with om_serve(tmp_path, *args, env=env) as served:
        end = time.monotonic() + 60
        while served.process.poll() is None:
            assert not _listening(port), "the API listens on 0.0.0.0 without authentication"
            assert time.monotonic() < end, "om serve neither refused nor exited within 60s"
            time.sleep(0.05)  # waiting for a process to exit; the deadline bounds it
        output = served.output()
    assert served.process.returncode != 0, output
    assert "OM_AUTH=none" in output and "OM_AUTH=keys" in output and "--insecure-no-auth" in output, output
    assert not _listening(port)


def test_om_serve_runs_on_an_open_address_when_told_insecure_no_auth(tmp_path: Path) -> None:
    port = free_port()
    with om_serve(tmp_path, "--host", "0.0.0.0", "--port", str(port), "--insecure-no-auth") as served:
        end = time.monotonic() + 60
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5) as http:
            while True:
                assert served.process.poll() is None, served.output()
                assert time.monotonic() < end, "om serve did not answer within 60s"
                with contextlib.suppress(httpx.TransportError):
                    if http.get("/healthz").status_code == 200:
                        break
                time.sleep(0.05)  # waiting for a starting process; the deadline bounds it
            assert http.get("/v1/threads").status_code == 200
            refused = http.get("/v1/threads", headers={"Host": "rebind.attacker.example"})
            assert refused.status_code == 421, "the Host rule still holds"
