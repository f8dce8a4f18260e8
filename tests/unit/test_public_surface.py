"""`om_core`'s public surface: every exported name resolves to its home's object, and importing the package
(as every `import om_core.x` does) loads none of them until asked, so `om serve` can still cap malloc
arenas and load the tokenizer before the engine's imports."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

import om_core

HOMES: dict[str, str] = om_core._HOMES


def run(probe: str) -> str:
    """Run `probe` in a fresh interpreter: this one has imported half the core already."""
    return subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout


def test_all_lists_exactly_the_names_with_a_home() -> None:
    assert sorted(om_core.__all__) == sorted(HOMES)
    assert len(set(om_core.__all__)) == len(om_core.__all__)


@pytest.mark.parametrize("name", sorted(HOMES))
def test_each_public_name_is_the_object_of_its_home(name: str) -> None:
    assert getattr(om_core, name) is getattr(importlib.import_module(HOMES[name]), name)


def test_engine_names_come_from_the_engine_package_not_its_modules() -> None:
    assert not [home for home in HOMES.values() if home.startswith("om_core.engine.")]


def test_an_unknown_name_is_an_attribute_error_and_submodules_still_import() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = om_core.no_such_name  # type: ignore[attr-defined]
    from om_core import tenancy

    assert tenancy.__name__ == "om_core.tenancy"


def test_importing_a_core_submodule_loads_no_public_name() -> None:
    probe = (
        "import json, sys; import om_core.process.malloc_arenas; "
        "watched = ('om_core', 'sqlalchemy', 'litellm'); "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith(watched))))"
    )
    loaded = json.loads(run(probe))
    assert loaded == ["om_core", "om_core.process", "om_core.process.malloc_arenas"]


def test_a_public_name_loads_only_its_home() -> None:
    probe = (
        "import json, sys; from om_core import Message; "
        "print(json.dumps(['om_core.engine' in sys.modules, 'om_core.messages' in sys.modules]))"
    )
    assert json.loads(run(probe)) == [False, True]
