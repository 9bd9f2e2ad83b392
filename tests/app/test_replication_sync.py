"""Sync replication (SYNC_MASTER): a send is answered once the in-sync slave has it.

The master runs in this process; the slave is a ``spoolmq serve --role slave`` process of its
own, so the test can stall it (SIGSTOP) and let it go (SIGCONT).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import LiveServer, start_server, wait_until
from tests.net import free_port

BIN = Path(sys.executable).parent
FILE_SIZE = 64 * 1024
SLAVE = "slave-p"


def start_slave_process(store: Path, master: LiveServer) -> tuple[subprocess.Popen[bytes], str]:
    """``spoolmq serve`` as a slave of ``master``; the process and its URL, once ready."""
    port = free_port()
    ha_address = master.broker.replica.ha_address
    assert ha_address is not None
    process = subprocess.Popen(
        [
            str(BIN / "spoolmq"),
            "serve",
            "--store-dir",
            str(store),
            "--port",
            str(port),
            "--role",
            "slave",
            "--broker-name",
            SLAVE,
            "--master-http",
            master.url,
            "--master-ha",
            ha_address,
            "--commit-log-file-size",
            str(FILE_SIZE),
            "--consume-queue-units-per-file",
            "1000",
            "--log-level",
            "warning",
        ],
        env=dict(os.environ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return process, url
        except httpx.TransportError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError("the slave process did not become ready")
        time.sleep(0.05)


def stop_process(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGCONT)
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def send(client: httpx.Client, body: str) -> dict[str, Any]:
    response = client.post("/v1/topics/SyncT/messages", json={"body": body, "queue_id": 0})
    assert response.status_code == 201, response.text
    receipt: dict[str, Any] = response.json()["messages"][0]
    return receipt


def replica(url: str) -> dict[str, Any]:
    answer: dict[str, Any] = httpx.get(f"{url}/v1/replication", timeout=10).json()
    return answer


@pytest.fixture(scope="module")
def master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    server = start_server(
        tmp_path_factory.mktemp("sync-master"),
        commit_log_file_size=FILE_SIZE,
        broker_name="master-s",
        ha_listen="127.0.0.1:0",
        replication="sync",
        sync_flush_timeout_ms=1500,
        ha_catch_up_window_s=120,  # a stalled slave stays in the set for the whole test
    )
    yield server
    server.stop()


def test_sync_replication(master: LiveServer, tmp_path: Path) -> None:
    client = master.client()
    # No slave yet: stored on the master, answered SLAVE_NOT_AVAILABLE.
    alone = send(client, "alone")
    assert alone["status"] == "SLAVE_NOT_AVAILABLE"
    assert client.get(f"/v1/messages/{alone['msg_id']}").status_code == 200

    process, slave_url = start_slave_process(tmp_path / "slave", master)
    try:
        wait_until(lambda: replica(master.url)["sync_state_set"] == [SLAVE])
        # In sync: each send is answered only once the slave has it.
        for i in range(5):
            receipt = send(client, f"sync-{i}")
            assert receipt["status"] == "PUT_OK"
            end = replica(master.url)["max_physical_offset"]
            assert end > receipt["commit_log_offset"]
            assert replica(slave_url)["max_physical_offset"] >= end

        # A stalled slave: the send is stored but times out waiting for it.
        process.send_signal(signal.SIGSTOP)
        stalled = send(client, "stalled")
        assert stalled["status"] == "FLUSH_SLAVE_TIMEOUT"
        assert client.get(f"/v1/messages/{stalled['msg_id']}").status_code == 200
        process.send_signal(signal.SIGCONT)
        end = replica(master.url)["max_physical_offset"]
        wait_until(lambda: replica(slave_url)["max_physical_offset"] >= end)
        wait_until(lambda: replica(master.url)["sync_state_set"] == [SLAVE])
        assert send(client, "resumed")["status"] == "PUT_OK"
        slaves = replica(master.url)["slaves"]
        assert [(s["name"], s["in_sync"]) for s in slaves] == [(SLAVE, True)]
    finally:
        stop_process(process)
    # The slave is gone: nobody in sync any more.
    wait_until(lambda: replica(master.url)["sync_state_set"] == [])
    assert send(client, "gone")["status"] == "SLAVE_NOT_AVAILABLE"
