"""MappedFileQueue: the ordered, contiguous MappedFiles of one directory.

File ``k`` starts where file ``k-1`` ends; names are 20-digit start offsets. Only the last
file is written. Offsets here are absolute (file start + position).

With an :class:`~storage.allocate_service.AllocateMappedFileService`, a roll to file N asks
for file N+1 to be prepared in the service's thread, and the next roll takes it instead of
fallocating on the caller's thread (RocketMQ's pre-allocation). Without one (tests, tools)
every file is created inline. A prepared file lives in the service's scratch directory
until taken (renamed into place). A ``sparse`` queue (ConsumeQueues) creates its files
sparse (see :mod:`storage.mapped_file`) and inline: there is nothing to prepare ahead.
:meth:`load` deletes a zero-length last file and trailing full-size files that were never
written (a crash right after a roll).
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Final

from storage.errors import StoreLoadError
from storage.mapped_file import MappedFile, offset_to_file_name

if TYPE_CHECKING:
    from storage.allocate_service import AllocateMappedFileService

DELETE_FILES_BATCH_MAX = 10
# A file whose first bytes are zero was never written: appends start at position 0, and
# the first record (CommitLog) or unit (ConsumeQueue) is never all zeros.
_NEVER_WRITTEN_HEAD: Final = bytes(8)


class MappedFileQueue:
    """Fixed-size files in one directory, found by offset, rolled when full."""

    def __init__(
        self,
        directory: Path,
        file_size: int,
        allocator: AllocateMappedFileService | None = None,
        *,
        sparse: bool = False,
    ) -> None:
        self.directory = directory
        self.file_size = file_size
        self.allocator = None if sparse else allocator
        self.sparse = sparse
        self.files: list[MappedFile] = []
        self.flushed_where = 0
        self.store_timestamp = 0
        # Guards the file list against a flusher or cleaner thread; appends take no lock.
        self._files_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"MappedFileQueue({self.directory}, files={len(self.files)})"

    # ------------------------------------------------------------------ load

    def load(self) -> None:
        """Map every file; each must have exactly the configured size.

        Trailing files that were never written are removed: a zero-length last file (an
        interrupted creation, apache/rocketmq#6904) and full-size files whose head is zero
        (pre-allocated ahead of need, or created at a roll, when the process stopped). The
        first file is kept, whatever it holds: it fixes the queue's start offset. Any other
        wrong size is an error.
        """
        if self.allocator is not None:
            self.allocator.remove_leftovers()
        try:
            sizes = _file_sizes(self.directory)
        except FileNotFoundError:
            self.directory.mkdir(parents=True, exist_ok=True)
            sizes = {}
        paths = [self.directory / name for name in sorted(sizes)]
        if paths and sizes[paths[-1].name] == 0:
            paths[-1].unlink()
            paths.pop()
        for path in paths:
            size = sizes[path.name]
            if size != self.file_size:
                raise StoreLoadError(
                    f"{path}: file is {size} bytes but the configured file size is "
                    f"{self.file_size}; refusing to load (was the store created with another size?)"
                )
        while len(paths) > 1 and self._is_unused_next(paths[-2], paths[-1]):
            paths.pop().unlink()
        files = []
        for path in paths:
            mapped = MappedFile(path, self.file_size, sparse=self.sparse)
            mapped.set_positions(self.file_size)
            files.append(mapped)
        self._check_contiguous(files)
        self.files = files

    def _is_unused_next(self, previous: Path, path: Path) -> bool:
        """Whether ``path`` directly follows ``previous`` and was never written."""
        return int(path.name) == int(previous.name) + self.file_size and _never_written(path)

    def _check_contiguous(self, files: list[MappedFile]) -> None:
        for previous, current in itertools.pairwise(files):
            if current.file_from_offset != previous.file_end_offset:
                raise StoreLoadError(
                    f"{current.path}: expected a file starting at {previous.file_end_offset} "
                    "after the previous one; the directory has a gap"
                )

    # ------------------------------------------------------------------ find and create

    def first_file(self) -> MappedFile | None:
        files = self.files
        return files[0] if files else None

    def last_file(self) -> MappedFile | None:
        files = self.files
        return files[-1] if files else None

    def get_last_mapped_file(self, start_offset: int = 0, create: bool = True) -> MappedFile | None:
        """The file to append to; creates one when there is none or the last is full."""
        last = self.last_file()
        if last is not None and not last.is_full:
            return last
        if not create:
            return last
        if last is None:
            create_offset = start_offset - start_offset % self.file_size
        else:
            create_offset = last.file_end_offset
        return self._create_file(create_offset, first_in_queue=last is None)

    def _create_file(self, offset: int, first_in_queue: bool) -> MappedFile:
        """Add the file starting at ``offset``: the prepared one if ready, else a new one.

        A roll (not the first file of the queue) asks the allocator for the file after it.
        """
        path = self._path_of(offset)
        allocator = self.allocator
        mapped = allocator.take(path, self.file_size) if allocator is not None else None
        if mapped is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            mapped = MappedFile(path, self.file_size, create=True, sparse=self.sparse)
        mapped.first_create_in_queue = first_in_queue
        with self._files_lock:
            self.files = [*self.files, mapped]
        if allocator is not None and not first_in_queue:
            allocator.request(self._path_of(offset + self.file_size), self.file_size)
        return mapped

    def _path_of(self, offset: int) -> Path:
        return self.directory / offset_to_file_name(offset)

    def discard_prepared(self) -> None:
        """Withdraw (and delete) the file prepared after the last one, if any."""
        last = self.last_file()
        if self.allocator is not None and last is not None:
            self.allocator.discard(self._path_of(last.file_end_offset))

    def find_by_offset(
        self, offset: int, return_first_on_not_found: bool = False
    ) -> MappedFile | None:
        """The file whose range holds ``offset``; None (or the first file) when out of range."""
        files = self.files
        if not files:
            return None
        first = files[0]
        index = offset // self.file_size - first.file_from_offset // self.file_size
        if 0 <= index < len(files):
            candidate = files[index]
            if candidate.file_from_offset <= offset < candidate.file_end_offset:
                return candidate
        for candidate in files:
            if candidate.file_from_offset <= offset < candidate.file_end_offset:
                return candidate
        return first if return_first_on_not_found else None

    def find_by_time(self, timestamp_ms: int) -> MappedFile | None:
        """The first file modified at or after ``timestamp_ms``, else the last file."""
        files = self.files
        for mapped in files:
            if mapped.last_modified() * 1000 >= timestamp_ms:
                return mapped
        return files[-1] if files else None

    # ------------------------------------------------------------------ offsets

    @property
    def min_offset(self) -> int:
        """Start of the first file, -1 when there is none."""
        first = self.first_file()
        return first.file_from_offset if first is not None else -1

    @property
    def max_offset(self) -> int:
        """End of readable data: last file start + its read position."""
        last = self.last_file()
        return last.file_from_offset + last.read_position if last is not None else 0

    @property
    def max_wrote_offset(self) -> int:
        last = self.last_file()
        return last.file_from_offset + last.wrote_position if last is not None else 0

    def roll_next_file(self, offset: int) -> int:
        return offset + self.file_size - offset % self.file_size

    # ------------------------------------------------------------------ flush

    def flush(self, least_pages: int) -> bool:
        """Flush the file holding ``flushed_where``; True when nothing moved (as RocketMQ)."""
        first = self.first_file()
        if first is not None and self.flushed_where < first.file_from_offset:
            # The files it pointed into were deleted (retention): go on from the first left,
            # else no flush would ever find a file again.
            self.flushed_where = first.file_from_offset
        mapped = self.find_by_offset(self.flushed_where, self.flushed_where == 0)
        if mapped is None:
            return True
        store_timestamp = mapped.store_timestamp
        where = mapped.file_from_offset + mapped.flush(least_pages)
        nothing_moved = where == self.flushed_where
        self.flushed_where = where
        if least_pages == 0:
            self.store_timestamp = store_timestamp
        return nothing_moved

    def flush_all(self) -> None:
        """Flush until every written byte is on disk."""
        while not self.flush(0):
            pass

    # ------------------------------------------------------------------ truncate and delete

    def truncate_dirty_files(self, offset: int) -> None:
        """Cut the queue at ``offset``: the file holding it is repositioned, later ones deleted."""
        keep: list[MappedFile] = []
        doomed: list[MappedFile] = []
        for mapped in self.files:
            if mapped.file_end_offset > offset:
                if mapped.file_from_offset <= offset:
                    position = offset % self.file_size
                    mapped.set_positions(position)
                    keep.append(mapped)
                else:
                    doomed.append(mapped)
            else:
                keep.append(mapped)
        if doomed:
            self.discard_prepared()  # it would follow a file that is going away
        with self._files_lock:
            self.files = keep
        for mapped in doomed:
            mapped.destroy()
        if self.flushed_where > offset:
            self.flushed_where = offset

    def delete_last_file(self) -> None:
        last = self.last_file()
        if last is None:
            return
        self.discard_prepared()
        with self._files_lock:
            self.files = self.files[:-1]
        last.destroy()

    def delete_first_files(self, count: int) -> list[MappedFile]:
        """Remove and delete the ``count`` oldest files (never the last one)."""
        count = min(count, len(self.files) - 1)
        if count <= 0:
            return []
        with self._files_lock:
            doomed = self.files[:count]
            self.files = self.files[count:]
        for mapped in doomed:
            mapped.destroy()
        return doomed

    def delete_expired_by_time(
        self, expired_ms: int, clean_immediately: bool, now_ms: int | None = None
    ) -> int:
        """Delete old files from the front, never the last, at most 10; stop at a young one."""
        now = now_ms if now_ms is not None else int(time.time() * 1000)
        count = 0
        for mapped in self.files[:-1]:
            if count >= DELETE_FILES_BATCH_MAX:
                break
            if not clean_immediately and now < mapped.last_modified() * 1000 + expired_ms:
                break
            count += 1
        return len(self.delete_first_files(count))

    def delete_files_below(self, predicate_last_unit_below: list[bool]) -> int:
        """Delete leading files for which the caller's per-file verdict is True."""
        count = 0
        for doomed in predicate_last_unit_below[: len(self.files) - 1]:
            if not doomed:
                break
            count += 1
        return len(self.delete_first_files(count))

    def close(self) -> None:
        """Unmap every file; a file prepared ahead and not taken is deleted."""
        self.discard_prepared()
        for mapped in self.files:
            mapped.close()

    def destroy(self) -> None:
        self.discard_prepared()
        for mapped in self.files:
            mapped.destroy()
        with self._files_lock:
            self.files = []
        self.flushed_where = 0


def _file_sizes(directory: Path) -> dict[str, int]:
    """Size of each store file (a name of digits) in ``directory``: one ``stat`` a file."""
    with os.scandir(directory) as entries:
        return {
            entry.name: entry.stat().st_size
            for entry in entries
            if entry.name.isdigit() and entry.is_file()
        }


def _never_written(path: Path) -> bool:
    """Whether a full-size store file holds nothing (its head is zero)."""
    with open(path, "rb") as file:
        return file.read(len(_NEVER_WRITTEN_HEAD)) == _NEVER_WRITTEN_HEAD
