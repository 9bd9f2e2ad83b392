"""A FUSE file system that loses what was never synced when the power is cut.

LazyFS's idea, kept small: every file operation passes through to a backing directory, but
the bytes a write changes are remembered (the page as it was, once per page since the last
sync of that file) until the file is fsynced. A **power cut** puts every unsynced page back
as it was and every unsynced file back to its synced length, then ignores every write until
unmount — so dirty pages the kernel still holds for a killed process (mmap'd writes) are lost
too, as they would be. What survives is exactly what was fsynced: the crash tests then cover
what kill -9 cannot, data the kernel never wrote.

Metadata (create, rename, unlink, mkdir) is durable at once: the cut takes file data only.

It can also **fail fsync** with EIO (``fail-fsync``), to test what a broker does when the
disk reports an error (the fsyncgate case), and ``heal`` ends that.

Run it as a process: ``python -m tests.powercut_fs BACKING MOUNT``; it mounts in the
foreground and reads commands on stdin, one a line, answering each on stdout:
``cut`` → ``ok <pages restored> <files cut back>``; ``fail-fsync`` / ``heal`` → ``ok``.
Unmount with ``fusermount3 -u MOUNT``. :mod:`tests.powercut_support` drives it.
"""

from __future__ import annotations

import errno
import os
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mfusepy as fuse  # type: ignore[import-untyped]

PAGE = 4096


@dataclass
class Unsynced:
    """What one file looked like at its last sync: its length and the pages changed since."""

    size: int
    pages: dict[int, bytes] = field(default_factory=dict)


class PowerCutFS(fuse.Operations):  # type: ignore[misc]
    """Pass-through to ``backing``, with unsynced changes kept undoable."""

    use_ns = True

    def __init__(self, backing: Path) -> None:
        self.backing = backing
        self._guard = threading.RLock()
        self._unsynced: dict[str, Unsynced] = {}
        self._paths: dict[int, str] = {}  # open file handle → path (fsync may get no path)
        self.powered_off = False
        self.fail_fsync = False

    # ------------------------------------------------------------------ commands

    def cut(self) -> tuple[int, int]:
        """Lose every unsynced change; ignore every write from now on."""
        with self._guard:
            self.powered_off = True
            pages = files = 0
            for path, unsynced in self._unsynced.items():
                real = self._real(path)
                try:
                    fd = os.open(real, os.O_WRONLY)
                except FileNotFoundError:
                    continue
                try:
                    for index, original in unsynced.pages.items():
                        os.pwrite(fd, original, index * PAGE)
                        pages += 1
                    if os.fstat(fd).st_size != unsynced.size:
                        os.ftruncate(fd, unsynced.size)
                        files += 1
                finally:
                    os.close(fd)
            self._unsynced.clear()
            return pages, files

    # ------------------------------------------------------------------ undo log

    def _remember(self, path: str, fd: int, offset: int, length: int) -> None:
        """Keep the pages ``[offset, offset + length)`` touches as they were at the last sync."""
        unsynced = self._unsynced.get(path)
        if unsynced is None:
            unsynced = self._unsynced[path] = Unsynced(os.fstat(fd).st_size)
        end = min(offset + length, unsynced.size)
        for index in range(offset // PAGE, (end + PAGE - 1) // PAGE):
            if index not in unsynced.pages:
                unsynced.pages[index] = os.pread(fd, PAGE, index * PAGE)

    def _real(self, path: str) -> Path:
        return self.backing / path.lstrip("/")

    # ------------------------------------------------------------------ metadata

    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        st = self._real(path).lstat()
        keys = ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_blocks", "st_ino")
        attrs: dict[str, Any] = {key: getattr(st, key) for key in keys}
        attrs.update(st_atime=st.st_atime_ns, st_mtime=st.st_mtime_ns, st_ctime=st.st_ctime_ns)
        return attrs

    def readdir(self, path: str, fh: int) -> list[str]:
        return [".", "..", *(entry.name for entry in self._real(path).iterdir())]

    def access(self, path: str, amode: int) -> int:
        if not os.access(self._real(path), amode):
            raise fuse.FuseOSError(errno.EACCES)
        return 0

    def chmod(self, path: str, mode: int) -> int:
        self._real(path).chmod(mode)
        return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        if times is None:
            os.utime(self._real(path))
        else:
            os.utime(self._real(path), ns=times)
        return 0

    def mkdir(self, path: str, mode: int) -> int:
        self._real(path).mkdir(mode)
        return 0

    def rmdir(self, path: str) -> int:
        self._real(path).rmdir()
        return 0

    def unlink(self, path: str) -> int:
        with self._guard:
            self._real(path).unlink()
            self._unsynced.pop(path, None)
        return 0

    def rename(self, old: str, new: str) -> int:
        with self._guard:
            self._real(old).rename(self._real(new))
            self._unsynced.pop(new, None)
            moved = self._unsynced.pop(old, None)
            if moved is not None:
                self._unsynced[new] = moved
            for fh, path in self._paths.items():
                if path == old:
                    self._paths[fh] = new
        return 0

    def statfs(self, path: str) -> dict[str, int]:
        st = os.statvfs(self._real(path))
        keys = ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree")
        return {key: getattr(st, key) for key in (*keys, "f_favail", "f_namemax")}

    # ------------------------------------------------------------------ files

    def create(self, path: str, mode: int, fi: Any = None) -> int:
        with self._guard:
            fh = os.open(self._real(path), os.O_RDWR | os.O_CREAT | os.O_EXCL, mode)
            self._unsynced.setdefault(path, Unsynced(0))
            self._paths[fh] = path
        return fh

    def open(self, path: str, flags: int) -> int:
        with self._guard:
            fh = os.open(self._real(path), os.O_RDWR)
            self._paths[fh] = path
        return fh

    def release(self, path: str, fh: int) -> int:
        with self._guard:
            self._paths.pop(fh, None)
            os.close(fh)
        return 0

    def flush(self, path: str, fh: int) -> int:
        return 0

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        return os.pread(fh, size, offset)

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        with self._guard:
            if self.powered_off:
                return len(data)
            self._remember(self._paths[fh], fh, offset, len(data))
            return os.pwrite(fh, data, offset)

    def truncate(self, path: str, length: int, fh: int | None = None) -> int:
        with self._guard:
            if self.powered_off:
                return 0
            fd = os.open(self._real(path), os.O_RDWR) if fh is None else fh
            name = path if fh is None else self._paths.get(fh, path)
            try:
                size = os.fstat(fd).st_size
                self._remember(name, fd, min(length, size), max(0, size - length))
                os.ftruncate(fd, length)
            finally:
                if fh is None:
                    os.close(fd)
        return 0

    def fallocate(self, path: str, mode: int, offset: int, size: int, fh: int) -> int:
        if mode != 0:
            raise fuse.FuseOSError(errno.EOPNOTSUPP)
        with self._guard:
            if self.powered_off:
                return 0
            self._remember(self._paths[fh], fh, offset, 0)
            os.posix_fallocate(fh, offset, size)
        return 0

    def fsync(self, path: str, datasync: int, fh: int) -> int:
        with self._guard:
            if self.fail_fsync:
                raise fuse.FuseOSError(errno.EIO)
            if not self.powered_off:
                # The backing directory is on a disk that keeps its power: what matters is
                # that these bytes survive a cut, not that the host forces them.
                self._unsynced.pop(self._paths.get(fh, path), None)
        return 0

    def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
        if self.fail_fsync:
            raise fuse.FuseOSError(errno.EIO)
        return 0


def serve_commands(fs: PowerCutFS) -> None:
    """Answer the commands on stdin (a daemon thread beside the FUSE loop)."""
    for line in sys.stdin:
        command = line.strip()
        if command == "cut":
            pages, files = fs.cut()
            answer = f"ok {pages} {files}"
        elif command == "fail-fsync":
            fs.fail_fsync = True
            answer = "ok"
        elif command == "heal":
            fs.fail_fsync = False
            answer = "ok"
        else:
            answer = f"unknown command {command!r}"
        sys.stdout.write(answer + "\n")
        sys.stdout.flush()


def main() -> None:
    backing, mount_point = Path(sys.argv[1]), Path(sys.argv[2])
    fs = PowerCutFS(backing)
    threading.Thread(target=serve_commands, args=(fs,), daemon=True).start()
    fuse.FUSE(fs, str(mount_point), foreground=True, nothreads=True, fsname="powercut")


if __name__ == "__main__":
    main()
