"""ARCHITECTURE.md's module map names every module, so a reader can find any file by what it is for."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.packages import SERVER_PACKAGES

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = SERVER_PACKAGES
#: One module per Alembic revision: the map names the folder and what it holds.
EXEMPT = ("om_core/store/migrations/versions/",)
ENTRY = re.compile(r"^(?P<indent> *)(?P<name>[A-Za-z_][\w.]*(?:\.py|/))(?: |$)")


def mapped_paths(text: str) -> set[str]:
    """Paths of the entries of the first code block after "## Shape": `name.py` or `folder/` lines, nested
    by two spaces; continuation lines (which start with no such name) are skipped, as are inline
    mentions like "__init__.py, env.py" in a folder's description (listed modules need their own line)."""
    block = text.split("## Shape", 1)[1].split("```", 2)[1]
    stack: list[str] = []
    found: set[str] = set()
    for line in block.splitlines():
        match = ENTRY.match(line)
        if match is None:
            continue
        depth = len(match["indent"]) // 2
        del stack[depth:]
        path = "".join(stack) + match["name"]
        found.add(path)
        if match["name"].endswith("/"):
            stack.append(match["name"])
    return found


def test_every_module_is_in_the_map() -> None:
    mapped = mapped_paths((ROOT / "ARCHITECTURE.md").read_text())
    modules = {
        str(path.relative_to(ROOT))
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if not str(path.relative_to(ROOT)).startswith(EXEMPT)
    }
    missing = sorted(modules - mapped)
    assert not missing, f"modules missing from ARCHITECTURE.md's module map: {missing}"
    gone = sorted(p for p in mapped if p.endswith(".py") and not (ROOT / p).exists())
    assert not gone, f"the module map names modules that do not exist: {gone}"


def test_the_parser_nests_entries_and_skips_continuations() -> None:
    text = (
        "## Shape\n\n```\npkg/          top\n  a.py       one\n             more about a.py\n"
        "  sub/\n    b.py\n  c.py\n```\n"
    )
    assert mapped_paths(text) == {"pkg/", "pkg/a.py", "pkg/sub/", "pkg/sub/b.py", "pkg/c.py"}
