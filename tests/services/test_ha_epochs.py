"""Where a replica's log stops agreeing with its master's epochs."""

from __future__ import annotations

import pytest

from services.errors import ReplicaDivergedError
from services.ha.epochs import check_consistent, divergence_point
from storage.epoch_file import EpochEntry

MASTER = [EpochEntry(1, 0), EpochEntry(2, 1000), EpochEntry(3, 5000)]


def test_a_log_without_epochs_or_bytes_is_taken_as_it_is() -> None:
    assert divergence_point((), MASTER, 700) is None
    assert divergence_point((EpochEntry(1, 0),), MASTER, 0) is None


def test_a_log_behind_its_master_in_the_same_epochs_is_consistent() -> None:
    assert divergence_point((EpochEntry(1, 0), EpochEntry(2, 1000)), MASTER, 3000) is None


def test_a_tail_written_in_an_epoch_the_master_never_had_is_cut() -> None:
    # This replica was master of epoch 2 from 800 on; the real epoch 2 began at 1000 elsewhere.
    local = (EpochEntry(1, 0), EpochEntry(2, 800))
    assert divergence_point(local, MASTER, 1500) == 800


def test_a_log_with_no_epoch_in_common_is_cut_to_zero() -> None:
    assert divergence_point((EpochEntry(7, 0),), MASTER, 100) == 0


def test_check_consistent_names_the_master_and_the_offset() -> None:
    check_consistent((EpochEntry(1, 0),), MASTER, 900, "http://m")
    with pytest.raises(ReplicaDivergedError, match=r"http://m after offset 800"):
        check_consistent((EpochEntry(1, 0), EpochEntry(2, 800)), MASTER, 1500, "http://m")
