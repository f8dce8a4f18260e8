"""Every behaviour section the repository cites has its heading in docs/behaviour.md (issue 30).

Code, tests and docs cite the memory's behaviour by section number: "behaviour §4.7", a bare "§4.7",
"§8.6.4" or "§3.5(4)" (an item of the numbered list under a heading), "§13.4 case 10", ranges such as
"§4.2–§4.6" or "§13.1.2–5", and "behaviour Appendix B". A citation is only followable from a clone if
docs/behaviour.md has the section, so this collects every citation in the repository's Python and
Markdown files and names, by file and line, each one that does not resolve.

The tests below write the section sign as an escape, so the collector does not take their examples for
citations of this file.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BEHAVIOUR = REPO / "docs" / "behaviour.md"
SIGN = "\u00a7"
#: Directories never scanned: tool caches, installed packages, generated client dependencies.
SKIPPED_DIRS = {"node_modules", "__pycache__", "build", "dist", "site-packages"}

_NUMBER = r"\d+(?:\.\d+)*"
_DASH = r"\s?[-\u2013]\s?"
#: A citation: the number, an optional "(k)" item, an optional range end ("–§4.6" or "–5").
_CITATION = re.compile(
    rf"{SIGN}{SIGN}?\s?(?P<number>{_NUMBER})(?:\((?P<item>\d+)\))?"
    rf"(?:{_DASH}{SIGN}?(?P<end>{_NUMBER})(?![\d.]*\d))?"
)
#: Items named after a citation: "case 10", "items 5, 7, 8", "cases 6–10 and 14", "step 9".
_ITEMS = re.compile(r"\s+(?:cases?|items?|steps?)\s+(?P<list>\d+(?:(?:,\s*|\s+and\s+|" + _DASH + r")\d+)*)")
_APPENDIX = re.compile(r"\bAppendix\s+(?P<letter>[A-Z])(?![a-z])")
_APPENDIX_CITED = re.compile(r"\bbehaviour\s+Appendix\s+(?P<letter>[A-Z])(?![a-z])")
_HEADING = re.compile(
    rf"^(?P<hashes>#{{1,6}})\s+(?:{SIGN}(?P<number>{_NUMBER})|Appendix\s+(?P<letter>[A-Z])\b)"
)
_ITEM_LINE = re.compile(r"^(?P<item>\d+)\.\s")


@dataclass(frozen=True)
class Citation:
    """One section (or one numbered item of a section) some file names."""

    where: str
    number: str
    item: int | None = None

    def label(self) -> str:
        name = f"Appendix {self.number}" if self.number.isalpha() else f"{SIGN}{self.number}"
        return name + (f" item {self.item}" if self.item is not None else "")


def _span(start: str, end: str) -> list[str]:
    """The numbers a range covers: "4.2"–"4.6" or "13.1.2"–"5"; a range it cannot read gives its ends."""
    first = start.split(".")
    last = end.split(".")
    if len(last) == 1 and len(first) > 1:
        last = [*first[:-1], last[0]]
    if len(last) != len(first) or first[:-1] != last[:-1] or int(last[-1]) < int(first[-1]):
        return [start, end]
    stem = first[:-1]
    return [".".join([*stem, str(n)]) for n in range(int(first[-1]), int(last[-1]) + 1)]


def _item_numbers(text: str) -> list[int]:
    numbers: list[int] = []
    for piece in re.split(r",\s*|\s+and\s+", text):
        bounds = re.split(_DASH, piece)
        if len(bounds) == 2:
            numbers.extend(range(int(bounds[0]), int(bounds[1]) + 1))
        else:
            numbers.append(int(bounds[0]))
    return numbers


def citations_in(text: str, where: str, *, bare_appendix: bool = False) -> Iterator[Citation]:
    """The citations of one file's text, each tagged `where:line`."""
    appendix = _APPENDIX if bare_appendix else _APPENDIX_CITED
    for line_number, line in enumerate(text.splitlines(), start=1):
        at = f"{where}:{line_number}"
        for match in _CITATION.finditer(line):
            number, end, item = match["number"], match["end"], match["item"]
            numbers = _span(number, end) if end else [number]
            for each in numbers:
                yield Citation(at, each)
            if item is not None:
                yield Citation(at, number, int(item))
            named = _ITEMS.match(line, match.end())
            if named is not None and end is None and item is None:
                for each_item in _item_numbers(named["list"]):
                    yield Citation(at, number, each_item)
        for match in appendix.finditer(line):
            yield Citation(at, match["letter"])


@dataclass(frozen=True)
class Sections:
    """The headings of docs/behaviour.md and the top-level numbered items under each."""

    headings: dict[str, int]
    items: dict[str, set[int]]


def sections_of(document: str) -> Sections:
    headings: dict[str, int] = {}
    items: dict[str, set[int]] = {}
    current: str | None = None
    fenced = False
    for line in document.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        heading = _HEADING.match(line)
        if heading is not None:
            current = heading["number"] or heading["letter"]
            headings[current] = len(heading["hashes"])
            items.setdefault(current, set())
            continue
        if line.startswith("#"):
            current = None
            continue
        item = _ITEM_LINE.match(line)
        if item is not None and current is not None:
            items[current].add(int(item["item"]))
    return Sections(headings, items)


def resolves(citation: Citation, sections: Sections) -> bool:
    """A heading for the number, or, for `a.b.c` / an item, the numbered item under the parent heading."""
    if citation.item is not None:
        return citation.number in sections.headings and citation.item in sections.items[citation.number]
    if citation.number in sections.headings:
        return True
    parent, _, last = citation.number.rpartition(".")
    return parent.count(".") >= 1 and parent in sections.headings and int(last) in sections.items[parent]


def repository_files() -> Iterator[Path]:
    for directory, subdirectories, files in os.walk(REPO):
        subdirectories[:] = sorted(
            name for name in subdirectories if not name.startswith(".") and name not in SKIPPED_DIRS
        )
        for name in sorted(files):
            if name.endswith((".py", ".md")):
                yield Path(directory, name)


def repository_citations() -> list[Citation]:
    found: list[Citation] = []
    for path in repository_files():
        where = str(path.relative_to(REPO))
        text = path.read_text(encoding="utf-8")
        found.extend(citations_in(text, where, bare_appendix=path == BEHAVIOUR))
    return found


def unresolved(citations: list[Citation], document: str) -> list[str]:
    sections = sections_of(document)
    return list(dict.fromkeys(f"{c.where}: {c.label()}" for c in citations if not resolves(c, sections)))


def _heading_number(line: str) -> str | None:
    heading = _HEADING.match(line)
    return None if heading is None else heading["number"] or heading["letter"]


def test_every_cited_section_has_a_heading_in_the_behaviour_document() -> None:
    citations = repository_citations()
    assert len({c.number for c in citations}) > 50, "the collector found too few citations to be working"
    missing = unresolved(citations, BEHAVIOUR.read_text(encoding="utf-8"))
    assert not missing, "cited but not in docs/behaviour.md:\n" + "\n".join(missing)


def test_removing_a_cited_heading_fails_the_check() -> None:
    document = BEHAVIOUR.read_text(encoding="utf-8")
    citations = repository_citations()
    sections = sections_of(document)
    cited = next(c for c in citations if c.item is None and c.number in sections.headings and "." in c.number)
    heading = next(line for line in document.splitlines() if _heading_number(line) == cited.number)
    missing = unresolved(citations, document.replace(heading + "\n", ""))
    assert f"{cited.where}: {cited.label()}" in missing


def test_headings_are_unique_and_nest_by_their_numbers() -> None:
    document = BEHAVIOUR.read_text(encoding="utf-8")
    numbers = [n for n in map(_heading_number, document.splitlines()) if n is not None]
    assert len(numbers) == len(set(numbers)), "a section number is headed twice"
    sections = sections_of(document)
    for number, level in sections.headings.items():
        if number.isalpha():
            assert level == 2, f"Appendix {number} is not a top-level section"
            continue
        depth = number.count(".") + 1
        assert level == depth + 1, f"{SIGN}{number} is a level-{level} heading, expected {depth + 1}"
        parent = number.rpartition(".")[0]
        assert not parent or parent in sections.headings, f"{SIGN}{number} has no parent {SIGN}{parent}"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"behaviour {SIGN}4.7.", [("4.7", None)]),
        (f"({SIGN}4.2\u2013{SIGN}4.4)", [("4.2", None), ("4.3", None), ("4.4", None)]),
        (f"{SIGN}9.2-{SIGN}9.3", [("9.2", None), ("9.3", None)]),
        (f"{SIGN}13.1.2\u20134 models", [("13.1.2", None), ("13.1.3", None), ("13.1.4", None)]),
        (f"{SIGN}8.6.1-2)", [("8.6.1", None), ("8.6.2", None)]),
        (f"{SIGN}3.5(4) and {SIGN}3.5(3)(4)", [("3.5", None), ("3.5", 4), ("3.5", None), ("3.5", 3)]),
        (f"{SIGN}13.4 case 10", [("13.4", None), ("13.4", 10)]),
        (f"{SIGN}13.9 items 5, 7, 8", [("13.9", None), ("13.9", 5), ("13.9", 7), ("13.9", 8)]),
        (f"{SIGN}13.6 cases 6\u20137 and 14", [("13.6", None), ("13.6", 6), ("13.6", 7), ("13.6", 14)]),
        (f"{SIGN}{SIGN}5\u20136", [("5", None), ("6", None)]),
        (f"see {SIGN}12.2 P4, {SIGN}7)", [("12.2", None), ("7", None)]),
        ("behaviour Appendix B1; an Appendix C elsewhere", [("B", None)]),
        (f"{SIGN}4.10-style {SIGN}2.3-4.1", [("4.10", None), ("2.3", None), ("4.1", None)]),
    ],
)
def test_the_collector_reads_each_form_of_citation(text: str, expected: list[tuple[str, int | None]]) -> None:
    found = [(c.number, c.item) for c in citations_in(text, "x")]
    assert found == expected


def test_an_item_resolves_only_under_its_own_heading() -> None:
    document = "\n".join(
        [
            f"## {SIGN}8 Extractors",
            f"### {SIGN}8.6 Hooks",
            "1. merge",
            "2. hooks",
            "   3. an indented item is no item of the section",
            f"### {SIGN}8.7 Working memory",
            "3. not under 8.6",
            "```",
            f"### {SIGN}8.8 inside a fence",
            "```",
        ]
    )
    sections = sections_of(document)
    assert resolves(Citation("x", "8.6.2"), sections)
    assert resolves(Citation("x", "8.6", 1), sections)
    assert not resolves(Citation("x", "8.6.3"), sections)
    assert not resolves(Citation("x", "8.8"), sections)
    assert not resolves(Citation("x", "8.9"), sections)
    # A two-part number is never read as an item: "2.3" needs its own heading, not item 3 of a "2".
    assert not resolves(Citation("x", "8.1"), sections_of(f"## {SIGN}8 X\n1. one"))
