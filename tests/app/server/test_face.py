"""The server's wire face: the requests it takes are read whole and answered in one piece below
ASGI, with the same connection rules as the app's (keep-alive, pipelining in order, 100-continue,
deadlines, HEAD); every other request goes to the ASGI app.

A real server on 127.0.0.1 serves a small ASGI app and a face that takes paths under
``/face``; the clients are raw sockets.
"""

from __future__ import annotations

import dataclasses
import queue
from typing import Any

from app.server import (
    BodyStalledError,
    BodyTooLargeError,
    ClientGoneError,
    Exchange,
    Handler,
)
from tests.app.server.support import (
    FAST,
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
)

LIMIT = 1000


async def _app(scope: Scope, receive: Receive, send: Send) -> None:
    body = await read_body(receive)
    await answer(send, 200, b"app:" + body)


APP = http_app(_app)


class EchoFace:
    """Takes ``/face/...``: answers the body it read, or what reading it raised."""

    def __init__(self) -> None:
        self.seen: queue.Queue[str] = queue.Queue()
        self.scopes: list[Scope] = []

    def handler(self, scope: dict[str, Any]) -> Handler | None:
        if not scope["path"].startswith("/face"):
            return None
        scope["face"] = "taken"
        return self.serve

    async def serve(self, exchange: Exchange) -> None:
        self.scopes.append(exchange.scope)
        if exchange.scope["path"] == "/face/fails":
            raise RuntimeError("the handler fails")
        try:
            body = await exchange.read_body(LIMIT)
        except BodyTooLargeError:
            self.seen.put("too large")
            exchange.respond(413, [(b"content-length", b"0"), (b"connection", b"close")], b"")
            return
        except BodyStalledError:
            self.seen.put("stalled")
            exchange.respond(408, [(b"content-length", b"0"), (b"connection", b"close")], b"")
            return
        except ClientGoneError:
            self.seen.put("gone")
            return
        self.seen.put("read")
        exchange.respond(200, [(b"content-length", b"%d" % (len(body) + 5))], b"face:" + body)


def test_the_face_answers_what_it_takes_and_the_app_the_rest_on_one_connection() -> None:
    face = EchoFace()
    with serving(APP, face=face) as running:
        client = running.connect()
        for path, body, expected in [
            ("/face/a", b"one", b"face:one"),
            ("/other", b"two", b"app:two"),
            ("/face/b", b"", b"face:"),
            ("/other", b"", b"app:"),
        ]:
            client.request("POST", path, body=body)
            got = client.read_answer()
            assert (got.status, got.body) == (200, expected)
            assert got.header("date") is not None
    assert [s["face"] for s in face.scopes] == ["taken", "taken"]


def test_pipelined_requests_for_the_face_and_the_app_are_answered_in_order() -> None:
    face = EchoFace()
    with serving(APP, face=face) as running:
        client = running.connect()
        paths = ["/face/1", "/a", "/face/2", "/face/3", "/b"]
        client.send(b"".join(request_bytes("POST", p, body=p.encode()) for p in paths))
        bodies = [client.read_answer().body for _ in paths]
    assert bodies == [
        b"face:/face/1",
        b"app:/a",
        b"face:/face/2",
        b"face:/face/3",
        b"app:/b",
    ]


def test_a_chunked_body_sent_slowly_is_read_whole() -> None:
    pieces = [b"x" * 100, b"y" * 200, b"z"]
    with serving(APP, face=EchoFace()) as running:
        client = running.connect()
        head = request_bytes("POST", "/face/c", [("Transfer-Encoding", "chunked")])
        client.send_slowly(head + chunked(*pieces), piece=37)
        got = client.read_answer()
    assert got.body == b"face:" + b"".join(pieces)


def test_a_client_that_waits_to_continue_is_told_to_once_the_face_reads() -> None:
    with serving(APP, face=EchoFace()) as running:
        client = running.connect()
        client.send(
            request_bytes("POST", "/face/e", [("Expect", "100-continue"), ("Content-Length", "4")])
        )
        assert client.read_until(b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"
        client.send(b"body")
        assert client.read_answer().body == b"face:body"


def test_a_body_over_the_limit_is_refused_and_the_connection_closes() -> None:
    face = EchoFace()
    with serving(APP, face=face) as running:
        client = running.connect()
        client.request("POST", "/face/big", body=b"x" * (LIMIT + 1))
        got = client.read_answer()
        assert got.status == 413 and got.header("connection") == "close"
        assert next_item(face.seen) == "too large"
        assert client.is_closed()


def test_a_body_that_stops_arriving_is_a_stall_and_the_connection_closes() -> None:
    face = EchoFace()
    limits = dataclasses.replace(FAST, body_timeout_s=0.3)
    with serving(APP, limits, face=face) as running:
        client = running.connect()
        client.send(request_bytes("POST", "/face/s", [("Content-Length", "10")]) + b"abc")
        got = client.read_answer()
        assert got.status == 408
        assert next_item(face.seen) == "stalled"
        assert client.is_closed()


def test_a_client_gone_before_its_body_came_is_seen_by_the_face() -> None:
    face = EchoFace()
    with serving(APP, face=face) as running:
        client = running.connect()
        client.send(request_bytes("POST", "/face/g", [("Content-Length", "10")]) + b"abc")
        client.close()
        assert next_item(face.seen) == "gone"


def test_a_head_request_the_face_answers_gets_the_headers_only() -> None:
    with serving(APP, face=EchoFace()) as running:
        client = running.connect()
        client.request("HEAD", "/face/h")
        got = client.read_answer(head=True)
        assert got.status == 200 and got.header("content-length") == "5"
        client.request("POST", "/face/after", body=b"!")
        assert client.read_answer().body == b"face:!"  # nothing of the HEAD's body came


def test_a_handler_that_fails_before_answering_gets_a_500_and_the_connection_closes() -> None:
    with serving(APP, face=EchoFace()) as running:
        client = running.connect()
        client.request("GET", "/face/fails")
        got = client.read_answer()
        assert got.status == 500
        assert client.is_closed()


def test_an_http_1_0_request_the_face_answers_closes_the_connection() -> None:
    with serving(APP, face=EchoFace()) as running:
        client = running.connect()
        client.request("POST", "/face/old", body=b"v", version="1.0")
        got = client.read_answer()
        assert got.body == b"face:v" and got.header("connection") == "close"
        assert client.is_closed()
