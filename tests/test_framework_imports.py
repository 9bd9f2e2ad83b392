"""spoolmq uses what it is built on through public interfaces, and declares what it imports.

* No module — production, tests, benchmarks or scripts — imports a private module or name (one
  that starts with ``_``) of a framework or library spoolmq depends on, in any import form
  (``import x._y``, ``from x._y import z``, ``from x.y import _z``).
* Every third-party package the production code imports is a dependency declared in
  ``pyproject.toml`` (the Spark jobs' may come from the ``spark`` extra): an undeclared one
  works only as long as something else happens to pull it in.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

ROOT = Path(__file__).resolve().parent.parent
CODE = ("app", "services", "storage", "spark_jobs", "tests", "bench", "scripts")
PRODUCTION = ("app", "services", "storage", "spark_jobs")
OWN = frozenset({*CODE, "failover_bench", "http_bench", "byte_relay", "http_relay"})
CHECKED = frozenset(
    {
        "fastapi", "starlette", "uvicorn", "pydantic", "pydantic_core", "pydantic_settings",
        "httpx", "httpcore", "httptools", "uvloop", "orjson", "jinja2", "pyspark", "pyarrow",
    }
)  # fmt: skip
"""Packages whose private parts nothing may import."""
TYPE_ONLY = frozenset({"_typeshed"})
"""Imported only for type checking (never at run time)."""


def imports(source: str) -> Iterator[tuple[int, str, str | None]]:
    """Each import of ``source``: its line, the module, and the name taken from it (None for
    ``import module``)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, None
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                yield node.lineno, node.module, alias.name


def private_uses(source: str) -> list[str]:
    """The imports of a private module or name of a :data:`CHECKED` package."""
    found = []
    for line, module, name in imports(source):
        parts = module.split(".")
        if parts[0] not in CHECKED:
            continue
        if any(part.startswith("_") for part in parts[1:]) or (name or "").startswith("_"):
            found.append(f"line {line}: {module}{'' if name is None else ' import ' + name}")
    return found


def python_files(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py"))


@pytest.mark.parametrize("path", python_files(*CODE), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_private_module_or_name_of_a_framework_is_imported(path: Path) -> None:
    assert private_uses(path.read_text(encoding="utf-8")) == []


def test_every_import_form_of_a_private_part_is_found() -> None:
    source = (
        "import starlette._utils\n"
        "from fastapi._compat import ModelField\n"
        "from fastapi.dependencies.utils import _get_param_model\n"
        "from fastapi.routing import APIRoute\n"
        "from app.routes import _private_of_our_own\n"
    )
    assert private_uses(source) == [
        "line 1: starlette._utils",
        "line 2: fastapi._compat import ModelField",
        "line 3: fastapi.dependencies.utils import _get_param_model",
    ]


def declared(group: str | None = None) -> set[str]:
    """The distributions pyproject.toml declares (``group``: an optional extra's too)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    specs = list(project["dependencies"])
    if group is not None:
        specs += project["optional-dependencies"][group]
    return {normalized(re.match(r"[A-Za-z0-9._-]+", spec).group()) for spec in specs}  # type: ignore[union-attr]


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def third_party(folder: str) -> dict[str, set[str]]:
    """Each third-party top-level module ``folder``'s code imports, with the files that do."""
    found: dict[str, set[str]] = {}
    for path in python_files(folder):
        for _, module, _ in imports(path.read_text(encoding="utf-8")):
            top = module.split(".")[0]
            if top in sys.stdlib_module_names or top in OWN or top in TYPE_ONLY:
                continue
            found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


EXTRA_CODE: Final = {"spark_jobs": "spark", "app/grpc": "grpc"}
"""Code an optional extra's packages serve, by folder: only it may import them."""


@pytest.mark.parametrize("folder", [*PRODUCTION, *EXTRA_CODE.keys() - set(PRODUCTION)])
def test_every_package_the_code_imports_is_declared(folder: str) -> None:
    allowed = declared(EXTRA_CODE.get(folder))
    distributions = importlib.metadata.packages_distributions()
    inside = [f"{other}/" for other in EXTRA_CODE if other.startswith(f"{folder}/")]
    undeclared = {
        module: kept
        for module, files in third_party(folder).items()
        if not {normalized(d) for d in distributions.get(module, [module])} & allowed
        if (kept := sorted(f for f in files if not any(f.startswith(i) for i in inside)))
    }
    assert undeclared == {}
