"""The shells go through `MemoryEngine`'s door, not behind it.

Import contracts see modules, not attributes, so this reads the source: a route (om_api/routes, the proxy
in om_api/proxy) may use on the engine only what `MemoryEngine` itself defines, plus the shared reads
every layer may make (`SHARED_READS`); the engine's collaborators (executor, coordination, publisher)
and `EngineCore`'s internal reads and writes stay the use-cases'. And no shell imports a use-case module
of `om_core.engine`: the package, its task values (`tasks`), events (`events`) and ports are its surface.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ROUTES = [ROOT / "om_api" / "routes", ROOT / "om_api" / "proxy"]
SHELLS = [ROOT / name for name in ("om_api", "om_workers", "om_app", "om_adapters")]
#: Reads that need no door: the database handle (the runtime holds the same one), the engine's clock and
#: the thread configuration every layer resolves.
SHARED_READS = frozenset({"db", "clock", "config_for", "thread_config"})
#: The parts of `om_core.engine` a shell may import besides the package itself.
ENGINE_SURFACE = frozenset(
    {"om_core.engine", "om_core.engine.tasks", "om_core.engine.events", "om_core.engine.ports"}
)


def _facade_names() -> frozenset[str]:
    """Public names defined in `MemoryEngine`'s own class body (not inherited from `EngineCore`)."""
    tree = ast.parse((ROOT / "om_core" / "engine" / "engine.py").read_text())
    [facade] = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "MemoryEngine"]
    names = {n.name for n in facade.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    return frozenset(name for name in names if not name.startswith("_"))


def _sources(folders: list[Path]) -> list[Path]:
    return sorted(path for folder in folders for path in folder.rglob("*.py"))


def _engine_uses(tree: ast.AST) -> list[tuple[int, str]]:
    """`<x>.engine.<name>` and `engine.<name>` attribute reads, with their line."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        owner = node.value
        named_engine = isinstance(owner, ast.Name) and owner.id == "engine"
        engine_attribute = isinstance(owner, ast.Attribute) and owner.attr == "engine"
        if named_engine or engine_attribute:
            found.append((node.lineno, node.attr))
    return found


def test_the_facade_is_read_from_the_class_itself() -> None:
    names = _facade_names()
    assert {"ingest_turn", "observe_now", "reflect_now", "delete_thread"} <= names
    assert "publish" not in names and "executor" not in names, "EngineCore's, not the facade's"


@pytest.mark.parametrize("path", _sources(ROUTES), ids=lambda p: str(p.relative_to(ROOT)))
def test_a_route_uses_only_the_engine_facade(path: Path) -> None:
    allowed = _facade_names() | SHARED_READS
    behind = [
        f"{path.relative_to(ROOT)}:{line}: engine.{name}"
        for line, name in _engine_uses(ast.parse(path.read_text()))
        if name not in allowed
    ]
    assert not behind, "routes reach behind MemoryEngine; give it a method instead:\n" + "\n".join(behind)


def test_the_check_sees_a_reach_behind_the_engine() -> None:
    source = "def route(runtime):\n    runtime.engine.executor.submit(task)\n    engine.publish([])\n"
    uses = sorted(name for _, name in _engine_uses(ast.parse(source)))
    assert uses == ["executor", "publish"] and not set(uses) & (_facade_names() | SHARED_READS)


@pytest.mark.parametrize("path", _sources(SHELLS), ids=lambda p: str(p.relative_to(ROOT)))
def test_a_shell_imports_no_use_case_module(path: Path) -> None:
    imported: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            imported.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            imported.extend((node.lineno, alias.name) for alias in node.names)
    imported = [(line, module) for line, module in imported if module.startswith("om_core.engine")]
    inside = [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for line, module in imported
        if module not in ENGINE_SURFACE
    ]
    assert not inside, (
        "use-case modules are the engine's inside; export what a shell needs from om_core.engine:\n"
        + "\n".join(inside)
    )
