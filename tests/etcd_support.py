"""A real etcd server (Debian's ``etcd-server``) for tests: one member on free loopback ports,
its client URL https with ``certificates`` (etcd's ``--cert-file``, ``--key-file`` and
``--trusted-ca-file``)."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import httpx

from tests.net import free_ports
from tests.tls_support import Certificates

ETCD_BINARY = shutil.which("etcd") or "/usr/bin/etcd"


@dataclass
class EtcdServer:
    """One etcd member started by a test; stopped (by its PID) by the same test."""

    data_dir: Path
    client_port: int
    peer_port: int
    process: subprocess.Popen[bytes] | None = None
    certificates: Certificates | None = None

    @property
    def url(self) -> str:
        scheme = "https" if self.certificates is not None else "http"
        return f"{scheme}://127.0.0.1:{self.client_port}"

    def _tls_flags(self) -> list[str]:
        certificates = self.certificates
        if certificates is None:
            return []
        return [
            f"--cert-file={certificates.cert}",
            f"--key-file={certificates.key}",
            f"--trusted-ca-file={certificates.ca}",
        ]

    def start(self) -> EtcdServer:
        peer = f"http://127.0.0.1:{self.peer_port}"
        log_path = self.data_dir.parent / f"{self.data_dir.name}.log"
        with log_path.open("ab") as log:
            self.process = self._spawn(peer, log)
        deadline = time.monotonic() + 30
        verify = self.certificates.client_context() if self.certificates else True
        while True:
            try:
                health = httpx.get(self.url + "/health", timeout=1, verify=verify)
                if health.json().get("health") == "true":
                    return self
            except (httpx.HTTPError, ValueError):
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"etcd on {self.url} did not start (see {log_path})")
            time.sleep(0.05)

    def _spawn(self, peer: str, log: BinaryIO) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [
                ETCD_BINARY,
                "--name=spoolmq-test",
                f"--data-dir={self.data_dir}",
                f"--listen-client-urls={self.url}",
                f"--advertise-client-urls={self.url}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=spoolmq-test={peer}",
                "--log-level=error",
                *self._tls_flags(),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    def stop(self) -> None:
        """Stop etcd (SIGTERM, then SIGKILL) — it can be started again on the same data."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


def start_etcd(tmp_dir: Path, certificates: Certificates | None = None) -> EtcdServer:
    client_port, peer_port = free_ports(2)
    return EtcdServer(tmp_dir / "etcd", client_port, peer_port, certificates=certificates).start()
