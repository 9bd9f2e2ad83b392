"""``spoolmq serve`` as a child process for the crash tests and benches: started on a free
port, waited for until it is ready, and killed with SIGKILL by the PID the caller holds."""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import httpx

from tests.net import free_port

BIN = Path(sys.executable).parent


def serve_command(store: Path, port: int, *args: str) -> list[str]:
    """``spoolmq serve`` on ``store`` and ``port`` of 127.0.0.1, then ``args``."""
    return [str(BIN / "spoolmq"), "serve", "--store-dir", str(store), "--port", str(port), *args]


class ServeProcess:
    """One ``spoolmq serve --store-dir STORE --port P ARGS...`` process."""

    def __init__(
        self,
        store: Path,
        *args: str,
        env: Mapping[str, str] | None = None,
        ready_timeout_s: float = 60,
    ) -> None:
        self.store = store
        self.args = args
        self.env = {**os.environ, **(env or {})}
        self.ready_timeout_s = ready_timeout_s
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = self._start()

    def _start(self) -> subprocess.Popen[bytes]:
        log_path = self.store.parent / f"{self.store.name}.serve.log"
        with log_path.open("ab") as log:  # the server's warnings, to say why it did not start
            process = subprocess.Popen(
                serve_command(self.store, self.port, "--log-level", "warning", *self.args),
                env=self.env,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        if not wait_ready(self.url, lambda: process.poll() is None, self.ready_timeout_s):
            exited = process.poll()
            kill_9(process)
            said = log_path.read_bytes()[-2000:].decode(errors="replace")
            raise RuntimeError(
                f"the server on port {self.port} did not become ready "
                f"({'exit code ' + str(exited) if exited is not None else 'still running'}); "
                f"it said: {said}"
            )
        return process

    def restart(self) -> None:
        """Start again on the same store and port (after :meth:`kill`)."""
        self.process = self._start()

    def kill(self) -> None:
        """kill -9: no flush, no shutdown."""
        kill_9(self.process)

    def client(self, timeout: float = 30) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=timeout)


def wait_ready(
    url: str, alive: Callable[[], bool], timeout_s: float, verify: ssl.SSLContext | bool = True
) -> bool:
    """Whether the server at ``url`` answers ``/readyz`` before it dies or time runs out
    (``verify``: what an https server's certificate is checked with)."""
    deadline = time.monotonic() + timeout_s
    while alive() and time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/readyz", timeout=5, verify=verify).status_code == 200:
                return True
        except httpx.TransportError:
            pass
        time.sleep(0.02)
    return False


def kill_9(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL ``process`` (by its PID) if it still runs, and reap it."""
    if process.poll() is None:
        os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


class Zygote:
    """``python -m tests.serve_zygote``: forks servers on request (stopped by :meth:`close`)."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.serve_zygote"],
            cwd=Path(__file__).resolve().parents[1],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )

    def fork(self, argv: list[str], env: Mapping[str, str]) -> int:
        """Start ``spoolmq`` with ``argv`` in a forked child; its PID."""
        assert self.process.stdin is not None and self.process.stdout is not None
        request = json.dumps({"argv": argv, "env": dict(env)})
        self.process.stdin.write(request.encode() + b"\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line.strip():
            raise RuntimeError("the zygote ended")
        return int(line)

    def __enter__(self) -> Zygote:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            kill_9(self.process)
        if self.process.stdout is not None:
            self.process.stdout.close()


class ForkedServe:
    """:class:`ServeProcess`'s interface, the server forked by a :class:`Zygote`: a restart
    costs the store's recovery, not the imports. Only the env given here reaches the server."""

    def __init__(
        self,
        zygote: Zygote,
        store: Path,
        *args: str,
        env: Mapping[str, str] | None = None,
        ready_timeout_s: float = 60,
    ) -> None:
        self.zygote = zygote
        self.argv = ["serve", "--store-dir", str(store), "--log-level", "warning", *args]
        self.env = dict(env or {})
        self.ready_timeout_s = ready_timeout_s
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.pid = self._start()

    def _start(self) -> int:
        pid = self.zygote.fork([*self.argv, "--port", str(self.port)], self.env)
        if not wait_ready(self.url, lambda: _alive(pid), self.ready_timeout_s):
            _kill_pid(pid)
            raise RuntimeError("the server did not become ready")
        return pid

    def restart(self) -> None:
        self.pid = self._start()

    def kill(self) -> None:
        """kill -9, then wait until the zygote's kernel reaped it (its port is free again)."""
        _kill_pid(self.pid)

    def client(self, timeout: float = 30) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=timeout)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _kill_pid(pid: int) -> None:
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.01)
