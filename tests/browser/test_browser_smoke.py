"""The browser infrastructure works: chromium from the machine, driven by Playwright, reaches a real
`om serve` (celery mode, auth on) with workers, makes authenticated calls from the page, and screenshots
land in test-output/screenshots/."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from playwright.sync_api import Page, expect

from tests.browser.conftest import Tenant, UiStack

FETCH = """async ([url, key]) => {
    const headers = key ? {Authorization: `Bearer ${key}`} : {};
    const response = await fetch(url, {headers});
    return {status: response.status, body: await response.json()};
}"""


def test_chromium_reaches_the_api_and_calls_it_with_a_key(
    ui_stack: UiStack,
    tenants: tuple[Tenant, Tenant],
    page: Page,
    screenshot: Callable[[Page, str], Path],
) -> None:
    response = page.goto(ui_stack.base_url + "/healthz")
    assert response is not None and response.status == 200
    expect(page.locator("body")).to_contain_text('"status"')

    alice, _ = tenants
    signed_out: dict[str, Any] = page.evaluate(FETCH, [ui_stack.base_url + "/v1/threads", None])
    assert signed_out["status"] == 401, "auth is on: the stack is the production shape"
    signed_in: dict[str, Any] = page.evaluate(FETCH, [ui_stack.base_url + "/v1/threads", alice.key])
    assert signed_in["status"] == 200
    assert signed_in["body"]["items"] == [], "a fresh tenant has no threads"

    assert ui_stack.workers.processes and all(p.alive() for p in ui_stack.workers.processes)
    replies = ui_stack.workers.app.control.ping(timeout=1.0) or []
    assert replies, "the stack's workers answer a ping"

    path = screenshot(page, "smoke-healthz")
    assert path.exists() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
