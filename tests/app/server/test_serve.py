"""Serving and stopping: should_exit from another thread or a signal, the graceful shutdown
(on_shutdown, idle connections closed at once, requests in progress given their time, then
cancelled), the date header, and listen_socket.
"""

from __future__ import annotations

import asyncio
import dataclasses
import queue
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from pathlib import Path

import pytest

from app.server import ListenError, Server, listen_socket
from tests.app.server.support import (
    FAST,
    WAIT_S,
    Answer,
    AsgiApp,
    Receive,
    Scope,
    Send,
    answer,
    http_app,
    next_item,
    read_body,
    request_bytes,
    serving,
    start,
    until,
)

ROOT = Path(__file__).resolve().parents[3]


class Shutdowns:
    """An on_shutdown that counts its calls and lets apps wait for the first."""

    def __init__(self) -> None:
        self.calls = 0
        self.event = threading.Event()

    def __call__(self) -> None:
        self.calls += 1
        self.event.set()


def _held(
    started: queue.Queue[str], release: threading.Event, cancelled: queue.Queue[str]
) -> AsgiApp:
    """An app that says it started, then answers only once ``release`` is set."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await read_body(receive)
        if scope["path"] == "/quick":
            await answer(send, 200, b"quick")
            return
        started.put(scope["path"])
        try:
            await until(release, within_s=60)
        except asyncio.CancelledError:
            cancelled.put(scope["path"])
            raise
        await answer(send, 200, b"finished")

    return http_app(app)


def _parts() -> tuple[queue.Queue[str], threading.Event, queue.Queue[str]]:
    return queue.Queue(), threading.Event(), queue.Queue()


def test_should_exit_from_another_thread_stops_the_server() -> None:
    shutdowns = Shutdowns()
    running = start(
        http_app(lambda scope, receive, send: answer(send, 200, b"up")), FAST, shutdowns
    )
    client = running.connect()
    client.request("GET", "/")
    assert client.read_answer().body == b"up"
    running.stop()
    assert shutdowns.calls == 1
    with pytest.raises(ConnectionRefusedError):
        running.connect()
    client.close()


def test_a_request_in_progress_finishes_and_its_connection_then_closes() -> None:
    """on_shutdown comes first (the broker answers its long-polls there): the app, woken
    by it, answers, with connection: close; a request pipelined behind is not started."""
    shutdowns = Shutdowns()
    started, _, cancelled = _parts()
    app = _held(started, shutdowns.event, cancelled)
    running = start(app, FAST, shutdowns)
    client = running.connect()
    client.send(request_bytes("GET", "/held") + request_bytes("GET", "/quick"))
    assert next_item(started) == "/held"
    running.server.should_exit = True
    got = client.read_answer()
    assert (got.status, got.body) == (200, b"finished")
    assert got.header("connection") == "close"
    assert client.is_closed()  # /quick was never answered
    running.stop()
    assert cancelled.empty()
    client.close()


def test_a_request_past_the_graceful_time_is_cancelled() -> None:
    started, release, cancelled = _parts()
    limits = dataclasses.replace(FAST, graceful_shutdown_s=0.3)
    running = start(_held(started, release, cancelled), limits)
    client = running.connect()
    client.request("GET", "/forever")
    assert next_item(started) == "/forever"
    running.stop()
    assert next_item(cancelled) == "/forever"
    got = client.read_answer()  # it had not begun its answer: the server's own 500
    assert got.status == 500
    assert client.is_closed()
    client.close()


def test_an_answer_streaming_past_the_graceful_time_is_cut() -> None:
    cancelled: queue.Queue[str] = queue.Queue()

    async def endless(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        try:
            while True:
                await send({"type": "http.response.body", "body": b"tick", "more_body": True})
                await asyncio.sleep(0.05)
        except asyncio.CancelledError:
            cancelled.put("cancelled")
            raise

    limits = dataclasses.replace(FAST, graceful_shutdown_s=0.3)
    running = start(http_app(endless), limits)
    client = running.connect()
    client.request("GET", "/")
    assert client.read_until(b"tick")
    running.stop()
    assert next_item(cancelled) == "cancelled"
    rest = client.read_to_close()
    assert not rest.endswith(b"0\r\n\r\n")  # cut, not ended as if whole
    client.close()


def test_idle_connections_are_closed_at_once() -> None:
    """Long deadlines: the closes come from the shutdown, and none is answered 408."""
    limits = dataclasses.replace(FAST, keep_alive_timeout_s=60.0, header_timeout_s=60.0)
    running = start(http_app(lambda scope, receive, send: answer(send, 200, b"ok")), limits)
    kept = running.connect()
    kept.request("GET", "/")
    assert kept.read_answer().status == 200
    silent = running.connect()
    halfway = running.connect()
    halfway.send(b"GET / HTTP/1.1\r\nHost: te")
    running.stop()
    for client in (kept, silent, halfway):
        assert client.is_closed()
        client.close()


def test_new_connections_are_refused_once_the_server_stops() -> None:
    shutdowns = Shutdowns()
    started, release, cancelled = _parts()
    running = start(_held(started, release, cancelled), FAST, shutdowns)
    client = running.connect()
    client.request("GET", "/held")
    assert next_item(started) == "/held"
    running.server.should_exit = True
    assert shutdowns.event.wait(WAIT_S)  # after the listening sockets closed
    with pytest.raises(ConnectionRefusedError):
        running.connect()
    release.set()
    assert client.read_answer().body == b"finished"
    running.stop()
    client.close()


def test_the_server_serves_every_socket_it_is_given() -> None:
    running = start(
        http_app(lambda scope, receive, send: answer(send, 200, b"%d" % scope["server"][1])),
        sockets=2,
    )
    try:
        assert len(set(running.ports)) == 2
        for port in running.ports:
            client = running.connect(port=port)
            client.request("GET", "/")
            assert client.read_answer().body == b"%d" % port
    finally:
        running.close_clients()
        running.stop()


async def test_serve_on_the_callers_loop_stops_on_handle_exit() -> None:
    sock = listen_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    server = Server(http_app(lambda scope, receive, send: answer(send, 200, b"here")), FAST)
    serving_task = asyncio.create_task(server.serve([sock]))
    while not server.started:
        assert not serving_task.done()
        await asyncio.sleep(0.005)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request_bytes("GET", "/", [("Connection", "close")]))
    data = await asyncio.wait_for(reader.read(), WAIT_S)
    assert data.startswith(b"HTTP/1.1 200 OK\r\n") and data.endswith(b"here")
    writer.close()
    await writer.wait_closed()
    server.handle_exit()
    await asyncio.wait_for(serving_task, WAIT_S)


_SIGNALLED = textwrap.dedent(
    """
    import sys
    from app.server import Server, ServerLimits, listen_socket

    def on_shutdown():
        print("on_shutdown", flush=True)

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        body = b"alive"
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", b"%d" % len(body))]})
        await send({"type": "http.response.body", "body": body})

    sock = listen_socket("127.0.0.1", 0)
    print(sock.getsockname()[1], flush=True)
    Server(app, ServerLimits(), on_shutdown).run([sock])
    print("stopped", flush=True)
    """
)


def _get(port: int) -> bytes:
    """One answer from the server on ``port``, once it listens."""
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)
            break
        except ConnectionRefusedError:
            assert time.monotonic() < deadline, "the server never listened"
            time.sleep(0.02)
    with sock:
        sock.sendall(request_bytes("GET", "/", [("Connection", "close")]))
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    return reply


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_stops_the_server_cleanly(sig: signal.Signals) -> None:
    process = subprocess.Popen(
        [sys.executable, "-c", _SIGNALLED],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline())
        assert _get(port).endswith(b"alive")
        process.send_signal(sig)
        out, err = process.communicate(timeout=WAIT_S * 3)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, err
    assert out.split() == ["on_shutdown", "stopped"]


# ---------------------------------------------------------------- the date header


def _dated(got: Answer) -> datetime:
    value = got.header("date")
    assert value is not None, got.raw
    assert value.endswith(" GMT")
    return parsedate_to_datetime(value)


def test_every_answer_has_a_date() -> None:
    async def various(scope: Scope, receive: Receive, send: Send) -> None:
        await read_body(receive)
        if scope["path"] == "/fail":
            raise RuntimeError("for the 500")
        if scope["path"] == "/stream":
            await send({"type": "http.response.start", "status": 201, "headers": []})
            await send({"type": "http.response.body", "body": b"s"})
            return
        await answer(send, 200, b"ok")

    limits = dataclasses.replace(FAST, header_timeout_s=0.3)
    answers = []
    with serving(http_app(various), limits) as running:
        client = running.connect()
        for path in ("/", "/stream", "/"):
            client.request("GET", path)
            answers.append(client.read_answer())
        for wire in (
            request_bytes("GET", "/fail"),  # 500
            b"NOT HTTP\r\n\r\n",  # 400
            request_bytes("GET", "/", [("X-Huge", "h" * 20_000)]),  # 431
            b"GET / HTTP/1.1\r\n",  # 408
        ):
            client = running.connect()
            client.send(wire)
            answers.append(client.read_answer())
    assert [a.status for a in answers] == [200, 201, 200, 500, 400, 431, 408]
    now = datetime.now(UTC)
    for got in answers:
        assert abs(_dated(got) - now) < timedelta(minutes=5)  # a sanity bound, not a timing


# ---------------------------------------------------------------- listen_socket


def test_listen_socket_gives_a_bound_socket_a_server_can_serve() -> None:
    sock = listen_socket("127.0.0.1", 0)
    try:
        assert sock.getsockname()[0] == "127.0.0.1"
        assert sock.get_inheritable()
    finally:
        sock.close()


def test_listen_socket_on_a_busy_port_is_a_clear_listen_error() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ListenError) as caught:
            listen_socket("127.0.0.1", port, how="--listen")
    assert str(caught.value) == (
        f"cannot listen on 127.0.0.1:{port}: the port is in use (another server? "
        "choose another with --listen)"
    )


def test_listen_socket_on_an_address_not_of_this_host_is_a_listen_error() -> None:
    with pytest.raises(ListenError, match=r"^cannot listen on 192\.0\.2\.1:\d+: "):
        listen_socket("192.0.2.1", 0)  # TEST-NET-1: never a local address


def test_listen_socket_with_reuse_port_shares_the_port_with_another_so_bound() -> None:
    first = listen_socket("127.0.0.1", 0, reuse_port=True)
    first.listen()
    port = first.getsockname()[1]
    try:
        second = listen_socket("127.0.0.1", port, reuse_port=True)
        second.listen()
        second.close()
        with pytest.raises(ListenError, match="the port is in use"):
            listen_socket("127.0.0.1", port)  # not bound to share it: refused
    finally:
        first.close()


def test_two_servers_on_sockets_bound_with_reuse_port_both_take_connections() -> None:
    first = listen_socket("127.0.0.1", 0, reuse_port=True)
    port = first.getsockname()[1]
    second = listen_socket("127.0.0.1", port, reuse_port=True)
    servers = [Server(http_app(_saying(name)), FAST) for name in (b"first", b"second")]
    threads = [
        threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        for server, sock in zip(servers, (first, second), strict=True)
    ]
    for thread in threads:
        thread.start()
    try:
        until_true = time.monotonic() + WAIT_S
        while not all(server.started for server in servers):
            assert time.monotonic() < until_true, "the servers did not start"
            time.sleep(0.005)
        answered = set()
        for _ in range(200):  # connections spread by their address hash: both soon answer
            answered.add(_get(port).rsplit(b"\r\n\r\n", 1)[1])
            if len(answered) == 2:
                break
        assert answered == {b"first", b"second"}
    finally:
        for server in servers:
            server.should_exit = True
        for thread in threads:
            thread.join(WAIT_S)
        first.close()
        second.close()


def _saying(name: bytes) -> AsgiApp:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await read_body(receive)
        await answer(send, 200, name)

    return app


def test_every_answer_carries_the_servers_own_headers_after_the_date() -> None:
    async def ok(scope: Scope, receive: Receive, send: Send) -> None:
        await read_body(receive)
        await answer(send, 200, b"ok")

    sock = listen_socket("127.0.0.1", 0)
    server = Server(http_app(ok), FAST, headers=[(b"x-proxy-worker", b"2; pid=42")])
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        ok_answer = _get(sock.getsockname()[1])
        with socket.create_connection(sock.getsockname(), timeout=WAIT_S) as raw:
            raw.sendall(b"NOT HTTP\r\n\r\n")  # refused by the server itself: a 400
            refusal = raw.recv(65536)
    finally:
        server.should_exit = True
        thread.join(WAIT_S)
        sock.close()
    for got in (ok_answer, refusal):
        head = got.split(b"\r\n\r\n", 1)[0].split(b"\r\n")
        assert head[1].startswith(b"date: ") and head[2] == b"x-proxy-worker: 2; pid=42", got
