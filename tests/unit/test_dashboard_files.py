"""The dashboard's files (om_api/ui/static/) keep the promises of issue 17 that can be checked without a
browser: served under /ui with the strict security headers, nothing fetched from the internet, every module
the page imports shipped, no data ever written as HTML, and every `data-testid` the browser tests use
present in the scripts (the DOM contract of the design note)."""

from __future__ import annotations

import re
from pathlib import Path

from fastapi import FastAPI
from fastapi.testclient import TestClient

from om_api import ui

STATIC = ui.STATIC
SCRIPTS = sorted(STATIC.glob("*.js"))

#: The DOM contract of issue 17: the `data-testid` names the browser tests (tests/browser/) rely on.
TEST_IDS = [
    "signin-form",
    "signin-key",
    "signin-error",
    "resource-list",
    "resource-row",
    "thread-list",
    "thread-row",
    "thread-search",
    "thread-page",
    "bar-messages",
    "bar-observations",
    "observation-log",
    "buffered-chunks",
    "buffered-reflection",
    "generation-list",
    "generation-diff",
    "current-task",
    "suggested-response",
    "extracted",
    "working-memory",
    "recent-messages",
    "live-status",
    "event-feed",
    "observe-now",
    "reflect-now",
    "reflect-guidance",
    "config-editor",
    "config-save",
    "config-error",
    "search-input",
    "search-results",
    "fleet-page",
    "queue-depths",
    "workers",
    "recent-failures",
    "usage",
    "flower-link",
    "not-found",
]


def client() -> TestClient:
    app = FastAPI()
    ui.mount(app)
    return TestClient(app)


def test_the_page_is_served_under_ui_with_its_security_headers() -> None:
    with client() as http:
        redirect = http.get("/ui", follow_redirects=False)
        assert redirect.status_code == 307 and redirect.headers["location"] == "ui/"
        page = http.get("/ui/")
        assert page.status_code == 200 and "text/html" in page.headers["content-type"]
        assert '<script type="module" src="app.js">' in page.text
        for name in ("/ui/", "/ui/app.js", "/ui/app.css"):
            headers = http.get(name).headers
            policy = headers["content-security-policy"]
            assert "script-src 'self'" in policy and "default-src 'none'" in policy
            assert "unsafe-inline" not in policy and "frame-ancestors 'none'" in policy
            assert headers["x-content-type-options"] == "nosniff"
        assert "javascript" in http.get("/ui/app.js").headers["content-type"]
        assert http.get("/ui/nothing-here.js").status_code == 404


def test_nothing_is_fetched_from_elsewhere_and_every_imported_module_is_shipped() -> None:
    for path in [*SCRIPTS, STATIC / "index.html", STATIC / "app.css"]:
        text = path.read_text()
        assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text), path.name
        assert "@import" not in text and "url(http" not in text, path.name
    for path in SCRIPTS:
        for module in re.findall(r"""from\s+["'](\./[^"']+)["']""", path.read_text()):
            assert (STATIC / module).is_file(), f"{path.name} imports {module}, which is not shipped"


def test_no_script_writes_html() -> None:
    """Observation text and messages are user-controlled: they reach the page as text nodes only."""
    for path in SCRIPTS:
        text = path.read_text()
        for sink in (
            "innerHTML",
            "outerHTML =",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
            "new Function",
        ):
            assert sink not in text, f"{path.name} uses {sink}"


def test_every_test_id_of_the_dom_contract_is_in_the_page() -> None:
    source = "\n".join(p.read_text() for p in [*SCRIPTS, STATIC / "index.html"])
    missing = [name for name in TEST_IDS if f'"{name}"' not in source]
    assert missing == []


def test_the_static_files_are_package_data() -> None:
    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    assert 'om_api = ["ui/static/*"]' in pyproject
