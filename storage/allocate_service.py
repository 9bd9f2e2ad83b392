"""AllocateMappedFileService: create (and fallocate) the next store file ahead of need.

RocketMQ's ``AllocateMappedFileService`` (reference §4.3) makes file N+1 in a background
thread while file N is being filled, so that a roll is instant. Here a
:class:`~storage.mapped_file_queue.MappedFileQueue` that rolls to file N asks for N+1;
the worker thread creates it in the service's scratch directory (``<store>/prepared/``,
outside every queue directory, so no reader, loader or cleaner ever lists it), reserves its
blocks (``posix_fallocate``), maps it and faults in its first MiB (on ext4 the first write
into a fresh file costs milliseconds; see ``bench/roll_stall_bench.py``). At the next roll
the queue takes the file if it is ready -- a rename into place, which keeps the mapping --
and otherwise creates it inline itself: correctness never depends on the thread.

* A request not started yet when the queue wants its file is withdrawn (the queue creates
  the file); one in progress is waited for, since creating it again would only redo that
  work.
* A file prepared but never taken (the queue closed, was destroyed or truncated) is deleted
  by :meth:`discard` or :meth:`shutdown`; scratch files a crash left behind are deleted
  by :meth:`remove_leftovers` when a queue using the service loads (the store holds its
  lock by then), or else when the worker starts.
* The renamed file's directory entry is made durable by its first flush (on the flusher's
  thread, see :mod:`storage.mapped_file`).
* The worker starts on the first request, so a service nobody uses costs no thread.
* It also maps in the pages of the file being written ahead of its write position
  (:meth:`prefault`, RocketMQ's ``warmMappedFile`` for the active file): the appending
  thread then takes no first-touch page fault. The pages are read-mapped, neither written
  nor dirtied, so this never races an append and adds no disk writes.
* The worker runs at the lowest priority (nice 19, that thread only): where the server has
  a core to itself its work is in the way of nothing else.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from storage.mapped_file import MappedFile

WARM_HEAD_BYTES: Final = 1024 * 1024
"""Bytes at the head of a prepared file faulted in ahead: the first appends after a roll."""


@dataclass(slots=True, eq=False)  # identity: a request is one piece of work
class _Request:
    """One file to prepare; ``done`` is set when it is ready or failed."""

    path: Path  # where the file will live
    scratch: Path  # where it is prepared
    file_size: int
    mapped: MappedFile | None = None
    error: Exception | None = None
    done: threading.Event = field(default_factory=threading.Event)


class AllocateMappedFileService:
    """A worker thread that creates requested MappedFiles before they are needed.

    ``scratch_directory`` must be on the same file system as the queues it serves.
    """

    def __init__(self, scratch_directory: Path) -> None:
        self.scratch_directory = scratch_directory
        self._lock = threading.Condition()
        self._pending: deque[_Request] = deque()
        self._requests: dict[Path, _Request] = {}  # pending, in progress or ready
        self._names = itertools.count()
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._leftovers_removed = False
        # Active files whose pages ahead of the write position are to be mapped in, and how
        # far (RocketMQ's warmMappedFile for the file being written; see ``prefault``).
        self._prefaults: dict[MappedFile, int] = {}
        self._prefault_supported = True
        self._prefaulting = False

    def __repr__(self) -> str:
        return (
            f"AllocateMappedFileService({self.scratch_directory}, requests={len(self._requests)})"
        )

    # ------------------------------------------------------------------ queue side

    def request(self, path: Path, file_size: int) -> None:
        """Ask for the file at ``path`` to be prepared; returns at once."""
        with self._lock:
            if self._stopped or path in self._requests:
                return
            scratch = self.scratch_directory / f"{next(self._names):08d}-{path.name}"
            request = _Request(path, scratch, file_size)
            self._requests[path] = request
            self._pending.append(request)
            self._ensure_worker()
            self._lock.notify_all()

    def prefault(self, mapped: MappedFile, end: int) -> None:
        """Ask for the pages of ``mapped`` up to ``end`` to be mapped in ahead of its
        appends (:meth:`MappedFile.prefault`); returns at once."""
        with self._lock:
            if self._stopped or not self._prefault_supported:
                return
            self._prefaults[mapped] = max(end, self._prefaults.get(mapped, 0))
            self._ensure_worker()
            self._lock.notify_all()

    def take(self, path: Path, file_size: int) -> MappedFile | None:
        """The prepared file, renamed to ``path``; None when the caller must create it.

        A request still waiting in line is withdrawn; one being prepared is waited for.
        """
        mapped = self._withdraw(path)
        if mapped is None:
            return None
        try:
            if mapped.file_size != file_size or path.exists():
                raise FileExistsError(path)
            mapped.move_to(path)
        except OSError:  # the inline creation meets (and reports) whatever is wrong
            mapped.destroy()
            return None
        return mapped

    def discard(self, path: Path) -> None:
        """Forget the request for ``path`` and delete its file if it was prepared."""
        mapped = self._withdraw(path)
        if mapped is not None:
            mapped.destroy()

    def wait_until_idle(self) -> None:
        """Block until no request is waiting or being prepared (benchmarks and tests)."""
        with self._lock:
            requests = list(self._requests.values())
            while self._prefaults or self._prefaulting:
                self._lock.wait()
        for request in requests:
            request.done.wait()

    @property
    def prepared_paths(self) -> list[Path]:
        """Target paths of the files prepared and not taken yet, sorted."""
        with self._lock:
            return sorted(p for p, r in self._requests.items() if r.mapped is not None)

    def shutdown(self) -> None:
        """Stop the worker and delete every file prepared but not taken."""
        with self._lock:
            self._stopped = True
            for never_started in self._pending:
                never_started.done.set()
            self._pending.clear()
            self._prefaults.clear()
            self._lock.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join()
        with self._lock:
            leftovers = list(self._requests.values())
            self._requests.clear()
        for request in leftovers:
            if request.mapped is not None:
                request.mapped.destroy()

    def _withdraw(self, path: Path) -> MappedFile | None:
        with self._lock:
            request = self._requests.pop(path, None)
            if request is None:
                return None
            if request in self._pending:
                self._pending.remove(request)
                return None
        request.done.wait()
        return request.mapped

    # ------------------------------------------------------------------ worker side

    def _ensure_worker(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="AllocateMappedFileService", daemon=True
            )
            self._thread.start()

    def _run(self) -> None:
        _lower_priority()
        self.remove_leftovers()
        while True:
            with self._lock:
                self._prefaulting = False
                self._lock.notify_all()
                while not self._pending and not self._prefaults and not self._stopped:
                    self._lock.wait()
                if self._stopped:
                    return
                # First the file being written: it needs its pages now.
                prefault = self._prefaults.popitem() if self._prefaults else None
                request = self._pending.popleft() if prefault is None else None
                self._prefaulting = prefault is not None
            if prefault is not None:
                self._prefault(*prefault)
            elif request is not None:
                self._prepare(request)

    def _prefault(self, mapped: MappedFile, end: int) -> None:
        if not mapped.prefault(end):  # no MADV_POPULATE_READ here: stop asking
            with self._lock:
                self._prefault_supported = False
                self._prefaults.clear()

    def remove_leftovers(self) -> None:
        """Delete scratch files of an earlier run that stopped without cleaning up (once).

        Called by :meth:`MappedFileQueue.load` (the store holds its lock by then) and when
        the worker starts.
        """
        with self._lock:
            if self._leftovers_removed:
                return
            self._leftovers_removed = True
        try:
            leftovers = list(self.scratch_directory.iterdir())
        except FileNotFoundError:
            return
        with self._lock:
            current = {r.scratch for r in self._requests.values()}
        for path in leftovers:
            if path not in current:
                path.unlink(missing_ok=True)

    def _prepare(self, request: _Request) -> None:
        """Create, fallocate and map the file under its scratch name."""
        try:
            self.scratch_directory.mkdir(parents=True, exist_ok=True)
            request.mapped = MappedFile(
                request.scratch,
                request.file_size,
                create=True,
                file_from_offset=int(request.path.name),
            )
            request.mapped.warm(WARM_HEAD_BYTES)
        except Exception as exc:  # the queue creates the file inline and meets the error
            request.error = exc
        finally:
            request.done.set()


def _lower_priority() -> None:
    """Make the calling thread the last to run when a CPU is contended (nice 19).

    Its work is all ahead of need; on a server pinned to one core it must not delay the
    event loop (a 1 MiB prefault is about a millisecond of kernel time).
    """
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except OSError:  # pragma: no cover - not permitted: run at the normal priority
        pass
