"""litellm's price table is the copy it ships with in every om process, never a file fetched at import.

litellm downloads its price table when it is first imported unless `LITELLM_LOCAL_MODEL_COST_MAP=True` is
in the environment by then; the download's URL comes from `LITELLM_MODEL_COST_MAP_URL`. Each test starts a
fresh interpreter with the variable unset (or set to "False", as an environment might carry it), points
the URL at a loopback listener, and asserts the listener heard nothing: the cost of every call then
depends on the installed litellm only. `om_core` pins the variable; each `om_*` package imports it first
(`om_local`, importable alone, pins it too).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.listener import Listener, listening

#: The tree whose `om_core` this run tests (found without importing it), with the tests package beside it.
ROOT = Path(str(importlib.util.find_spec("om_core").origin)).parents[1]  # type: ignore[union-attr]
VARIABLE = "LITELLM_LOCAL_MODEL_COST_MAP"
#: What a fresh process may start from: a package of each layer, and the modules processes start from.
ENTRY_MODULES = (
    "om_core",
    "om_local",
    "om_adapters",
    "om_api",
    "om_workers",
    "om_app",
    "om_app.cli",
    "om_workers.cli",
    "om_api.cli",
)


@pytest.fixture
def listener() -> Iterator[Listener]:
    with listening() as server:
        yield server


def _environment(inherited: str | None, price_table_url: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LITELLM_", "OM_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(Path(__file__).resolve().parents[2])])
    if inherited is not None:
        env[VARIABLE] = inherited
    if price_table_url is not None:
        env["LITELLM_MODEL_COST_MAP_URL"] = price_table_url
    return env


def _run(code: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


@pytest.mark.parametrize("inherited", [None, "False"])
@pytest.mark.parametrize("module", ENTRY_MODULES)
def test_importing_any_om_package_pins_the_local_price_table(module: str, inherited: str | None) -> None:
    """Cheap (no litellm import): whatever om module a process imports first, the variable litellm reads
    at its own import is already "True"."""
    code = f"import os, {module}; print(os.environ.get({VARIABLE!r}))"
    assert _run(code, _environment(inherited)) == "True"


@pytest.mark.parametrize("inherited", [None, "False"])
def test_a_process_that_loads_litellm_fetches_no_price_table(
    listener: Listener, inherited: str | None
) -> None:
    """The real import, as a worker does at start (`load_litellm`), after importing a shell package only:
    the listener standing in for the remote price table hears nothing, and litellm says its table is the
    local one."""
    code = (
        "import om_workers\n"
        "from om_core.models.client import load_litellm\n"
        "load_litellm()\n"
        "from litellm.litellm_core_utils.get_model_cost_map import _cost_map_source_info as info\n"
        "import litellm\n"
        "print(info.source, len(litellm.model_cost) > 100)\n"
    )
    out = _run(code, _environment(inherited, f"{listener.url}/model_prices.json"))
    assert listener.received == [], "litellm fetched its price table from the network"
    assert out.splitlines()[-1] == "local True"


def test_the_positive_control_fetches_when_nothing_pins_the_table(listener: Listener) -> None:
    """Without om in the process litellm does fetch from the URL: the listener above can hear it."""
    _run("import litellm", _environment(None, f"{listener.url}/model_prices.json"))
    assert [r.path for r in listener.received][:1] == ["/model_prices.json"]
