"""``--log-level`` on ``spoolmq serve`` and ``spoolmq proxy``: etcd calls (lease renewals, route
reads) and a slave's config syncs are request lines at DEBUG, never at INFO."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx

from tests.app.cluster_support import ClusterBroker
from tests.conftest import wait_until
from tests.etcd_support import start_etcd
from tests.net import free_port

REQUEST_LINE = "HTTP Request:"


def proxy_log(tmp_path: Path, etcd_url: str, level: str) -> str:
    """Start a proxy at ``level``, wait until it serves (its route table read), stop it."""
    port = free_port()
    log = tmp_path / f"proxy-{level}.log"
    command = ["proxy", "--cluster", "c", "--etcd", etcd_url, "--port", str(port)]
    command += ["--workers", "1"]
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "app.cli", *command, "--log-level", level],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:

        def serving() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).is_success
            except httpx.TransportError:
                assert process.poll() is None, log.read_text()
                return False

        wait_until(serving, timeout=60)
    finally:
        process.terminate()
        process.wait(timeout=30)
    return log.read_text()


def test_the_proxy_logs_its_etcd_reads_at_debug_only(tmp_path: Path) -> None:
    etcd = start_etcd(tmp_path)
    try:
        debug = proxy_log(tmp_path, etcd.url, "debug")
        info = proxy_log(tmp_path, etcd.url, "info")
    finally:
        etcd.stop()
    assert f"{REQUEST_LINE} POST {etcd.url}/v3/kv/range" in debug
    assert REQUEST_LINE not in info


def test_lease_renewals_and_config_syncs_log_at_debug_only(tmp_path: Path) -> None:
    etcd = start_etcd(tmp_path)
    master = ClusterBroker("m", tmp_path / "m", etcd.url, extra=["--log-level", "debug"])
    slave = ClusterBroker("s", tmp_path / "s", etcd.url, extra=["--log-level", "info"])
    master_log, slave_log = (tmp_path / "m.log"), (tmp_path / "s.log")
    try:
        master.start()
        slave.start()

        def renewed_three_times() -> bool:
            return master_log.read_text().count("/v3/lease/keepalive") >= 3

        # Meanwhile the slave renewed its own lease too, and synced configs every 0.2 s.
        wait_until(renewed_three_times, timeout=60)
    finally:
        slave.stop()
        master.stop()
        etcd.stop()
    logged = slave_log.read_text()
    assert "joins group g1 as slave of m" in logged  # INFO lines are there
    assert REQUEST_LINE not in logged
