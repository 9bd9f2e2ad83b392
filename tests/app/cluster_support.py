"""``spoolmq serve`` processes in cluster mode against a real etcd, for the cluster tests."""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.net import free_port
from tests.serve_process import serve_command, wait_ready
from tests.tls_support import Certificates

FILE_SIZE = 256 * 1024


@dataclass
class ClusterBroker:
    """One broker process of a test cluster; stopped (by its PID) by the same test."""

    name: str
    store: Path
    etcd_url: str
    group: str = "g1"
    replication: str = "sync"
    extra: list[str] = field(default_factory=list)  # more `spoolmq serve` flags
    port: int = field(default_factory=free_port)
    ha_port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    certificates: Certificates | None = None  # --tls-cert/--tls-key/--tls-ca: https, TLS HA

    @property
    def url(self) -> str:
        scheme = "https" if self.certificates is not None else "http"
        return f"{scheme}://127.0.0.1:{self.port}"

    @property
    def verify(self) -> ssl.SSLContext | bool:
        """How a test client checks this broker's certificate."""
        return self.certificates.client_context() if self.certificates is not None else True

    def _tls_flags(self) -> list[str]:
        certificates = self.certificates
        if certificates is None:
            return []
        return [
            f"--{name.replace('_', '-')}={path}" for name, path in certificates.settings().items()
        ]

    def start(self, role: str = "master") -> ClusterBroker:
        log = (self.store.parent / f"{self.store.name}.log").open("ab")
        self.process = subprocess.Popen(
            serve_command(
                self.store,
                self.port,
                "--role",
                role,
                "--broker-name",
                self.name,
                "--ha-listen",
                f"127.0.0.1:{self.ha_port}",
                "--replication",
                self.replication,
                "--cluster",
                "test",
                "--etcd",
                self.etcd_url,
                "--broker-group",
                self.group,
                "--etcd-lease-ttl-s",
                "2",
                "--commit-log-file-size",
                str(FILE_SIZE),
                "--consume-queue-units-per-file",
                "1000",
                "--config-sync-interval-s",
                "0.2",
                "--ha-heartbeat-s",
                "0.2",
                "--log-level",
                os.environ.get("SPOOLMQ_TEST_LOG_LEVEL", "warning"),
                *self._tls_flags(),
                *self.extra,
            ),
            env=dict(os.environ),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        process = self.process
        if not wait_ready(self.url, lambda: process.poll() is None, 60, self.verify):
            self.kill()
            raise RuntimeError(f"broker {self.name} did not become ready")
        return self

    def kill(self) -> None:
        """kill -9: no lease revoked, no flush — the lease has to lapse."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def replica(self) -> dict[str, Any]:
        answer: dict[str, Any] = httpx.get(
            f"{self.url}/v1/replication", timeout=10, verify=self.verify
        ).json()
        return answer

    def role(self) -> str | None:
        try:
            return str(self.replica()["role"])
        except httpx.HTTPError:
            return None
