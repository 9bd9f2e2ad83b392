"""store_reader: read-only readers checked against what MessageStore wrote.

Ground truth is the PutResults and Messages of a real store with tiny files (records cross
CommitLog files, queues span several ConsumeQueue files). Damaged tails are made by editing
the files after the store is closed.
"""

from __future__ import annotations

import hashlib
import os
import random
from dataclasses import dataclass
from pathlib import Path

import pytest

from storage import Message, MessageStore, PutResult, StoreConfig
from storage.config_managers import (
    ConsumerOffsetManager,
    SubscriptionGroupConfig,
    SubscriptionGroupManager,
    TopicConfig,
    TopicConfigManager,
)
from storage.errors import ConfigFileError
from storage.record.decode import Boundary, RecordKind, check_record
from storage.record.layout import CQ_UNIT_STRUCT, PRE_BLANK_SIZE
from storage.record.message import StoredMessage
from storage.store_reader import (
    QueueOffsets,
    all_queue_offsets,
    commit_log_files,
    commit_log_min_offset,
    consume_queue_ids,
    consume_queue_topics,
    first_store_timestamp,
    iter_store_records,
    map_read_only,
    next_boundary,
    queue_offsets,
    read_commit_log,
    read_consumer_offsets,
    read_records,
    read_subscription_groups,
    read_topic_configs,
    read_unit,
    scan_records,
    scan_stop,
    store_timestamp_at_offset,
    store_timestamp_at_queue_offset,
)

FILE_SIZE = 64 * 1024
CONFIG = StoreConfig(commit_log_file_size=FILE_SIZE, consume_queue_units_per_file=50)
TOPICS = ("Orders", "Payments", "%RETRY%billing")


@dataclass(frozen=True)
class Written:
    message: Message
    result: PutResult


def make_message(rng: random.Random, index: int) -> Message:
    """Varied messages: binary bodies of 0..2000 bytes, several topics, queues, properties."""
    body = rng.randbytes(rng.choice([0, 1, 17, 300, 1200, 2000]))
    properties = {"UNIQ_KEY": f"{index:032X}", "TAGS": rng.choice(["A", "B", "TagC"])}
    if index % 3:
        properties["KEYS"] = f"k{index} shared"
    if index % 7 == 0:
        properties = {}
    return Message(
        topic=TOPICS[index % len(TOPICS)],
        body=body,
        queue_id=index % 4,
        properties=properties,
        born_timestamp=1_700_000_000_000 + index,
    )


def fill(store_dir: Path, count: int, seed: int = 7) -> list[Written]:
    """Write ``count`` messages through MessageStore and close it cleanly."""
    rng = random.Random(seed)
    written = []
    with MessageStore.open(store_dir, CONFIG) as store:
        for index in range(count):
            message = make_message(rng, index)
            written.append(Written(message, store.put([message])[0]))
    return written


@pytest.fixture
def store(tmp_path: Path) -> tuple[Path, list[Written]]:
    store_dir = tmp_path / "store"
    return store_dir, fill(store_dir, 400)


def expected_properties(message: Message) -> dict[str, str]:
    return {k: v for k, v in message.properties.items() if k and v}


def assert_same(record_offset: int, decoded: StoredMessage, written: Written) -> None:
    message, result = written.message, written.result
    assert record_offset == result.physical_offset
    assert decoded.topic == message.topic
    assert decoded.queue_id == message.queue_id
    assert decoded.queue_offset == result.queue_offset
    assert decoded.body == message.body
    assert decoded.properties == expected_properties(message)
    assert decoded.store_timestamp == result.store_timestamp
    assert decoded.born_timestamp == message.born_timestamp
    assert decoded.msg_id == result.msg_id
    assert decoded.size == result.size


def file_digests(root: Path) -> dict[str, tuple[int, int, str]]:
    """Every file under ``root``: size, mtime and content hash."""
    digests = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            stat = path.stat()
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            digests[str(path.relative_to(root))] = (stat.st_size, stat.st_mtime_ns, digest)
    return digests


# --------------------------------------------------------------------------- CommitLog


def test_commit_log_files_are_sorted_by_offset(store: tuple[Path, list[Written]]) -> None:
    store_dir, _written = store
    files = commit_log_files(store_dir)
    assert len(files) >= 3, "the test needs records in several files"
    assert [f.start_offset for f in files] == [i * FILE_SIZE for i in range(len(files))]
    assert all(f.size == FILE_SIZE for f in files)
    assert [f.path.name for f in files] == sorted(f.path.name for f in files)
    assert commit_log_min_offset(store_dir) == 0
    assert commit_log_files(store_dir / "missing") == []
    assert commit_log_min_offset(store_dir / "missing") == -1


def test_records_equal_what_was_written(store: tuple[Path, list[Written]]) -> None:
    store_dir, written = store
    records = list(iter_store_records(store_dir, check_crc=True))
    assert len(records) == len(written)
    for record, expected in zip(records, written, strict=True):
        assert_same(record.commit_log_offset, record.message, expected)


def test_every_file_but_the_last_ends_with_a_blank(store: tuple[Path, list[Written]]) -> None:
    store_dir, written = store
    files = commit_log_files(store_dir)
    per_file = {f.start_offset: 0 for f in files}
    for item in written:
        per_file[item.result.physical_offset // FILE_SIZE * FILE_SIZE] += 1
    for file in files:
        with map_read_only(file.path) as buffer:
            stop = scan_stop(buffer)
            assert len(list(scan_records(buffer))) == per_file[file.start_offset]
        assert stop.kind is (RecordKind.END if file is files[-1] else RecordKind.BLANK)


def test_next_boundary_walks_to_the_first_record_at_or_after_a_target(
    store: tuple[Path, list[Written]],
) -> None:
    store_dir, written = store
    file = commit_log_files(store_dir)[1]
    starts = sorted(
        w.result.physical_offset - file.start_offset
        for w in written
        if file.start_offset <= w.result.physical_offset < file.end_offset
    )
    rng = random.Random(3)
    with map_read_only(file.path) as buffer:
        stop = scan_stop(buffer)
        assert stop.kind is RecordKind.BLANK
        for target in [0, 1, starts[5], starts[5] + 1, *rng.sample(range(starts[-1]), 40)]:
            expected = min(p for p in starts if p >= target)
            from_start = next_boundary(buffer, 0, target)
            assert from_start == Boundary(expected, RecordKind.MESSAGE)
            known = max(p for p in starts if p <= target)
            assert next_boundary(buffer, known, target) == from_start
        past_last = next_boundary(buffer, starts[-1], starts[-1] + 1)
        assert past_last.kind is RecordKind.BLANK
        assert past_last.position == stop.position


def test_read_records_of_a_byte_range(store: tuple[Path, list[Written]]) -> None:
    store_dir, written = store
    file = commit_log_files(store_dir)[0]
    with map_read_only(file.path) as buffer:
        cut = next_boundary(buffer, 0, FILE_SIZE // 2).position
    first = list(read_records(file, 0, cut))
    second = list(read_records(file, cut))
    in_file = [w for w in written if w.result.physical_offset < FILE_SIZE]
    assert len(first) + len(second) == len(in_file)
    assert first[-1].commit_log_offset + first[-1].message.size == cut
    assert second[0].commit_log_offset == cut


def test_a_zeroed_torn_tail_is_the_end(store: tuple[Path, list[Written]]) -> None:
    store_dir, written = store
    last = written[-1].result
    path = commit_log_files(store_dir)[-1].path
    position = last.physical_offset % FILE_SIZE
    with open(path, "r+b") as handle:  # a torn write: the second half never reached the disk
        handle.seek(position + last.size // 2)
        handle.write(bytes(last.size - last.size // 2))
    records = list(iter_store_records(store_dir))
    assert [r.commit_log_offset for r in records] == [
        w.result.physical_offset for w in written[:-1]
    ]
    with map_read_only(path) as buffer:
        stop = scan_stop(buffer)
    # The first half is intact, so the field lengths (zeros) disagree with TOTALSIZE.
    assert stop.kind in (RecordKind.END, RecordKind.CORRUPT)
    assert stop.position == position


def test_garbage_after_the_last_record_stops_the_file(store: tuple[Path, list[Written]]) -> None:
    store_dir, written = store
    last = written[-1].result
    path = commit_log_files(store_dir)[-1].path
    end = last.physical_offset % FILE_SIZE + last.size
    with open(path, "r+b") as handle:
        handle.seek(end)
        handle.write(b"\x00\x00\x01\x00garbage-garbage-garbage" * 10)
    records = list(iter_store_records(store_dir))
    assert len(records) == len(written)
    with map_read_only(path) as buffer:
        assert scan_stop(buffer) == Boundary(end, RecordKind.CORRUPT, scan_stop(buffer).reason)


def test_a_short_last_file_ends_at_its_last_complete_record(
    store: tuple[Path, list[Written]],
) -> None:
    store_dir, written = store
    last = written[-1].result
    path = commit_log_files(store_dir)[-1].path
    os.truncate(path, last.physical_offset % FILE_SIZE + last.size - 1)
    records = list(iter_store_records(store_dir))
    assert len(records) == len(written) - 1
    assert commit_log_files(store_dir)[-1].size == last.physical_offset % FILE_SIZE + last.size - 1


def test_empty_and_vanished_files_yield_nothing(tmp_path: Path) -> None:
    directory = tmp_path / "store" / "commitlog"
    directory.mkdir(parents=True)
    empty = directory / f"{0:020d}"
    empty.touch()
    (directory / "not-a-log").write_bytes(b"x")
    assert list(iter_store_records(tmp_path / "store")) == []
    [file] = commit_log_files(tmp_path / "store")
    empty.unlink()
    assert list(read_records(file)) == []
    assert first_store_timestamp(file) is None


def test_store_time_lookups(store: tuple[Path, list[Written]]) -> None:
    store_dir, written = store
    first = commit_log_files(store_dir)[0]
    assert first_store_timestamp(first) == written[0].result.store_timestamp
    for item in written[::37]:
        result = item.result
        assert store_timestamp_at_offset(store_dir, result.physical_offset) == (
            result.store_timestamp
        )
        assert read_commit_log(store_dir, result.physical_offset, result.size) is not None
    assert store_timestamp_at_offset(store_dir, written[0].result.physical_offset + 1) is None
    assert read_commit_log(store_dir, 10 * FILE_SIZE, 8) is None


# --------------------------------------------------------------------------- ConsumeQueue


def expected_queues(written: list[Written]) -> dict[tuple[str, int], list[PutResult]]:
    queues: dict[tuple[str, int], list[PutResult]] = {}
    for item in written:
        queues.setdefault((item.message.topic, item.message.queue_id), []).append(item.result)
    return queues


def test_queue_offsets_equal_the_store(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    rng = random.Random(11)
    with MessageStore.open(store_dir, CONFIG) as message_store:
        for index in range(300):
            message_store.put([make_message(rng, index)])
        expected = [
            QueueOffsets(
                topic,
                queue_id,
                message_store.min_offset_in_queue(topic, queue_id),
                message_store.max_offset_in_queue(topic, queue_id),
            )
            for topic in message_store.topics()
            for queue_id in message_store.queue_ids(topic)
        ]
        # Read while the store is open (the lock is held): readers never need it.
        assert all_queue_offsets(store_dir) == expected
    assert all_queue_offsets(store_dir) == expected
    assert consume_queue_topics(store_dir) == sorted(TOPICS)
    assert consume_queue_ids(store_dir, "Orders") == [0, 1, 2, 3]
    assert sum(q.message_count for q in expected) == 300


def test_units_and_store_times_by_queue_offset(store: tuple[Path, list[Written]]) -> None:
    store_dir, written = store
    for (topic, queue_id), results in expected_queues(written).items():
        offsets = queue_offsets(store_dir, topic, queue_id)
        assert (offsets.min_offset, offsets.max_offset) == (0, len(results))
        for offset in (0, len(results) // 2, len(results) - 1):
            result = results[offset]
            assert read_unit(store_dir, topic, queue_id, offset) == (
                result.physical_offset,
                result.size,
                read_unit(store_dir, topic, queue_id, offset)[2],  # type: ignore[index]
            )
            stamp = store_timestamp_at_queue_offset(store_dir, topic, queue_id, offset)
            assert stamp == result.store_timestamp
        assert store_timestamp_at_queue_offset(store_dir, topic, queue_id, len(results)) is None
        assert read_unit(store_dir, topic, queue_id, -1) is None
    assert queue_offsets(store_dir, "NoSuchTopic", 0) == QueueOffsets("NoSuchTopic", 0, 0, 0)


def test_min_offset_skips_units_of_deleted_commit_log_files(
    store: tuple[Path, list[Written]],
) -> None:
    store_dir, written = store
    commit_log_files(store_dir)[0].path.unlink()  # what expiry does to the oldest file
    assert commit_log_min_offset(store_dir) == FILE_SIZE
    for (topic, queue_id), results in expected_queues(written).items():
        first_kept = next(i for i, r in enumerate(results) if r.physical_offset >= FILE_SIZE)
        offsets = queue_offsets(store_dir, topic, queue_id)
        assert offsets == QueueOffsets(topic, queue_id, first_kept, len(results))
        assert store_timestamp_at_queue_offset(store_dir, topic, queue_id, 0) is None


def write_units(path: Path, units: list[tuple[int, int, int]], file_units: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = b"".join(CQ_UNIT_STRUCT.pack(*u) for u in units)
    path.write_bytes(data + bytes(file_units * 20 - len(data)))


def test_pre_blank_units_and_a_partly_zero_last_file(tmp_path: Path) -> None:
    queue_dir = tmp_path / "consumequeue" / "T" / "0"
    blank = (0, PRE_BLANK_SIZE, 0)
    # A queue that started at offset 3: three pre-blank units, then real ones, two files.
    write_units(queue_dir / f"{0:020d}", [blank] * 3 + [(100 * i, 100, 0) for i in range(7)], 10)
    write_units(queue_dir / f"{200:020d}", [(700 + 100 * i, 100, 0) for i in range(4)], 10)
    assert queue_offsets(tmp_path, "T", 0, commit_log_min=0) == QueueOffsets("T", 0, 3, 14)
    assert queue_offsets(tmp_path, "T", 0, commit_log_min=250) == QueueOffsets("T", 0, 6, 14)
    assert queue_offsets(tmp_path, "T", 0, commit_log_min=10_000) == QueueOffsets("T", 0, 14, 14)
    assert read_unit(tmp_path, "T", 0, 1) == blank
    assert store_timestamp_at_queue_offset(tmp_path, "T", 0, 1) is None
    assert read_unit(tmp_path, "T", 0, 14) is None


def test_a_torn_last_unit_is_not_counted(tmp_path: Path) -> None:
    queue_dir = tmp_path / "consumequeue" / "T" / "1"
    units = [(100 * i, 100, 0) for i in range(5)]
    write_units(queue_dir / f"{0:020d}", [*units, (600, 0, 0)], 10)
    assert queue_offsets(tmp_path, "T", 1, commit_log_min=0).max_offset == 5


# --------------------------------------------------------------------------- config files


def test_consumer_offsets_and_commit_times(tmp_path: Path) -> None:
    clock = iter([1_000, 2_000, 3_000])
    manager = ConsumerOffsetManager(tmp_path / "config", now_ms=lambda: next(clock))
    manager.commit_offset("g1", "Orders", 0, 12)
    manager.commit_offset("g1", "Orders", 3, 4)
    manager.commit_offset("g2", "%RETRY%g2", 0, 1)
    manager.persist()
    offsets = read_consumer_offsets(tmp_path)
    assert offsets.offsets == {("Orders", "g1"): {0: 12, 3: 4}, ("%RETRY%g2", "g2"): {0: 1}}
    assert offsets.commit_times == {
        ("Orders", "g1"): {0: 1_000, 3: 2_000},
        ("%RETRY%g2", "g2"): {0: 3_000},
    }
    assert offsets.groups() == ["g1", "g2"]
    assert offsets.topics_of("g1") == ["Orders"]


def test_consumer_offsets_in_rocketmq_dialect_and_from_the_backup(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.mkdir()
    (config / "consumerOffset.json").write_text('{"offsetTable":{"T@g":{0:6,1:3}}}')
    assert read_consumer_offsets(tmp_path).offsets == {("T", "g"): {0: 6, 1: 3}}
    (config / "consumerOffset.json.bak").write_text('{"offsetTable":{"T@g":{0:5}}}')
    (config / "consumerOffset.json").write_text("")
    assert read_consumer_offsets(tmp_path).offsets == {("T", "g"): {0: 5}}
    assert read_consumer_offsets(tmp_path / "nothing").offsets == {}


def test_a_config_file_with_a_wrong_shape_is_an_error(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.mkdir()
    (config / "consumerOffset.json").write_text('{"offsetTable":{"T@g":{"0":"x"}}}')
    with pytest.raises(ConfigFileError, match=r"consumerOffset\.json"):
        read_consumer_offsets(tmp_path)
    (config / "consumerOffset.json").write_text('{"offsetTable":[]}')
    with pytest.raises(ConfigFileError, match="offsetTable"):
        read_consumer_offsets(tmp_path)


def test_groups_and_topics(tmp_path: Path) -> None:
    groups = SubscriptionGroupManager(tmp_path / "config")
    groups.put(SubscriptionGroupConfig("billing", retry_max_times=3))
    topics = TopicConfigManager(tmp_path / "config")
    topics.put(TopicConfig("Orders", read_queue_nums=4, write_queue_nums=4))
    assert read_subscription_groups(tmp_path)["billing"]["retryMaxTimes"] == 3
    assert read_topic_configs(tmp_path)["Orders"]["readQueueNums"] == 4
    assert read_subscription_groups(tmp_path / "nothing") == {}


# --------------------------------------------------------------------------- read-only


def test_readers_never_write_or_lock(store: tuple[Path, list[Written]]) -> None:
    store_dir, _written = store
    ConsumerOffsetManager(store_dir / "config").persist()
    before = file_digests(store_dir)
    with MessageStore.open(store_dir, CONFIG) as message_store:  # the server holds the lock
        message_store.put([Message("Orders", b"while reading")])
        locked = file_digests(store_dir)
        list(iter_store_records(store_dir, check_crc=True))
        all_queue_offsets(store_dir)
        store_timestamp_at_queue_offset(store_dir, "Orders", 0, 0)
        read_consumer_offsets(store_dir)
        read_subscription_groups(store_dir)
        for file in commit_log_files(store_dir):
            with map_read_only(file.path) as buffer:
                scan_stop(buffer)
        assert file_digests(store_dir) == locked
    after_close = file_digests(store_dir)
    list(iter_store_records(store_dir))
    all_queue_offsets(store_dir)
    assert file_digests(store_dir) == after_close
    assert set(before) <= set(after_close)


def test_reads_follow_a_store_that_is_being_written(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    rng = random.Random(5)
    with MessageStore.open(store_dir, CONFIG) as message_store:
        results = [message_store.put([make_message(rng, i)])[0] for i in range(150)]
        seen = [r.commit_log_offset for r in iter_store_records(store_dir)]
        assert seen == [r.physical_offset for r in results]
        results += [message_store.put([make_message(rng, i)])[0] for i in range(150, 260)]
        seen = [r.commit_log_offset for r in iter_store_records(store_dir)]
        assert seen == [r.physical_offset for r in results]


def test_check_record_agrees_with_the_walk(store: tuple[Path, list[Written]]) -> None:
    store_dir, _ = store
    for file in commit_log_files(store_dir):
        with map_read_only(file.path) as buffer:
            for position, size in scan_records(buffer, check_crc=True):
                check = check_record(buffer, position, file.size, check_crc=True)
                assert (check.kind, check.size) == (RecordKind.MESSAGE, size)
