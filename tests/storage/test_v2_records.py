"""A CommitLog written by RocketMQ 5.x mixes format v1 and v2 records: read, recover, pull.

The files are built byte by byte (v1 records from the record encoder, v2 records rewritten from them
as the reference describes), then opened by the read-only readers and by a MessageStore.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import pytest

from storage.mapped_file import offset_to_file_name
from storage.message_store import MessageStore
from storage.record.decode import RecordKind, check_record
from storage.record.encode import blank_record, encode_message
from storage.record.message import GetMessageStatus, Message
from storage.store_reader import (
    commit_log_files,
    first_store_timestamp,
    iter_store_records,
    map_read_only,
    scan_stop,
    store_timestamp_at_offset,
)
from storage.store_types import StoreConfig
from tests.storage.record.golden import to_v2

FILE_SIZE = 4096
CONFIG = StoreConfig(commit_log_file_size=FILE_SIZE, consume_queue_units_per_file=10)
LONG_TOPIC = "L" * 150  # over 127 characters: only v2 can hold it
STORE_HOST = ("192.168.1.2", 10911)


@dataclass(frozen=True)
class Planned:
    topic: str
    queue_offset: int
    v2: bool
    body: bytes


PLAN = [
    Planned("Orders", 0, False, b"v1-a"),
    Planned("Orders", 1, True, b"v2-a"),
    Planned(LONG_TOPIC, 0, True, b"v2-long-a"),
    Planned("Orders", 2, False, b"v1-b"),
    Planned(LONG_TOPIC, 1, True, b"v2-long-b"),
    Planned("Orders", 3, True, b"v2-b" * 400),  # fills most of the first file
    Planned("Orders", 4, False, b"v1-c" * 400),  # goes to the second file after a BLANK
    Planned("Orders", 5, True, b"v2-c"),
]


def v1_record(planned: Planned, physical_offset: int) -> bytes:
    message = Message(
        "Placeholder" if len(planned.topic) > 127 else planned.topic,
        planned.body,
        properties={"KEYS": planned.body[:9].decode()},
    )
    record = encode_message(
        message,
        queue_offset=planned.queue_offset,
        physical_offset=physical_offset,
        store_timestamp=1_700_000_000_000 + physical_offset,
        store_host=STORE_HOST,
    )
    if message.topic != planned.topic:  # the encoder never writes such a topic: splice it in
        body_end = 88 + len(planned.body)
        tail = record[body_end + 1 + len(message.topic) :]
        record = record[:body_end] + bytes([len(planned.topic)]) + planned.topic.encode() + tail
        record = struct.pack(">i", len(record)) + record[4:]
    return record


def write_commit_log(store_dir: Path) -> dict[int, Planned]:
    """The PLAN as CommitLog files; returns each record's physical offset."""
    directory = store_dir / "commitlog"
    directory.mkdir(parents=True)
    files: list[bytearray] = [bytearray(FILE_SIZE)]
    offsets: dict[int, Planned] = {}
    position = 0
    for planned in PLAN:
        size = len(v1_record(planned, 0)) + (1 if planned.v2 else 0)
        if position % FILE_SIZE + size + 8 > FILE_SIZE:
            remaining = FILE_SIZE - position % FILE_SIZE
            files[-1][position % FILE_SIZE : position % FILE_SIZE + 8] = blank_record(remaining)
            files.append(bytearray(FILE_SIZE))
            position += remaining
        record = v1_record(planned, position)
        record = to_v2(record) if planned.v2 else record
        assert len(record) == size
        files[-1][position % FILE_SIZE : position % FILE_SIZE + size] = record
        offsets[position] = planned
        position += size
    for number, content in enumerate(files):
        (directory / offset_to_file_name(number * FILE_SIZE)).write_bytes(bytes(content))
    return offsets


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def written(store_dir: Path) -> dict[int, Planned]:
    return write_commit_log(store_dir)


def test_the_store_reader_walks_a_mixed_commit_log(
    store_dir: Path, written: dict[int, Planned]
) -> None:
    records = list(iter_store_records(store_dir, check_crc=True))
    assert [r.commit_log_offset for r in records] == sorted(written)
    for record in records:
        planned = written[record.commit_log_offset]
        assert (record.message.topic, record.message.body) == (planned.topic, planned.body)
        assert record.message.queue_offset == planned.queue_offset
        assert record.message.physical_offset == record.commit_log_offset
    files = commit_log_files(store_dir)
    assert len(files) == 2
    with map_read_only(files[0].path) as buffer:
        assert scan_stop(buffer).kind is RecordKind.BLANK
        kinds = {
            offset: check_record(buffer, offset, FILE_SIZE, check_crc=True).kind
            for offset in written
            if offset < FILE_SIZE
        }
        assert set(kinds.values()) == {RecordKind.MESSAGE}
    with map_read_only(files[1].path) as buffer:
        end = scan_stop(buffer)
        assert end.kind is RecordKind.END
        assert FILE_SIZE + end.position == max(written) + len(to_v2(v1_record(PLAN[-1], 0)))
    assert first_store_timestamp(files[1]) == 1_700_000_000_000 + FILE_SIZE
    v2_offset = next(offset for offset, planned in written.items() if planned.v2)
    assert store_timestamp_at_offset(store_dir, v2_offset) == 1_700_000_000_000 + v2_offset


def pull_all(store: MessageStore, topic: str) -> list[bytes]:
    result = store.get_message("g", topic, 0, 0)
    assert result.status is GetMessageStatus.FOUND
    bodies = [m.body for m in result.messages]
    while result.next_begin_offset < result.max_offset:
        result = store.get_message("g", topic, 0, result.next_begin_offset)
        bodies += [m.body for m in result.messages]
    return bodies


@pytest.mark.parametrize("clean_exit", [True, False], ids=["normal", "abnormal"])
def test_a_mixed_commit_log_recovers_dispatches_and_serves(
    store_dir: Path, written: dict[int, Planned], clean_exit: bool
) -> None:
    if not clean_exit:
        (store_dir / "abort").touch()  # recovery from the checkpoint, CRCs checked
    with MessageStore.open(store_dir, CONFIG) as store:
        assert store.recovery_findings == []
        end = max(written) + len(to_v2(v1_record(PLAN[-1], 0)))
        assert store.commit_log.max_offset == end
        assert pull_all(store, "Orders") == [p.body for p in PLAN if p.topic == "Orders"]
        assert pull_all(store, LONG_TOPIC) == [b"v2-long-a", b"v2-long-b"]
        for offset, planned in written.items():
            found = store.look_message_by_offset(offset)
            assert found is not None and found.body == planned.body
            assert store.look_message_by_id(found.msg_id) is not None
        assert [m.body for m in store.query_message("Orders", "v2-a")] == [b"v2-a"]
        appended = store.put([Message("Orders", b"written as v1")])[0]
        assert appended.queue_offset == 6
        assert store.check() == []
    with MessageStore.open(store_dir, CONFIG) as store:
        assert pull_all(store, "Orders")[-1] == b"written as v1"
