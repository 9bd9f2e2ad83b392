"""Fixtures of the HTTP tests: the browser ones (``chromium``, ``admin``) for page tests."""

from tests.app.browser_support import admin, chromium

__all__ = ["admin", "chromium"]
