"""The project's documentation as the tests read it: `README.md` first, then every page under `docs/`.

One list, so that a page added under `docs/` is checked by every doc test (its examples run, its links
resolve, it keeps no measurement history) without any test naming it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = REPO / "docs"


@dataclass(frozen=True)
class Doc:
    path: Path
    text: str

    @property
    def name(self) -> str:
        """The page's path from the repository root, as messages name it."""
        return str(self.path.relative_to(REPO))


def doc_paths() -> list[Path]:
    """README.md, then the pages under docs/ in path order (the order their examples run in)."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def docs() -> list[Doc]:
    return [Doc(path, path.read_text(encoding="utf-8")) for path in doc_paths()]


FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.MULTILINE | re.DOTALL)


def fenced(lang: str) -> list[tuple[Doc, str]]:
    """Every fenced block of the language, with the page it is on, in page order."""
    return [(doc, m.group(2)) for doc in docs() for m in FENCE.finditer(doc.text) if m.group(1) == lang]
