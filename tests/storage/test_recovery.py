"""Recovery from damaged files: torn tails, garbage, zeroed pages, flipped bytes; the lock."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from storage import Message, MessageStore, StoreConfig, StoreLoadError, StoreLockedError
from storage.record.layout import RECORD_HEADER_V4, TRANSACTION_COMMIT_TYPE

CONFIG = StoreConfig(commit_log_file_size=4096, consume_queue_units_per_file=10)


def fill(store_dir: Path, count: int, body_size: int = 150) -> list[int]:
    """Write ``count`` messages to queue 0 of topic T; returns their physical offsets."""
    with MessageStore.open(store_dir, CONFIG) as store:
        return [
            store.put([Message("T", bytes([i % 251]) * body_size)])[0].physical_offset
            for i in range(count)
        ]


def commit_log_files(store_dir: Path) -> list[Path]:
    return sorted((store_dir / "commitlog").iterdir())


def patch_bytes(path: Path, position: int, data: bytes) -> None:
    with path.open("r+b") as f:
        f.seek(position)
        f.write(data)


def locate(store_dir: Path, physical_offset: int) -> tuple[Path, int]:
    return (
        store_dir / "commitlog" / f"{physical_offset - physical_offset % 4096:020d}",
        physical_offset % 4096,
    )


def reopen_count(store_dir: Path, abnormal: bool = False) -> tuple[int, list[str], list[str]]:
    """Queue size after reopening, the recovery findings and what check() says."""
    if abnormal:
        (store_dir / "abort").touch()
    with MessageStore.open(store_dir, CONFIG) as store:
        result = store.get_message("g", "T", 0, 0, 1000)
        count = store.max_offset_in_queue("T", 0)
        assert result.min_offset == 0
        return count, store.recovery_findings, store.check()


@pytest.mark.parametrize(
    "abnormal", [pytest.param(False, id="normal"), pytest.param(True, id="abnormal")]
)
def test_record_cut_mid_way_is_truncated_to_the_last_valid_record(
    tmp_path: Path, abnormal: bool
) -> None:
    offsets = fill(tmp_path, 30)
    path, position = locate(tmp_path, offsets[-1])
    # Zero the second half of the last record: a write torn by a crash.
    patch_bytes(path, position + 100, bytes(4096 - position - 100))
    count, findings, problems = reopen_count(tmp_path, abnormal)
    assert count == 29
    assert any("truncated" in f for f in findings)
    assert problems == findings


def test_garbage_after_the_last_record_is_cut(tmp_path: Path) -> None:
    offsets = fill(tmp_path, 12)
    path, position = locate(tmp_path, offsets[-1])
    end = position + 150 + 91 + 1  # record size: 91 overhead + 150 body + topic "T"
    patch_bytes(path, end, b"\xde\xad\xbe\xef" * 8)
    count, findings, _ = reopen_count(tmp_path)
    assert count == 12
    assert any("unknown magic" in f for f in findings)
    with MessageStore.open(tmp_path, CONFIG) as store:
        result = store.put([Message("T", b"after")])[0]
        assert result.queue_offset == 12
        assert result.physical_offset == offsets[-1] + 242


def test_zeroed_page_ends_the_log_at_the_last_record_before_it(tmp_path: Path) -> None:
    offsets = fill(tmp_path, 60)
    files = commit_log_files(tmp_path)
    last = files[-1]
    start = int(last.name)
    survivors = [o for o in offsets if o < start]
    patch_bytes(last, 0, bytes(4096))
    count, findings, problems = reopen_count(tmp_path)
    assert count == len(survivors)
    assert problems == findings
    with MessageStore.open(tmp_path, CONFIG) as store:
        assert store.commit_log.max_offset <= start


def test_flipped_byte_in_an_old_file_is_found_by_abnormal_recovery(tmp_path: Path) -> None:
    offsets = fill(tmp_path, 60)
    victim = offsets[3]
    path, position = locate(tmp_path, victim)
    body_at = position + RECORD_HEADER_V4.size + 10
    with path.open("r+b") as f:
        f.seek(body_at)
        byte = f.read(1)[0]
        f.seek(body_at)
        f.write(bytes([byte ^ 0xFF]))
    count, findings, problems = reopen_count(tmp_path, abnormal=True)
    assert count == 3, "recovery keeps the records before the corrupt one"
    assert any("CRC" in f for f in findings)
    assert problems and "CRC" in problems[0]


def test_normal_recovery_after_clean_close_keeps_everything(tmp_path: Path) -> None:
    fill(tmp_path, 50)
    count, findings, problems = reopen_count(tmp_path)
    assert (count, findings, problems) == (50, [], [])


def test_recovery_maps_no_idle_queue_and_their_messages_stay_readable(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path, CONFIG) as store:
        for n in range(12):  # a few units per queue, the last file of each partly filled
            for queue_id in range(3):
                store.put([Message(f"T{n}", b"%d-%d" % (n, queue_id), queue_id=queue_id)])
    with MessageStore.open(tmp_path, CONFIG) as store:
        files = [f for queue in store.consume_queue_table for f in queue.queue.files]
        assert len(files) == 36
        assert not [f for f in files if "buffer" in vars(f)], "found ends with pread only"
        assert store.max_offset_in_queue("T7", 2) == 1
        assert [m.body for m in store.get_message("g", "T7", 2, 0).messages] == [b"7-2"]
        store.put([Message("T7", b"after", queue_id=2)])
        assert [m.body for m in store.get_message("g", "T7", 2, 0).messages] == [b"7-2", b"after"]
        assert sum("buffer" in vars(f) for f in files) == 1, "only the queue used"


def test_deleted_consume_queues_are_rebuilt_by_reput(tmp_path: Path) -> None:
    fill(tmp_path, 40)
    for path in sorted((tmp_path / "consumequeue" / "T" / "0").iterdir()):
        path.unlink()
    count, _, problems = reopen_count(tmp_path)
    assert count == 40
    assert problems == []


def test_consume_queue_beyond_the_commit_log_is_truncated(tmp_path: Path) -> None:
    offsets = fill(tmp_path, 30)
    path, position = locate(tmp_path, offsets[25])
    patch_bytes(path, position, bytes(4096 - position))
    for later in commit_log_files(tmp_path):
        if int(later.name) > offsets[25]:
            later.write_bytes(bytes(4096))
    count, _, problems = reopen_count(tmp_path)
    assert count == 25
    assert problems == []


def test_zero_length_last_file_from_interrupted_preallocation_is_removed(tmp_path: Path) -> None:
    offsets = fill(tmp_path, 20)
    last = commit_log_files(tmp_path)[-1]
    empty = tmp_path / "commitlog" / f"{int(last.name) + 4096:020d}"
    empty.touch()
    count, _, _ = reopen_count(tmp_path)
    assert count == 20
    assert not empty.exists()
    assert offsets


def test_file_of_the_wrong_size_is_a_clear_error(tmp_path: Path) -> None:
    fill(tmp_path, 20)
    first = commit_log_files(tmp_path)[0]
    with first.open("r+b") as f:
        f.truncate(1000)
    with pytest.raises(StoreLoadError, match=first.name):
        MessageStore.open(tmp_path, CONFIG)


def test_abort_file_marks_an_unclean_exit(tmp_path: Path) -> None:
    store = MessageStore.open(tmp_path, CONFIG)
    assert (tmp_path / "abort").exists()
    store.close()
    assert not (tmp_path / "abort").exists()


def test_second_store_on_a_locked_directory_fails_with_a_clear_error(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path, CONFIG):
        with pytest.raises(StoreLockedError, match="in use"):
            MessageStore.open(tmp_path, CONFIG)
        code = (
            "import sys\n"
            "from storage import MessageStore, StoreLockedError\n"
            "try:\n"
            f"    MessageStore.open({str(tmp_path)!r})\n"
            "except StoreLockedError as exc:\n"
            "    print(exc); sys.exit(3)\n"
        )
        other = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
        )
        assert other.returncode == 3
        assert str(tmp_path) in other.stdout and "in use" in other.stdout


@pytest.mark.parametrize(
    "abnormal", [pytest.param(False, id="clean"), pytest.param(True, id="crash")]
)
def test_a_deleted_topic_stays_deleted_across_restarts(tmp_path: Path, abnormal: bool) -> None:
    with MessageStore.open(tmp_path, CONFIG) as store:
        store.put([Message("Kept", b"k")])
        for i in range(5):
            store.put([Message("Gone", f"g{i}".encode())])
        assert store.delete_topic("Gone")
        assert "Gone" not in store.topics()
    if abnormal:
        (tmp_path / "abort").touch()
        (tmp_path / "checkpoint").unlink()
    with MessageStore.open(tmp_path, CONFIG) as store:
        assert store.topics() == ["Kept"]
        again = store.put([Message("Gone", b"new life")])[0]
        assert again.queue_offset == 0
        assert [m.body for m in store.get_message("g", "Gone", 0, 0).messages] == [b"new life"]
        assert store.check() == []
    with MessageStore.open(tmp_path, CONFIG) as store:
        assert [m.body for m in store.get_message("g", "Gone", 0, 0).messages] == [b"new life"]


def test_a_file_begun_by_a_committed_transaction_does_not_start_abnormal_recovery(
    tmp_path: Path,
) -> None:
    """A committed transactional message keeps its half's earlier store time. As the first
    record of a file it must not pass for "begun before the checkpoint": recovery would skip
    the files before it."""
    offsets = fill(tmp_path, 20)
    with MessageStore.open(tmp_path, CONFIG) as store:
        last = store.look_message_by_offset(offsets[-1])
        assert last is not None
        checkpoint_time = last.store_timestamp
        # Fill the last file up with 93-byte records, so that the 101-byte commit (with the
        # 8-byte end-of-file blank) begins a new one.
        while 4096 - store.commit_log.max_offset % 4096 >= 101 + 8:
            store.put([Message("T", b"x")])
        commit = Message(
            "T", b"committed", sys_flag=TRANSACTION_COMMIT_TYPE, store_timestamp=checkpoint_time - 1
        )
        first = store.put([commit])[0]
        assert first.physical_offset % 4096 == 0
        assert (
            store.commit_log._first_record_before(store.commit_log.queue.files[-1], checkpoint_time)
            is False
        )
        assert (
            store.commit_log._first_record_before(store.commit_log.queue.files[0], checkpoint_time)
            is True
        )
