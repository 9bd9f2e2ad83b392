"""HttpConnection on the wire: keep-alive, pipelining, request bodies and flow control,
100-continue, the deadlines and size caps of slow clients, disconnects, and the ASGI scope.

A real server on 127.0.0.1 serves small ASGI apps; the clients are raw sockets.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import queue
import random
import select
import threading
import time
from typing import Any

import pytest

from app.server import BODY_STALLED, ServerLimits
from tests.app.server.support import (
    WAIT_S,
    Client,
    Receive,
    Scope,
    Send,
    answer,
    chunked,
    http_app,
    next_item,
    read_body,
    request_bytes,
    serving,
    until,
)


async def _echo(scope: Scope, receive: Receive, send: Send) -> None:
    """Answers what it was asked: method, path, the client's address and the body."""
    body = await read_body(receive)
    if scope["path"].startswith("/slow"):
        await asyncio.sleep(float(scope["query_string"] or b"0.3"))
    info = {
        "method": scope["method"],
        "path": scope["path"],
        "client": scope["client"],
        "size": len(body),
        "sha": hashlib.sha256(body).hexdigest(),
    }
    await answer(send, 200, json.dumps(info).encode(), [(b"content-type", b"application/json")])


ECHO = http_app(_echo)


def _info(client: Client) -> dict[str, Any]:
    got = client.read_answer()
    assert got.status == 200, got.raw
    info: dict[str, Any] = json.loads(got.body)
    return info


def _sha(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


# ---------------------------------------------------------------- keep-alive


def test_several_requests_are_answered_on_one_connection() -> None:
    with serving(ECHO) as running:
        client = running.connect()
        addresses = set()
        for i in range(4):
            body = b"x" * i
            client.request("POST", f"/r{i}", body=body)
            got = client.read_answer()
            assert got.status == 200
            assert got.header("connection") is None
            info = json.loads(got.body)
            assert (info["path"], info["sha"]) == (f"/r{i}", _sha(body))
            addresses.add(tuple(info["client"]))
        assert len(addresses) == 1


def test_connection_close_from_the_client_closes_after_the_answer() -> None:
    with serving(ECHO) as running:
        client = running.connect()
        client.request("GET", "/bye", headers=[("Connection", "close")])
        got = client.read_answer()
        assert got.status == 200
        assert got.header("connection") == "close"
        assert client.is_closed()


def test_connection_close_from_the_app_closes_after_the_answer() -> None:
    async def closing(scope: Scope, receive: Receive, send: Send) -> None:
        await answer(send, 200, b"done", [(b"connection", b"close")])

    with serving(http_app(closing)) as running:
        client = running.connect()
        client.request("GET", "/")
        got = client.read_answer()
        assert (got.status, got.body) == (200, b"done")
        assert got.all("connection") == ["close"]
        assert client.is_closed()


def test_an_idle_keep_alive_connection_is_closed_after_its_time() -> None:
    with serving(ECHO, ServerLimits(keep_alive_timeout_s=0.3)) as running:
        client = running.connect()
        client.request("GET", "/")
        assert client.read_answer().status == 200
        assert client.is_closed()  # nothing more, not even a 408: just the close


@pytest.mark.parametrize("how", ["late start", "long stream"])
def test_a_busy_connection_outlives_the_keep_alive_time(how: str) -> None:
    """An answer that takes several keep-alive times arrives whole, and the request
    pipelined behind it is answered too."""

    async def slow(scope: Scope, receive: Receive, send: Send) -> None:
        await read_body(receive)
        if scope["path"] == "/next":
            await answer(send, 200, b"next")
            return
        if how == "late start":
            await asyncio.sleep(1.2)
            await answer(send, 200, b"late")
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for piece in (b"a", b"b", b"c", b"d"):
            await send({"type": "http.response.body", "body": piece, "more_body": True})
            await asyncio.sleep(0.3)
        await send({"type": "http.response.body", "body": b""})

    with serving(http_app(slow), ServerLimits(keep_alive_timeout_s=0.3)) as running:
        client = running.connect()
        client.request("GET", "/slow")
        client.request("GET", "/next")
        first = client.read_answer()
        assert first.body == (b"late" if how == "late start" else b"abcd")
        assert client.read_answer().body == b"next"
        assert client.is_closed()  # idle again: closed after the keep-alive time


# ---------------------------------------------------------------- pipelining


def _pipeline(count: int) -> tuple[bytes, list[tuple[str, bytes]]]:
    """``count`` requests, the earlier ones slower, Content-Length and chunked bodies."""
    wire = b""
    expected = []
    for i in range(count):
        body = (b"body %d;" % i) * (i * 97)
        path = f"/slow{i}"
        target = f"{path}?{0.02 * (count - i):.2f}"
        if i % 2:
            headers = [("Transfer-Encoding", "chunked")]
            sent = chunked(*(body[j : j + 1000] for j in range(0, len(body), 1000)))
        else:
            headers, sent = [], body
        if i == count - 1:
            headers.append(("Connection", "close"))
        wire += request_bytes("POST", target, headers, sent)
        expected.append((path, body))
    return wire, expected


def _answers_in_order(client: Client, expected: list[tuple[str, bytes]]) -> None:
    for path, body in expected:
        info = _info(client)
        assert (info["path"], info["size"], info["sha"]) == (path, len(body), _sha(body))
    assert client.is_closed()  # the last said close: nothing answered twice, nothing more


def test_pipelined_requests_in_one_write_are_answered_in_order_once_each() -> None:
    wire, expected = _pipeline(6)
    with serving(ECHO) as running:
        client = running.connect()
        client.send(wire)
        _answers_in_order(client, expected)


@pytest.mark.parametrize("seed", [1, 2])
def test_pipelined_requests_split_across_writes_keep_their_bodies(seed: int) -> None:
    wire, expected = _pipeline(6)
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(wire)), 40))
    pieces = [wire[a:b] for a, b in zip([0, *cuts], [*cuts, len(wire)], strict=True)]
    with serving(ECHO) as running:
        client = running.connect()
        for piece in pieces:
            client.send(piece)
            time.sleep(0.001)  # the server likely reads each piece alone
        _answers_in_order(client, expected)


def test_a_large_body_pipelined_behind_a_slow_request_arrives_intact() -> None:
    body = random.Random(3).randbytes(300_000)
    wire = (
        request_bytes("GET", "/slow?0.3")
        + request_bytes("POST", "/big", body=body)
        + request_bytes("GET", "/last", [("Connection", "close")])
    )
    with serving(ECHO) as running:
        client = running.connect()
        client.send(wire)
        _answers_in_order(client, [("/slow", b""), ("/big", body), ("/last", b"")])


def test_a_pipelined_body_is_never_counted_as_header_bytes() -> None:
    """Bodies far over max_header_bytes, pipelined behind a slow request, in one write
    and in small ones."""
    big = b"b" * 50_000
    wire = (
        request_bytes("GET", "/slow?0.3")
        + request_bytes("POST", "/length", body=big)
        + request_bytes("POST", "/chunked", [("Transfer-Encoding", "chunked")], chunked(big, big))
        + request_bytes("GET", "/last", [("Connection", "close")])
    )
    expected = [("/slow", b""), ("/length", big), ("/chunked", big + big), ("/last", b"")]
    limits = ServerLimits(max_header_bytes=1024)
    with serving(ECHO, limits) as running:
        client = running.connect()
        client.send(wire)
        _answers_in_order(client, expected)
        client = running.connect()
        client.send_slowly(wire, 4096, pause_s=0.0005)
        _answers_in_order(client, expected)


# ---------------------------------------------------------------- request bodies


def _recorder(messages: queue.Queue[Any], delay_s: float = 0.0) -> Any:
    """An app that puts every receive() it makes in ``messages`` (then the scope), and
    answers the body's digest."""

    async def record(scope: Scope, receive: Receive, send: Send) -> None:
        await asyncio.sleep(delay_s)
        body = b""
        while True:
            message = await receive()
            messages.put(message)
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        messages.put(scope)
        await answer(send, 200, _sha(body).encode())

    return http_app(record)


def _received(messages: queue.Queue[Any]) -> tuple[list[dict[str, Any]], Scope]:
    got: list[dict[str, Any]] = []
    while True:
        item = next_item(messages)
        if item.get("type") == "http":
            return got, item
        got.append(item)


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_a_body_in_many_small_writes_reaches_the_app_whole(framing: str) -> None:
    body = bytes(range(256)) * 12
    if framing == "chunked":
        headers = [("Transfer-Encoding", "chunked")]
        sent = chunked(*(body[i : i + 77] for i in range(0, len(body), 77)))
    else:
        headers, sent = [("Content-Length", str(len(body)))], body
    messages: queue.Queue[Any] = queue.Queue()
    with serving(_recorder(messages)) as running:
        client = running.connect()
        client.send_slowly(request_bytes("POST", "/", headers) + sent, 50, pause_s=0.001)
        assert client.read_answer().body == _sha(body).encode()
        got, _ = _received(messages)
    assert all(m["type"] == "http.request" for m in got)
    assert b"".join(m["body"] for m in got) == body
    assert [m["more_body"] for m in got] == [True] * (len(got) - 1) + [False]


@pytest.mark.parametrize(
    "headers, sent",
    [
        ([], b""),
        ([("Content-Length", "0")], b""),
        ([("Transfer-Encoding", "chunked")], b"0\r\n\r\n"),
    ],
    ids=["none", "empty", "no chunks"],
)
def test_no_body_is_one_empty_last_message(headers: list[tuple[str, str]], sent: bytes) -> None:
    messages: queue.Queue[Any] = queue.Queue()
    with serving(_recorder(messages)) as running:
        client = running.connect()
        client.send(request_bytes("POST", "/", headers) + sent)
        assert client.read_answer().status == 200
        got, _ = _received(messages)
    assert got == [{"type": "http.request", "body": b"", "more_body": False}]


def test_a_body_over_the_high_water_mark_arrives_intact_and_the_pause_is_no_stall() -> None:
    """The app waits twice the body deadline before it reads a 1 MiB body: the server stops
    reading meanwhile, and that pause of its own is not the client's stall. (The client's
    write is done before then: it fits in the sockets' buffers, so nothing hangs on when the
    test's thread runs.)"""
    body = random.Random(4).randbytes(1024 * 1024)
    messages: queue.Queue[Any] = queue.Queue()
    limits = ServerLimits(body_timeout_s=0.4)
    with serving(_recorder(messages, delay_s=0.8), limits) as running:
        client = running.connect()
        client.request("POST", "/", body=body)
        assert client.read_answer().body == _sha(body).encode()
        got, scope = _received(messages)
    assert BODY_STALLED not in scope
    assert b"".join(m["body"] for m in got) == body
    assert len(got) > 1  # it came in pieces


def test_100_continue_is_sent_when_the_app_reads_the_body() -> None:
    called = queue.Queue[str]()
    release = threading.Event()

    async def reader(scope: Scope, receive: Receive, send: Send) -> None:
        called.put("called")
        await until(release)
        body = await read_body(receive)
        await answer(send, 200, body)

    with serving(http_app(reader)) as running:
        client = running.connect()
        client.request("PUT", "/", [("Expect", "100-continue"), ("Content-Length", "5")])
        assert next_item(called) == "called"
        ready, _, _ = select.select([client.sock], [], [], 0.2)
        assert not ready  # nothing before the app reads
        release.set()
        interim = client.read_answer()
        assert interim.raw == b"HTTP/1.1 100 Continue\r\n\r\n"
        client.send(b"hello")
        final = client.read_answer()
        assert (final.status, final.body) == (200, b"hello")


def test_100_continue_is_not_sent_when_the_app_answers_without_reading() -> None:
    """The final answer comes first; a body the client then sends anyway is read and
    dropped, and the connection goes on."""

    async def refuser(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["path"] == "/next":
            await answer(send, 200, b"next")
        else:
            await answer(send, 417, b"no")

    with serving(http_app(refuser)) as running:
        client = running.connect()
        client.request("PUT", "/", [("Expect", "100-continue"), ("Content-Length", "5")])
        first = client.read_answer()
        assert (first.status, first.body) == (417, b"no")
        client.send(b"hello" + request_bytes("GET", "/next"))
        assert client.read_answer().body == b"next"


# ---------------------------------------------------------------- slow and oversized clients


def _refusal(client: Client, status: int) -> None:
    got = client.read_answer()
    assert got.status == status, got.raw
    assert got.header("connection") == "close"
    assert got.header("date")
    assert client.is_closed()


def _send_until_answered(client: Client, pieces: list[bytes], pause_s: float) -> None:
    """Send ``pieces`` one by one until the server has something to say (or closes)."""
    for piece in pieces:
        try:
            client.send(piece)
        except (BrokenPipeError, ConnectionResetError):
            return
        ready, _, _ = select.select([client.sock], [], [], pause_s)
        if ready:
            return
    raise AssertionError("the server said nothing")


def _app_never_called() -> tuple[Any, queue.Queue[str]]:
    calls: queue.Queue[str] = queue.Queue()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        calls.put(scope["path"])
        await answer(send, 200, b"ok")

    return http_app(app), calls


def test_headers_that_never_complete_get_408() -> None:
    app, calls = _app_never_called()
    with serving(app, ServerLimits(header_timeout_s=0.3)) as running:
        client = running.connect()
        client.send(b"GET / HTTP/1.1\r\nHost: test\r\n")
        _refusal(client, 408)
    assert calls.empty()


def test_headers_sent_a_byte_at_a_time_get_408_past_their_deadline() -> None:
    """The deadline is for the whole of the headers, not for each byte."""
    app, calls = _app_never_called()
    with serving(app, ServerLimits(header_timeout_s=0.3)) as running:
        client = running.connect()
        trickle = [b"GET / HTTP/1.1\r\nX-Slow: "] + [b"a"] * 2000
        _send_until_answered(client, trickle, pause_s=0.02)
        _refusal(client, 408)
    assert calls.empty()


def test_each_request_on_a_connection_has_its_own_header_deadline() -> None:
    """The deadline starts with a request's first byte: a wait on the kept-alive connection
    longer than the deadline does not count; a later request's headers that never complete
    get 408 there too."""
    limits = ServerLimits(header_timeout_s=0.3, keep_alive_timeout_s=5.0)
    with serving(ECHO, limits) as running:
        client = running.connect()
        client.request("GET", "/first")
        assert _info(client)["path"] == "/first"
        time.sleep(0.6)  # idle, not late
        client.request("GET", "/second")
        assert _info(client)["path"] == "/second"
        client.send(b"GET /third HTTP/1.1\r\nHost: test\r\n")
        _refusal(client, 408)


def test_a_huge_header_gets_431() -> None:
    app, calls = _app_never_called()
    with serving(app) as running:
        client = running.connect()
        client.request("GET", "/", [("X-Huge", "h" * 20_000)])
        _refusal(client, 431)
    assert calls.empty()


def test_many_small_headers_get_431() -> None:
    app, calls = _app_never_called()
    with serving(app) as running:
        client = running.connect()
        client.request("GET", "/", [(f"X-H{i}", "v") for i in range(1000)])
        _refusal(client, 431)
    assert calls.empty()


def test_a_huge_header_arriving_slowly_gets_431() -> None:
    """Its bytes count while they arrive, before the parser has the whole header."""
    app, calls = _app_never_called()
    with serving(app, ServerLimits(max_header_bytes=4096)) as running:
        client = running.connect()
        pieces = [b"GET / HTTP/1.1\r\nX-Huge: "] + [b"h" * 500] * 200
        _send_until_answered(client, pieces, pause_s=0.005)
        _refusal(client, 431)
    assert calls.empty()


def test_a_huge_header_is_refused_even_with_a_request_after_it() -> None:
    """A request pipelined behind one with too many header bytes is not answered."""
    app, calls = _app_never_called()
    with serving(app) as running:
        client = running.connect()
        client.send(
            request_bytes("GET", "/huge", [("X-Huge", "h" * 20_000)])
            + request_bytes("GET", "/after")
        )
        _refusal(client, 431)
    assert calls.empty()


def test_a_malformed_request_behind_one_being_answered_is_refused_after_its_answer() -> None:
    """The request in progress is answered whole first; then the refusal, then the close."""
    with serving(ECHO) as running:
        client = running.connect()
        client.send(request_bytes("GET", "/slow?0.2") + b"GARBAGE\r\n\r\n")
        first = client.read_answer()
        assert first.status == 200 and json.loads(first.body)["path"] == "/slow"
        _refusal(client, 400)


@pytest.mark.parametrize(
    "wire",
    [b"GARBAGE\r\n\r\n", b"GET / HTTP/1.1\r\nNo colon here\r\n\r\n", b"GET / HTTP/9.9x\r\n\r\n"],
    ids=["request line", "header line", "version"],
)
def test_a_malformed_request_gets_400(wire: bytes) -> None:
    app, calls = _app_never_called()
    with serving(app) as running:
        client = running.connect()
        client.send(wire)
        _refusal(client, 400)
    assert calls.empty()


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_a_stalled_body_wakes_the_pending_read_and_the_connection_closes(framing: str) -> None:
    """The app's pending receive() returns no bytes and more to come, with BODY_STALLED in
    the scope; the next one says the client is gone; after the app's answer the
    connection closes."""
    seen: queue.Queue[Any] = queue.Queue()

    async def patient(scope: Scope, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            seen.put((message, scope.get(BODY_STALLED)))
            if scope.get(BODY_STALLED):
                break
        seen.put((await receive(), scope.get(BODY_STALLED)))
        await answer(send, 408, b"too slow")

    if framing == "chunked":
        headers, first = [("Transfer-Encoding", "chunked")], b"a\r\n0123456789\r\n"
    else:
        headers, first = [("Content-Length", "100")], b"0123456789"
    with serving(http_app(patient), ServerLimits(body_timeout_s=0.3)) as running:
        client = running.connect()
        client.send(request_bytes("POST", "/", headers) + first)
        got = client.read_answer()
        assert (got.status, got.body) == (408, b"too slow")
        assert got.header("connection") == "close"
        assert client.is_closed()
    messages = []
    while not seen.empty():
        messages.append(seen.get())
    *before, stalled, after = messages
    assert b"".join(m["body"] for m, _ in before) == b"0123456789"
    assert all(m["more_body"] and not flag for m, flag in before)
    assert stalled == ({"type": "http.request", "body": b"", "more_body": True}, True)
    assert after == ({"type": "http.disconnect"}, True)


# ---------------------------------------------------------------- disconnects


def test_a_client_gone_while_the_app_waits_after_the_body_is_a_disconnect() -> None:
    seen: queue.Queue[Any] = queue.Queue()

    async def waiter(scope: Scope, receive: Receive, send: Send) -> None:
        seen.put(await read_body(receive))
        seen.put(await receive())

    with serving(http_app(waiter)) as running:
        client = running.connect()
        client.request("POST", "/", body=b"all of it")
        assert next_item(seen) == b"all of it"
        client.close()
        assert next_item(seen) == {"type": "http.disconnect"}


def test_a_client_gone_in_the_middle_of_the_body_is_a_disconnect() -> None:
    seen: queue.Queue[Any] = queue.Queue()

    async def waiter(scope: Scope, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            seen.put(message)
            if message["type"] == "http.disconnect":
                return

    with serving(http_app(waiter)) as running:
        client = running.connect()
        client.request("POST", "/", [("Content-Length", "100")], b"part")
        assert next_item(seen) == {"type": "http.request", "body": b"part", "more_body": True}
        client.close()
        assert next_item(seen) == {"type": "http.disconnect"}


def test_a_receive_pending_when_the_answer_completes_is_a_disconnect() -> None:
    """The connection itself goes on: the next request is answered."""
    seen: queue.Queue[Any] = queue.Queue()

    async def listener(scope: Scope, receive: Receive, send: Send) -> None:
        await read_body(receive)
        pending = asyncio.ensure_future(receive())
        await asyncio.sleep(0.05)
        seen.put(pending.done())
        await answer(send, 200, b"answered")
        seen.put(await asyncio.wait_for(pending, WAIT_S))
        seen.put(await receive())

    with serving(http_app(listener)) as running:
        client = running.connect()
        for _ in range(2):
            client.request("POST", "/", body=b"x")
            assert client.read_answer().body == b"answered"
            assert next_item(seen) is False  # it was pending
            assert next_item(seen) == {"type": "http.disconnect"}
            assert next_item(seen) == {"type": "http.disconnect"}


# ---------------------------------------------------------------- the scope


def _scope_app(scopes: queue.Queue[Scope]) -> Any:
    async def keep(scope: Scope, receive: Receive, send: Send) -> None:
        await read_body(receive)
        scopes.put(scope)
        await answer(send, 200, b"ok")

    return http_app(keep)


def test_the_scope_of_a_request() -> None:
    scopes: queue.Queue[Scope] = queue.Queue()
    with serving(_scope_app(scopes)) as running:
        client = running.connect()
        client.request(
            "PATCH",
            "/a%20b/c%2Fd/%C3%A9?x=1&y=%20z",
            [("X-Mixed-Case", "Some Value"), ("x-dup", "1"), ("X-Dup", "2")],
        )
        assert client.read_answer().status == 200
        scope = next_item(scopes)
        assert scope["type"] == "http"
        assert scope["asgi"]["version"] == "3.0"
        assert scope["http_version"] == "1.1"
        assert scope["scheme"] == "http"
        assert scope["method"] == "PATCH"
        assert scope["path"] == "/a b/c/d/é"  # %2F too: the app's HTTP shell sees raw_path
        assert scope["raw_path"] == b"/a%20b/c%2Fd/%C3%A9"
        assert scope["query_string"] == b"x=1&y=%20z"
        assert scope["root_path"] == ""
        assert scope["headers"] == [
            (b"host", b"test"),
            (b"x-mixed-case", b"Some Value"),
            (b"x-dup", b"1"),
            (b"x-dup", b"2"),
        ]
        assert scope["client"] == client.sock.getsockname()
        assert scope["server"] == ("127.0.0.1", running.port)


def test_the_scope_of_a_plain_path_and_of_http_1_0() -> None:
    scopes: queue.Queue[Scope] = queue.Queue()
    with serving(_scope_app(scopes)) as running:
        client = running.connect()
        client.request("GET", "/plain", version="1.0")
        got = client.read_answer()
        assert got.status == 200
        assert got.header("connection") == "close"
        assert client.is_closed()  # HTTP/1.0: one request per connection
        scope = next_item(scopes)
        assert (scope["http_version"], scope["path"], scope["raw_path"]) == (
            "1.0",
            "/plain",
            b"/plain",
        )
        assert scope["query_string"] == b""
