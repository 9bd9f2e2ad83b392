"""Swagger UI (/docs) and ReDoc (/redoc) rendered in Chromium, the vendored files they use,
and the server's icon.

A page that only references its script can be blank: these tests wait until every operation of
the OpenAPI document is on the page, with no error in the console (a request refused by the
page's policy is one) and no request leaving the machine.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest
from playwright.sync_api import ConsoleMessage, Response, expect

from tests.app.browser_support import Admin, needs_chromium

ROOT = Path(__file__).resolve().parents[2]
VERSIONS_FILES = [ROOT / "app/static/VERSIONS.txt", ROOT / "app/admin/static/vendor/VERSIONS.txt"]


def operations(admin: Admin) -> list[dict[str, str]]:
    """Method, path, summary and operationId of every operation the server documents."""
    document = admin.api.get("/openapi.json").json()
    return [
        {"method": method, "path": path, **operation}
        for path, methods in document["paths"].items()
        for method, operation in methods.items()
    ]


def recorded_digests(versions: Path) -> dict[Path, str]:
    """The ``sha256:`` section of a VERSIONS.txt: digest and file name, one a line."""
    section = versions.read_text().split("sha256:", 1)[1]
    digests = {}
    for line in section.strip().splitlines():
        digest, name = line.split()
        digests[versions.parent / name] = digest
    return digests


@pytest.mark.parametrize("versions", VERSIONS_FILES, ids=lambda p: p.parent.name)
def test_vendored_files_match_their_recorded_digests(versions: Path) -> None:
    digests = recorded_digests(versions)
    assert digests, f"{versions} records no digest"
    for path, digest in digests.items():
        assert hashlib.sha256(path.read_bytes()).hexdigest() == digest, f"{path} was altered"


@needs_chromium
def test_redoc_renders_every_operation(admin: Admin) -> None:
    admin.goto("/redoc")
    page = admin.page
    # ReDoc parses the whole document before it draws anything: give a busy machine time.
    expect(page.get_by_role("heading", level=1)).to_contain_text("spoolmq", timeout=30_000)
    for operation in operations(admin):
        section = page.locator(f'[data-section-id="operation/{operation["operationId"]}"]')
        expect(section.get_by_role("heading", level=2)).to_have_text(operation["summary"])
        expect(section).to_contain_text(operation["path"])
    # ReDoc's side menu keeps its vendor's link, without the logo it would fetch from a CDN.
    expect(page.get_by_role("link", name="API docs by Redocly")).to_be_visible()
    sources = page.eval_on_selector_all("img", "images => images.map(i => i.src)")
    assert [s for s in sources if not s.startswith((admin.live.url, "data:"))] == []
    # The admin fixture fails the test on any console error or request to another host.


@needs_chromium
def test_swagger_ui_renders_every_operation(admin: Admin) -> None:
    admin.goto("/docs")
    page = admin.page
    expected = operations(admin)
    expect(page.locator(".opblock")).to_have_count(len(expected))
    for operation in expected:
        block = page.locator(f"#operations-{operation['tags'][0]}-{operation['operationId']}")
        expect(block).to_have_class(re.compile(f"opblock-{operation['method']}"))
        expect(block).to_contain_text(operation["summary"])


@needs_chromium
def test_every_page_has_an_icon_and_no_request_fails(admin: Admin) -> None:
    """The admin pages and the API docs link the server's icon; a page without a link (the
    JSON of an API answer) gets it at /favicon.ico, where browsers look by default. The
    browser's own icon requests are not the page's: a failed one shows in the console."""
    page, failed = admin.page, []

    def check(response: Response) -> None:
        if response.status >= 400:
            failed.append(f"{response.status} {response.url}")

    def console(message: ConsoleMessage) -> None:
        if message.type == "error":
            failed.append(message.text)

    page.on("response", check)
    page.on("console", console)
    for path in ("/admin/", "/admin/timers", "/docs", "/redoc", "/v1/topics"):
        admin.goto(path)
        page.wait_for_load_state("load")
        icon = page.locator('link[rel="icon"]')
        if icon.count():
            answer = page.request.get(f"{admin.live.url}{icon.first.get_attribute('href')}")
            assert answer.ok and answer.headers["content-type"].startswith("image/"), path
    favicon = page.request.get(f"{admin.live.url}/favicon.ico")
    assert favicon.ok and favicon.headers["content-type"] == "image/svg+xml"
    assert b"<svg" in favicon.body()
    assert failed == []
