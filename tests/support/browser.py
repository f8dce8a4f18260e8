"""Playwright driving Debian's chromium, for the dashboard's browser tests (tests/browser/).

Playwright (the Python package) never downloads a browser here: `scripts/testenv.py` installs Debian's
`chromium` with apt-get and hands its path over as `OM_TEST_CHROMIUM`. The launch flags are the ones this
machine needs (/work/.library/env/machines/python.md): no sandbox as root, no GPU, and no background
networking, update or sync, whose connections this machine's closed network refuses by the dozen. Each
launch gets a fresh, empty profile (Playwright's `launch` makes a temporary user-data dir), so no test sees
another's storage.

Screenshots go to `test-output/screenshots/` at the repository's root (ignored by git), where a reviewer
finds them after `make test`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, Playwright

REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / "test-output" / "screenshots"

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

#: A laptop screen and a phone, the two widths the dashboard is checked at.
LAPTOP = {"width": 1366, "height": 900}
PHONE = {"width": 375, "height": 812}


def chromium_path() -> str:
    """Debian's chromium from `scripts/testenv.py`; failing (not skipping) names the fix when missing."""
    path = os.environ.get("OM_TEST_CHROMIUM")
    if not path:
        pytest.fail(
            "OM_TEST_CHROMIUM is not set: the browser tests run under `make test` "
            "(scripts/testenv.py run -- pytest ...), which installs Debian's chromium",
            pytrace=False,
        )
    if not Path(path).exists():
        pytest.fail(f"OM_TEST_CHROMIUM={path} does not exist (apt-get install chromium)", pytrace=False)
    return path


def launch_chromium(playwright: Playwright) -> Browser:
    """Headless chromium from the machine, never a Playwright-downloaded build."""
    return playwright.chromium.launch(
        executable_path=chromium_path(), headless=True, args=["--headless", *CHROMIUM_ARGS]
    )


def screenshot(page: Page, name: str, *, full_page: bool = True) -> Path:
    """Save `page` as `test-output/screenshots/<name>.png` and return the path. The name is kept to
    letters, digits, `-` and `_` so it is a safe file name whatever a test passes."""
    safe = re.sub(r"[^A-Za-z0-9_-]+", "-", name).strip("-") or "page"
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{safe}.png"
    page.screenshot(path=str(path), full_page=full_page)
    return path
