"""Every production module has a test module of its own, or a line in tests/README.md saying
where it is exercised instead (see that file for the naming rule)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
PACKAGES = ("services", "app")
_LISTED = re.compile(r"^- `([\w/]+\.py)`: \S", re.MULTILINE)


def listed_in_readme() -> set[str]:
    return set(_LISTED.findall((TESTS / "README.md").read_text(encoding="utf-8")))


def modules() -> list[Path]:
    return sorted(
        p for package in PACKAGES for p in (ROOT / package).rglob("*.py") if p.name != "__init__.py"
    )


def own_test_modules(module: Path) -> list[Path]:
    package, *subpackages, _ = module.relative_to(ROOT).parts
    name = f"test_{module.stem}.py"
    found = [TESTS / package / name, TESTS / package / Path(*subpackages) / name]
    if subpackages:
        found.append(TESTS / package / f"test_{'_'.join(subpackages)}_{module.stem}.py")
        found.append(TESTS / package / f"test_{subpackages[-1]}_{module.stem}.py")
    return found


@pytest.mark.parametrize("module", modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_module_has_a_test_module_or_a_reason(module: Path) -> None:
    name = module.relative_to(ROOT).as_posix()
    has_tests = any(path.exists() for path in own_test_modules(module))
    assert has_tests or name in listed_in_readme(), f"{name}: no test module and no reason"


def test_every_reason_names_a_module_without_tests() -> None:
    for name in listed_in_readme():
        module = ROOT / name
        if name.split("/")[0] not in PACKAGES:
            continue  # another part of the tree keeps its own list
        assert module.exists(), f"tests/README.md names {name}, which is gone"
        assert not any(p.exists() for p in own_test_modules(module)), f"{name} has tests now"
