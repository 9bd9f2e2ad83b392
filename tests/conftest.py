"""Shared fixtures: a real spoolmq server (uvicorn, in a thread) on 127.0.0.1 with a temp store.

Every test also fails when a server it ran in this process answered a problem code its
operation does not declare (``undeclared_codes_fail_the_test``: the declared codes are the
OpenAPI document's, :mod:`app.problem_codes`).

Also the order of a run (``pytest_collection_modifyitems``): the modules of ``LONG_FIRST``
start first, longest first, so that a run on two workers (``make test``: ``pytest -n 2
--dist loadfile``) does not end on one long module; and the modules of ``SERIAL_MODULES``
are marked ``serial``, which ``make test`` runs after the others, alone.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from app.errors import UNDECLARED_CODE
from app.main import build_server, create_app
from app.server import Server
from app.settings import Settings
from services import Broker
from tests.etcd_support import EtcdServer, start_etcd

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[1]

SERIAL_MODULES = (
    "tests/app/test_cluster.py",
    "tests/app/test_cluster_exactly_once.py",
    "tests/app/test_cluster_failover.py",
    "tests/app/test_cluster_partitions.py",
    "tests/app/test_cluster_partitions_state.py",
    "tests/app/test_cluster_proxy.py",
    "tests/app/test_timer_failover.py",
    "tests/app/test_transactions_failover.py",
    "tests/spark_jobs/streaming/test_cluster.py",
)
"""Brokers killed, frozen or failed over on 2-second etcd leases, under load: a test running
next to them would take the CPU their lease renewals and timeouts count on, so they run alone
(``-m serial``); every other module runs next to another (``-m "not serial"``)."""

LONG_FIRST = (
    "tests/test_readme.py",
    "tests/app/test_fuzz.py",
    "tests/app/test_openapi.py",
    "tests/spark_jobs/streaming/test_paid_orders.py",
    "tests/app/test_pop.py",
    "tests/spark_jobs/streaming/test_restart.py",
    "tests/app/test_transactions_crash.py",
    "tests/app/test_power_cut.py",
    "tests/spark_jobs/test_spark_submit.py",
    "tests/spark_jobs/lag/test_job.py",
    "tests/storage/test_crash.py",
    "tests/app/test_idempotency_crash.py",
    "tests/app/test_pop_crash.py",
    "tests/spark_jobs/streaming/test_source.py",
    "tests/app/test_timer_crash.py",
    "tests/spark_jobs/replay/test_job.py",
    "tests/storage/test_store_model.py",
)
"""The longest modules of a run (from ``--durations``), longest first. Only the order of a run
depends on this list, and only its speed on two workers."""


def pytest_configure(config: pytest.Config) -> None:
    missing = [m for m in (*SERIAL_MODULES, *LONG_FIRST) if not (ROOT / m).is_file()]
    if missing:
        raise pytest.UsageError(f"tests/conftest.py names modules that do not exist: {missing}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    serial = {ROOT / m for m in SERIAL_MODULES}
    rank = {ROOT / m: i for i, m in enumerate(LONG_FIRST)}
    for item in items:
        if item.path in serial:
            item.add_marker(pytest.mark.serial)
    items.sort(key=lambda item: rank.get(item.path, len(rank)))  # stable: modules stay whole


class _UndeclaredCodes(logging.Handler):
    """Keeps the error mapping's lines about codes an operation does not declare."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg == UNDECLARED_CODE:
            self.lines.append(record.getMessage())


@pytest.fixture(autouse=True)
def undeclared_codes_fail_the_test() -> Iterator[_UndeclaredCodes]:
    handler = _UndeclaredCodes()
    logger = logging.getLogger("app.errors")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
    assert not handler.lines, "\n".join(handler.lines)


SMALL_STORE: dict[str, Any] = {
    "commit_log_file_size": 8 * 1024 * 1024,
    "consume_queue_units_per_file": 1000,
    "offset_persist_interval_s": 0.2,
}
"""Small files so tests cross file boundaries and start fast."""


@dataclass
class LiveServer:
    """A running server: its URL, app and broker, and a way to run code on its loop."""

    settings: Settings
    url: str
    server: Server
    thread: threading.Thread
    broker: Broker
    clients: list[httpx.Client] = field(default_factory=list)

    @property
    def store_dir(self) -> Path:
        return self.settings.store_dir

    def client(self, **kwargs: Any) -> httpx.Client:
        client = httpx.Client(base_url=self.url, timeout=kwargs.pop("timeout", 40), **kwargs)
        self.clients.append(client)
        return client

    def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the server's event loop thread (the store's owner) and return its value."""

        async def run() -> T:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self.broker.loop).result(timeout=30)

    def stop(self) -> None:
        for client in self.clients:
            client.close()
        self.server.should_exit = True
        self.thread.join(timeout=60)
        assert not self.thread.is_alive(), "the server did not stop"


def start_server(store_dir: Path, *, ready: bool = True, **overrides: Any) -> LiveServer:
    """Start a server on a free port of 127.0.0.1 and wait until /readyz answers 200.

    With ``ready=False`` wait only until the server answers at all.
    """
    values = {**SMALL_STORE, "log_level": "warning", **overrides}
    settings = Settings(store_dir=store_dir, host="127.0.0.1", port=0, **values)
    app = create_app(settings)
    server = build_server(app, settings)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="spoolmq-server", daemon=True
    )
    thread.start()
    tls = settings.tls()
    url = f"{'https' if tls is not None and tls.serves else 'http'}://127.0.0.1:{port}"
    live = LiveServer(settings, url, server, thread, app.state.broker)
    deadline = time.monotonic() + 60
    verify = tls.client_context() if tls is not None else True
    with httpx.Client(base_url=url, timeout=5, verify=verify) as client:
        while True:
            try:
                status = client.get("/readyz").status_code
                if status == 200 or not ready:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or not thread.is_alive():
                live.stop()
                raise RuntimeError(f"server on {url} did not become ready")
            time.sleep(0.02)
    return live


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """One server per test module; tests use their own topic and group names."""
    live = start_server(tmp_path_factory.mktemp("store"))
    yield live
    live.stop()


@pytest.fixture
def client(live_server: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=live_server.url, timeout=40) as client:
        yield client


@pytest.fixture
def topic() -> str:
    """A fresh topic name."""
    return f"T_{uuid.uuid4().hex[:12]}"


@pytest.fixture
def group() -> str:
    """A fresh consumer group name."""
    return f"G_{uuid.uuid4().hex[:12]}"


def wait_until(condition: Callable[[], bool], timeout: float = 20.0) -> None:
    """Poll ``condition`` until it holds (a bound on the wait, not a timing assertion)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[EtcdServer]:
    """A real etcd (Debian's etcd-server) on free loopback ports, stopped after the test."""
    server = start_etcd(tmp_path)
    try:
        yield server
    finally:
        server.stop()
