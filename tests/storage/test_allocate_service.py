"""AllocateMappedFileService: files prepared ahead, taken at a roll, cleaned up, crash-safe."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import storage.mapped_file
import storage.mapped_file_queue
from storage.allocate_service import AllocateMappedFileService
from storage.commit_log import PREFAULT_AHEAD
from storage.mapped_file import MappedFile, offset_to_file_name
from storage.mapped_file_queue import MappedFileQueue
from storage.message_store import MessageStore
from storage.record.message import Message
from storage.store_types import StoreConfig

SIZE = 4096
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def service(tmp_path: Path) -> Iterator[AllocateMappedFileService]:
    allocator = AllocateMappedFileService(tmp_path / "prepared")
    yield allocator
    allocator.shutdown()


@pytest.fixture
def inline_creations(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Paths of the files a MappedFileQueue created itself (not taken from the service)."""
    created: list[Path] = []
    real = storage.mapped_file.MappedFile

    def counting(
        path: Path, file_size: int, *, create: bool = False, sparse: bool = False
    ) -> MappedFile:
        if create:
            created.append(path)
        return real(path, file_size, create=create, sparse=sparse)

    monkeypatch.setattr(storage.mapped_file_queue, "MappedFile", counting)
    return created


def roll(queue: MappedFileQueue) -> MappedFile:
    """Fill the last file (if any) and return the file the next append goes to."""
    last = queue.last_file()
    if last is not None:
        assert last.append(b"x" * last.remaining)
    mapped = queue.get_last_mapped_file()
    assert mapped is not None
    return mapped


def listing(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir()) if directory.exists() else []


# ---------------------------------------------------------------- prepare and take


def test_a_roll_takes_the_file_prepared_ahead(
    tmp_path: Path, service: AllocateMappedFileService, inline_creations: list[Path]
) -> None:
    directory = tmp_path / "log"
    queue = MappedFileQueue(directory, SIZE, service)
    queue.load()
    roll(queue)  # file 0: the first of a queue asks for nothing
    service.wait_until_idle()
    assert service.prepared_paths == []
    roll(queue)  # file 1, made inline, asks for file 2
    service.wait_until_idle()
    assert service.prepared_paths == [directory / offset_to_file_name(2 * SIZE)]
    assert listing(directory) == [offset_to_file_name(0), offset_to_file_name(SIZE)]
    third = roll(queue)
    assert third.path == directory / offset_to_file_name(2 * SIZE)
    assert third.file_from_offset == 2 * SIZE
    assert inline_creations == [directory / offset_to_file_name(n * SIZE) for n in (0, 1)]
    assert third.append(b"written")
    assert third.read(0, 7) == b"written"
    assert third.flush(0) == 7
    assert (directory / offset_to_file_name(2 * SIZE)).read_bytes()[:7] == b"written"
    queue.close()
    assert listing(directory) == [offset_to_file_name(n * SIZE) for n in range(3)]
    assert listing(tmp_path / "prepared") == [], "file 3 was prepared and is deleted on close"


def test_without_a_service_every_file_is_made_inline(
    tmp_path: Path, inline_creations: list[Path]
) -> None:
    queue = MappedFileQueue(tmp_path / "log", SIZE)
    queue.load()
    for _ in range(3):
        roll(queue)
    assert len(inline_creations) == 3
    queue.close()


def test_a_request_not_started_is_withdrawn_and_one_in_progress_is_awaited(
    tmp_path: Path, service: AllocateMappedFileService, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = threading.Event()
    started = threading.Event()
    real_prepare = service._prepare

    def gated(request: object) -> None:
        started.set()
        gate.wait()
        real_prepare(request)  # type: ignore[arg-type]

    monkeypatch.setattr(service, "_prepare", gated)
    first, second = tmp_path / offset_to_file_name(0), tmp_path / offset_to_file_name(SIZE)
    service.request(first, SIZE)
    started.wait()
    service.request(second, SIZE)  # waits in line behind the gated one
    assert service.take(second, SIZE) is None, "withdrawn: the caller creates it"
    taken: list[MappedFile | None] = []
    taker = threading.Thread(target=lambda: taken.append(service.take(first, SIZE)))
    taker.start()
    gate.set()
    taker.join()
    assert taken[0] is not None and taken[0].path == first and first.stat().st_size == SIZE
    taken[0].destroy()
    service.wait_until_idle()
    assert not second.exists()
    assert listing(tmp_path / "prepared") == []


def test_a_file_of_another_size_or_an_existing_target_is_not_taken(
    tmp_path: Path, service: AllocateMappedFileService
) -> None:
    target = tmp_path / offset_to_file_name(0)
    service.request(target, SIZE)
    service.wait_until_idle()
    assert service.take(target, 2 * SIZE) is None
    service.request(target, SIZE)
    service.wait_until_idle()
    target.write_bytes(b"someone else's")
    assert service.take(target, SIZE) is None
    assert target.read_bytes() == b"someone else's"
    assert listing(tmp_path / "prepared") == []


def test_shutdown_deletes_prepared_files_and_later_requests_are_ignored(
    tmp_path: Path, service: AllocateMappedFileService
) -> None:
    service.request(tmp_path / offset_to_file_name(0), SIZE)
    service.request(tmp_path / offset_to_file_name(SIZE), SIZE)
    service.wait_until_idle()
    assert len(listing(tmp_path / "prepared")) == 2
    service.shutdown()
    assert listing(tmp_path / "prepared") == []
    service.request(tmp_path / offset_to_file_name(2 * SIZE), SIZE)
    assert service.take(tmp_path / offset_to_file_name(2 * SIZE), SIZE) is None


def test_leftovers_of_a_crashed_run_are_deleted_when_the_worker_starts(tmp_path: Path) -> None:
    scratch = tmp_path / "prepared"
    scratch.mkdir()
    (scratch / f"00000003-{offset_to_file_name(SIZE)}").write_bytes(bytes(SIZE))
    allocator = AllocateMappedFileService(scratch)
    try:
        target = tmp_path / offset_to_file_name(0)
        allocator.request(target, SIZE)
        allocator.wait_until_idle()
        assert listing(scratch) == [f"00000000-{offset_to_file_name(0)}"]
    finally:
        allocator.shutdown()


def test_truncating_or_destroying_a_queue_discards_its_prepared_file(
    tmp_path: Path, service: AllocateMappedFileService
) -> None:
    queue = MappedFileQueue(tmp_path / "log", SIZE, service)
    queue.load()
    roll(queue)
    roll(queue)  # a roll to file 1 asks for file 2
    service.wait_until_idle()
    assert len(service.prepared_paths) == 1
    queue.truncate_dirty_files(SIZE // 2)  # drops file 1: the file after it is not wanted any more
    assert service.prepared_paths == []
    roll(queue)
    service.wait_until_idle()
    assert len(service.prepared_paths) == 1
    queue.destroy()
    assert service.prepared_paths == []
    assert listing(tmp_path / "prepared") == []


def test_a_sparse_queue_creates_its_files_itself(
    tmp_path: Path, service: AllocateMappedFileService, inline_creations: list[Path]
) -> None:
    queue = MappedFileQueue(tmp_path / "consumequeue", SIZE, service, sparse=True)
    queue.load()
    for _ in range(3):
        roll(queue)
    service.wait_until_idle()
    assert service.prepared_paths == []
    assert [p.name for p in inline_creations] == [offset_to_file_name(n * SIZE) for n in range(3)]
    queue.close()


# ---------------------------------------------------------------- load and crash


def test_load_drops_trailing_files_that_were_never_written(tmp_path: Path) -> None:
    directory = tmp_path / "log"
    directory.mkdir()
    (directory / offset_to_file_name(0)).write_bytes(b"\x01" + bytes(SIZE - 1))
    (directory / offset_to_file_name(SIZE)).write_bytes(bytes(SIZE))
    (directory / offset_to_file_name(2 * SIZE)).write_bytes(bytes(SIZE))
    queue = MappedFileQueue(directory, SIZE)
    queue.load()
    assert [f.file_from_offset for f in queue.files] == [0]
    assert listing(directory) == [offset_to_file_name(0)]
    queue.close()


def test_load_keeps_a_never_written_first_file(tmp_path: Path) -> None:
    directory = tmp_path / "log"
    directory.mkdir()
    (directory / offset_to_file_name(5 * SIZE)).write_bytes(bytes(SIZE))
    queue = MappedFileQueue(directory, SIZE)
    queue.load()
    assert [f.file_from_offset for f in queue.files] == [5 * SIZE], "it fixes the start offset"
    queue.close()


CRASH_SCRIPT = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    from storage import Message, MessageStore, StoreConfig
    config = StoreConfig(commit_log_file_size=4096, consume_queue_units_per_file=10)
    store = MessageStore.open(Path(sys.argv[1]), config)
    for i in range(40):
        store.put([Message("T", b"%05d" % i + bytes(400))])[0]
    store.allocate_service.wait_until_idle()
    print(store.commit_log.max_offset, len(list(Path(sys.argv[1], "prepared").iterdir())))
    sys.stdout.flush()
    os._exit(0)  # no close: the prepared files stay behind, as after kill -9
    """
)


def test_a_crash_with_prepared_files_present_recovers_every_message(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    child = subprocess.run(
        [sys.executable, "-c", CRASH_SCRIPT, str(store_dir)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    max_offset, prepared = (int(v) for v in child.stdout.split())
    assert prepared >= 1, "the CommitLog had its next file ready"
    config = StoreConfig(commit_log_file_size=4096, consume_queue_units_per_file=10)
    with MessageStore.open(store_dir, config) as store:
        assert store.commit_log.max_offset == max_offset
        assert store.max_offset_in_queue("T", 0) == 40
        bodies = []
        offset = 0
        while offset < 40:
            result = store.get_message("g", "T", 0, offset)
            bodies += [m.body[:5] for m in result.messages]
            offset = result.next_begin_offset
        assert bodies == [b"%05d" % i for i in range(40)]
        assert store.check() == []
        assert listing(store_dir / "prepared") == [], "leftovers go when the store loads"
        store.put([Message("T", b"after")])
        assert store.max_offset_in_queue("T", 0) == 41
    with MessageStore.open(store_dir, config) as store:
        assert store.max_offset_in_queue("T", 0) == 41


def test_the_worker_prefaults_pages_ahead_of_the_write_position(tmp_path: Path) -> None:
    config = StoreConfig(commit_log_file_size=16 * 1024 * 1024, message_index_enable=False)
    with MessageStore.open(tmp_path / "store", config) as store:
        first = store.put([Message("T", b"x" * 1000)])[0]
        for _ in range(49):
            store.put([Message("T", b"x" * 1000)])
        store.put([Message("T", b"y" * 1000) for _ in range(20)])
        store.allocate_service.wait_until_idle()
        active = store.commit_log.queue.files[-1]
        # Asked for PREFAULT_AHEAD past the first record; asked again only half way there.
        assert active.prefaulted_position == first.size + PREFAULT_AHEAD
        assert active.prefault_next == first.size + PREFAULT_AHEAD // 2
        worker = store.allocate_service._thread
        assert worker is not None and worker.native_id is not None
        assert os.getpriority(os.PRIO_PROCESS, worker.native_id) == 19  # out of the loop's way
        assert [len(m.body) for m in store.get_message("g", "T", 0, 0, 100).messages] == [1000] * 32


def test_a_file_prefaulted_to_its_end_is_not_asked_again(tmp_path: Path) -> None:
    config = StoreConfig(commit_log_file_size=1024 * 1024, message_index_enable=False)
    with MessageStore.open(tmp_path / "store", config) as store:
        store.put([Message("T", b"x" * 1000)])
        store.allocate_service.wait_until_idle()
        active = store.commit_log.queue.files[-1]
        assert active.prefaulted_position == active.file_size
        assert active.prefault_next == active.file_size + 1
