"""The core keeps the shape issue 30 gave it: each concept in its own folder, so the root of `om_core/`
stays a short list of cross-cutting modules, and no engine module grows back into a file that does
everything. A new module at the root, or an engine module past the limit, belongs in a concept's folder."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "om_core"
#: Modules at the root of `om_core/`, `__init__.py` not counted.
MAX_ROOT_MODULES = 12
MAX_ENGINE_LINES = 500


def test_the_core_root_holds_few_modules() -> None:
    modules = sorted(p.name for p in ROOT.glob("*.py") if p.name != "__init__.py")
    assert len(modules) <= MAX_ROOT_MODULES, f"{len(modules)} modules at om_core/: {modules}"


def test_no_engine_module_is_over_the_limit() -> None:
    long = {
        p.name: n
        for p in sorted((ROOT / "engine").glob("*.py"))
        if (n := len(p.read_text().splitlines())) > MAX_ENGINE_LINES
    }
    assert not long, f"engine modules over {MAX_ENGINE_LINES} lines: {long}"
