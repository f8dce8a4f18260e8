"""Every relative link in the docs leads somewhere: the file exists, and a `#fragment` names a heading of
it, as GitHub turns headings into anchors. The docs were split into pages that link to each other, so a
page renamed or a heading reworded must not leave a link behind."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.docs import FENCE, REPO, doc_paths

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"`[^`\n]*`")
HEADING = re.compile(r"^#{1,6} +(.+?) *#*$", re.MULTILINE)
PAGES = [*doc_paths(), REPO / "ARCHITECTURE.md"]


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but `-` and `_` dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor of a page; a repeated heading gets `-1`, `-2`, ... as on GitHub."""
    seen: dict[str, int] = {}
    found = set()
    for heading in HEADING.findall(FENCE.sub("", path.read_text())):
        base = anchor(heading)
        count = seen.get(base, 0)
        found.add(base if count == 0 else f"{base}-{count}")
        seen[base] = count + 1
    return found


def links(path: Path) -> list[str]:
    """The link targets of a page's prose (code blocks and code spans are not links)."""
    prose = CODE_SPAN.sub("", FENCE.sub("", path.read_text()))
    return [target for target in LINK.findall(prose) if not re.match(r"[a-z]+:", target)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_leads_to_a_file_and_heading_that_exist(page: Path) -> None:
    broken = []
    for target in links(page):
        file_part, _, fragment = target.partition("#")
        destination = (page.parent / file_part).resolve() if file_part else page
        if not destination.exists():
            broken.append(f"{target}: no such file")
        elif fragment and destination.suffix == ".md" and fragment not in anchors(destination):
            broken.append(f"{target}: no heading #{fragment} in {destination.relative_to(REPO)}")
    assert not broken, f"{page.relative_to(REPO)} has broken links:\n" + "\n".join(broken)


def test_the_pages_link_to_each_other() -> None:
    """So that the test above cannot pass by finding no link; and no page under docs/ is an orphan."""
    linked = {(page.parent / t.partition("#")[0]).resolve() for page in PAGES for t in links(page)}
    orphans = [str(p.relative_to(REPO)) for p in doc_paths()[1:] if p.resolve() not in linked]
    assert not orphans, f"pages nothing links to: {orphans}"


@pytest.mark.parametrize(
    ("heading", "expected"),
    [
        ("One machine: `om up`", "one-machine-om-up"),
        ("POST /v1/threads/{thread_id}/turns", "post-v1threadsthread_idturns"),
        ("Memory across a user's threads", "memory-across-a-users-threads"),
    ],
)
def test_anchors_are_githubs(heading: str, expected: str) -> None:
    assert anchor(heading) == expected
