"""The Dockerfile, read (no Docker engine here): pinned uv, Spark jobs runnable, every package.

A change that unpins uv, drops the Java runtime or the Spark extra, or forgets a package the
wheel ships fails here rather than at someone's ``docker build``.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = (ROOT / "Dockerfile").read_text()
MAKEFILE = (ROOT / "Makefile").read_text()
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def instructions() -> list[str]:
    """The instructions, continuation lines joined, comments left out."""
    joined = re.sub(r"\\\n\s*", " ", DOCKERFILE)
    return [line.strip() for line in joined.splitlines() if line.strip() and line[0] != "#"]


def test_uv_is_pinned_to_the_version_the_makefile_installs() -> None:
    [docker_pin] = re.findall(r"^ARG UV_VERSION=(\S+)$", DOCKERFILE, re.MULTILINE)
    [make_pin] = re.findall(r"^UV_VERSION := (\S+)$", MAKEFILE, re.MULTILINE)
    assert re.fullmatch(r"\d+\.\d+\.\d+", docker_pin) and docker_pin == make_pin
    installs = [i for i in instructions() if "pip install" in i]
    assert installs == ['RUN pip install --no-cache-dir "uv==${UV_VERSION}"']
    assert 'pip install --quiet "uv==$(UV_VERSION)"' in MAKEFILE


def test_the_image_can_run_the_spark_jobs() -> None:
    [base] = [i for i in instructions() if i.startswith("FROM ")]
    assert base.startswith("FROM python:3.11-slim-bookworm")  # Debian 12 ships Java 17
    assert any("apt-get install" in i and "openjdk-17-jre-headless" in i for i in instructions())
    syncs = [i for i in instructions() if "uv sync" in i]
    assert len(syncs) == 2 and all("--frozen" in s and "--extra spark" in s for s in syncs)
    assert "spark" in PYPROJECT["project"]["optional-dependencies"]
    assert "spoolmq-spark" in PYPROJECT["project"]["scripts"]


def test_every_package_of_the_wheel_is_copied() -> None:
    packages = PYPROJECT["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    copied = {m.group(1) for m in re.finditer(r"^COPY (\w+) \./\1$", DOCKERFILE, re.MULTILINE)}
    assert set(packages) <= copied
