"""The module map (docs/architecture/modules.md) names every module once, so a reader can find any file by
what it is for."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.packages import SERVER_PACKAGES

ROOT = Path(__file__).resolve().parents[2]
MAP = ROOT / "docs" / "architecture" / "modules.md"
#: The framework adapters' packages (clients/<framework>/, hyphenated folders) are mapped too.
PACKAGES = (*SERVER_PACKAGES, "clients/openai-agents/om_openai_agents", "clients/langgraph/om_langgraph")
#: One module per Alembic revision: the map names the folder and what it holds.
EXEMPT = ("om_core/store/migrations/versions/",)
#: A name may hold hyphens (clients/openai-agents/): a folder the parser skipped would file everything
#: under it in the wrong place.
ENTRY = re.compile(r"^(?P<indent> *)(?P<name>[A-Za-z_][\w.-]*(?:\.py|/))(?: |$)")


def mapped_entries(text: str) -> list[str]:
    """Paths of the entries of the page's first code block: `name.py` or `folder/` lines, nested by two
    spaces; continuation lines (which start with no such name) are skipped, as are inline mentions like
    "__init__.py, env.py" in a folder's description (listed modules need their own line)."""
    block = text.split("```", 2)[1]
    stack: list[str] = []
    found: list[str] = []
    for line in block.splitlines():
        match = ENTRY.match(line)
        if match is None:
            continue
        depth = len(match["indent"]) // 2
        del stack[depth:]
        path = "".join(stack) + match["name"]
        found.append(path)
        if match["name"].endswith("/"):
            stack.append(match["name"])
    return found


def mapped_paths(text: str) -> set[str]:
    return set(mapped_entries(text))


def test_every_module_is_in_the_map() -> None:
    mapped = mapped_paths(MAP.read_text())
    modules = {
        str(path.relative_to(ROOT))
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if not str(path.relative_to(ROOT)).startswith(EXEMPT)
    }
    missing = sorted(modules - mapped)
    assert not missing, f"modules missing from the module map ({MAP.name}): {missing}"
    gone = sorted(p for p in mapped if p.endswith(".py") and not (ROOT / p).exists())
    assert not gone, f"the module map names modules that do not exist: {gone}"


def test_no_entry_is_listed_twice() -> None:
    entries = mapped_entries(MAP.read_text())
    twice = sorted({path for path in entries if entries.count(path) > 1})
    assert not twice, f"the module map lists these twice: {twice}"


def test_the_parser_nests_entries_and_skips_continuations() -> None:
    text = (
        "# Modules\n\n```\npkg/          top\n  a.py       one\n             more about a.py\n"
        "  sub/\n    b.py\n  c.py\n  a.py       again\n```\n"
    )
    assert mapped_entries(text) == ["pkg/", "pkg/a.py", "pkg/sub/", "pkg/sub/b.py", "pkg/c.py", "pkg/a.py"]
    assert mapped_paths(text) == {"pkg/", "pkg/a.py", "pkg/sub/", "pkg/sub/b.py", "pkg/c.py"}


def test_the_parser_reads_hyphenated_folders() -> None:
    text = "```\nclients/\n  openai-agents/   the adapter\n    pkg/\n      a.py\n```\n"
    assert mapped_entries(text) == [
        "clients/",
        "clients/openai-agents/",
        "clients/openai-agents/pkg/",
        "clients/openai-agents/pkg/a.py",
    ]
