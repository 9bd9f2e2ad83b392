"""truncation: a CommitLog cut back to an offset, and what reopening the store makes of it."""

from __future__ import annotations

from pathlib import Path

from storage.epoch_file import EpochEntry, EpochFile
from storage.mapped_file import offset_to_file_name
from storage.record.message import GetMessageStatus
from storage.truncation import truncate_commit_log
from tests.storage.conftest import COMMIT_LOG_FILE_SIZE, OpenStore, fill_two_queues, message


def test_truncation_and_reopen_trim_queues(open_store: OpenStore, store_dir: Path) -> None:
    store = open_store()
    fill_two_queues(store, 20)
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
    result = reopened.put([message("TopicA", b"new", queue_id=0)])[0]
    assert (result.physical_offset, result.queue_offset) == (cut, 5)


def test_truncation_at_a_file_start_deletes_that_file(
    open_store: OpenStore, store_dir: Path
) -> None:
    store = open_store()
    fill_two_queues(store, 60)
    store.close()
    truncate_commit_log(store_dir, COMMIT_LOG_FILE_SIZE)
    names = sorted(p.name for p in (store_dir / "commitlog").iterdir())
    assert names == [offset_to_file_name(0)]
    reopened = open_store()
    assert reopened.max_physical_offset <= COMMIT_LOG_FILE_SIZE
    assert reopened.check() == []
