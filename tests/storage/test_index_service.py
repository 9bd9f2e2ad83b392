"""index_service: the store's index files, key lookups through the store, rebuilds."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from storage import Message, MessageStore, StoreConfig
from storage.checkpoint import StoreCheckpoint
from storage.errors import StorageError
from storage.index_file import IndexFileSizeError
from storage.index_service import IndexService
from storage.record.java_hash import java_string_hash


def small_config(**overrides: object) -> StoreConfig:
    values: dict[str, object] = {
        "commit_log_file_size": 64 * 1024,
        "consume_queue_units_per_file": 50,
        "max_hash_slot_num": 100,
        "max_index_num": 400,
    }
    values.update(overrides)
    return StoreConfig(**values)  # type: ignore[arg-type]


def test_query_by_key_and_by_uniq_key(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path, small_config()) as store:
        for i in range(30):
            store.put(
                [
                    Message(
                        "Orders",
                        f"order {i}".encode(),
                        queue_id=i % 4,
                        properties={
                            "KEYS": f"order-{i} customer-{i % 3}",
                            "UNIQ_KEY": f"U{i:031d}",
                        },
                    )
                ]
            )
        store.put([Message("Other", b"same key, other topic", properties={"KEYS": "order-5"})])
        assert [m.body for m in store.query_message("Orders", "order-5")] == [b"order 5"]
        by_customer = store.query_message("Orders", "customer-1")
        assert [m.body for m in by_customer] == [f"order {i}".encode() for i in range(1, 30, 3)]
        assert [m.body for m in store.query_message("Orders", f"U{7:031d}")] == [b"order 7"]
        assert store.query_message("Orders", "nobody") == []


def test_hash_collisions_are_filtered_by_the_real_key(tmp_path: Path) -> None:
    assert java_string_hash("Aa") == java_string_hash("BB")
    with MessageStore.open(tmp_path, small_config()) as store:
        store.put([Message("T", b"Aa", properties={"KEYS": "Aa"})])
        store.put([Message("T", b"BB", properties={"KEYS": "BB"})])
        assert [m.body for m in store.query_message("T", "Aa")] == [b"Aa"]
        assert [m.body for m in store.query_message("T", "BB")] == [b"BB"]


def test_query_respects_the_time_range_and_the_cap_of_64(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path, small_config(max_index_num=2000)) as store:
        results = [
            store.put([Message("T", b"x", properties={"KEYS": "hot"})])[0] for _ in range(100)
        ]
        assert len(store.query_message("T", "hot", max_num=1000)) == 64
        first = results[0].store_timestamp
        assert store.query_message("T", "hot", begin=0, end=first - 1000) == []


def test_full_index_files_roll_and_queries_span_them(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path, small_config(max_index_num=20)) as store:
        for i in range(100):
            store.put([Message("T", str(i).encode(), properties={"KEYS": f"k{i}"})])
        assert store.index_service is not None
        assert len(store.index_service.files) >= 5
        assert store.checkpoint is not None and store.checkpoint.index_msg_timestamp > 0
        for i in (0, 37, 99):
            assert [m.body for m in store.query_message("T", f"k{i}")] == [str(i).encode()]


@pytest.mark.parametrize("catch_up_on_open", [True, False])
def test_index_is_rebuilt_after_an_unclean_exit(tmp_path: Path, catch_up_on_open: bool) -> None:
    with MessageStore.open(tmp_path, small_config(max_index_num=2000)) as store:
        for i in range(200):
            store.put([Message("T", str(i).encode(), properties={"KEYS": f"k{i}"})])
    (tmp_path / "abort").touch()
    config = small_config(max_index_num=2000, index_catch_up_on_open=catch_up_on_open)
    with MessageStore.open(tmp_path, config) as store:
        if not catch_up_on_open:
            assert store.index_behind_bytes > 0
            assert store.query_message("T", "k150") == []
            while not store.catch_up_index(max_records=50):
                pass
        assert store.index_behind_bytes == 0
        assert [m.body for m in store.query_message("T", "k150")] == [b"150"]
        later = store.put([Message("T", b"later", properties={"KEYS": "k-later"})])[0]
        assert [m.physical_offset for m in store.query_message("T", "k-later")] == [
            later.physical_offset
        ]


# ---------------------------------------------------------------- geometry of existing files

ROCKETMQ_INDEX_SIZE = 420_000_040  # 40 + 5,000,000 * 4 + 20,000,000 * 20


def write_rocketmq_index(path: Path, keys: dict[str, int], begin_ms: int) -> None:
    """A sparse index file of RocketMQ's default size holding ``keys`` (key -> offset),
    written byte by byte from reference §7; one second between entries."""
    slots, entries_at = 5_000_000, 40 + 5_000_000 * 4
    with open(path, "w+b") as file:
        file.truncate(ROCKETMQ_INDEX_SIZE)
        for number, (key, offset) in enumerate(keys.items(), start=1):
            key_hash = abs(java_string_hash(key))
            file.seek(40 + key_hash % slots * 4)
            previous = int.from_bytes(file.read(4), "big")
            file.seek(40 + key_hash % slots * 4)
            file.write(number.to_bytes(4, "big"))
            file.seek(entries_at + number * 20)
            file.write(struct.pack(">iqii", key_hash, offset, number - 1, previous))
        file.seek(0)
        count = len(keys)
        last_offset = list(keys.values())[-1]
        end_ms = begin_ms + (count - 1) * 1000
        header = (begin_ms, end_ms, next(iter(keys.values())), last_offset, count, count + 1)
        file.write(struct.pack(">qqqqii", *header))


def test_an_index_file_of_rocketmq_default_size_opens_with_its_own_geometry(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "index"
    directory.mkdir()
    begin = 1_700_000_000_000
    keys = {"Orders#k1": 100, "Orders#k2": 300, "Orders#UNIQ": 500}
    write_rocketmq_index(directory / "20231114221320000", keys, begin)
    checkpoint = StoreCheckpoint(tmp_path / "checkpoint")
    service = IndexService(directory, 100, 400, checkpoint)  # configured: a tiny geometry
    try:
        service.load(last_exit_ok=True)
        (index,) = service.files
        assert (index.hash_slot_num, index.max_index_num) == (5_000_000, 20_000_000)
        assert index.file_size == ROCKETMQ_INDEX_SIZE
        assert service.query("Orders", "k2", 10, begin, begin + 10_000) == [300]
        assert service.query("Orders", "UNIQ", 10, begin, begin + 10_000) == [500]
        service.build_index("Orders", 700, begin + 5_000, "k1", None)  # appends to that file
        assert sorted(service.query("Orders", "k1", 10, begin, begin + 10_000)) == [100, 700]
        assert len(service.files) == 1 and not index.is_full
    finally:
        service.close()
        checkpoint.close()
    size_on_disk = (directory / "20231114221320000").stat().st_blocks * 512
    assert size_on_disk < 64 * 1024 * 1024, "the file stayed sparse"


def test_an_index_file_of_another_size_is_a_clear_startup_error(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    (store_dir / "index").mkdir(parents=True)
    with open(store_dir / "index" / "20231114221320000", "wb") as file:
        file.truncate(12_345)
    with pytest.raises(IndexFileSizeError) as raised:
        MessageStore.open(store_dir, small_config())
    message = str(raised.value)
    for needle in ("max_hash_slot_num=100", "max_index_num=400", "12345", "8440", "420000040"):
        assert needle in message
    assert isinstance(raised.value, StorageError)
    with MessageStore.open(store_dir, small_config(message_index_enable=False)):
        pass  # nothing else was touched


def test_batches_roll_index_files_and_queries_span_them(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path, small_config(max_index_num=20)) as store:
        for start in range(0, 100, 25):
            batch = [
                Message(
                    "T", str(i).encode(), properties={"KEYS": f"k{i} x{i}", "UNIQ_KEY": f"u{i}"}
                )
                for i in range(start, start + 25)
            ]
            store.put(batch)
        assert store.index_service is not None
        assert len(store.index_service.files) >= 10
        for i in (0, 37, 99):
            for key in (f"k{i}", f"x{i}", f"u{i}"):
                assert [m.body for m in store.query_message("T", key)] == [str(i).encode()]


def test_an_index_file_a_crash_cut_short_is_dropped_and_rebuilt(tmp_path: Path) -> None:
    """A power cut right after an index file was made keeps its name, not its size: after
    an unclean exit such a file (of no index size, nothing but zeros) is dropped."""
    with MessageStore.open(tmp_path, small_config()) as store:
        store.put([Message("T", b"kept", properties={"KEYS": "k"})])
    (tmp_path / "index" / "99991231235959000").write_bytes(b"")
    (tmp_path / "index" / "99991231235959001").write_bytes(b"\0" * 100)
    (tmp_path / "abort").touch()
    with MessageStore.open(tmp_path, small_config()) as store:
        assert sorted(p.name for p in (tmp_path / "index").iterdir())[-1] < "9999"
        assert [m.body for m in store.query_message("T", "k")] == [b"kept"]
