"""No production module over 600 lines: past that a module holds more than one concept."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("app", "services", "storage", "spark_jobs")
MAX_LINES = 600


def production_modules() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def line_count(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_the_packages_have_modules() -> None:
    assert len(production_modules()) > 100


@pytest.mark.parametrize("path", production_modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_module_is_within_the_limit(path: Path) -> None:
    lines = line_count(path)
    assert lines <= MAX_LINES, f"{path.relative_to(ROOT)} has {lines} lines (at most {MAX_LINES})"
