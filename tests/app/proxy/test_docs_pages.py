"""The proxy's Swagger UI (/docs) and ReDoc (/redoc) rendered in headless Chromium: the
vendored files of the broker's pages (:mod:`app.routes.docs`), every operation of the proxy's
document on the page, no error in the page and no request leaving the machine.

The cluster is started before the browser: Playwright's sync API holds an event loop in the
main thread while the browser runs, and starting a cluster writes etcd with ``asyncio.run``."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from playwright.sync_api import Browser, Page, Route, expect

from tests.app.browser_support import LOOPBACK, needs_chromium
from tests.app.proxy.support import Cluster, two_groups


@pytest.fixture(scope="module")
def documented(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from two_groups(Path(tmp_path_factory.mktemp("docs")))


@pytest.fixture
def docs_page(documented: Cluster, chromium: Browser) -> Iterator[tuple[Page, list[str]]]:
    """A page that refuses the outside world; the list holds what it tried to reach outside
    and the errors it hit."""
    context = chromium.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    faults: list[str] = []

    def guard(route: Route) -> None:
        if urlparse(route.request.url).hostname in LOOPBACK:
            route.continue_()
        else:
            faults.append(f"left the machine: {route.request.url}")
            route.abort()

    page.route("**/*", guard)
    page.on("pageerror", lambda error: faults.append(str(error)))
    page.on(
        "console",
        lambda message: faults.append(message.text) if message.type == "error" else None,
    )
    page.set_default_timeout(20_000)
    try:
        yield page, faults
    finally:
        context.close()


def documented_operations(cluster: Cluster) -> dict[str, dict[str, Any]]:
    document = cluster.http.get("/openapi.json").json()
    return {
        operation["operationId"]: {"method": method, "path": path, **operation}
        for path, methods in document["paths"].items()
        for method, operation in methods.items()
    }


@needs_chromium
def test_swagger_ui_renders_every_operation_of_the_proxy(
    documented: Cluster, docs_page: tuple[Page, list[str]]
) -> None:
    page, faults = docs_page
    answer = page.goto(documented.proxy.url + "/docs")
    assert answer is not None and answer.ok
    expected = documented_operations(documented)
    expect(page.locator(".opblock")).to_have_count(len(expected))
    for operation_id, operation in expected.items():
        tag = operation.get("tags", ["default"])[0]
        block = page.locator(f"#operations-{tag}-{operation_id}")
        expect(block).to_have_class(re.compile(f"opblock-{operation['method']}"))
        expect(block).to_contain_text(operation["summary"])
    assert faults == []


@needs_chromium
def test_redoc_renders_the_proxys_document(
    documented: Cluster, docs_page: tuple[Page, list[str]]
) -> None:
    page, faults = docs_page
    answer = page.goto(documented.proxy.url + "/redoc")
    assert answer is not None and answer.ok
    # ReDoc parses the whole document before it draws anything: give a busy machine time.
    expect(page.get_by_role("heading", level=1)).to_contain_text("spoolmq proxy", timeout=30_000)
    for operation_id, operation in documented_operations(documented).items():
        section = page.locator(f'[data-section-id="operation/{operation_id}"]')
        expect(section).to_contain_text(operation["path"])
    sources = page.eval_on_selector_all("img", "images => images.map(i => i.src)")
    assert [s for s in sources if not s.startswith((documented.proxy.url, "data:"))] == []
    assert faults == []
