"""The proxy's answers with directly built headers hold what Starlette's Response would."""

from __future__ import annotations

import orjson
import pytest
from starlette.requests import Request
from starlette.responses import Response

from app.proxy.forward import BrokerAnswer, Forwarder, PassedResponse
from app.proxy.upstream import UpstreamAnswer
from services.cluster import BrokerMember

STATUSES = (100, 199, 200, 201, 204, 206, 301, 304, 400, 404, 409, 421, 500, 503, 504)
MEDIA_TYPES = (
    None,
    "application/json",
    "application/problem+json",
    "application/octet-stream",
    "text/plain",
    "text/plain; charset=latin-1",
    "text/html; Charset=UTF-8",
    "text/csv",
)
HEADERS: tuple[dict[str, str] | None, ...] = (
    None,
    {},
    {"Retry-After": "1"},
    {"retry-after": "2", "location": "/v1/topics/t", "idempotent-replayed": "true"},
    {"Content-Length": "3"},
    {"content-type": "text/x-given"},
    {"X-Other": "é", "Content-Type": "application/json", "CONTENT-LENGTH": "0"},
)
BODIES = (b"", b"{}", b'{"queue_id":1}' * 1000)


def same(left: Response, right: Response) -> None:
    assert (left.status_code, left.body, left.background, left.media_type) == (
        right.status_code,
        right.body,
        right.background,
        right.media_type,
    )
    assert left.raw_headers == right.raw_headers
    assert left.headers.items() == right.headers.items()


@pytest.mark.parametrize("status", STATUSES)
@pytest.mark.parametrize("media_type", MEDIA_TYPES)
@pytest.mark.parametrize("headers", HEADERS)
def test_the_headers_are_starlettes(
    status: int, media_type: str | None, headers: dict[str, str] | None
) -> None:
    for body in BODIES:
        given = None if headers is None else dict(headers)
        same(
            PassedResponse(body, status, given, media_type),
            Response(body, status, headers, media_type),
        )


def test_a_default_answer_is_starlettes() -> None:
    same(PassedResponse(b"x"), Response(b"x"))
    same(PassedResponse(b"x", media_type="text/plain"), Response(b"x", media_type="text/plain"))


@pytest.mark.parametrize("status", STATUSES)
def test_a_broker_answer_passed_on_is_starlettes(status: int) -> None:
    answer = BrokerAnswer(status, b'{"a":1}', "application/json", {"retry-after": "1"})
    expected = Response(answer.content, status, answer.headers, media_type=answer.content_type)
    same(answer.response(), expected)
    rewritten = Response(b"{}", status, answer.headers, media_type=answer.content_type)
    same(answer.response(b"{}"), rewritten)
    same(answer.with_body({}), rewritten)


async def test_it_is_sent_as_starlettes_is() -> None:
    async def sent(response: Response) -> list[dict[str, object]]:
        messages: list[dict[str, object]] = []

        async def receive() -> dict[str, object]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: dict[str, object]) -> None:
            messages.append(message)

        scope = {"type": "http", "method": "GET", "path": "/", "headers": []}
        await response(scope, receive, send)  # type: ignore[arg-type]
        return messages

    headers = {"Retry-After": "1"}
    assert await sent(PassedResponse(b"{}", 503, headers, "application/problem+json")) == (
        await sent(Response(b"{}", 503, headers, media_type="application/problem+json"))
    )


def _head_as_formatted(
    host: bytes,
    method: str,
    path: str,
    query: bytes,
    client_headers: list[tuple[bytes, bytes]],
    request_id: str | None,
    json: object,
    body: bytes | tuple[bytes, ...],
    extra: list[tuple[bytes, bytes]],
) -> bytes:
    """A request head made the plain way, as the forwarder used to format it."""
    sent = [(k, v) for k, v in client_headers if k in (b"content-type", b"authorization")]
    if request_id:
        sent.append((b"x-request-id", request_id.encode()))
    if json is not None:
        body = orjson.dumps(json)
        sent = [(k, v) for k, v in sent if k != b"content-type"]
        sent.append((b"content-type", b"application/json"))
    sent.extend(extra)
    length = sum(map(len, body)) if isinstance(body, tuple) else len(body)
    target = path.encode() + (b"?" + query if query else b"")
    head = [b"%s %s HTTP/1.1\r\nhost: %s\r\n" % (method.encode(), target, host)]
    head.extend(b"%s: %s\r\n" % pair for pair in sent)
    if body or method in ("POST", "PUT", "PATCH"):
        head.append(b"content-length: %d\r\n" % length)
    head.append(b"\r\n")
    return b"".join(head)


class _Recorder:
    """An upstream that keeps what it was asked to write and answers 200."""

    def __init__(self) -> None:
        self.written: list[tuple[object, bytes, object]] = []

    async def request(
        self, origin: object, head: bytes, body: object, timeout_s: float
    ) -> UpstreamAnswer:
        self.written.append((origin, head, body))
        return UpstreamAnswer(200, [(b"content-type", b"application/json")], b"{}")


@pytest.mark.parametrize("method", ["GET", "POST", "PUT", "DELETE", "PATCH"])
@pytest.mark.parametrize("query", [b"", b"offset=3&max_messages=32"])
@pytest.mark.parametrize("request_id", [None, "", "req-1"])
@pytest.mark.parametrize(
    "client_headers",
    [
        [],
        [(b"content-type", b"application/json"), (b"host", b"p"), (b"content-length", b"9")],
        [(b"authorization", b"Bearer t"), (b"content-type", b"text/plain"), (b"x-a", b"b")],
        [(b"content-type", b"a/b"), (b"content-type", b"c/d"), (b"authorization", b"x")],
    ],
)
async def test_a_request_head_is_the_formatted_one(
    method: str,
    query: bytes,
    request_id: str | None,
    client_headers: list[tuple[bytes, bytes]],
) -> None:
    recorder = _Recorder()
    forwarder = Forwarder(recorder)  # type: ignore[arg-type]
    member = BrokerMember("b", "g1", "http://127.0.0.1:8081", "127.0.0.1:1")
    state = {} if request_id is None else {"request_id": request_id}
    scope = {"type": "http", "headers": client_headers, "state": state}
    request = Request(scope)
    bodies: list[tuple[object, bytes | tuple[bytes, ...]]] = [
        (None, b""),
        (None, b'{"body":"x"}'),
        (None, (b'{"queue_id":1,', b'"body":"x"}')),
        ({"a": [1, "é"]}, b""),
    ]
    for json, body in bodies:
        for extra in ([], [(b"idempotency-key", b"k-1")]):
            for path in ("/v1/topics/T/messages", "/v1/topics/T%25/queues/1/messages"):
                await forwarder.call(
                    member,
                    method,
                    path,
                    request=request,
                    query=query,
                    json=json,
                    content=body or None,
                    headers=extra,
                )
                expected = _head_as_formatted(
                    b"127.0.0.1:8081",
                    method,
                    path,
                    query,
                    client_headers,
                    request_id,
                    json,
                    body,
                    extra,
                )
                origin, head, _ = recorder.written[-1]
                assert (origin, head) == (("127.0.0.1", 8081), expected)
    await forwarder.call(member, "GET", "/v1/x", params=[("a", "b c")])
    assert recorder.written[-1][1] == b"GET /v1/x?a=b+c HTTP/1.1\r\nhost: 127.0.0.1:8081\r\n\r\n"
