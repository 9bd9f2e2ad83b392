"""Forwarding to brokers (:mod:`app.proxy.forward`): the request head a broker gets (the
client's headers it needs, the request id, the cluster's labels), what a broker's answer
becomes (the headers a client gets, the message count, a problem's code), how a broker that
gives no answer is named, and the proxy's answers, built directly, as Starlette's Response
would build them."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from starlette.requests import Request
from starlette.responses import Response

from app.errors import ApiError
from app.proxy.forward import (
    BrokerAnswer,
    BrokerNoAnswerError,
    BrokerUnreachableError,
    Forwarder,
    ProxyError,
    broker_answer,
    broker_path,
    long_poll_timeout,
)
from app.proxy.upstream import NotSentError, OutcomeUnknownError, UpstreamAnswer
from app.responses import BytesResponse
from services.cluster import BrokerMember, ClusterLabels

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
    {"Spoolmq-Epoch": "3", "Idempotent-Replayed": "true"},
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
            BytesResponse(body, status, given, media_type),
            Response(body, status, headers, media_type),
        )


def test_a_default_answer_is_starlettes() -> None:
    same(BytesResponse(b"x"), Response(b"x"))
    same(BytesResponse(b"x", media_type="text/plain"), Response(b"x", media_type="text/plain"))


@pytest.mark.parametrize("status", STATUSES)
def test_a_broker_answer_passed_on_is_starlettes(status: int) -> None:
    answer = BrokerAnswer(status, b'{"a":1}', "application/json", [(b"retry-after", b"1")])
    headers = {"retry-after": "1"}
    expected = Response(answer.content, status, headers, media_type=answer.content_type)
    same(answer.response(), expected)
    rewritten = Response(b"{}", status, headers, media_type=answer.content_type)
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
    assert await sent(BytesResponse(b"{}", 503, headers, "application/problem+json")) == (
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
    labels: ClusterLabels | None,
) -> bytes:
    """A request head made the plain way: line, host, the client's Content-Type and
    Authorization (a JSON body the proxy made: its own Content-Type), the request id, the
    extra headers, the labels' headers, the length."""
    sent = [(k, v) for k, v in client_headers if k in (b"content-type", b"authorization")]
    if request_id:
        sent.append((b"x-request-id", request_id.encode()))
    if json is not None:
        body = orjson.dumps(json)
        sent = [(k, v) for k, v in sent if k != b"content-type"]
        sent.append((b"content-type", b"application/json"))
    sent.extend(extra)
    if labels is not None:
        sent.append((b"spoolmq-broker-group", labels.group.encode()))
        if labels.queue_ids:
            pairs = ",".join(f"{k}={v}" for k, v in labels.queue_ids.items())
            sent.append((b"spoolmq-queue-ids", pairs.encode()))
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
    labelled = (None, ClusterLabels("g1", "T", {}), ClusterLabels("g2", "T", {0: 4, 1: 5}))
    for json, body in bodies:
        for extra in ([], [(b"idempotency-key", b"k-1")]):
            for path in ("/v1/topics/T/messages", "/v1/topics/T%25/queues/1/messages"):
                for labels in labelled:
                    await forwarder.call(
                        member,
                        method,
                        path,
                        request=request,
                        query=query,
                        json=json,
                        content=body or None,
                        headers=extra,
                        labels=labels,
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
                        labels,
                    )
                    origin, head, _ = recorder.written[-1]
                    assert (origin, head) == (("127.0.0.1", 8081), expected)
    await forwarder.call(member, "GET", "/v1/x", params=[("a", "b c")])
    assert recorder.written[-1][1] == b"GET /v1/x?a=b+c HTTP/1.1\r\nhost: 127.0.0.1:8081\r\n\r\n"


MEMBER = BrokerMember("b", "g2", "http://127.0.0.1:8082", "127.0.0.1:1")


def test_a_broker_answer_keeps_the_headers_a_client_gets_and_its_message_count() -> None:
    answer = broker_answer(
        UpstreamAnswer(
            200,
            [
                (b"content-type", b"application/json"),
                (b"retry-after", b"1"),
                (b"location", b"/v1/topics/T"),
                (b"idempotent-replayed", b"true"),
                (b"x-request-id", b"from-the-broker"),
                (b"date", b"Thu, 01 Jan 2026 00:00:00 GMT"),
                (b"content-length", b"2"),
                (b"spoolmq-message-count", b"3"),
            ],
            b"{}",
        )
    )
    assert (answer.status, answer.content, answer.content_type) == (200, b"{}", "application/json")
    assert answer.kept == [
        (b"retry-after", b"1"),
        (b"location", b"/v1/topics/T"),
        (b"idempotent-replayed", b"true"),
    ]
    assert answer.message_count == 3
    for count in (b"", b"x", b"-1", b"1.5"):  # not a count: the proxy reads the body instead
        odd = broker_answer(UpstreamAnswer(200, [(b"spoolmq-message-count", count)], b"{}"))
        assert odd.message_count is None
        assert odd.content_type == "application/json"  # none given: the brokers' own type


@pytest.mark.parametrize(
    ("content_type", "content", "code"),
    [
        ("application/problem+json", b'{"code":"NOT_MASTER","status":421}', "NOT_MASTER"),
        ("application/problem+json", b'{"status":500}', None),
        ("application/problem+json", b'{"code":7}', None),
        ("application/problem+json", b"[1]", None),
        ("application/problem+json", b"not json", None),
        ("application/json", b'{"code":"NOT_MASTER"}', None),
    ],
)
def test_a_problems_code_is_read_from_a_problem_answer_only(
    content_type: str, content: bytes, code: str | None
) -> None:
    assert BrokerAnswer(421, content, content_type, []).problem_code() == code


class _Failing:
    """An upstream that fails every request with ``error``, noting that it was asked."""

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.asked = 0

    async def request(self, origin: object, head: bytes, body: object, timeout_s: float) -> Any:
        self.asked += 1
        raise self.error


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (NotSentError(("127.0.0.1", 8082), "connect failed"), BrokerUnreachableError),
        (OutcomeUnknownError(("127.0.0.1", 8082), "connection closed"), BrokerNoAnswerError),
        (RuntimeError("anything else once written"), BrokerNoAnswerError),
    ],
)
async def test_a_broker_that_gives_no_answer_is_named_by_how_far_the_request_got(
    error: Exception, kind: type[ProxyError]
) -> None:
    forwarder = Forwarder(_Failing(error))  # type: ignore[arg-type]
    with pytest.raises(ProxyError) as raised:
        await forwarder.call(MEMBER, "POST", "/v1/topics/T/messages", content=b"{}")
    assert type(raised.value) is kind
    assert (raised.value.code, raised.value.headers) == ("BROKER_UNAVAILABLE", {"Retry-After": "1"})
    assert "broker b of group g2 does not answer" in raised.value.detail


async def test_a_read_goes_to_the_members_in_turn_until_one_answers() -> None:
    class _Answering:
        def __init__(self) -> None:
            self.asked: list[object] = []

        async def request(
            self, origin: object, head: bytes, body: object, timeout_s: float
        ) -> UpstreamAnswer:
            self.asked.append(origin)
            if origin == ("127.0.0.1", 8082):
                raise OutcomeUnknownError(("127.0.0.1", 8082), "connection closed")
            return UpstreamAnswer(200, [], b"{}")

    upstream = _Answering()
    forwarder = Forwarder(upstream)  # type: ignore[arg-type]
    slave = BrokerMember("b2", "g2", "http://127.0.0.1:8083", "127.0.0.1:1", "slave")
    member, answer = await forwarder.call_any([MEMBER, slave], "GET", "/v1/topics/T")
    assert (member, answer.status) == (slave, 200)
    assert upstream.asked == [("127.0.0.1", 8082), ("127.0.0.1", 8083)]  # each once
    with pytest.raises(BrokerNoAnswerError):
        await forwarder.call_any([MEMBER], "GET", "/v1/topics/T")
    with pytest.raises(ProxyError) as none:
        await forwarder.call_any([], "GET", "/v1/topics/T")
    assert (none.value.code, none.value.detail) == ("BROKER_UNAVAILABLE", "no replica is known")


async def test_a_json_body_too_deep_to_encode_is_the_clients_mistake_and_is_not_sent() -> None:
    upstream = _Failing(AssertionError("nothing is to be sent"))
    forwarder = Forwarder(upstream)  # type: ignore[arg-type]
    deep: list[Any] = []
    for _ in range(300):
        deep = [deep]
    with pytest.raises(ApiError) as raised:
        await forwarder.call(MEMBER, "POST", "/v1/groups/G/acks", json={"x": deep})
    assert raised.value.code == "VALIDATION_FAILED"
    assert upstream.asked == 0


def test_a_long_polls_wait_is_added_to_the_read_timeout_up_to_a_minute() -> None:
    assert long_poll_timeout(0) == long_poll_timeout(None) == long_poll_timeout("5000") == 10.0
    assert long_poll_timeout(True) == 10.0  # a bool is no number of milliseconds
    assert long_poll_timeout(2500) == 12.5
    assert long_poll_timeout(-5) == 10.0
    assert long_poll_timeout(10**9) == 70.0


def test_broker_paths_encode_each_segment() -> None:
    assert broker_path("v1", "topics", "50%off", "queues", 3) == "/v1/topics/50%25off/queues/3"
    assert broker_path("v1", "groups", "a/b", "offsets") == "/v1/groups/a%2Fb/offsets"
