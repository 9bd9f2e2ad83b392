"""Parsing of the jobs' options and arguments: store lists, times, sizes, topic lists,
endpoints.

No pyspark here: the data sources receive their options as strings, and the command line
shares the same parsers.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from spark_jobs.records import RecordFilter
from storage.sql92 import FilterSyntaxError, Sql92Filter
from storage.timestamps import parse_timestamp_ms

DEFAULT_SPLIT_SIZE: Final = 64 * 1024 * 1024
DEFAULT_BATCH_SIZE: Final = 16_384
_SIZE = re.compile(r"^\s*(\d+)\s*([kmg]i?b?|b)?\s*$", re.IGNORECASE)
_SIZE_UNITS: Final = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3}


class OptionError(ValueError):
    """An option or argument has a value that cannot be used."""


def parse_time_ms(text: str | int | None) -> int | None:
    """Milliseconds since the epoch from epoch ms or ISO 8601 (:mod:`storage.timestamps`,
    the parser the HTTP API uses too). None or an empty string gives None."""
    if text is None or isinstance(text, int):
        return text
    if not text.strip():
        return None
    try:
        return parse_timestamp_ms(text.strip())
    except ValueError as exc:
        raise OptionError(str(exc)) from None


def parse_size(text: str | int | None, default: int) -> int:
    """Bytes from ``67108864``, ``64m``, ``64MiB`` or ``1g``; ``default`` when unset."""
    if text is None or text == "":
        return default
    if isinstance(text, int):
        value = text
    else:
        match = _SIZE.match(text)
        if match is None:
            raise OptionError(f"cannot read {text!r} as a size: use bytes or e.g. 64m, 1g")
        unit = (match.group(2) or "").lower()[:1]
        value = int(match.group(1)) * _SIZE_UNITS[unit]
    if value <= 0:
        raise OptionError(f"a size must be positive, not {text!r}")
    return value


def parse_positive_int(text: str | int | None, default: int, what: str) -> int:
    """A positive integer option; ``default`` when unset."""
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise OptionError(f"{what} must be an integer, not {text!r}") from None
    if value <= 0:
        raise OptionError(f"{what} must be positive, not {value}")
    return value


def parse_bool(text: str | bool | None, default: bool = False) -> bool:
    """``true``/``false`` (also 1/0, yes/no); ``default`` when unset."""
    if text is None or text == "":
        return default
    if isinstance(text, bool):
        return text
    value = text.strip().lower()
    if value in ("true", "1", "yes", "on"):
        return True
    if value in ("false", "0", "no", "off"):
        return False
    raise OptionError(f"expected true or false, not {text!r}")


def parse_list(text: str | None) -> list[str]:
    """Items of a comma-separated list, stripped, empty ones dropped."""
    if not text:
        return []
    return [item.strip() for item in text.split(",") if item.strip()]


def parse_endpoints(text: str | None) -> tuple[str, ...]:
    """The HTTP endpoints of a comma-separated list, without trailing slashes; each must be
    an http:// or https:// URL. Empty for no text."""
    endpoints = tuple(item.rstrip("/") for item in parse_list(text))
    for endpoint in endpoints:
        if not endpoint.startswith(("http://", "https://")):
            raise OptionError(f"an endpoint is an http:// or https:// URL, not {endpoint!r}")
    return endpoints


def store_dirs_from_options(options: Mapping[str, str]) -> list[str]:
    """The store directories of a read: ``path`` (from ``load(path)``), ``paths`` (a JSON
    list, from ``load([...])``) and ``stores`` (comma-separated), as absolute paths."""
    found: list[str] = []
    path = options.get("path")
    if path:
        found.append(path)
    paths = options.get("paths")
    if paths:
        try:
            decoded = json.loads(paths)
        except json.JSONDecodeError:
            decoded = parse_list(paths)
        found.extend(str(p) for p in (decoded if isinstance(decoded, list) else [decoded]))
    found.extend(parse_list(options.get("stores")))
    if not found:
        raise OptionError(
            "no store directory given: use load('/path/to/store') or option('stores', 'a,b')"
        )
    unique: list[str] = []
    for item in found:
        absolute = str(Path(item).resolve())
        if absolute not in unique:
            unique.append(absolute)
    return unique


@dataclass(frozen=True, slots=True)
class CommitLogOptions:
    """Everything a CommitLog read is configured with."""

    store_dirs: tuple[str, ...]
    record_filter: RecordFilter
    split_size: int = DEFAULT_SPLIT_SIZE
    batch_size: int = DEFAULT_BATCH_SIZE
    check_crc: bool = False


def parse_commitlog_options(options: Mapping[str, str]) -> CommitLogOptions:
    """Options of ``spoolmq_commitlog``: stores, ``topics``, ``from_time``, ``to_time``,
    ``filter`` (SQL92, on the records' properties), ``split_size``, ``batch_size``,
    ``check_crc``."""
    topics = parse_list(options.get("topics"))
    sql = parse_sql_filter(options.get("filter"))
    from_ms = parse_time_ms(options.get("from_time"))
    to_ms = parse_time_ms(options.get("to_time"))
    if from_ms is not None and to_ms is not None and to_ms <= from_ms:
        raise OptionError(f"to_time ({to_ms}) must be after from_time ({from_ms})")
    return CommitLogOptions(
        store_dirs=tuple(store_dirs_from_options(options)),
        record_filter=RecordFilter(frozenset(topics) if topics else None, from_ms, to_ms, sql),
        split_size=parse_size(options.get("split_size"), DEFAULT_SPLIT_SIZE),
        batch_size=parse_positive_int(options.get("batch_size"), DEFAULT_BATCH_SIZE, "batch_size"),
        check_crc=parse_bool(options.get("check_crc")),
    )


def parse_sql_filter(text: str | None) -> str | None:
    """A SQL92 filter option, checked here (on the driver) so a bad one fails the read before
    any task runs, naming where it stops parsing."""
    if text is None:
        return None
    try:
        Sql92Filter(text)
    except FilterSyntaxError as exc:
        raise OptionError(f"filter does not parse: {exc}") from None
    return text


def job_main(
    prog: str,
    description: str,
    add_arguments: Callable[[argparse.ArgumentParser], None],
    run: Callable[[argparse.Namespace], int],
    argv: Sequence[str] | None = None,
) -> int:
    """The entry point of a ``spark-submit spark_jobs/<job>.py`` script: parse, run, and
    turn a bad option into argparse's usage error (exit 2)."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except OptionError as exc:
        parser.error(str(exc))
        return 2  # pragma: no cover - parser.error exits
