"""Crash-safe JSON config files: the one way config files are written and read.

Every config file under ``<root>/config/`` (``consumerOffset.json``, ``topics.json``,
``subscriptionGroup.json``, ``delayOffset.json``) goes through :func:`save_json` and
:func:`load_json`. Next to ``<file>`` live:

* ``<file>.bak`` -- the previous complete version, the fallback of :func:`load_json`;
* ``<file>.tmp`` and ``<file>.bak.tmp`` -- scratch files of an interrupted save; never read.

RocketMQ's own writers (``MixAll.string2File``) deleted the main file before renaming, never
fsynced, and later overwrote the main file in place; after a power loss brokers came back with
zero-length config files and silently reset consumer offsets (apache/rocketmq#5905). The recipe
here fsyncs every file before it gets its final name and never leaves a moment without a
complete main file or a complete ``.bak``.

The reader also accepts fastjson's dialect, in which integer map keys are written unquoted
(``{"offsetTable":{"T@g":{0:12,1:3}}}``), so files written by a real RocketMQ broker load.

:func:`load_config` is the one decoder of a config file's content, shared by the broker's
managers (:mod:`storage.config_managers`) and the read-only tools (:mod:`storage.store_reader`):
the top-level object plus the small shape checks (:func:`as_object`, :func:`as_int`,
:func:`decode_int_map`, :func:`decode_topic_group_table`) that turn RocketMQ's tables into
Python values.
"""

from __future__ import annotations

import errno
import json
import os
import re
import threading
from pathlib import Path

# Re-exported: callers of load_json catch it as storage.json_file.ConfigFileError.
from storage.errors import ConfigFileError, StoreDiskFullError
from storage.fs import fsync_directory

__all__ = [
    "TOPIC_GROUP_SEPARATOR",
    "ConfigFileError",
    "as_int",
    "as_object",
    "backup_path",
    "decode_int_map",
    "decode_topic_group_table",
    "load_config",
    "load_json",
    "parse_json_text",
    "save_json",
]

TOPIC_GROUP_SEPARATOR = "@"
"""Joins topic and group in consumerOffset.json keys (``"<topic>@<group>"``)."""


# One token at a time: a complete string literal (copied untouched, so text inside strings is
# never rewritten) or a bare integer key right after "{" or "," and before ":" (fastjson writes
# Map<Integer, ...> keys unquoted). The string alternative is the "unrolled loop" form, which
# does not backtrack on long strings.
_STRING_OR_BARE_INT_KEY = re.compile(
    r'"[^"\\]*(?:\\.[^"\\]*)*"'  # a string literal, escapes included
    r"|([{,]\s*)(-?\d+)(?=\s*:)",  # group 1: opener + blanks, group 2: the bare key
    re.DOTALL,
)

_save_locks: dict[str, threading.Lock] = {}
_save_locks_guard = threading.Lock()


def backup_path(path: Path) -> Path:
    """Return the ``.bak`` sibling of a config file (``topics.json`` -> ``topics.json.bak``)."""
    return _with_suffix(path, ".bak")


def save_json(path: Path, data: object) -> None:
    """Write ``data`` as pretty-printed UTF-8 JSON to ``path``, crash-safely.

    Steps, in order:

    1. write the new content to ``path.tmp``, flush, fsync;
    2. if ``path`` holds a complete (parseable) file, copy its bytes to ``path.bak.tmp``, fsync,
       ``os.replace(path.bak.tmp, path.bak)``, fsync the directory;
    3. ``os.replace(path.tmp, path)``, fsync the directory.

    Why a crash at any point leaves a complete main file or a complete ``.bak`` (holding
    either the previous or the new content): before step 3, ``path`` is untouched, and step
    2's rename is atomic, so ``.bak`` is at every instant either the old ``.bak`` or a full,
    fsynced copy of the current main file. Step 2 is skipped when the main file is missing,
    empty or garbage, so a good ``.bak`` (the one :func:`load_json` fell back to) is never
    replaced by a bad main file. Step 3's rename is atomic too: ``path`` is the old complete
    file until it is the new complete file. The directory fsync after step 2 makes the new
    ``.bak`` durable before the main file can change, and the data fsync in step 1 means the
    renamed file cannot come back empty after a power loss. Scratch files left by a crash are
    ignored by :func:`load_json` and truncated by the next save.

    The directory is created if missing. Saves to the same path are serialised; callers that
    snapshot state should hold their own lock across snapshot and save, so that an older
    snapshot never lands after a newer one.
    """
    # Encode before touching the disk: an unserialisable value leaves every file as it was.
    text = json.dumps(data, indent=2, sort_keys=False, ensure_ascii=False)
    payload = (text + "\n").encode("utf-8")
    with _save_lock(path):
        _ensure_directory(path.parent)
        tmp = _with_suffix(path, ".tmp")
        try:
            _write_synced(tmp, payload)
            _back_up_current(path)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            # The main file and .bak are untouched: the last good version stays.
            tmp.unlink(missing_ok=True)
            _with_suffix(path, ".bak.tmp").unlink(missing_ok=True)
            raise StoreDiskFullError(
                f"disk full: cannot save {path.name}; it keeps its last saved version"
            ) from exc
        tmp.replace(path)
        fsync_directory(path.parent)


def load_json(path: Path) -> object | None:
    """Read the config file at ``path``, falling back to its ``.bak``.

    Returns the decoded JSON value of the main file; if the main file is missing, empty or
    unparsable, that of ``path.bak``; ``None`` when neither holds anything (a fresh start).
    Raises :class:`ConfigFileError` (naming the file) when the main file is unparsable or
    missing and the ``.bak`` exists but is unparsable too. It is also raised when the main file
    holds garbage and there is no ``.bak``: RocketMQ starts empty in that case, which silently
    resets consumer offsets; :func:`save_json` never leaves a torn main file, so garbage there
    means real damage that an operator should see. ``.tmp`` files are never read. Both strict
    JSON and fastjson's unquoted integer keys are accepted (:func:`parse_json_text`).
    """
    main_error: ValueError | None = None
    try:
        return _parse_file(path)
    except _NoContentError:
        pass
    except ValueError as exc:
        main_error = exc
    bak = backup_path(path)
    try:
        return _parse_file(bak)
    except _NoContentError:
        if main_error is None:
            return None
        raise ConfigFileError(
            f"config file {path} is unreadable ({main_error}) and {bak} is missing or empty"
        ) from main_error
    except ValueError as exc:
        raise ConfigFileError(
            f"config file {path} and its backup {bak} are both unreadable: {exc}"
        ) from exc


def parse_json_text(text: str) -> object:
    """Decode strict JSON or fastjson's dialect with unquoted integer map keys.

    >>> parse_json_text('{"offsetTable":{"T@g":{0:12,1:3}}}')
    {'offsetTable': {'T@g': {'0': 12, '1': 3}}}

    Integer keys come back as strings, exactly as if they had been quoted. Raises
    ``ValueError`` (``json.JSONDecodeError``) when the text is neither.
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        # Only RocketMQ-written files take this path; ours are strict JSON.
        return json.loads(_quote_bare_int_keys(text))


# --------------------------------------------------------------------------- decoding shapes


def load_config(path: Path) -> dict[str, object]:
    """The top-level object of a config file (``.bak`` fallback); ``{}`` when there is none.

    Raises :class:`ConfigFileError` naming the file when it and its backup are unreadable
    or the top level is not an object.
    """
    data = load_json(path)
    if data is None:
        return {}
    try:
        return as_object(data, "the top level")
    except ValueError as exc:
        raise ConfigFileError(f"config file {path}: {exc}") from exc


def as_object(value: object, what: str) -> dict[str, object]:
    """``value`` if it is a JSON object; ``ValueError`` naming ``what`` otherwise."""
    if not isinstance(value, dict):
        raise ValueError(f"{what} must be a JSON object, got {type(value).__name__}")
    return value


def as_int(value: object, what: str) -> int:
    """An integer, or a map key holding one (``"12"``, also a bare key once quoted)."""
    # bool is an int subclass, but true/false where a number belongs is a broken file.
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lstrip("-").isascii() and value.lstrip("-").isdigit():
        return int(value)
    raise ValueError(f"{what}: expected an integer, got {value!r}")


def decode_int_map(value: object, what: str) -> dict[int, int]:
    """``{"<int>": <int>}`` (``{0:6}`` in fastjson) as a dict of ints."""
    return {as_int(key, what): as_int(item, what) for key, item in as_object(value, what).items()}


def decode_topic_group_table(value: object, what: str) -> dict[tuple[str, str], dict[int, int]]:
    """``{"<topic>@<group>": {<queueId>: <int>}}`` keyed by ``(topic, group)``.

    Keys that do not split in two at the separator are skipped, as RocketMQ does.
    """
    table: dict[tuple[str, str], dict[int, int]] = {}
    for key, queues in as_object(value, what).items():
        topic, separator, group = key.partition(TOPIC_GROUP_SEPARATOR)
        if topic and separator and group:
            table[(topic, group)] = decode_int_map(queues, f"{what}[{key!r}]")
    return table


# --------------------------------------------------------------------------- file internals


class _NoContentError(Exception):
    """The file is missing or holds only whitespace: nothing was ever saved there."""


def _parse_file(path: Path) -> object:
    """Decode one file; ``_NoContentError`` if missing/empty, ``ValueError`` if garbage."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise _NoContentError(path) from None
    return _parse_bytes(raw)


def _parse_bytes(raw: bytes) -> object:
    """Decode a file's bytes; ``_NoContentError`` if blank, ``ValueError`` if garbage."""
    if not raw.strip():
        raise _NoContentError
    # utf-8-sig: tolerate a BOM left by an editor; UnicodeDecodeError is a ValueError.
    return parse_json_text(raw.decode("utf-8-sig"))


def _quote_bare_int_keys(text: str) -> str:
    """Quote fastjson's bare integer map keys, leaving string literals untouched."""

    def quote(match: re.Match[str]) -> str:
        opener, key = match.group(1), match.group(2)
        if key is None:  # a string literal: copy as is
            return match.group(0)
        return f'{opener}"{key}"'

    return _STRING_OR_BARE_INT_KEY.sub(quote, text)


def _back_up_current(path: Path) -> None:
    """Make ``path.bak`` a durable copy of ``path``, if ``path`` is a complete file."""
    try:
        current = path.read_bytes()
    except FileNotFoundError:
        return
    if not _is_complete(current):
        # Keep the existing .bak: it is the last good version (load_json fell back to it).
        return
    bak_tmp = _with_suffix(path, ".bak.tmp")
    _write_synced(bak_tmp, current)
    bak_tmp.replace(backup_path(path))
    # The new .bak must be on disk before the main file is replaced (step 3).
    fsync_directory(path.parent)


def _is_complete(raw: bytes) -> bool:
    """Whether ``raw`` is a non-empty, parseable config file."""
    try:
        _parse_bytes(raw)
    except (_NoContentError, ValueError):
        return False
    return True


def _write_synced(path: Path, payload: bytes) -> None:
    """Write ``payload`` to ``path`` (truncating) and fsync it before returning."""
    with open(path, "wb") as file:
        file.write(payload)
        file.flush()
        os.fsync(file.fileno())


def _ensure_directory(directory: Path) -> None:
    """Create the config directory on first save, durably."""
    if directory.is_dir():
        return
    directory.mkdir(parents=True, exist_ok=True)
    fsync_directory(directory.parent)


def _with_suffix(path: Path, suffix: str) -> Path:
    """Append ``suffix`` to the full file name (``a.json`` -> ``a.json.tmp``)."""
    return path.with_name(path.name + suffix)


def _save_lock(path: Path) -> threading.Lock:
    """The lock serialising saves to one path (they share the ``.tmp`` scratch files)."""
    key = str(path.absolute())
    with _save_locks_guard:
        return _save_locks.setdefault(key, threading.Lock())
