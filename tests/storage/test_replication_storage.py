"""Replication in the store: raw appends, chunks, epochs, truncation."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage import MessageStore
from storage.commit_log import ReplicaAppendError
from storage.epoch_file import EpochEntry, EpochFile, consistent_offset
from storage.mapped_file import offset_to_file_name
from storage.record.message import GetMessageStatus
from storage.truncation import truncate_commit_log
from tests.storage.conftest import COMMIT_LOG_FILE_SIZE, OpenStore, message


def commit_log_bytes(root: Path, up_to: int) -> bytes:
    """The CommitLog of ``root`` from its first file, concatenated, cut at ``up_to``."""
    directory = root / "commitlog"
    paths = sorted(p for p in directory.iterdir() if p.name.isdigit())
    return b"".join(p.read_bytes() for p in paths)[: up_to - int(paths[0].name)]


def fill(store: MessageStore, count: int, topic: str = "TopicA") -> None:
    for i in range(count):
        store.put_message(message(topic, f"body-{i}".encode() * 20, queue_id=i % 2, keys=f"k{i}"))
    store.put_messages([message(topic, b"batch", queue_id=1) for _ in range(3)])


def replicate(
    master: MessageStore, slave: MessageStore, chunk: int = 32 * 1024, start: int | None = None
) -> int:
    """Stream master → slave the way the HA connection does (from ``start`` if given, else
    from where the master starts a slave at its max offset); the number of chunks."""
    offset = master.replication_start(slave.max_physical_offset) if start is None else start
    chunks = 0
    while True:
        data = master.read_replication_chunk(offset, chunk)
        if not data:
            return chunks
        offset = slave.append_replicated(offset, data)
        chunks += 1


def test_raw_append_gives_identical_bytes_and_dispatches(
    open_store: OpenStore, tmp_path: Path
) -> None:
    master = open_store(root=tmp_path / "m")
    slave = open_store(root=tmp_path / "s")
    fill(master, 60)
    assert master.max_physical_offset > 3 * COMMIT_LOG_FILE_SIZE  # several files
    replicate(master, slave, start=0)
    end = master.max_physical_offset
    assert slave.max_physical_offset == end
    assert commit_log_bytes(tmp_path / "s", end) == commit_log_bytes(tmp_path / "m", end)
    for queue_id in (0, 1):
        assert slave.max_offset_in_queue("TopicA", queue_id) == master.max_offset_in_queue(
            "TopicA", queue_id
        )
        got = slave.get_message("g", "TopicA", queue_id, 0, 64)
        want = master.get_message("g", "TopicA", queue_id, 0, 64)
        assert [m.body for m in got.messages] == [m.body for m in want.messages]
    assert [m.body for m in slave.query_message("TopicA", "k7")] == [b"body-7" * 20]


def test_small_chunks_split_records_and_the_tail_waits(
    open_store: OpenStore, tmp_path: Path
) -> None:
    master = open_store(root=tmp_path / "m")
    slave = open_store(root=tmp_path / "s")
    fill(master, 5)
    first = master.read_replication_chunk(0, 50)  # shorter than one record
    assert len(first) == 50
    assert slave.append_replicated(0, first) == 50
    assert slave.max_offset_in_queue("TopicA", 0) == 0  # the partial record is not dispatched
    assert replicate(master, slave, chunk=77, start=50) > 10
    assert slave.max_offset_in_queue("TopicA", 0) == master.max_offset_in_queue("TopicA", 0)
    assert slave.max_offset_in_queue("TopicA", 1) == master.max_offset_in_queue("TopicA", 1)


def test_a_chunk_never_spans_files(open_store: OpenStore, tmp_path: Path) -> None:
    master = open_store(root=tmp_path / "m")
    fill(master, 40)
    offset = COMMIT_LOG_FILE_SIZE - 10  # inside the BLANK at the end of the first file
    chunk = master.read_replication_chunk(offset, 32 * 1024)
    assert len(chunk) == 10
    assert len(master.read_replication_chunk(COMMIT_LOG_FILE_SIZE)) > 0


def test_wrong_offsets_are_refused(open_store: OpenStore, tmp_path: Path) -> None:
    master = open_store(root=tmp_path / "m")
    slave = open_store(root=tmp_path / "s")
    fill(master, 3)
    data = master.read_replication_chunk(0)
    with pytest.raises(ReplicaAppendError):
        slave.append_replicated(100, data)  # an empty log starts at a file start only
    slave.append_replicated(0, data[:40])
    with pytest.raises(ReplicaAppendError):
        slave.append_replicated(0, data)  # not the slave's max
    with pytest.raises(ReplicaAppendError):
        slave.append_replicated(40, bytes(COMMIT_LOG_FILE_SIZE))  # would span two files
    assert slave.max_physical_offset == 40
    with pytest.raises(ReplicaAppendError):
        master.read_replication_chunk(master.max_physical_offset + 1)


def test_an_empty_slave_starts_at_the_masters_last_file(
    open_store: OpenStore, tmp_path: Path
) -> None:
    master = open_store(root=tmp_path / "m")
    fill(master, 60)
    last_file_start = master.max_physical_offset // COMMIT_LOG_FILE_SIZE * COMMIT_LOG_FILE_SIZE
    assert master.replication_start(0) == last_file_start > 0
    slave = open_store(root=tmp_path / "s")
    replicate(master, slave)
    names = sorted(p.name for p in (tmp_path / "s" / "commitlog").iterdir())
    assert names == [offset_to_file_name(last_file_start)]
    end = master.max_physical_offset
    assert slave.max_physical_offset == end
    slave.close()
    reopened = open_store(root=tmp_path / "s")  # recovery keeps a log that starts late
    assert reopened.max_physical_offset == end
    assert reopened.min_physical_offset == last_file_start


def test_reopened_slave_keeps_replicated_queues(open_store: OpenStore, tmp_path: Path) -> None:
    master = open_store(root=tmp_path / "m")
    slave = open_store(root=tmp_path / "s")
    fill(master, 30)
    replicate(master, slave, start=0)
    slave.close()
    reopened = open_store(root=tmp_path / "s")
    assert reopened.max_physical_offset == master.max_physical_offset
    assert reopened.max_offset_in_queue("TopicA", 0) == master.max_offset_in_queue("TopicA", 0)
    # once promoted it appends after the replicated queue offsets
    [result] = [reopened.put_message(message("TopicA", b"after", queue_id=0))]
    assert result.queue_offset == master.max_offset_in_queue("TopicA", 0)


# ---------------------------------------------------------------- epochs


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


# ---------------------------------------------------------------- truncation


def test_truncation_and_reopen_trim_queues(open_store: OpenStore, store_dir: Path) -> None:
    store = open_store()
    fill(store, 20)
    cut = store.get_message("g", "TopicA", 0, 5, 1).messages[0].physical_offset
    full_max = store.max_physical_offset
    EpochFile(store_dir).load().begin(1, 0)
    EpochFile(store_dir).load().begin(2, cut + 10)
    store.close()
    removed = truncate_commit_log(store_dir, cut)
    assert 0 < removed <= full_max - cut
    reopened = open_store()
    assert reopened.max_physical_offset == cut
    assert reopened.max_offset_in_queue("TopicA", 0) == 5
    got = reopened.get_message("g", "TopicA", 0, 5, 1)
    assert got.status is GetMessageStatus.OFFSET_OVERFLOW_ONE
    assert reopened.query_message("TopicA", "k19") == []  # index entries past the max
    assert EpochFile(store_dir).load().entries == (EpochEntry(1, 0),)
    assert reopened.check() == []
    result = reopened.put_message(message("TopicA", b"new", queue_id=0))
    assert (result.physical_offset, result.queue_offset) == (cut, 5)


def test_truncation_at_a_file_start_deletes_that_file(
    open_store: OpenStore, store_dir: Path
) -> None:
    store = open_store()
    fill(store, 60)
    store.close()
    truncate_commit_log(store_dir, COMMIT_LOG_FILE_SIZE)
    names = sorted(p.name for p in (store_dir / "commitlog").iterdir())
    assert names == [offset_to_file_name(0)]
    reopened = open_store()
    assert reopened.max_physical_offset <= COMMIT_LOG_FILE_SIZE
    assert reopened.check() == []


def test_a_promoted_slave_cuts_the_record_that_never_arrived_whole(
    open_store: OpenStore, tmp_path: Path
) -> None:
    master = open_store(root=tmp_path / "m")
    slave = open_store(root=tmp_path / "s")
    fill(master, 5)
    whole = master.max_physical_offset
    replicate(master, slave, start=0)
    master.put_message(message("TopicA", b"x" * 300, queue_id=0))
    torn = master.read_replication_chunk(whole, 100)  # the head of a 400-byte record
    assert slave.append_replicated(whole, torn) == whole + 100

    assert slave.cut_partial_tail() == whole
    assert slave.cut_partial_tail() == whole, "a log of whole records is left as it is"
    result = slave.put_message(message("TopicA", b"own write", queue_id=0))
    assert result.physical_offset == whole
    assert slave.check() == []
    got = slave.get_message("g", "TopicA", 0, 0, 64)
    assert got.messages[-1].body == b"own write"
    assert len(got.messages) == master.max_offset_in_queue("TopicA", 0)
