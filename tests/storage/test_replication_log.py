"""replication_log: raw appends, chunks, where a slave starts, the cut of a partial tail."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage import MessageStore
from storage.commit_log import ReplicaAppendError
from storage.mapped_file import offset_to_file_name
from tests.storage.conftest import COMMIT_LOG_FILE_SIZE, OpenStore, fill_two_queues, message


def commit_log_bytes(root: Path, up_to: int) -> bytes:
    """The CommitLog of ``root`` from its first file, concatenated, cut at ``up_to``."""
    directory = root / "commitlog"
    paths = sorted(p for p in directory.iterdir() if p.name.isdigit())
    return b"".join(p.read_bytes() for p in paths)[: up_to - int(paths[0].name)]


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
    fill_two_queues(master, 60)
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
    fill_two_queues(master, 5)
    first = master.read_replication_chunk(0, 50)  # shorter than one record
    assert len(first) == 50
    assert slave.append_replicated(0, first) == 50
    assert slave.max_offset_in_queue("TopicA", 0) == 0  # the partial record is not dispatched
    assert replicate(master, slave, chunk=77, start=50) > 10
    assert slave.max_offset_in_queue("TopicA", 0) == master.max_offset_in_queue("TopicA", 0)
    assert slave.max_offset_in_queue("TopicA", 1) == master.max_offset_in_queue("TopicA", 1)


def test_a_chunk_never_spans_files(open_store: OpenStore, tmp_path: Path) -> None:
    master = open_store(root=tmp_path / "m")
    fill_two_queues(master, 40)
    offset = COMMIT_LOG_FILE_SIZE - 10  # inside the BLANK at the end of the first file
    chunk = master.read_replication_chunk(offset, 32 * 1024)
    assert len(chunk) == 10
    assert len(master.read_replication_chunk(COMMIT_LOG_FILE_SIZE)) > 0


def test_wrong_offsets_are_refused(open_store: OpenStore, tmp_path: Path) -> None:
    master = open_store(root=tmp_path / "m")
    slave = open_store(root=tmp_path / "s")
    fill_two_queues(master, 3)
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
    fill_two_queues(master, 60)
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
    fill_two_queues(master, 30)
    replicate(master, slave, start=0)
    slave.close()
    reopened = open_store(root=tmp_path / "s")
    assert reopened.max_physical_offset == master.max_physical_offset
    assert reopened.max_offset_in_queue("TopicA", 0) == master.max_offset_in_queue("TopicA", 0)
    # once promoted it appends after the replicated queue offsets
    [result] = [reopened.put([message("TopicA", b"after", queue_id=0)])[0]]
    assert result.queue_offset == master.max_offset_in_queue("TopicA", 0)


def test_a_promoted_slave_cuts_the_record_that_never_arrived_whole(
    open_store: OpenStore, tmp_path: Path
) -> None:
    master = open_store(root=tmp_path / "m")
    slave = open_store(root=tmp_path / "s")
    fill_two_queues(master, 5)
    whole = master.max_physical_offset
    replicate(master, slave, start=0)
    master.put([message("TopicA", b"x" * 300, queue_id=0)])
    torn = master.read_replication_chunk(whole, 100)  # the head of a 400-byte record
    assert slave.append_replicated(whole, torn) == whole + 100

    assert slave.cut_partial_tail() == whole
    assert slave.cut_partial_tail() == whole, "a log of whole records is left as it is"
    result = slave.put([message("TopicA", b"own write", queue_id=0)])[0]
    assert result.physical_offset == whole
    assert slave.check() == []
    got = slave.get_message("g", "TopicA", 0, 0, 64)
    assert got.messages[-1].body == b"own write"
    assert len(got.messages) == master.max_offset_in_queue("TopicA", 0)
