"""``spoolmq proxy`` from the command line: it serves the cluster named in etcd."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from app.cli import main
from tests.etcd_support import start_etcd
from tests.net import free_port


def test_proxy_command_serves_the_cluster_route_table(tmp_path: Path) -> None:
    etcd = start_etcd(tmp_path)
    port = free_port()
    command = ["proxy", "--cluster", "c9", "--etcd", etcd.url, "--port", str(port)]
    process = subprocess.Popen(
        [sys.executable, "-m", "app.cli", *command],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        health = None
        while health is None:
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).json()
            except httpx.TransportError:
                assert process.poll() is None, "the proxy exited"
                assert time.monotonic() < deadline, "the proxy did not start"
                time.sleep(0.05)
        assert (health["status"], health["cluster"]) == ("ok", "c9")
        missing = httpx.get(f"http://127.0.0.1:{port}/v1/topics/T/route", timeout=5)
        assert (missing.status_code, missing.json()["code"]) == (404, "TOPIC_NOT_FOUND")
    finally:
        process.terminate()
        process.wait(timeout=30)
        etcd.stop()


def test_proxy_command_refuses_to_listen_beyond_loopback_unless_asked(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["proxy", "--cluster", "c", "--etcd", "http://127.0.0.1:1", "--host", "0.0.0.0"]
    assert main(argv) == 2
    assert "--allow-anonymous" in capsys.readouterr().err


def test_proxy_command_refuses_a_busy_port_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = ["proxy", "--cluster", "c", "--etcd", "http://127.0.0.1:1", "--port", str(port)]
        assert main(argv) == 2
    assert capsys.readouterr().err == (
        f"spoolmq: cannot listen on 127.0.0.1:{port}: the port is in use (another server? "
        "choose another with --port)\n"
    )
