"""store_types: RocketMQ's defaults, and what a dispatch request derives."""

from __future__ import annotations

from storage.record.layout import TRANSACTION_COMMIT_TYPE, TRANSACTION_PREPARED_TYPE
from storage.store_types import DispatchRequest, FlushDiskType, StoreConfig


def test_the_defaults_are_rocketmqs() -> None:
    config = StoreConfig()
    assert config.commit_log_file_size == 1024**3
    assert config.consume_queue_units_per_file * 20 == 6_000_000
    assert config.max_message_size == 4 * 1024 * 1024
    assert config.flush_disk_type is FlushDiskType.ASYNC_FLUSH
    assert (config.max_transfer_count_in_memory, config.max_transfer_bytes_in_memory) == (
        32,
        262144,
    )
    assert (config.max_transfer_count_in_disk, config.max_transfer_bytes_in_disk) == (8, 65536)
    assert config.access_message_in_memory_max_ratio == 40


def test_a_dispatch_request_ends_after_its_record_and_skips_transaction_halves() -> None:
    request = DispatchRequest("T", 0, 4096, 158, 0, 1, 7, None, None, TRANSACTION_COMMIT_TYPE)
    assert request.end_offset == 4096 + 158 and request.is_dispatchable
    request.sys_flag = TRANSACTION_PREPARED_TYPE
    assert not request.is_dispatchable
