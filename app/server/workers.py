"""Several processes serving one port: the workers of a server that keeps no state of its own
(``spoolmq proxy --workers N``).

Each worker is a fresh interpreter (nothing of the parent's memory is shared: every module-level
value is made anew in each) that binds a socket of its own with ``SO_REUSEPORT``
(:func:`~app.server.serve.listen_socket`), so the kernel spreads new connections over the
workers listening. The parent (:class:`WorkerPool`) only watches them:

* a worker that dies while the pool is not stopping is started again, after a back-off that
  doubles with each death in a row at start (:class:`Restarts`), and the death is logged;
* a worker slot whose workers keep dying at start (within ``start_grace_s``, ``max_failures``
  times in a row) stops the pool: the others are stopped and :meth:`WorkerPool.run` answers 1;
* SIGTERM or SIGINT to the parent is passed to every worker as SIGTERM: each stops gracefully
  (:class:`~app.server.Server`), and the parent waits for them (SIGKILL after ``stop_timeout_s``)
  and answers 0;
* a worker whose parent is gone (killed with SIGKILL) sends itself SIGTERM and so stops as
  after a signal to the pool (:func:`stop_when_orphaned`).

Port sharing that spreads connections is Linux's; :func:`shares_ports` says whether this system
has it.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess
from typing import Any, Final

log = logging.getLogger("spoolmq.workers")

FORWARDED_SIGNALS: Final = (signal.SIGTERM, signal.SIGINT)
_SPAWN: Final = multiprocessing.get_context("spawn")


def cpu_count() -> int:
    """The CPUs this process may run on (its affinity), the default number of workers."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1  # pragma: no cover - every Linux has sched_getaffinity


def shares_ports() -> bool:
    """Whether sockets bound with ``SO_REUSEPORT`` share the connections of their port here:
    Linux only (elsewhere the option exists without spreading the connections, or not at all)."""
    return sys.platform.startswith("linux") and hasattr(socket, "SO_REUSEPORT")


@dataclass(frozen=True, slots=True)
class Restarts:
    """When a dead worker is started again, and when the pool gives up."""

    first_delay_s: float = 0.5
    """The wait before the first restart; it doubles with each death at start in a row."""
    max_delay_s: float = 10.0
    start_grace_s: float = 30.0
    """A worker that dies sooner than this after it started died at start (an interpreter
    that imports the app takes seconds on a busy machine)."""
    max_failures: int = 5
    """Deaths at start in a row of one worker slot after which the pool stops."""

    def delay_s(self, failures: int) -> float:
        """The wait before a restart after ``failures`` deaths at start in a row (0: a death
        after a good run)."""
        return min(self.first_delay_s * (1 << max(failures - 1, 0)), self.max_delay_s)


@dataclass(slots=True)
class _Slot:
    """One worker's place in the pool: its process now, and its deaths at start in a row."""

    index: int
    process: BaseProcess | None = None
    started_at: float = 0.0
    failures: int = 0
    restart_at: float | None = None


class WorkerPool:
    """``count`` processes each running ``target(index, *args)`` (``index`` from 1), kept
    running until SIGTERM or SIGINT: see the module's docstring. ``target`` and ``args`` are
    pickled to each worker: a module-level function and plain values."""

    def __init__(
        self,
        count: int,
        target: Callable[..., None],
        args: tuple[Any, ...] = (),
        restarts: Restarts | None = None,
        stop_timeout_s: float = 30.0,
    ) -> None:
        self.target = target
        self.args = args
        self.restarts = restarts or Restarts()
        self.stop_timeout_s = stop_timeout_s
        self.slots = [_Slot(index) for index in range(1, count + 1)]
        self.stopping = False
        self._wake_read, self._wake_write = os.pipe()

    def pids(self) -> list[int]:
        """The live workers' process ids, by slot."""
        return [s.process.pid for s in self.slots if s.process is not None and s.process.pid]

    def run(self) -> int:
        """Start the workers and keep them running until a signal (0) or until one slot keeps
        dying at start (1). Call from the main thread: it handles SIGTERM and SIGINT."""
        previous = {sig: signal.signal(sig, self._on_signal) for sig in FORWARDED_SIGNALS}
        try:
            for slot in self.slots:
                self._start(slot)
            status = self._watch()
            self._stop_all()
            return status
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            os.close(self._wake_read)
            os.close(self._wake_write)

    def _on_signal(self, signum: int, frame: object) -> None:
        log.info("%s: stopping %d workers", signal.Signals(signum).name, len(self.slots))
        self.stopping = True
        os.write(self._wake_write, b"\0")

    def _start(self, slot: _Slot) -> None:
        process = _SPAWN.Process(
            target=_worker_main,
            args=(self.target, slot.index, *self.args),
            name=f"worker-{slot.index}",
            daemon=False,
        )
        process.start()
        slot.process, slot.started_at, slot.restart_at = process, time.monotonic(), None
        log.info("worker %d started (pid %s)", slot.index, process.pid)

    def _watch(self) -> int:
        while not self.stopping:
            self._wait_for_news()
            now = time.monotonic()
            for slot in self.slots:
                died = slot.process is not None and not slot.process.is_alive()
                if died and not self._schedule_restart(slot, now):
                    return 1
                if slot.restart_at is not None and slot.restart_at <= now and not self.stopping:
                    self._start(slot)
        return 0

    def _wait_for_news(self) -> None:
        """Until a worker ends, a signal comes or the next restart is due."""
        sentinels = [s.process.sentinel for s in self.slots if s.process is not None]
        due = [s.restart_at for s in self.slots if s.restart_at is not None]
        timeout = max(min(due) - time.monotonic(), 0.0) if due else None
        ready = wait([self._wake_read, *sentinels], timeout)
        if self._wake_read in ready:
            os.read(self._wake_read, 64)

    def _schedule_restart(self, slot: _Slot, now: float) -> bool:
        """A worker died: when to start it again (False: it keeps dying at start, give up)."""
        process = slot.process
        assert process is not None
        process.join()
        lived_s = now - slot.started_at
        at_start = lived_s < self.restarts.start_grace_s
        slot.failures = slot.failures + 1 if at_start else 0
        slot.process = None
        how = _exit_text(process.exitcode)
        if slot.failures >= self.restarts.max_failures:
            log.error(
                "worker %d died at start %d times in a row (last: %s): stopping the workers",
                slot.index,
                slot.failures,
                how,
            )
            return False
        delay_s = self.restarts.delay_s(slot.failures)
        log.warning(
            "worker %d (pid %s) died after %.1f s (%s): restarting it in %.1f s",
            slot.index,
            process.pid,
            lived_s,
            how,
            delay_s,
        )
        slot.restart_at = now + delay_s
        return True

    def _stop_all(self) -> None:
        """SIGTERM to every live worker, then wait for them all (SIGKILL past the time)."""
        live = [s.process for s in self.slots if s.process is not None and s.process.is_alive()]
        for process in live:
            _signal(process, signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout_s
        for process in live:
            process.join(max(deadline - time.monotonic(), 0.0))
            if process.is_alive():
                log.error("worker pid %s did not stop in time: killed", process.pid)
                _signal(process, signal.SIGKILL)
                process.join()
        for slot in self.slots:
            slot.process = None


def _signal(process: BaseProcess, sig: signal.Signals) -> None:
    if process.pid is not None:
        try:
            os.kill(process.pid, sig)
        except ProcessLookupError:
            pass  # it ended meanwhile


def _exit_text(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        return f"killed by {signal.Signals(-exitcode).name}"
    return f"exit status {exitcode}"


def _worker_main(target: Callable[..., None], index: int, *args: Any) -> None:
    """A worker process: ``target(index, *args)``, stopped if the pool goes away."""
    stop_when_orphaned()
    target(index, *args)


def stop_when_orphaned(interval_s: float = 1.0) -> threading.Thread:
    """A daemon thread that sends this process SIGTERM once its parent is gone: a worker keeps
    no port busy after its pool was killed (its server stops as after a signal to the pool)."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval_s)
        log.warning("the worker pool (pid %d) is gone: stopping", parent)
        os.kill(os.getpid(), signal.SIGTERM)

    thread = threading.Thread(target=watch, name="orphan-watch", daemon=True)
    thread.start()
    return thread
