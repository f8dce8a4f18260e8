"""The client installed alone: a fresh virtualenv gets only `clients/python` (from a copy, so concurrent
runs never share a build directory; pip's cache makes repeated installs quick), runs the README's client
example against a real `om serve` (Postgres, Redis, keys) and prints what the server stored; none of the
server's dependencies can be imported there. The same server answers `GET /v1/models`, the proxy's model
list, which the `openai` package reads."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import openai
import pytest
from sqlalchemy import Engine

from om_client import OMClient
from om_core.tenancy import access
from tests.support.api_server import REPO, ApiServer, new_id
from tests.support.docs import fenced

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.timeout(300)]

SERVER_ONLY = ("litellm", "celery", "psycopg2", "sqlalchemy", "fastapi", "om_core", "om_api")


def clean_env() -> dict[str, str]:
    drop = {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "PIP_REQUIRE_VIRTUALENV"}
    return {k: v for k, v in os.environ.items() if k not in drop} | {"PIP_DISABLE_PIP_VERSION_CHECK": "1"}


@pytest.fixture(scope="module")
def client_venv(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    """A virtualenv with only the client distribution installed (the test's pip installs into it). The
    install mostly waits on the package index, so the server starts meanwhile."""
    root = tmp_path_factory.mktemp("client-venv")
    source = root / "om-client-src"
    skip = shutil.ignore_patterns("build", "*.egg-info", "__pycache__")
    shutil.copytree(REPO / "clients" / "python", source, ignore=skip)
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    install = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", str(source)]
    pip = subprocess.Popen(
        install, cwd=root, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        request.getfixturevalue("stack")
        output, _ = pip.communicate(timeout=240)
    finally:
        if pip.poll() is None:
            pip.kill()
            pip.wait()
    assert pip.returncode == 0, f"pip install ./clients/python failed:\n{output}"
    return python


def run_in(python: Path, code: str, cwd: Path) -> str:
    result = subprocess.run(
        [str(python), "-c", code], cwd=cwd, env=clean_env(), capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    return result.stdout


def readme_client_example() -> str:
    """The quickstart's client example (README.md)."""
    (example,) = [
        text for doc, text in fenced("python") if "OMClient" in text and doc.path.name == "README.md"
    ]
    return example


def test_the_client_alone_has_none_of_the_servers_dependencies(client_venv: Path) -> None:
    probe = (
        "import importlib.util, json, om_client, om_client.client, httpx, pydantic\n"
        f"print(json.dumps({{m: importlib.util.find_spec(m) is not None for m in {SERVER_ONLY!r}}}))\n"
        "print(om_client.__file__)\n"
    )
    found, where = run_in(client_venv, probe, client_venv.parent.parent).splitlines()
    assert json.loads(found) == dict.fromkeys(SERVER_ONLY, False)
    assert Path(where).is_relative_to(client_venv.parent.parent), f"om_client came from {where}"


def test_the_readme_client_example_runs_in_the_clients_own_virtualenv(
    client_venv: Path, stack: ApiServer, key: str
) -> None:
    thread, resource = new_id("t"), new_id("user")
    example = readme_client_example()
    for placeholder, real in (
        ("http://localhost:8088", stack.base_url),
        ("omk_...", key),
        ('"t-43"', json.dumps(thread)),
        ('"user-7"', json.dumps(resource)),
    ):
        assert placeholder in example, f"the README's client example no longer uses {placeholder}"
        example = example.replace(placeholder, real)
    my_model = (
        "def my_model(messages):\n"
        "    assert messages[-1] == {'role': 'user', 'content': \"Hi, I'm Dana\"}, messages\n"
        "    return 'Nice to meet you, Dana.'\n\n"
    )
    printed = run_in(client_venv, my_model + example, client_venv.parent.parent)
    assert printed.strip() == repr(["user: Hi, I'm Dana", "assistant: Nice to meet you, Dana."])
    with OMClient(stack.base_url, key) as om:  # the server side agrees
        stored = om.messages(thread)
    assert [(m.id, m.role) for m in stored.messages] == [("m1", "user"), ("m2", "assistant")]


def test_models_lists_the_allowed_actor_models_in_openais_format(
    stack: ApiServer, key: str, pg_engine: Engine
) -> None:
    other = access.create_key(pg_engine, new_id("tenant"), "models").secret
    listed = openai.OpenAI(base_url=f"{stack.base_url}/v1", api_key=key).models.list()
    ids = [model.id for model in listed.data]
    assert "om-actor/echo" in ids and "openai/gpt-4o-mini" in ids and "ollama/llama3" in ids
    assert ids == sorted(ids) and len(ids) == len(set(ids))
    assert "openai/gpt-4o" not in ids, "a model no pattern matches is not listed"
    assert not [m for m in ids if m.startswith("ollama/") and not m.startswith("ollama/llama3")]
    assert {m.owned_by for m in listed.data if m.id.startswith("openai/")} == {"openai"}
    raw = httpx.get(f"{stack.base_url}/v1/models", headers={"Authorization": f"Bearer {key}"}).json()
    assert raw["object"] == "list" and set(raw["data"][0]) == {"id", "object", "created", "owned_by"}
    assert {entry["object"] for entry in raw["data"]} == {"model"}
    with OMClient(stack.base_url, other) as om:  # another tenant: the operator's list, nothing of a tenant
        assert [m.id for m in om.models().data] == ids
    refused = httpx.get(f"{stack.base_url}/v1/models")
    assert refused.status_code == 401
    wrong = httpx.get(f"{stack.base_url}/v1/models", headers={"Authorization": "Bearer omk_nope"})
    assert wrong.status_code == 401
