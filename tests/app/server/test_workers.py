"""The worker pool (:mod:`app.server.workers`): real worker processes, each serving a tiny app
on its own socket of one shared port, under a pool run as a process of its own (it handles
SIGTERM and SIGINT) — connections reach every worker, a killed worker is started again while
the others serve, a signal stops them all after the requests in progress, a worker that keeps
dying at start stops the pool, and workers whose pool was killed stop themselves."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from app.server.workers import Restarts, WorkerPool, cpu_count
from tests.app.server.pool_workers import QUICK_RESTARTS, failing_worker
from tests.app.server.support import WAIT_S
from tests.conftest import wait_until
from tests.net import free_port

ROOT = Path(__file__).resolve().parents[3]


# ---------------------------------------------------------------- the pool, as a process


@contextmanager
def pool_process(marks: Path, count: int = 2) -> Iterator[tuple[subprocess.Popen[str], int]]:
    port = free_port()
    run = f"run_pool({port}, {count}, {str(marks)!r})"
    code = f"import sys; from tests.app.server.pool_workers import run_pool; sys.exit({run})"
    process = subprocess.Popen(
        [sys.executable, "-c", code], cwd=ROOT, stderr=subprocess.PIPE, text=True
    )
    try:
        wait_until(lambda: len(answering(port)) == count, timeout=120)
        yield process, port
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            process.communicate(timeout=60)


def get(port: int, path: str = "/") -> tuple[int, int]:
    """One answer on a new connection: the answering worker's slot and pid."""
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as sock:
        sock.sendall(b"GET %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n" % path.encode())
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 200 "), reply
    slot, pid = reply.rsplit(b"\r\n\r\n", 1)[1].split()
    return int(slot), int(pid)


def answering(port: int, connections: int = 60) -> dict[int, int]:
    """Which workers answer ``connections`` new connections: slot -> pid (none if refused)."""
    seen: dict[int, int] = {}
    for _ in range(connections):
        try:
            slot, pid = get(port)
        except ConnectionRefusedError:
            return {}
        seen[slot] = pid
    return seen


def reaped(pid: int) -> bool:
    """The process is gone and its parent has collected it: all its threads ended, so all its
    sockets are closed (a zombie leader may still have threads closing them)."""
    return not Path(f"/proc/{pid}").exists()


def refused(port: int) -> bool:
    """Nothing listens on ``port`` any more."""
    try:
        get(port)
    except ConnectionRefusedError:
        return True
    return False


# ---------------------------------------------------------------- tests


def test_the_workers_share_the_port_and_a_sigterm_stops_them_all(tmp_path: Path) -> None:
    with pool_process(tmp_path) as (process, port):
        pids = answering(port)
        assert sorted(pids) == [1, 2]
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert all(reaped(pid) for pid in pids.values())
    assert "SIGTERM: stopping 2 workers" in err


def test_a_killed_worker_is_started_again_while_the_others_serve(tmp_path: Path) -> None:
    with pool_process(tmp_path) as (process, port):
        killed = answering(port)[1]
        os.kill(killed, signal.SIGKILL)
        wait_until(lambda: reaped(killed))
        served = [get(port) for _ in range(20)]  # its socket went with it: the other serves
        assert {slot for slot, _ in served} <= {1, 2}
        wait_until(lambda: answering(port).get(1) not in (None, killed), timeout=60)
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert f"worker 1 (pid {killed}) died after" in err
    assert "(killed by SIGKILL): restarting it in" in err


def test_a_signal_lets_the_requests_in_progress_finish(tmp_path: Path) -> None:
    with pool_process(tmp_path) as (process, port):
        got: list[tuple[int, int]] = []
        slow = threading.Thread(target=lambda: got.append(get(port, "/slow")))
        slow.start()
        wait_until((tmp_path / "slow").exists)  # under way, a second to go
        process.send_signal(signal.SIGINT)
        slow.join(WAIT_S * 3)
        _, err = process.communicate(timeout=60)
    assert len(got) == 1, err
    assert process.returncode == 0, err


def test_workers_whose_pool_was_killed_stop_themselves(tmp_path: Path) -> None:
    with pool_process(tmp_path) as (process, port):
        pids = answering(port)
        process.kill()
        process.communicate(timeout=60)  # its stderr closes once every worker has stopped
        assert len(pids) == 2
        wait_until(lambda: refused(port), timeout=60)


def test_a_worker_that_keeps_dying_at_start_stops_the_pool(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pool = WorkerPool(2, failing_worker, (free_port(),), QUICK_RESTARTS)
    with caplog.at_level(logging.INFO, logger="spoolmq.workers"):
        assert pool.run() == 1
    assert "died at start 3 times in a row (last: exit status 3)" in caplog.text
    assert pool.pids() == []


def test_restarts_back_off_while_a_worker_dies_at_start() -> None:
    restarts = Restarts(first_delay_s=0.5, max_delay_s=3.0)
    assert [restarts.delay_s(n) for n in range(6)] == [0.5, 0.5, 1.0, 2.0, 3.0, 3.0]


def test_the_default_number_of_workers_is_the_cpus_this_process_may_use() -> None:
    assert cpu_count() == len(os.sched_getaffinity(0))
