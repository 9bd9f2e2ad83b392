"""``spoolmq proxy --workers N``: the proxy served by N processes sharing its port
(:class:`~app.server.workers.WorkerPool`), one per CPU by default.

The proxy keeps nothing that its processes would have to share: each worker has its own
route registry and etcd watch, its own keep-alive connections to the brokers, its own budget
shares of the group pulls and receives (each learns what the groups gave it), and its own
prefix for the Idempotency-Keys it makes (a fresh interpreter per worker: module state is
never inherited). The proxy keeps no counters: ``/metrics`` is the brokers' (each broker counts
what it stored and served, whichever worker forwarded it), and the proxy answers it 404 with
any number of workers.

Every answer of a worker names it: ``X-Proxy-Worker: 2; pid=4242`` (its slot, from 1, and its
process id, new after a restart), so an operator can tell which process answered a request
and find its log lines (each worker's log lines say ``[worker 2]``).
"""

from __future__ import annotations

import logging
import os
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace

from app.proxy.context import ProxyLimits
from app.proxy.main import create_proxy_app, proxy_server
from app.server import ListenError, ReusePortError, listen_socket
from app.server.workers import Restarts, WorkerPool, shares_ports

log = logging.getLogger("spoolmq.proxy")

WORKER_HEADER = b"x-proxy-worker"
HOW_TO_CHOOSE_A_PORT = "--port"


@dataclass(frozen=True, slots=True)
class ProxyService:
    """What ``spoolmq proxy`` serves, and where: all a worker needs to start on its own."""

    cluster: str
    etcd_endpoints: tuple[str, ...]
    host: str
    port: int
    limits: ProxyLimits


LogSetup = Callable[[str], None]
"""Configures a process's logging; given the text its lines are tagged with (``worker 2``)."""


def worker_header(index: int) -> tuple[bytes, bytes]:
    """The header every answer of worker ``index`` carries (this process's id in it)."""
    return WORKER_HEADER, b"%d; pid=%d" % (index, os.getpid())


def bind_port(service: ProxyService, workers: int) -> tuple[socket.socket, int]:
    """The proxy's socket and the number of processes to serve it with.

    With one, the socket is the one to serve. With several, it is bound with ``SO_REUSEPORT``
    and not listened on: it holds the port (given as 0: the one the system chose) for the
    workers, which bind their own. Where the system does not spread a port's connections over
    several sockets, a warning says so and one process serves. ListenError: the port cannot be
    had at all.
    """
    if workers > 1 and not shares_ports():
        log.warning(
            "--workers %d: several processes share a port only on Linux (SO_REUSEPORT); "
            "serving with one",
            workers,
        )
        workers = 1
    if workers > 1:
        try:
            sock = listen_socket(service.host, service.port, HOW_TO_CHOOSE_A_PORT, reuse_port=True)
        except ReusePortError as exc:
            log.warning("--workers %d: %s; serving with one", workers, exc)
            workers = 1
        else:
            return sock, workers
    return listen_socket(service.host, service.port, HOW_TO_CHOOSE_A_PORT), 1


def serve_in_workers(
    service: ProxyService,
    held: socket.socket,
    workers: int,
    log_setup: LogSetup,
    restarts: Restarts | None = None,
) -> int:
    """Serve ``service`` with ``workers`` processes on the port ``held`` holds (from
    :func:`bind_port`) until SIGTERM or SIGINT: 0 once every worker stopped, 1 when one kept
    dying at start."""
    on_port = replace(service, port=held.getsockname()[1])
    log.info("serving with %d workers on port %d", workers, on_port.port)
    with held:
        pool = WorkerPool(workers, serve_worker, (on_port, log_setup), restarts)
        return pool.run()


def serve_worker(index: int, service: ProxyService, log_setup: LogSetup) -> None:
    """One worker process: its own socket on the shared port, its own proxy app, served until
    SIGTERM. Exit status 2: the port cannot be had; 1: the app did not start."""
    log_setup(f"worker {index}")
    try:
        sock = listen_socket(service.host, service.port, HOW_TO_CHOOSE_A_PORT, reuse_port=True)
    except ListenError as exc:
        log.error("%s", exc)
        sys.exit(2)
    app = create_proxy_app(service.cluster, service.etcd_endpoints, service.limits)
    server = proxy_server(app, headers=[worker_header(index)])
    with sock:
        server.run(sockets=[sock])
    if not server.started:
        sys.exit(1)
