"""MappedFile: one fixed-size, memory-mapped file named by the offset it starts at.

A MappedFile keeps three positions, relative to its start: ``wrote`` (bytes appended),
``committed`` (equal to ``wrote``: there is no separate write buffer) and ``flushed``
(bytes forced to disk). Readers see bytes up to the read position, which is ``committed``.

A file is either *reserved* -- created with every block allocated (``posix_fallocate``), the
CommitLog's way -- or *sparse*: created at its full length with no blocks, taking disk as it
fills (RocketMQ's ConsumeQueue files). Writing through a mapping into a hole on a full disk
kills the process with SIGBUS, so a sparse file reserves ahead of its writes, a page first,
then doubling up to :data:`RESERVE_CHUNK` at a time (``reserved_position``): a full disk is
then an ENOSPC ``OSError`` from the write, before any byte is copied. A sparse file loaded
from disk is mapped on first use (:attr:`MappedFile.buffer`): idle queues cost no mapping.

A file created (or renamed into place, see :meth:`MappedFile.move_to`) has a new directory
entry; its first flush fsyncs the directory too, so that flushed data is never in a file
whose name a power loss could take back. That keeps the directory fsync off the thread
that creates the file.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import mmap
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Final, cast

from storage.fs import fsync_directory, reserve_blocks

OS_PAGE_SIZE: Final = 4096
FILE_NAME_WIDTH: Final = 20
RESERVE_CHUNK: Final = 64 * 1024
"""Most bytes a sparse file reserves at once ahead of a write that crosses its reserved
position; the first reservation is a page, each next one doubles up to this."""
MADV_POPULATE_READ: Final = 22  # Linux 5.14+: map the file's pages in, content untouched


def _libc_madvise() -> Callable[[int, int, int], int] | None:
    """libc's ``madvise`` through ctypes, which releases the GIL for the call (the
    ``mmap.madvise`` method holds it); None where there is no such libc."""
    try:
        function = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):  # pragma: no cover - every Linux libc has it
        return None
    function.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    function.restype = ctypes.c_int
    return cast("Callable[[int, int, int], int]", function)


_madvise = _libc_madvise()


def offset_to_file_name(offset: int) -> str:
    """The 20-digit, zero-padded decimal name of a file starting at ``offset``."""
    return f"{offset:0{FILE_NAME_WIDTH}d}"


def _reserve(fd: int, size: int) -> None:
    """Give a new file its full size with real blocks (:func:`storage.fs.reserve_blocks`)."""
    reserve_blocks(fd, size)


def _reserve_range(fd: int, offset: int, length: int) -> None:
    """Give ``length`` bytes of a sparse file from ``offset`` real blocks (ENOSPC when the
    disk has none); nothing where the filesystem cannot reserve."""
    try:
        os.posix_fallocate(fd, offset, length)
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            raise


class MappedFile:
    """A pre-sized file mapped into memory; appends are memory copies."""

    def __init__(
        self,
        path: Path,
        file_size: int,
        *,
        create: bool = False,
        file_from_offset: int | None = None,
        sparse: bool = False,
    ) -> None:
        """Map ``path``; ``create`` makes it, reserved whole or (``sparse``) sized only. The
        start offset is the file's name unless given (a file prepared under a scratch name)."""
        self.path = path
        self.file_size = file_size
        self.file_from_offset = int(path.name) if file_from_offset is None else file_from_offset
        if create or not sparse:  # a loaded sparse file is opened and mapped when first used
            self._open(create, sparse)
        self.wrote_position = 0
        self.flushed_position = 0
        # Below it, writes through the mapping have blocks to land in (the whole file unless
        # sparse; a loaded sparse file may have holes anywhere, so nothing is assumed).
        self.reserved_position = 0 if sparse else file_size
        self.store_timestamp = 0
        self.first_create_in_queue = False
        self._directory_sync_pending = create
        self._lock = threading.Lock()
        self._closed = False
        self._write_fd = -1  # opened on the first ``write_append``
        # Pages ahead of the write position mapped in off the owner thread (``prefault``):
        # the write position at which the owner asks for more, and how far it is done.
        self.prefault_next = 0
        self.prefaulted_position = 0

    def __repr__(self) -> str:
        return f"MappedFile({self.path.name}, wrote={self.wrote_position})"

    def _open(self, create: bool, sparse: bool) -> None:
        """Open (``create``: make and size or reserve) the file and map it."""
        path, file_size = self.path, self.file_size
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        fd = os.open(path, flags, 0o644)
        try:
            if create and sparse:
                os.ftruncate(fd, file_size)
            elif create:
                _reserve(fd, file_size)
            self.buffer = mmap.mmap(fd, file_size, access=mmap.ACCESS_WRITE)
        except BaseException:
            if create:
                path.unlink(missing_ok=True)
            raise
        finally:
            os.close(fd)

    @functools.cached_property
    def buffer(self) -> mmap.mmap:
        """The mapping; made here, on first use, for a loaded sparse file (an idle
        ConsumeQueue of a store with thousands costs no mapping until it is read or
        written). Once made it is a plain attribute."""
        if self._closed:
            raise ValueError("mmap closed or invalid")
        fd = os.open(self.path, os.O_RDWR)
        try:
            return mmap.mmap(fd, self.file_size, access=mmap.ACCESS_WRITE)
        finally:
            os.close(fd)

    # ------------------------------------------------------------------ positions

    @property
    def read_position(self) -> int:
        return self.wrote_position

    @property
    def committed_position(self) -> int:
        return self.wrote_position

    @property
    def file_end_offset(self) -> int:
        return self.file_from_offset + self.file_size

    @property
    def remaining(self) -> int:
        return self.file_size - self.wrote_position

    @property
    def is_full(self) -> bool:
        return self.wrote_position == self.file_size

    @property
    def closed(self) -> bool:
        return self._closed

    def set_positions(self, position: int) -> None:
        """Set wrote and flushed positions together (used by load, recovery and truncation)."""
        self.wrote_position = position
        self.flushed_position = position

    # ------------------------------------------------------------------ write

    def reserve(self, end: int) -> None:
        """Make sure bytes below ``end`` have blocks, reserving the next chunk(s) of a sparse
        file; ENOSPC (or another ``OSError``) when the disk has none, the file unchanged."""
        start = self.reserved_position
        if end <= start:
            return
        chunk = min(RESERVE_CHUNK, max(OS_PAGE_SIZE, start))  # 4 KiB, 8, ... 64, 64, ...
        target = min(self.file_size, -(-end // chunk) * chunk)
        fd = os.open(self.path, os.O_RDWR)
        try:
            _reserve_range(fd, start, target - start)
        finally:
            os.close(fd)
        self.reserved_position = target

    def append(self, data: bytes | bytearray | memoryview) -> bool:
        """Copy ``data`` at the write position; False (nothing written) if it does not fit."""
        start = self.wrote_position
        end = start + len(data)
        if end > self.file_size:
            return False
        if end > self.reserved_position:
            self.reserve(end)
        self.buffer[start:end] = data
        self.wrote_position = end
        return True

    def append_with(self, size: int, write: Callable[[mmap.mmap, int], None]) -> bool:
        """Let ``write(buffer, position)`` fill ``size`` bytes at the write position."""
        start = self.wrote_position
        if start + size > self.file_size:
            return False
        if start + size > self.reserved_position:
            self.reserve(start + size)
        write(self.buffer, start)
        self.wrote_position = start + size
        return True

    def write_append(self, data: bytes | bytearray) -> None:
        """Write ``data`` (known to fit) at the write position with ``pwrite``, not the map.

        The page cache is shared with the mapping, so readers of ``buffer`` see the bytes at
        once; unlike a copy into the map it takes no page fault per fresh page
        (``bench/put_path_bench.py``). The write position moves only once every byte is
        written.
        """
        start = self.wrote_position
        fd = self._write_fd
        if fd < 0:
            fd = self._write_fd = os.open(self.path, os.O_WRONLY)
        view = memoryview(data)
        written = 0
        while written < len(view):
            written += os.pwrite(fd, view[written:], start + written)
        self.wrote_position = start + len(view)

    def write_at(self, position: int, data: bytes) -> None:
        """Write bytes through the mapping at ``position`` (pre-blank fill, tests)."""
        self.reserve(position + len(data))
        self.buffer[position : position + len(data)] = data

    # ------------------------------------------------------------------ read

    def read(self, position: int, size: int) -> bytes | None:
        """``size`` bytes at ``position`` if they are all readable, else None."""
        if position < 0 or position + size > self.read_position:
            return None
        return self.buffer[position : position + size]

    def select(self, position: int, limit: int | None = None) -> bytes | None:
        """Bytes from ``position`` to the read position (at most ``limit``), else None."""
        end = self.read_position
        if position < 0 or position >= end:
            return None
        if limit is not None:
            end = min(end, position + limit)
        return self.buffer[position:end]

    # ------------------------------------------------------------------ flush

    def is_able_to_flush(self, least_pages: int) -> bool:
        flushed = self.flushed_position
        write = self.read_position
        if self.is_full:
            return write > flushed
        if least_pages > 0:
            return write // OS_PAGE_SIZE - flushed // OS_PAGE_SIZE >= least_pages
        return write > flushed

    def flush(self, least_pages: int) -> int:
        """Force dirty pages to disk when the page rule allows; returns the flushed position.

        Runs on a flusher thread while the owner appends: the read position is captured
        before the sync and only that much is reported as flushed. ``fdatasync`` on the
        file writes back pages dirtied through the mapping and, unlike ``mmap.flush``
        (msync), releases the GIL, so the event loop keeps running during the flush.
        """
        if not self.is_able_to_flush(least_pages):
            return self.flushed_position
        with self._lock:
            if self._closed:
                return self.flushed_position
            target = self.read_position
            if self._directory_sync_pending:
                fsync_directory(self.path.parent)
                self._directory_sync_pending = False
            fd = os.open(self.path, os.O_RDWR)
            try:
                os.fdatasync(fd)
            finally:
                os.close(fd)
            self.flushed_position = max(self.flushed_position, target)
        return self.flushed_position

    # ------------------------------------------------------------------ lifecycle

    def warm(self, length: int) -> None:
        """Fault in the first ``length`` bytes for writing (RocketMQ's ``warmMappedFile``,
        for the head only).

        The first write into a fresh file is slow (file-system bookkeeping on the first
        write fault, then one fault per page); doing it here, on a thread that prepares the
        file ahead, keeps it off the appending thread. Writes zero bytes into zero pages:
        the content does not change.
        """
        buffer = self.buffer
        for page in range(0, min(length, self.file_size), OS_PAGE_SIZE):
            buffer[page] = 0

    def prefault(self, end: int) -> bool:
        """Map the file's pages up to ``end`` into this mapping (RocketMQ's
        ``warmMappedFile``, for the pages ahead of the write position of the active file).

        Runs on a worker thread: ``madvise(MADV_POPULATE_READ)`` through ctypes releases the
        GIL and neither changes nor dirties a byte, so appends on the owner thread go on
        meanwhile and then take no page fault of their own. False where the kernel lacks
        it (before Linux 5.14): there is nothing to do then.
        """
        if _madvise is None:
            return False
        with self._lock:  # close() waits: the address stays mapped during the call
            if self._closed:
                return True
            start = self.prefaulted_position // OS_PAGE_SIZE * OS_PAGE_SIZE
            end = min(end, self.file_size)
            if end <= start:
                return True
            view = ctypes.c_char.from_buffer(self.buffer)
            address = ctypes.addressof(view)
            del view  # an exported buffer would keep the mapping from closing
            if _madvise(address + start, end - start, MADV_POPULATE_READ) != 0:
                return False
            self.prefaulted_position = end
        return True

    def move_to(self, path: Path) -> None:
        """Rename the file (same file system); the mapping stays valid. The next flush
        makes the new name durable."""
        with self._lock:
            self.path.rename(path)
            self.path = path
            self._directory_sync_pending = True

    def last_modified(self) -> float:
        return self.path.stat().st_mtime

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                buffer = self.__dict__.get("buffer")  # never mapped: nothing to unmap
                if buffer is not None:
                    buffer.close()
                if self._write_fd >= 0:
                    os.close(self._write_fd)
                    self._write_fd = -1

    def destroy(self) -> None:
        """Unmap and delete the file."""
        self.close()
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
