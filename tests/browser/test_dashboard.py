"""The memory dashboard (issue 17) in a real browser against a real stack (`ui_stack`: `om serve` in celery
mode with keys, workers on every queue, beat; Debian's chromium driven by Playwright).

What a user does, checked on what the page shows: sign in (a wrong key is refused on the form), find a
resource and a thread, watch an activation arrive live while turns are posted through the API, reflect now
with guidance and read what the reflection changed, fix a refused config value shown beside its field,
search for a planted value, look at the fleet, and, as another tenant, get "not found" for the first
tenant's thread URL. The live feed is also cut at the network (a TCP proxy between page and API) and must
resume with Last-Event-ID: every event the server has shown exactly once.

Every wait is on a condition (Playwright's `expect` with a timeout, or `wait_until` on the API with a
deadline), never a sleep. Screenshots of every page, at a laptop and a phone width, are saved under
test-output/screenshots/ for a reviewer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, Request, expect

from tests.browser.conftest import Tenant, UiStack
from tests.support.api_server import new_id, run_api_server
from tests.support.browser import PHONE
from tests.support.browser import screenshot as save_screenshot
from tests.support.tcp_proxy import tcp_proxy
from tests.support.workers import wait_until

Screenshot = Callable[[Page, str], Path]

#: Generous for a loaded two-core machine; a condition met early returns at once.
UI_TIMEOUT_MS = 30_000
#: Thresholds small enough that a dozen turns buffer and activate (the offline model is extractive).
LIVE_CYCLE = {
    "observation": {"messageTokens": 400, "bufferTokens": 100},
    "reflection": {"observationTokens": 4000},
}

#: User-controlled text that would run script if the page ever parsed stored text as HTML.
MARKUP = '<img src="x" onerror="window.__xss = 1">'

# ----------------------------------------------------------------------------------------- helpers


@pytest.fixture(autouse=True)
def no_script_errors(page: Page) -> Iterator[None]:
    """Every test fails on an uncaught error in the page's scripts or a Content-Security-Policy violation
    (a page that half works would otherwise pass on what it happened to render)."""
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(f"uncaught: {error}"))
    page.on(
        "console",
        lambda message: (
            problems.append(f"console: {message.text}") if "Content Security Policy" in message.text else None
        ),
    )
    yield
    assert problems == []


@pytest.fixture
def alice(tenants: tuple[Tenant, Tenant]) -> Tenant:
    return tenants[0]


@pytest.fixture
def mallory(tenants: tuple[Tenant, Tenant]) -> Tenant:
    return tenants[1]


@pytest.fixture
def api(ui_stack: UiStack, alice: Tenant) -> Iterator[httpx.Client]:
    """The first tenant's API client: what a chat backend would do while the user watches."""
    headers = {"Authorization": f"Bearer {alice.key}"}
    with httpx.Client(base_url=ui_stack.base_url, headers=headers, timeout=90) as client:
        yield client


def ok(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code < 300, f"{response.request.method} {response.request.url}: {response.text}"
    return response.json() if response.content else {}


def new_thread(
    api: httpx.Client, resource: str, *, title: str | None = None, overrides: dict[str, Any] | None = None
) -> str:
    thread = new_id("thread")
    ok(api.put(f"/v1/threads/{thread}/config", json={"resource_id": resource, "overrides": overrides}))
    if title is not None:
        ok(api.patch(f"/v1/threads/{thread}", json={"title": title}))
    return thread


def post_turn(api: httpx.Client, thread: str, index: int, *, planted: str = "") -> dict[str, Any]:
    user = (
        f"Day {index}: I booked flight LH{400 + index} to Lisbon for {100 + 7 * index} euros and my dog "
        f"Rex needs a sitter on day {index}. {planted}"
    )
    return ok(
        api.post(
            f"/v1/threads/{thread}/turns",
            json={
                "messages": [
                    {"role": "user", "text": user.strip()},
                    {"role": "assistant", "text": f"Noted flight LH{400 + index}, and Rex on day {index}."},
                ]
            },
        )
    )


def server_events(api: httpx.Client, thread: str) -> list[dict[str, Any]]:
    """Every event of the thread as the server has it (a replay, not following)."""
    response = api.get(f"/v1/threads/{thread}/events", params={"follow": "false"})
    assert response.status_code == 200, response.text
    return [json.loads(line[5:]) for line in response.text.splitlines() if line.startswith("data:")]


def sign_in(page: Page, url: str, key: str) -> None:
    page.goto(url)
    expect(page.get_by_test_id("signin-form")).to_be_visible(timeout=UI_TIMEOUT_MS)
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_test_id("signin-form")).to_have_count(0, timeout=UI_TIMEOUT_MS)


def open_thread(page: Page, ui_url: str, thread: str) -> None:
    page.goto(f"{ui_url}#/threads/{thread}")
    expect(page.get_by_test_id("thread-page")).to_be_visible(timeout=UI_TIMEOUT_MS)
    expect(page.get_by_test_id("live-status")).to_have_text("live", timeout=UI_TIMEOUT_MS)


def feed_ids(page: Page) -> list[int]:
    values = (
        page.get_by_test_id("event-feed")
        .locator("[data-event-id]")
        .evaluate_all("items => items.map(item => Number(item.dataset.eventId))")
    )
    return [int(v) for v in values]


# ------------------------------------------------------------------------------------------- tests


def test_sign_in_find_a_resource_and_open_its_thread(
    ui_stack: UiStack, alice: Tenant, api: httpx.Client, page: Page, screenshot: Screenshot
) -> None:
    resource = new_id("res")
    # The Reflector as a fallback list with retries (issue 33): shown beside its bar as written.
    reflector = [{"model": "om-local/extractive", "maxRetries": 1}, "om-local/extractive"]
    models = {
        "model": None,
        "observation": {"model": "om-local/extractive"},
        "reflection": {"model": reflector},
    }
    thread = new_thread(api, resource, title="Trip planning", overrides=models)
    other = new_thread(api, resource, title="Groceries")
    post_turn(api, thread, 1, planted=f"The gate code is 4711. {MARKUP}")
    post_turn(api, other, 1)

    page.goto(ui_stack.ui_url)
    expect(page.get_by_test_id("signin-form")).to_be_visible(timeout=UI_TIMEOUT_MS)
    screenshot(page, "signin")
    page.get_by_label("API key").fill("om_not-a-real-key")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_test_id("signin-error")).to_have_text(
        "That key was refused: check it and try again.", timeout=UI_TIMEOUT_MS
    )
    expect(page.get_by_label("API key")).to_be_focused()

    page.get_by_label("API key").fill(alice.key)
    page.get_by_role("button", name="Sign in").click()
    rows = page.get_by_test_id("resource-row")
    expect(rows).to_have_count(1, timeout=UI_TIMEOUT_MS)  # a fresh tenant: its one resource only
    expect(rows.first).to_contain_text(resource)
    expect(rows.first).to_contain_text("threads 2")
    expect(rows.first).to_contain_text("messages 4")
    screenshot(page, "resources")

    rows.first.get_by_role("link").click()
    threads = page.get_by_test_id("thread-row")
    expect(threads).to_have_count(2, timeout=UI_TIMEOUT_MS)
    page.get_by_test_id("thread-search").fill("trip")
    expect(threads).to_have_count(1, timeout=UI_TIMEOUT_MS)
    expect(threads.first).to_contain_text(thread)
    expect(threads.first).to_contain_text("messages 2")
    screenshot(page, "threads-of-a-resource")

    threads.first.get_by_role("link").click()
    expect(page.get_by_test_id("thread-page")).to_be_visible(timeout=UI_TIMEOUT_MS)
    messages = page.get_by_test_id("recent-messages")
    expect(messages).to_contain_text("The gate code is 4711.")
    expect(messages).to_contain_text(MARKUP)  # stored text is shown as text, never parsed as markup
    expect(messages.locator("img")).to_have_count(0)
    assert page.evaluate("window.__xss") is None
    expect(page.get_by_test_id("bar-messages")).to_contain_text("Unobserved messages")
    # The models beside the token bars (the config answer's `models`, resolved as the workers use them).
    expect(page.get_by_test_id("bar-messages-model")).to_have_text(
        "Observer: om-local/extractive", timeout=UI_TIMEOUT_MS
    )
    expect(page.get_by_test_id("bar-observations-model")).to_have_text(
        "Reflector: om-local/extractive (1 retry), then om-local/extractive"
    )
    expect(page.get_by_test_id("live-status")).to_have_text("live", timeout=UI_TIMEOUT_MS)


def test_an_activation_arrives_live_then_reflect_now_makes_a_generation_with_a_diff(
    ui_stack: UiStack, alice: Tenant, api: httpx.Client, page: Page, browser: Browser, screenshot: Screenshot
) -> None:
    thread = new_thread(api, new_id("res"), title="Lisbon trip", overrides=LIVE_CYCLE)
    post_turn(api, thread, 0)
    sign_in(page, ui_stack.ui_url, alice.key)
    open_thread(page, ui_stack.ui_url, thread)
    page.evaluate("window.__sameDocument = true")  # gone if anything reloads the page
    expect(page.get_by_test_id("observation-log")).to_contain_text("No observations yet")

    # Turns through the API, as a chat backend posts them, until the server reports an activation.
    turns = iter(range(1, 60))

    def activated() -> bool:
        post_turn(api, thread, next(turns))
        return any(e["type"] == "data-om-activation" for e in server_events(api, thread))

    wait_until(activated, deadline_s=120, what="an activation after posting turns", every_s=0)

    feed = page.get_by_test_id("event-feed")
    expect(feed.locator('[data-event-type="data-om-activation"]').first).to_be_visible(timeout=UI_TIMEOUT_MS)
    expect(page.get_by_test_id("observation-log")).to_contain_text("LH40", timeout=UI_TIMEOUT_MS)
    expect(page.get_by_test_id("observation-log").locator(".prio").first).to_be_visible()
    expect(page.get_by_test_id("bar-observations").locator(".bar-value")).not_to_have_text(
        re.compile(r"^0 tok of"), timeout=UI_TIMEOUT_MS
    )
    assert page.evaluate("window.__sameDocument") is True, "the activation arrived without a reload"
    unlabelled = page.evaluate(
        "[...document.querySelectorAll('input, select, textarea')]"
        ".filter(el => !el.labels.length && !el.getAttribute('aria-label')).map(el => el.outerHTML)"
    )
    assert unlabelled == [], "every field of the thread page has a label"
    screenshot(page, "thread")
    save_screenshot(page, "thread-viewport", full_page=False)  # the README's picture (docs/)

    generation = ok(api.get(f"/v1/threads/{thread}/status"))["generationCount"]
    page.get_by_test_id("reflect-guidance").fill("Keep every flight number and amount.")
    page.get_by_test_id("reflect-now").click()
    new_generation = page.get_by_test_id("generation-list").get_by_text(
        f"Generation {generation + 1} (active)"
    )
    expect(new_generation).to_be_visible(timeout=UI_TIMEOUT_MS * 2)
    reflected = feed.locator('[data-event-type="data-om-observation-end"]', has_text="reflection")
    expect(reflected.first).to_be_visible(timeout=UI_TIMEOUT_MS)
    page.get_by_test_id("generation-list").locator(f'[data-generation="{generation + 1}"]').get_by_role(
        "button", name="What changed"
    ).click()
    diff = page.get_by_test_id("generation-diff")
    expect(diff).to_contain_text(f"Generation {generation + 1} against {generation}", timeout=UI_TIMEOUT_MS)
    expect(diff.locator(".diff-added, .diff-removed, .diff-kept").first).to_be_visible()
    assert page.evaluate("window.__sameDocument") is True
    screenshot(page, "thread-after-reflection")

    # The same page on a phone.
    phone = browser.new_context(viewport=PHONE)  # type: ignore[arg-type]
    try:
        small = phone.new_page()
        sign_in(small, ui_stack.ui_url, alice.key)
        open_thread(small, ui_stack.ui_url, thread)
        expect(small.get_by_test_id("observation-log")).to_contain_text("LH40", timeout=UI_TIMEOUT_MS)
        width = small.evaluate("document.documentElement.scrollWidth")
        assert width <= PHONE["width"], f"the thread page scrolls sideways on a phone ({width}px)"
        screenshot(small, "phone-thread")
        small.goto(ui_stack.ui_url + "#/resources")
        expect(small.get_by_test_id("resource-row")).to_have_count(1, timeout=UI_TIMEOUT_MS)
        screenshot(small, "phone-resources")
    finally:
        phone.close()


def test_a_refused_config_value_is_shown_beside_its_field_and_a_good_one_saves(
    ui_stack: UiStack, alice: Tenant, api: httpx.Client, page: Page, screenshot: Screenshot
) -> None:
    thread = new_thread(api, new_id("res"))
    post_turn(api, thread, 1)
    sign_in(page, ui_stack.ui_url, alice.key)
    open_thread(page, ui_stack.ui_url, thread)

    field = page.locator('[data-field="observation.messageTokens"]')
    field.get_by_role("textbox").fill("-5")
    page.get_by_test_id("config-save").click()
    error = field.get_by_test_id("config-error")
    expect(error).to_be_visible(timeout=UI_TIMEOUT_MS)
    expect(error).to_contain_text("messageTokens")
    expect(field.get_by_role("textbox")).to_have_attribute("aria-invalid", "true")
    assert ok(api.get(f"/v1/threads/{thread}/config"))["overrides"] is None, "nothing was stored"
    screenshot(page, "config-error")

    field.get_by_role("textbox").fill("5000")
    page.get_by_test_id("config-save").click()
    expect(page.get_by_test_id("config-editor")).to_contain_text("Saved.", timeout=UI_TIMEOUT_MS)
    expect(page.get_by_test_id("config-error")).to_have_count(0)
    expect(page.get_by_test_id("bar-messages")).to_contain_text(
        re.compile(r"of 5.?000 tok"), timeout=UI_TIMEOUT_MS
    )
    stored = ok(api.get(f"/v1/threads/{thread}/config"))
    assert stored["overrides"] == {"observation": {"messageTokens": 5000}}

    # A block where the form has a single value stays in the JSON box, and a save keeps it whole.
    block = {"retrieval": {"scope": "thread"}, "observation": {"messageTokens": 5000}}
    ok(api.put(f"/v1/threads/{thread}/config", json={"overrides": block}))
    page.reload()
    expect(page.get_by_label("Retrieval (search index)")).to_be_disabled(timeout=UI_TIMEOUT_MS)
    expect(page.get_by_label("Other overrides (JSON object)")).to_have_value(re.compile(r'"scope": "thread"'))
    field.get_by_role("textbox").fill("6000")
    page.get_by_test_id("config-save").click()
    expect(page.get_by_test_id("config-editor")).to_contain_text("Saved.", timeout=UI_TIMEOUT_MS)
    stored = ok(api.get(f"/v1/threads/{thread}/config"))
    assert stored["overrides"] == {"retrieval": {"scope": "thread"}, "observation": {"messageTokens": 6000}}


def test_search_finds_a_planted_value(
    ui_stack: UiStack, alice: Tenant, api: httpx.Client, page: Page, screenshot: Screenshot
) -> None:
    thread = new_thread(api, new_id("res"), overrides={"retrieval": True})
    post_turn(api, thread, 1, planted="The locker code is zebra-7731.")
    post_turn(api, thread, 2)

    def indexed() -> bool:
        body = ok(api.post(f"/v1/threads/{thread}/search", json={"query": "zebra-7731"}))
        return int(body["count"]) > 0

    wait_until(indexed, deadline_s=60, what="the planted message in the search index", every_s=0.2)
    sign_in(page, ui_stack.ui_url, alice.key)
    open_thread(page, ui_stack.ui_url, thread)
    page.get_by_test_id("search-input").fill("zebra-7731")
    page.get_by_role("button", name="Search", exact=True).click()
    results = page.get_by_test_id("search-results")
    expect(results).to_contain_text("The locker code is zebra-7731.", timeout=UI_TIMEOUT_MS)
    screenshot(page, "search")


def test_the_fleet_shows_queues_workers_failures_and_usage(
    ui_stack: UiStack, alice: Tenant, page: Page, screenshot: Screenshot
) -> None:
    sign_in(page, ui_stack.ui_url, alice.key)
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Fleet").click()
    fleet = page.get_by_test_id("fleet-page")
    expect(fleet).to_be_visible(timeout=UI_TIMEOUT_MS)
    expect(page.get_by_test_id("queue-depths")).to_contain_text("om.observe", timeout=UI_TIMEOUT_MS)
    expect(page.get_by_test_id("queue-depths")).to_contain_text("om.reflect")
    expect(page.get_by_test_id("workers").locator("tbody tr").first).to_be_visible(timeout=UI_TIMEOUT_MS)
    expect(page.get_by_test_id("workers")).to_contain_text("om.buffer")
    expect(page.get_by_test_id("recent-failures")).to_contain_text("No failures recently.")
    expect(page.get_by_test_id("usage")).to_contain_text("Actor calls")
    expect(page.get_by_test_id("spend-budget")).to_contain_text("Today $", timeout=UI_TIMEOUT_MS)
    expect(page.get_by_test_id("spend")).to_contain_text("Per thread per day")
    expect(page.get_by_test_id("flower-link")).to_have_attribute("href", "http://127.0.0.1:5555/")
    screenshot(page, "fleet")


def test_another_tenants_thread_url_shows_not_found(
    ui_stack: UiStack, api: httpx.Client, mallory: Tenant, page: Page, screenshot: Screenshot
) -> None:
    thread = new_thread(api, new_id("res"), title="Alice's secret plans")
    post_turn(api, thread, 1, planted="The vault code is 9931.")

    sign_in(page, ui_stack.ui_url, mallory.key)
    expect(page.get_by_test_id("resource-list")).to_contain_text("No resources yet", timeout=UI_TIMEOUT_MS)
    page.goto(f"{ui_stack.ui_url}#/threads/{thread}")
    not_found = page.get_by_test_id("not-found")
    expect(not_found).to_be_visible(timeout=UI_TIMEOUT_MS)
    expect(not_found).to_contain_text("not found")
    expect(page.get_by_test_id("thread-page")).to_have_count(0)
    body = page.locator("body").inner_text()
    assert "9931" not in body and "secret plans" not in body
    screenshot(page, "not-found")


def test_the_live_feed_resumes_after_a_dropped_stream_without_losing_or_repeating_events(
    ui_stack: UiStack, alice: Tenant, api: httpx.Client, page: Page
) -> None:
    thread = new_thread(api, new_id("res"), overrides=LIVE_CYCLE)
    post_turn(api, thread, 1)
    event_requests: list[Request] = []
    page.on("request", lambda r: event_requests.append(r) if "/events" in r.url else None)

    with tcp_proxy(ui_stack.base_url) as proxy:
        ui_url = f"{proxy.base_url}/ui/"
        sign_in(page, ui_url, alice.key)
        open_thread(page, ui_url, thread)
        before = [e["id"] for e in server_events(api, thread)]
        assert before, "the first turn wrote events"
        for event_id in before:
            expect(page.locator(f'[data-testid="event-feed"] [data-event-id="{event_id}"]')).to_have_count(
                1, timeout=UI_TIMEOUT_MS
            )

        proxy.drop()
        expect(page.get_by_test_id("live-status")).to_have_text("reconnecting", timeout=UI_TIMEOUT_MS)
        # Work while the page is cut off: turns, and the buffering they start on the workers. Its events
        # must all be replayed on reconnect, none lost and none twice.
        turns = iter(range(2, 40))

        def buffered() -> bool:
            post_turn(api, thread, next(turns))
            return any(
                e["type"] == "data-om-buffering-end"
                for e in server_events(api, thread)
                if e["id"] not in before
            )

        wait_until(buffered, deadline_s=90, what="a buffering cycle while the page is cut off", every_s=0)
        proxy.resume()

        expect(page.get_by_test_id("live-status")).to_have_text("live", timeout=UI_TIMEOUT_MS)
        every = [e["id"] for e in server_events(api, thread)]
        for event_id in every:
            expect(page.locator(f'[data-testid="event-feed"] [data-event-id="{event_id}"]')).to_have_count(
                1, timeout=UI_TIMEOUT_MS
            )
        shown = feed_ids(page)
        assert len(shown) == len(set(shown)), f"an event was shown twice: {shown}"
        assert set(every) <= set(shown)

    resumed = [r for r in event_requests if r.headers.get("last-event-id")]
    assert resumed, "the reconnect carried Last-Event-ID"
    cursor = resumed[0].headers["last-event-id"]
    assert int(cursor.split("~")[0]) >= 0 and re.fullmatch(r"[0-9]+(~[0-9,]+)?", cursor)
    assert proxy.refused + proxy.accepted > 1


def test_without_authentication_the_dashboard_opens_without_a_sign_in(
    postgres_url: str, redis_url: str, tmp_path: Path, page: Page, screenshot: Screenshot
) -> None:
    """`om up` runs with OM_AUTH=none: /v1/whoami says so and the page goes straight to the data."""
    env = {"OM_AUTH": "none", "OM_EXECUTOR": "inline"}
    with run_api_server(postgres_url, redis_url, tmp_path, env=env) as server:
        with httpx.Client(base_url=server.base_url, timeout=60) as open_api:
            thread = new_thread(open_api, new_id("res"), title="No keys here")
            post_turn(open_api, thread, 1)
        page.goto(server.base_url + "/ui/")
        expect(page.get_by_test_id("resource-list")).to_be_visible(timeout=UI_TIMEOUT_MS)
        expect(page.get_by_test_id("signin-form")).to_have_count(0)
        expect(page.get_by_text("no authentication (om up)")).to_be_visible()
        expect(page.get_by_role("button", name="Sign out")).to_be_hidden()
        page.get_by_test_id("thread-search").fill(thread)
        expect(page.get_by_test_id("thread-row")).to_have_count(1, timeout=UI_TIMEOUT_MS)
        page.get_by_test_id("thread-row").get_by_role("link").click()
        expect(page.get_by_test_id("recent-messages")).to_contain_text("LH401", timeout=UI_TIMEOUT_MS)
        expect(page.get_by_test_id("live-status")).to_have_text("live", timeout=UI_TIMEOUT_MS)
        screenshot(page, "thread-without-auth")
