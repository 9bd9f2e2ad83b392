"""fs: a directory's entries made durable."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage.fs import fsync_directory


def test_a_directory_is_fsynced_and_a_missing_one_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "new").write_bytes(b"x")
    fsync_directory(tmp_path)
    with pytest.raises(FileNotFoundError):
        fsync_directory(tmp_path / "gone")
