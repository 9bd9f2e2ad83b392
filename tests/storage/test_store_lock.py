"""store_lock: one holder of a store directory at a time."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage.errors import StoreLockedError
from storage.store_lock import acquire_store_lock, release_store_lock


def test_a_second_lock_fails_until_the_first_is_released(tmp_path: Path) -> None:
    fd = acquire_store_lock(tmp_path)
    assert (tmp_path / "lock").read_bytes() == b"lock"
    with pytest.raises(StoreLockedError, match="in use by another process"):
        acquire_store_lock(tmp_path)
    release_store_lock(fd)
    release_store_lock(acquire_store_lock(tmp_path))
