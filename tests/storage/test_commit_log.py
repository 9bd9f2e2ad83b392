"""CommitLog: append, the end-of-file BLANK and roll, batches, queue offsets, read, scan."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage.commit_log import CommitLog
from storage.errors import MessageTooLargeError
from storage.mapped_file import offset_to_file_name
from storage.record.decode import RecordKind, decode_record
from storage.record.encode import EncodedBatch, EncodedMessage
from storage.record.layout import BLANK_MAGIC_CODE, TRANSACTION_PREPARED_TYPE
from storage.record.message import Message

FILE_SIZE = 4096
HOST = ("127.0.0.1", 10911)
OVERHEAD_T = 91 + 1  # fixed overhead + a one-letter topic, no properties


@pytest.fixture
def log(tmp_path: Path) -> Iterator[CommitLog]:
    commit_log = CommitLog(tmp_path / "commitlog", FILE_SIZE, HOST)
    commit_log.load()
    yield commit_log
    commit_log.close()


def encoded(
    size: int | None = None,
    body: bytes | None = None,
    topic: str = "T",
    queue_id: int = 0,
    sys_flag: int = 0,
) -> EncodedMessage:
    """An encoded message; ``size`` picks a body so that the whole record is ``size`` bytes."""
    if body is None:
        assert size is not None and topic == "T"
        body = b"b" * (size - OVERHEAD_T)
    message = Message(topic=topic, body=body, queue_id=queue_id, sys_flag=sys_flag)
    result = EncodedMessage(message, store_v6=False, max_body_size=1 << 20)
    if size is not None:
        assert result.size == size
    return result


def batch(count: int, size: int) -> EncodedBatch:
    """A batch of ``count`` records of ``size`` bytes each to queue 0 of topic T."""
    body = b"b" * (size - OVERHEAD_T)
    messages = [Message(topic="T", body=body) for _ in range(count)]
    return EncodedBatch(messages, store_v6=False, max_body_size=1 << 20)


def file_bytes(log: CommitLog, offset: int) -> bytes:
    return (log.queue.directory / offset_to_file_name(offset)).read_bytes()


# ---------------------------------------------------------------- append


def test_append_writes_the_record_at_the_physical_offset(log: CommitLog) -> None:
    first = log.append(encoded(200), store_timestamp=1000)
    second = log.append(encoded(300), store_timestamp=2000)
    assert (first.physical_offset, first.size, first.queue_offset) == (0, 200, 0)
    assert (second.physical_offset, second.size, second.queue_offset) == (200, 300, 1)
    assert log.max_offset == 500
    assert log.min_offset == 0
    data = log.read(200, 300)
    assert data is not None
    record = decode_record(data)
    assert (record.physical_offset, record.queue_offset, record.store_timestamp) == (200, 1, 2000)
    assert record.store_host == HOST


def test_record_that_fits_exactly_with_room_for_a_blank_stays_in_the_file(log: CommitLog) -> None:
    log.append(encoded(1000), 1)
    # 3096 bytes left: a 3088-byte record leaves exactly the 8 bytes of a future BLANK.
    result = log.append(encoded(3088), 1)
    assert result.physical_offset == 1000
    assert len(log.queue.files) == 1
    assert log.queue.files[0].remaining == 8
    # Any next record must roll, leaving the 8-byte BLANK at 4088.
    rolled = log.append(encoded(100), 1)
    assert rolled.physical_offset == FILE_SIZE
    assert file_bytes(log, 0)[4088:] == struct.pack(">ii", 8, BLANK_MAGIC_CODE)


def test_record_one_byte_too_big_goes_to_the_next_file_after_a_blank(log: CommitLog) -> None:
    log.append(encoded(1000), 1)
    # size + 8 > remaining (3096) by one byte.
    result = log.append(encoded(3089), 7)
    assert result.physical_offset == FILE_SIZE
    assert result.queue_offset == 1  # the BLANK consumed no queue offset
    first = log.queue.files[0]
    assert first.is_full
    data = file_bytes(log, 0)
    assert data[1000:1008] == struct.pack(">ii", 3096, BLANK_MAGIC_CODE)
    assert data[1008:] == bytes(FILE_SIZE - 1008)  # the rest stays as it was: zeros
    second = file_bytes(log, FILE_SIZE)
    assert struct.unpack_from(">i", second, 0)[0] == 3089
    assert decode_record(second).physical_offset == FILE_SIZE
    assert log.max_offset == FILE_SIZE + 3089


def test_largest_record_fills_a_fresh_file_minus_the_blank(log: CommitLog) -> None:
    result = log.append(encoded(FILE_SIZE - 8), 1)
    assert result.physical_offset == 0
    with pytest.raises(MessageTooLargeError):
        log.append(encoded(FILE_SIZE - 7), 1)
    assert log.max_offset == FILE_SIZE - 8  # nothing written by the refused append
    assert len(log.queue.files) == 1


def test_too_large_record_writes_nothing_even_mid_file(log: CommitLog) -> None:
    log.append(encoded(500), 1)
    with pytest.raises(MessageTooLargeError):
        log.append(encoded(FILE_SIZE), 1)
    assert log.max_offset == 500
    assert log.topic_queue_table == {("T", 0): 1}
    assert file_bytes(log, 0)[500:] == bytes(FILE_SIZE - 500)


def test_queue_offsets_are_per_topic_and_queue(log: CommitLog) -> None:
    offsets = []
    for topic, queue_id in [("A", 0), ("A", 1), ("B", 0), ("A", 0), ("B", 0), ("A", 0)]:
        result = log.append(encoded(body=b"x", topic=topic, queue_id=queue_id), 1)
        offsets.append(result.queue_offset)
    assert offsets == [0, 0, 0, 1, 1, 2]
    assert log.topic_queue_table == {("A", 0): 3, ("A", 1): 1, ("B", 0): 2}


def test_prepared_transaction_messages_take_no_queue_offset(log: CommitLog) -> None:
    log.append(encoded(body=b"1"), 1)
    prepared = log.append(encoded(body=b"2", sys_flag=TRANSACTION_PREPARED_TYPE), 1)
    after = log.append(encoded(body=b"3"), 1)
    assert prepared.queue_offset == 0
    assert after.queue_offset == 1


# ---------------------------------------------------------------- batches


def test_batch_gets_consecutive_offsets_in_one_file(log: CommitLog) -> None:
    log.append(encoded(body=b"x"), 1)
    appended = log.append_encoded_batch(batch(5, 300), 5)
    assert appended.first_queue_offset == 1
    assert appended.offsets == [93 + 300 * i for i in range(5)]
    assert appended.sizes == [300] * 5
    assert appended.end_offset == log.max_offset == 93 + 1500
    assert appended.store_timestamp == 5
    assert log.topic_queue_table == {("T", 0): 6}
    stored = [log.look_message(offset) for offset in appended.offsets]
    assert [m.queue_offset if m else None for m in stored] == [1, 2, 3, 4, 5]


def test_batch_never_straddles_files(log: CommitLog) -> None:
    log.append(encoded(3000), 1)
    # 1096 bytes left; 4 x 300 = 1200 would fit only if split: the whole batch rolls.
    appended = log.append_encoded_batch(batch(4, 300), 1)
    assert appended.offsets == [FILE_SIZE + 300 * i for i in range(4)]
    assert appended.first_queue_offset == 1
    assert file_bytes(log, 0)[3000:3008] == struct.pack(">ii", 1096, BLANK_MAGIC_CODE)


def test_batch_bigger_than_a_file_is_refused(log: CommitLog) -> None:
    with pytest.raises(MessageTooLargeError):
        log.append_encoded_batch(batch(5, 1000), 1)
    assert log.max_offset == 0
    assert log.topic_queue_table == {}


# ---------------------------------------------------------------- read


def test_read_by_physical_offset(log: CommitLog) -> None:
    results = [log.append(encoded(1500), i) for i in range(5)]  # two per file
    for index, result in enumerate(results):
        data = log.read_record(result.physical_offset)
        assert data is not None
        record = decode_record(data)
        assert (record.physical_offset, record.queue_offset) == (result.physical_offset, index)
        assert record.store_timestamp == index
        assert log.store_time_of(result.physical_offset, result.size) == index


@pytest.mark.parametrize(
    "offset",
    [
        pytest.param(3000, id="on-the-blank"),
        pytest.param(10, id="inside-a-record"),
        pytest.param(2 * FILE_SIZE + 1500, id="at-the-end-of-data"),
        pytest.param(10 * FILE_SIZE, id="beyond"),
        pytest.param(-1, id="negative"),
    ],
)
def test_read_record_at_a_non_record_offset_is_none(log: CommitLog, offset: int) -> None:
    for _ in range(5):
        log.append(encoded(1500), 1)
    assert log.read_record(offset) is None


def test_read_never_returns_unwritten_bytes(log: CommitLog) -> None:
    log.append(encoded(200), 1)
    assert log.read(0, 200) is not None
    assert log.read(0, 201) is None
    assert log.read(150, 100) is None
    assert log.store_time_of(200, 100) == -1


# ---------------------------------------------------------------- scan


def test_scan_walks_records_across_files_and_stops_at_the_end(log: CommitLog) -> None:
    sizes = [1500, 1500, 1500, 800, 3000, 200, 2000]
    appended = [log.append(encoded(size), 1) for size in sizes]
    assert len(log.queue.files) == 4
    scanned = list(log.scan(0))
    # Blanks are stepped over; a cleanly ended log yields its records and nothing else.
    assert {s.check.kind for s in scanned} == {RecordKind.MESSAGE}
    assert [s.offset for s in scanned] == [r.physical_offset for r in appended]
    assert [len(s.data) for s in scanned] == sizes
    assert [decode_record(s.data).queue_offset for s in scanned] == list(range(len(sizes)))


def test_scan_from_the_middle_and_up_to_an_offset(log: CommitLog) -> None:
    appended = [log.append(encoded(1500), 1) for _ in range(6)]
    from_third = [s.offset for s in log.scan(appended[2].physical_offset)]
    assert from_third == [r.physical_offset for r in appended[2:]]
    bounded = list(log.scan(0, to_offset=appended[3].physical_offset))
    assert [s.offset for s in bounded] == [r.physical_offset for r in appended[:3]]


def test_scan_of_an_empty_log_yields_nothing(log: CommitLog) -> None:
    assert list(log.scan(0)) == []


def test_scan_reports_corruption_where_it_is(log: CommitLog) -> None:
    appended = [log.append(encoded(500), 1) for _ in range(3)]
    mapped = log.queue.files[0]
    struct.pack_into(">I", mapped.buffer, appended[1].physical_offset + 4, 0x01020304)
    scanned = list(log.scan(0))
    assert [s.check.kind for s in scanned] == [RecordKind.MESSAGE, RecordKind.CORRUPT]
    assert scanned[-1].offset == appended[1].physical_offset


# ---------------------------------------------------------------- reopen


def test_reopen_recovers_the_end_and_appends_continue(tmp_path: Path) -> None:
    directory = tmp_path / "commitlog"
    first = CommitLog(directory, FILE_SIZE, HOST)
    first.load()
    appended = [first.append(encoded(1500), 1) for _ in range(5)]
    end = first.max_offset
    first.close()
    second = CommitLog(directory, FILE_SIZE, HOST)
    second.load()
    try:
        recovered_end, findings = second.recover_normally(check_crc=True)
        assert (recovered_end, findings) == (end, [])
        assert second.max_offset == end
        second.rebuild_topic_queue_table({("T", 0): 5})
        result = second.append(encoded(1500), 1)
        assert result.physical_offset == appended[-1].physical_offset + 1500
        assert result.queue_offset == 5
    finally:
        second.close()
