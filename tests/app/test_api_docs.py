"""Swagger UI (/docs) and ReDoc (/redoc) rendered in Chromium, and the vendored files they use.

A page that only references its script can be blank: these tests wait until every operation of
the OpenAPI document is on the page, with no script error and no request leaving the machine.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

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
    # The vendor logo in the side menu is refused by the page's policy, not fetched.
    refused = [e for e in admin.errors if "cdn.redoc.ly" in e and "Content Security" in e]
    assert len(refused) == len(admin.errors), admin.errors
    admin.errors.clear()


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
