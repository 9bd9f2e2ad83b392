"""Headless Chromium for page tests: Debian's Chromium driven by Playwright (a module-scoped
``sync_playwright``, not pytest-playwright's fixtures), on a page that refuses the outside world.

Every request a page makes to anything but the loopback address is aborted and fails the test
(no CDN may sneak in); a JavaScript error fails it too. A module uses it with
fixtures ``chromium`` and ``admin`` (tests/app/conftest.py). :func:`layout_faults` says what
does not fit on the page as shown.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import httpx
import pytest
from playwright.sync_api import Browser, Page, Route, sync_playwright

from tests.conftest import LiveServer

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "admin"
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})

needs_chromium = pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason="Debian chromium is not installed (make test installs it)"
)


LAYOUT_FAULTS = """() => {
    const faults = [];
    const named = (el) => el.tagName.toLowerCase() + (el.id ? "#" + el.id : "")
        + [...el.classList].map((c) => "." + c).join("");
    const page = document.documentElement;
    if (page.scrollWidth > page.clientWidth) {
        faults.push(`the page is ${page.scrollWidth} px wide in a ${page.clientWidth} px window`);
    }
    const skipped = "pre, .chart, input, select, textarea";
    for (const el of document.querySelectorAll("main *")) {
        if (el.closest(skipped)) { continue; }
        const box = el.parentElement;
        if (el.tagName === "TABLE" && el.offsetWidth > box.clientWidth) {
            faults.push(`${named(el)} is ${el.offsetWidth} px wide in a ${box.clientWidth} px box`);
        }
        if (el.clientWidth > 0 && el.scrollWidth > el.clientWidth) {
            faults.push(`${named(el)} holds ${el.scrollWidth} px in ${el.clientWidth} px`);
        }
    }
    for (const id of document.querySelectorAll("main .id")) {
        if (id.getClientRects().length > 1) {
            faults.push(`id ${id.textContent} is broken over lines`);
        }
    }
    return faults;
}"""


def layout_faults(page: Page) -> list[str]:
    """What does not fit on the page as shown: a page wider than the window, a table wider
    than its box, an element whose content is wider than it (cut off, scrolled away or
    spilling over), an id (``.id``) broken over lines. A body's ``<pre>`` (it scrolls on
    purpose), the charts (uPlot sizes them) and form fields are left out."""
    faults: list[str] = page.evaluate(LAYOUT_FAULTS)
    return faults


@pytest.fixture(scope="module")
def chromium() -> Iterator[Browser]:
    """The system Chromium (``playwright install`` is never run), for this module only.

    A hand-made ``sync_playwright`` rather than pytest-playwright's session fixtures: the sync
    API holds an event loop in the main thread while it runs, so it must be gone before the
    async tests of later modules start.
    """
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM)
        yield browser
        browser.close()


@dataclass
class Admin:
    """A page on the live server that refuses the outside world and records JS errors."""

    page: Page
    live: LiveServer
    api: httpx.Client
    blocked: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def console(self, kind: str, text: str) -> None:
        # Chromium logs every 4xx answer; the tests check those answers themselves.
        if kind == "error" and not re.match(r"Failed to load resource: .* status of 4\d\d", text):
            self.errors.append(text)

    def goto(self, path: str) -> None:
        response = self.page.goto(self.live.url + path)
        assert response is not None and response.ok, f"{path}: {response and response.status}"

    def shot(self, name: str) -> None:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        size = self.page.viewport_size or {"width": 0, "height": 0}
        path = ARTIFACTS / f"{name}-{size['width']}x{size['height']}.png"
        self.page.screenshot(path=str(path), full_page=True)


@pytest.fixture
def admin(chromium: Browser, live_server: LiveServer) -> Iterator[Admin]:
    context = chromium.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    admin = Admin(page, live_server, live_server.client())

    def guard(route: Route) -> None:
        if urlparse(route.request.url).hostname in LOOPBACK:
            route.continue_()
        else:
            admin.blocked.append(route.request.url)
            route.abort()

    page.route("**/*", guard)
    page.on("pageerror", lambda error: admin.errors.append(str(error)))
    page.on("console", lambda message: admin.console(message.type, message.text))
    page.set_default_timeout(10_000)
    try:
        yield admin
    finally:
        context.close()
    assert admin.blocked == [], f"requests left the machine: {admin.blocked}"
    assert admin.errors == [], f"errors in the page: {admin.errors}"
