"""epoch_file: epochs and where two logs stop agreeing."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage.epoch_file import EpochEntry, EpochFile, consistent_offset


def entries(*pairs: tuple[int, int]) -> list[EpochEntry]:
    return [EpochEntry(epoch, start) for epoch, start in pairs]


@pytest.mark.parametrize(
    ("local", "remote", "local_max", "expected"),
    [
        # same single epoch: the replica's whole log is consistent
        (entries((1, 0)), entries((1, 0)), 500, 500),
        # the master moved on to epoch 2 at 300: the replica's epoch-1 tail past 300 diverges
        (entries((1, 0)), entries((1, 0), (2, 300)), 500, 300),
        # the replica is behind the point where the master's epoch 1 ended
        (entries((1, 0)), entries((1, 0), (2, 300)), 200, 200),
        # an old master wrote epoch 2 alone; the new master has 1 then 3
        (entries((1, 0), (2, 400)), entries((1, 0), (3, 350)), 900, 350),
        # both went through epoch 2, the replica is in it
        (entries((1, 0), (2, 400)), entries((1, 0), (2, 400), (3, 700)), 650, 650),
        # no common epoch
        (entries((4, 0)), entries((1, 0), (2, 10)), 90, -1),
        # an epoch number alike but a different start is not common
        (entries((1, 0), (2, 50)), entries((1, 0), (2, 60)), 90, 50),
    ],
)
def test_consistent_offset(
    local: list[EpochEntry], remote: list[EpochEntry], local_max: int, expected: int
) -> None:
    assert consistent_offset(local, remote, local_max) == expected


def test_epoch_file_round_trip_and_rules(tmp_path: Path) -> None:
    epochs = EpochFile(tmp_path).load()
    assert epochs.last_epoch == 0
    epochs.begin(1, 0)
    epochs.begin(3, 1000)
    with pytest.raises(ValueError):
        epochs.begin(3, 2000)  # not a new epoch
    with pytest.raises(ValueError):
        epochs.begin(4, 10)  # before the last epoch's start
    again = EpochFile(tmp_path).load()
    assert again.entries == (EpochEntry(1, 0), EpochEntry(3, 1000))
    again.truncate(999)
    assert EpochFile(tmp_path).load().entries == (EpochEntry(1, 0),)
