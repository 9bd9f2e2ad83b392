"""queue_reader: GetMessageStatus by offset, the batch caps, and reads decoded or raw."""

from __future__ import annotations

import pytest

from storage import GetMessageStatus, MessageStore, StoreConfig, TagFilter
from storage.queue_reader import position_status
from storage.record.decode import decode_record
from tests.storage.conftest import TINY_CONFIG, message


@pytest.mark.parametrize(
    ("offset", "min_offset", "max_offset", "expected"),
    [
        pytest.param(0, 0, 0, (GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0), id="empty"),
        pytest.param(1, 3, 9, (GetMessageStatus.OFFSET_TOO_SMALL, 3), id="too-small"),
        pytest.param(9, 3, 9, (GetMessageStatus.OFFSET_OVERFLOW_ONE, 9), id="overflow-one"),
        pytest.param(20, 3, 9, (GetMessageStatus.OFFSET_OVERFLOW_BADLY, 9), id="badly"),
        pytest.param(20, 0, 9, (GetMessageStatus.OFFSET_OVERFLOW_BADLY, 0), id="badly-from-0"),
        pytest.param(5, 3, 9, (None, 5), id="read-units"),
    ],
)
def test_the_offset_alone_decides_these_statuses(
    offset: int, min_offset: int, max_offset: int, expected: tuple[object, int]
) -> None:
    assert position_status(offset, min_offset, max_offset) == expected


def fill(store: MessageStore, count: int) -> None:
    for index in range(count):
        tags = "even" if index % 2 == 0 else "odd"
        store.put_message(message(body=f"body-{index}".encode(), tags=tags, keys=f"k{index}"))


@pytest.mark.parametrize("tags", [None, "odd"])
@pytest.mark.parametrize("offset", [0, 7])
def test_a_raw_read_finds_what_a_decoded_read_finds(
    store: MessageStore, tags: str | None, offset: int
) -> None:
    fill(store, 30)  # several 4 KiB CommitLog files and 10-unit ConsumeQueue files
    tag_filter = None if tags is None else TagFilter(tags)
    decoded = store.get_message("g", "TopicA", 0, offset, 32, tag_filter=tag_filter)
    raw = store.get_message("g", "TopicA", 0, offset, 32, tag_filter=tag_filter, raw=True)
    assert raw.status is decoded.status is GetMessageStatus.FOUND
    assert (raw.next_begin_offset, raw.min_offset, raw.max_offset) == (
        decoded.next_begin_offset,
        decoded.min_offset,
        decoded.max_offset,
    )
    assert raw.messages == [] and decoded.records == []
    assert [decode_record(r.data) for r in raw.records] == decoded.messages
    assert [r.queue_offset for r in raw.records] == [m.queue_offset for m in decoded.messages]
    assert all(len(r.data) == m.size for r, m in zip(raw.records, decoded.messages, strict=True))


def test_raw_reads_keep_the_batch_caps(open_store: object) -> None:
    config = StoreConfig(
        commit_log_file_size=64 * 1024,
        consume_queue_units_per_file=100,
        max_transfer_count_in_memory=5,
        max_transfer_bytes_in_memory=10_000,
    )
    store = open_store(config)  # type: ignore[operator]
    fill(store, 20)
    assert len(store.get_message("g", "TopicA", 0, 0, 32, raw=True).records) == 5
    assert len(store.get_message("g", "TopicA", 0, 0, 3, raw=True).records) == 3
    one = store.get_message("g", "TopicA", 0, 0, 32, max_bytes=10, raw=True)
    assert len(one.records) == 1  # the first message always goes out
    assert one.next_begin_offset == 1


def test_a_raw_read_with_nothing_matching_counts_what_it_skipped(store: MessageStore) -> None:
    fill(store, 6)
    result = store.get_message("g", "TopicA", 0, 0, 32, tag_filter=TagFilter("none"), raw=True)
    assert result.status is GetMessageStatus.NO_MATCHED_MESSAGE
    assert (result.records, result.next_begin_offset) == ([], 6)


def test_raw_records_do_not_hold_the_store_files(open_store: object, store_dir: object) -> None:
    store = open_store(TINY_CONFIG)  # type: ignore[operator]
    fill(store, 3)
    records = store.get_message("g", "TopicA", 0, 0, 32, raw=True).records
    store.close()  # unmaps every file: would fail if a record still pointed into one
    assert [decode_record(r.data).body for r in records] == [b"body-0", b"body-1", b"body-2"]
    assert records[2].properties() == {"TAGS": "even", "KEYS": "k2"}
