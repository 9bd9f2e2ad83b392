"""Exchange on the wire: how an app's answer is framed (one write for a small one, chunked,
close-delimited, headers only), what the server does when the app fails or breaks the
framing, and the access log.

A real server on 127.0.0.1 serves small ASGI apps; the clients are raw sockets.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import queue
import time
from typing import Any

import pytest

from tests.app.server.support import (
    FAST,
    Receive,
    Scope,
    Send,
    answer,
    http_app,
    next_item,
    read_body,
    request_bytes,
    serving,
)


async def _ok(scope: Scope, receive: Receive, send: Send) -> None:
    await read_body(receive)
    await answer(send, 200, b"fine")


OK = http_app(_ok)


def _still_serving(running: Any) -> None:
    client = running.connect()
    client.request("GET", "/")
    assert client.read_answer().body == b"fine"


def _start(status: int = 200, headers: list[tuple[bytes, bytes]] | None = None) -> dict[str, Any]:
    return {"type": "http.response.start", "status": status, "headers": headers or []}


def _body(body: bytes, more: bool = False) -> dict[str, Any]:
    return {"type": "http.response.body", "body": body, "more_body": more}


# ---------------------------------------------------------------- framing


def test_a_small_answer_leaves_in_one_write() -> None:
    """The head is held until the body's first bytes, even when they come later: the first
    read of the client has the whole answer."""

    async def late_body(scope: Scope, receive: Receive, send: Send) -> None:
        await read_body(receive)
        await send(_start(200, [(b"content-length", b"5")]))
        await asyncio.sleep(0.1)
        await send(_body(b"hello"))

    with serving(http_app(late_body)) as running:
        client = running.connect()
        client.request("GET", "/")
        first = client.recv()
        assert first.startswith(b"HTTP/1.1 200 OK\r\n")
        assert first.endswith(b"\r\n\r\nhello")


def test_an_answer_without_length_is_chunked_for_http_1_1() -> None:
    async def streamer(scope: Scope, receive: Receive, send: Send) -> None:
        await read_body(receive)
        await send(_start(200, [(b"content-type", b"text/plain")]))
        for piece in (b"one ", b"", b"two ", b"three"):
            await send(_body(piece, more=True))  # an empty piece is no chunk: it would end it
        await send(_body(b""))

    with serving(http_app(streamer)) as running:
        client = running.connect()
        for _ in range(2):  # the connection goes on after the last chunk
            client.request("GET", "/")
            got = client.read_answer()
            assert got.header("transfer-encoding") == "chunked"
            assert got.header("content-length") is None
            assert got.framing == "chunked"
            assert got.chunks == [b"one ", b"two ", b"three"]


def test_an_answer_without_length_is_close_delimited_for_http_1_0() -> None:
    async def streamer(scope: Scope, receive: Receive, send: Send) -> None:
        await read_body(receive)
        await send(_start(200))
        await send(_body(b"one ", more=True))
        await send(_body(b"two"))

    with serving(http_app(streamer)) as running:
        client = running.connect()
        client.request("GET", "/", version="1.0")
        got = client.read_answer()
        assert got.framing == "close"
        assert got.header("transfer-encoding") is None
        assert got.header("connection") == "close"  # once
        assert got.body == b"one two"


def test_an_answer_the_app_chunks_itself_is_not_chunked_twice() -> None:
    async def streamer(scope: Scope, receive: Receive, send: Send) -> None:
        await read_body(receive)
        await send(_start(200, [(b"Transfer-Encoding", b"chunked")]))
        await send(_body(b"abc", more=True))
        await send(_body(b""))

    with serving(http_app(streamer)) as running:
        client = running.connect()
        client.request("GET", "/")
        got = client.read_answer()
        assert got.all("transfer-encoding") == ["chunked"]
        assert got.chunks == [b"abc"]


@pytest.mark.parametrize("length", [True, False], ids=["with length", "streamed"])
def test_head_gets_the_headers_and_no_body(length: bool) -> None:
    async def both(scope: Scope, receive: Receive, send: Send) -> None:
        await read_body(receive)
        await answer(send, 200, b"the body of GET", length=length)

    with serving(http_app(both)) as running:
        client = running.connect()
        client.send(request_bytes("HEAD", "/") + request_bytes("GET", "/"))
        head = client.read_answer(head=True)
        assert head.status == 200
        if length:
            assert head.header("content-length") == "15"
        else:
            assert head.header("transfer-encoding") is None
        got = client.read_answer()  # right after the head: no body bytes came between
        assert got.body == b"the body of GET"


@pytest.mark.parametrize("status", [204, 304])
def test_204_and_304_have_no_body(status: int) -> None:
    async def bodiless(scope: Scope, receive: Receive, send: Send) -> None:
        await read_body(receive)
        if scope["path"] == "/next":
            await answer(send, 200, b"next")
            return
        await send(_start(status))
        await send(_body(b"dropped"))  # an app that sends one anyway

    with serving(http_app(bodiless)) as running:
        client = running.connect()
        client.send(request_bytes("GET", "/") + request_bytes("GET", "/next"))
        got = client.read_answer()
        assert got.status == status
        assert got.header("transfer-encoding") is None
        assert client.read_answer().body == b"next"


def test_a_large_answer_to_a_slow_reader_arrives_intact() -> None:
    """The app's sends wait while the client does not read (the transport's buffer is
    full); every byte arrives, in order."""
    piece = bytes(range(256)) * 512  # 128 KiB
    count = 128  # 16 MiB: more than the socket buffers hold (the client's is kept small)
    sent: queue.Queue[float] = queue.Queue()

    async def big(scope: Scope, receive: Receive, send: Send) -> None:
        await read_body(receive)
        await send(_start(200, [(b"content-length", b"%d" % (len(piece) * count))]))
        for _ in range(count):
            await send(_body(piece, more=True))
        await send(_body(b""))
        sent.put(time.monotonic())

    with serving(http_app(big)) as running:
        client = running.connect(receive_buffer=64 * 1024)
        client.request("GET", "/")
        time.sleep(0.3)  # the server fills the socket's buffers meanwhile
        assert sent.empty()  # the app waits for the client
        got = client.read_answer()
        assert hashlib.sha256(got.body).digest() == hashlib.sha256(piece * count).digest()
        next_item(sent)


# ---------------------------------------------------------------- an app that fails


@pytest.mark.parametrize("how", ["raises", "returns"])
def test_an_app_that_fails_before_answering_gets_a_plain_500(how: str) -> None:
    async def failing(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["path"] == "/":
            await answer(send, 200, b"fine")
        elif how == "raises":
            raise RuntimeError("broken")

    with serving(http_app(failing)) as running:
        client = running.connect()
        client.request("GET", "/fail")
        got = client.read_answer()
        assert (got.status, got.body) == (500, b"Internal Server Error")
        assert got.header("content-type") == "text/plain; charset=utf-8"
        assert got.header("connection") == "close"
        assert got.header("date")
        assert client.is_closed()
        _still_serving(running)


@pytest.mark.parametrize("sent", ["the head", "a first piece"])
def test_an_app_that_raises_after_starting_its_answer_closes_the_connection(sent: str) -> None:
    async def failing(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["path"] == "/":
            await answer(send, 200, b"fine")
            return
        await send(_start(200))
        if sent == "a first piece":
            await send(_body(b"partial", more=True))
        raise RuntimeError("broken halfway")

    with serving(http_app(failing)) as running:
        client = running.connect()
        client.request("GET", "/fail")
        rest = client.read_to_close()
        if sent == "the head":
            assert rest == b""  # the head was held: nothing went out
        else:
            assert rest.startswith(b"HTTP/1.1 200 OK\r\n")
            assert rest.endswith(b"\r\n\r\n7\r\npartial\r\n")  # no last chunk
        _still_serving(running)


def test_an_app_that_raises_after_its_answer_keeps_the_connection() -> None:
    """The answer went out whole (say a background task failed after it): the client's
    next request on the connection is answered."""
    calls: queue.Queue[str] = queue.Queue()

    async def then_fails(scope: Scope, receive: Receive, send: Send) -> None:
        await read_body(receive)
        await answer(send, 200, scope["path"].encode())
        calls.put(scope["path"])
        raise RuntimeError("after the answer")

    with serving(http_app(then_fails)) as running:
        client = running.connect()
        client.request("GET", "/one")
        assert client.read_answer().body == b"/one"
        assert next_item(calls) == "/one"
        client.request("GET", "/two")
        assert client.read_answer().body == b"/two"


@pytest.mark.parametrize("pieces", [[b"too long!"], [b"too", b" long!"]], ids=["one", "two"])
def test_more_bytes_than_the_content_length_is_the_apps_error(pieces: list[bytes]) -> None:
    errors: queue.Queue[str] = queue.Queue()

    async def overlong(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["path"] == "/":
            await answer(send, 200, b"fine")
            return
        await send(_start(200, [(b"content-length", b"5")]))
        try:
            for piece in pieces[:-1]:
                await send(_body(piece, more=True))
            await send(_body(pieces[-1]))
        except RuntimeError as exc:
            errors.put(str(exc))
            raise

    with serving(http_app(overlong)) as running:
        client = running.connect()
        client.request("GET", "/long")
        rest = client.read_to_close()
        if len(pieces) == 1:
            assert rest == b""  # the head was held with the body: nothing went out
        else:
            assert rest.endswith(b"\r\n\r\ntoo")  # not a byte past the length
        assert "longer than its Content-Length" in next_item(errors)
        _still_serving(running)


def test_fewer_bytes_than_the_content_length_is_the_apps_error() -> None:
    errors: queue.Queue[str] = queue.Queue()

    async def short(scope: Scope, receive: Receive, send: Send) -> None:
        await send(_start(200, [(b"content-length", b"50")]))
        try:
            await send(_body(b"short"))
        except RuntimeError as exc:
            errors.put(str(exc))
            raise

    with serving(http_app(short)) as running:
        client = running.connect()
        client.request("GET", "/")
        assert client.read_to_close().endswith(b"\r\n\r\nshort")  # then the close
        assert "shorter than its Content-Length" in next_item(errors)


@pytest.mark.parametrize(
    "name, value",
    [
        (b"x-split", b"a\r\nx-injected: 1"),
        (b"x-split", b"a\nb"),
        (b"x-bad\r\n", b"v"),
        (b"x:bad", b"v"),
        (b"x bad", b"v"),
        (b"", b"v"),
        (b"x-nul", b"a\x00b"),
    ],
    ids=["crlf in value", "lf in value", "crlf in name", "colon", "space", "empty", "nul"],
)
def test_invalid_header_names_and_values_are_refused(name: bytes, value: bytes) -> None:
    errors: queue.Queue[str] = queue.Queue()

    async def bad_header(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["path"] == "/":
            await answer(send, 200, b"fine")
            return
        try:
            await send(_start(200, [(name, value), (b"content-length", b"2")]))
        except RuntimeError as exc:
            errors.put(str(exc))
            raise
        await send(_body(b"no"))

    with serving(http_app(bad_header)) as running:
        client = running.connect()
        client.request("GET", "/bad")
        assert client.read_to_close() == b""  # nothing of it on the wire
        assert "invalid HTTP header" in next_item(errors)
        _still_serving(running)


def test_sends_out_of_order_are_the_apps_error() -> None:
    errors: queue.Queue[str] = queue.Queue()

    async def confused(scope: Scope, receive: Receive, send: Send) -> None:
        for message in (_body(b"first?"), _start(200)):
            try:
                await send(message)
            except RuntimeError as exc:
                errors.put(str(exc))
        await send(_body(b"ok"))
        for message in (_body(b"again"), _start(200)):
            try:
                await send(message)
            except RuntimeError as exc:
                errors.put(str(exc))

    with serving(http_app(confused)) as running:
        client = running.connect()
        client.request("GET", "/")
        assert client.read_answer().chunks == [b"ok"]
        assert "expected 'http.response.start'" in next_item(errors)
        assert "after the answer was complete" in next_item(errors)
        assert "after the answer was complete" in next_item(errors)
        client.request("GET", "/")  # the connection goes on
        assert client.read_answer().chunks == [b"ok"]


# ---------------------------------------------------------------- the access log


def test_the_access_log_has_a_line_for_each_answer(caplog: pytest.LogCaptureFixture) -> None:
    limits = dataclasses.replace(FAST, access_log=True)
    with caplog.at_level(logging.INFO, logger="spoolmq.access"), serving(OK, limits) as running:
        client = running.connect()
        client.request("GET", "/path?q=1")
        assert client.read_answer().status == 200
        client.request("POST", "/other", version="1.0")
        assert client.read_answer().status == 200
        port = client.sock.getsockname()[1]
    lines = [r.getMessage() for r in caplog.records if r.name == "spoolmq.access"]
    assert lines == [
        f'127.0.0.1:{port} - "GET /path?q=1 HTTP/1.1" 200',
        f'127.0.0.1:{port} - "POST /other HTTP/1.0" 200',
    ]


def test_no_access_log_unless_asked(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="spoolmq.access"), serving(OK) as running:
        _still_serving(running)
    assert not [r for r in caplog.records if r.name == "spoolmq.access"]
