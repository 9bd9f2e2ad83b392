"""save_json / load_json: the safe-write recipe, the .bak fallback and fastjson's dialect."""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from storage import errors
from storage.json_file import (
    ConfigFileError,
    backup_path,
    load_json,
    parse_json_text,
    save_json,
)

OLD = {"offsetTable": {"T@g": {"0": 1}}}
NEW = {"offsetTable": {"T@g": {"0": 2, "1": 7}}}


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "consumerOffset.json"


def sibling(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


# ---------------------------------------------------------------- round trips and format


def test_round_trip(path: Path) -> None:
    data = {"topicConfigTable": {"Topic%|x": {"perm": 6, "order": False}}, "list": [1, None]}
    save_json(path, data)
    assert load_json(path) == data


def test_file_is_strict_indented_utf8_json(path: Path) -> None:
    save_json(path, {"name": "consommé", "n": 1})
    text = path.read_bytes().decode("utf-8")
    assert "consommé" in text  # ensure_ascii=False: readable, not \u escapes
    assert '\n  "n": 1' in text  # indent=2
    assert json.loads(text) == {"name": "consommé", "n": 1}


def test_missing_file_is_a_fresh_start(path: Path) -> None:
    assert load_json(path) is None


def test_empty_main_without_backup_is_a_fresh_start(path: Path) -> None:
    path.write_bytes(b"")
    assert load_json(path) is None


def test_save_creates_the_directory(tmp_path: Path) -> None:
    path = tmp_path / "store" / "config" / "topics.json"
    save_json(path, OLD)
    assert load_json(path) == OLD


def test_unserialisable_data_leaves_files_alone(path: Path) -> None:
    save_json(path, OLD)
    with pytest.raises(TypeError):
        save_json(path, {"bad": object()})
    assert load_json(path) == OLD
    assert not backup_path(path).exists()


def test_config_file_error_is_the_storage_error() -> None:
    assert ConfigFileError is errors.ConfigFileError
    assert issubclass(ConfigFileError, errors.StorageError)


# ---------------------------------------------------------------- fastjson's unquoted integer keys


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            '{"offsetTable":{"T@g":{0:12,1:3}}}',
            {"offsetTable": {"T@g": {"0": 12, "1": 3}}},
            id="nested-compact",
        ),
        pytest.param(
            '{\n\t"offsetTable":{1:1,2:1}\n}',
            {"offsetTable": {"1": 1, "2": 1}},
            id="tabs",
        ),
        pytest.param(
            '{\n\t"a":{\n\t\t0 : {\n\t\t\t-1:2\n\t\t},\n\t\t12\t:[1,2]\n\t}\n}',
            {"a": {"0": {"-1": 2}, "12": [1, 2]}},
            id="blanks-negative-and-arrays",
        ),
        pytest.param(
            '{"s":"{0:1,2:3}","t":{5:"x,6:y"}}',
            {"s": "{0:1,2:3}", "t": {"5": "x,6:y"}},
            id="strings-containing-keys",
        ),
        pytest.param(
            r'{"s":"a\"{0:1}\\","t":{7:8}}',
            {"s": 'a"{0:1}\\', "t": {"7": 8}},
            id="escaped-quotes-and-backslash",
        ),
    ],
)
def test_parse_accepts_unquoted_integer_keys(text: str, expected: object) -> None:
    assert parse_json_text(text) == expected


def test_string_values_with_key_lookalikes_survive_a_load(path: Path) -> None:
    # The bare key forces the lenient pre-pass; the strings must come through byte for byte.
    path.write_text('{"note":"{0:1} and ,2:3","offsetTable":{0:5}}', encoding="utf-8")
    assert load_json(path) == {"note": "{0:1} and ,2:3", "offsetTable": {"0": 5}}


def test_parse_rejects_garbage() -> None:
    with pytest.raises(ValueError):
        parse_json_text('{"offsetTable":{0:}')


# ---------------------------------------------------------------- .bak rotation and fallback


def test_save_keeps_previous_version_as_bak(path: Path) -> None:
    save_json(path, OLD)
    assert not backup_path(path).exists()
    save_json(path, NEW)
    assert json.loads(path.read_text(encoding="utf-8")) == NEW
    assert json.loads(backup_path(path).read_text(encoding="utf-8")) == OLD


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda p: p.write_bytes(b"\x00\x00garbage{"), id="garbage"),
        pytest.param(lambda p: p.write_bytes(b""), id="empty"),
        pytest.param(lambda p: p.write_bytes(b" \n\t"), id="blank"),
        pytest.param(lambda p: p.write_bytes(b'{"offsetTable":{"T@g":{"0":'), id="truncated"),
        pytest.param(lambda p: p.unlink(), id="missing"),
    ],
)
def test_bad_main_file_falls_back_to_bak(path: Path, damage: Callable[[Path], object]) -> None:
    save_json(path, OLD)
    save_json(path, NEW)
    damage(path)
    assert load_json(path) == OLD


def test_rocketmq_style_bak_is_read(path: Path) -> None:
    backup_path(path).write_text('{\n\t"offsetTable":{"T@g":{0:9}}\n}', encoding="utf-8")
    assert load_json(path) == {"offsetTable": {"T@g": {"0": 9}}}


def test_both_files_corrupt_raises_naming_the_file(path: Path) -> None:
    path.write_text("{not json", encoding="utf-8")
    backup_path(path).write_text("{neither", encoding="utf-8")
    with pytest.raises(ConfigFileError, match=re.escape(str(path))):
        load_json(path)


def test_missing_main_and_corrupt_bak_raises(path: Path) -> None:
    backup_path(path).write_text("{neither", encoding="utf-8")
    with pytest.raises(ConfigFileError, match=re.escape(str(path))):
        load_json(path)


def test_corrupt_main_without_bak_raises_instead_of_resetting(path: Path) -> None:
    # RocketMQ starts empty here, silently resetting every consumer offset.
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(ConfigFileError, match=re.escape(str(path))):
        load_json(path)


def test_save_over_corrupt_main_keeps_the_good_bak(path: Path) -> None:
    save_json(path, OLD)
    save_json(path, NEW)
    path.write_bytes(b"")  # e.g. a zero-length file after a power loss
    assert load_json(path) == OLD
    save_json(path, {"offsetTable": {}})
    assert json.loads(backup_path(path).read_text(encoding="utf-8")) == OLD


def test_leftover_scratch_files_are_ignored_then_overwritten(path: Path) -> None:
    save_json(path, OLD)
    sibling(path, ".tmp").write_bytes(b"\xff garbage from a crash")
    sibling(path, ".bak.tmp").write_bytes(b"{half")
    assert load_json(path) == OLD
    save_json(path, NEW)
    assert load_json(path) == NEW
    assert load_json(backup_path(path)) == OLD


# ---------------------------------------------------------------- simulated crashes


class SimulatedCrash(Exception):
    """Stands for the process dying just before one filesystem step."""


def install_crash(monkeypatch: pytest.MonkeyPatch, crash_at: int | None) -> list[str]:
    """Count save_json's durable steps (fsync, rename); raise before step ``crash_at``."""
    steps: list[str] = []

    def step(name: str, real: Callable[..., object]) -> Callable[..., object]:
        def wrapper(*args: object) -> object:
            if len(steps) == crash_at:
                raise SimulatedCrash(f"before {name} #{len(steps)}")
            steps.append(name)
            return real(*args)

        return wrapper

    monkeypatch.setattr(os, "replace", step("replace", os.replace))
    monkeypatch.setattr(os, "fsync", step("fsync", os.fsync))
    return steps


def save_crashing(monkeypatch: pytest.MonkeyPatch, path: Path, data: object, at: int) -> None:
    with monkeypatch.context() as patch:
        install_crash(patch, at)
        with pytest.raises(SimulatedCrash):
            save_json(path, data)


def setup_first_save(path: Path) -> object:
    return None


def setup_main_only(path: Path) -> object:
    save_json(path, OLD)
    return OLD


def setup_main_and_bak(path: Path) -> object:
    save_json(path, {"offsetTable": {}})
    save_json(path, OLD)
    return OLD


def setup_empty_main_good_bak(path: Path) -> object:
    backup_path(path).write_text(json.dumps(OLD), encoding="utf-8")
    path.write_bytes(b"")
    return OLD


def setup_corrupt_main_good_bak(path: Path) -> object:
    backup_path(path).write_text(json.dumps(OLD), encoding="utf-8")
    path.write_bytes(b'{"offsetTable":')
    return OLD


Setup = Callable[[Path], object]
SETUPS = [
    pytest.param(setup_first_save, id="first-save"),
    pytest.param(setup_main_only, id="main-only"),
    pytest.param(setup_main_and_bak, id="main-and-bak"),
    pytest.param(setup_empty_main_good_bak, id="empty-main-good-bak"),
    pytest.param(setup_corrupt_main_good_bak, id="corrupt-main-good-bak"),
]
# The durable steps of a save: with a complete main file it is copied to .bak first.
ROTATING = ["fsync", "fsync", "replace", "fsync", "replace", "fsync"]
NOT_ROTATING = ["fsync", "replace", "fsync"]
STEPS_AFTER: dict[Setup, list[str]] = {
    setup_first_save: NOT_ROTATING,
    setup_main_only: ROTATING,
    setup_main_and_bak: ROTATING,
    setup_empty_main_good_bak: NOT_ROTATING,
    setup_corrupt_main_good_bak: NOT_ROTATING,
}


@pytest.mark.parametrize("setup", SETUPS)
def test_save_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, setup: Setup) -> None:
    path = tmp_path / "c.json"
    setup(path)
    with monkeypatch.context() as patch:
        steps = install_crash(patch, None)
        save_json(path, NEW)
    assert steps == STEPS_AFTER[setup]
    assert load_json(path) == NEW


def count_steps(directory: Path, monkeypatch: pytest.MonkeyPatch, setup: Setup) -> int:
    """How many durable steps a save takes after ``setup`` (a dry run in ``directory``)."""
    directory.mkdir()
    path = directory / "c.json"
    setup(path)
    with monkeypatch.context() as patch:
        steps = install_crash(patch, None)
        save_json(path, NEW)
    return len(steps)


@pytest.mark.parametrize("setup", SETUPS)
def test_crash_at_every_step_leaves_old_or_new(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, setup: Setup
) -> None:
    # Crash before each step the code really takes, not only the ones we expect it to.
    for crash_at in range(count_steps(tmp_path / "dry-run", monkeypatch, setup)):
        path = tmp_path / f"crash-{crash_at}" / "c.json"
        path.parent.mkdir()
        old = setup(path)
        save_crashing(monkeypatch, path, NEW, crash_at)
        loaded = load_json(path)
        assert loaded in (old, NEW), f"crash before step {crash_at} loaded {loaded!r}"
        if STEPS_AFTER[setup] is ROTATING:
            # A complete main file is replaced atomically: it never disappears or tears.
            assert json.loads(path.read_text(encoding="utf-8")) in (old, NEW)
        # The next save after a restart works over whatever the crash left behind.
        save_json(path, {"after": crash_at})
        assert load_json(path) == {"after": crash_at}


def test_two_crashed_saves_in_a_row_leave_a_saved_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    versions = [{"v": 1}, {"v": 2}, {"v": 3}]
    steps = count_steps(tmp_path / "dry-run", monkeypatch, setup_main_and_bak)
    for first in range(steps):
        for second in range(steps):
            path = tmp_path / f"crash-{first}-{second}" / "c.json"
            path.parent.mkdir()
            save_json(path, {"v": 0})
            save_json(path, versions[0])
            save_crashing(monkeypatch, path, versions[1], first)
            save_crashing(monkeypatch, path, versions[2], second)
            assert load_json(path) in versions


# ---------------------------------------------------------------- concurrency


def test_concurrent_saves_to_one_path_do_not_collide(path: Path) -> None:
    failures: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            for i in range(20):
                save_json(path, {"writer": n, "i": i})
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    final = load_json(path)
    assert isinstance(final, dict)
    assert final["i"] == 19
