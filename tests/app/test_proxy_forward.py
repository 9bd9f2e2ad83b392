"""The proxy's answers with directly built headers hold what Starlette's Response would."""

from __future__ import annotations

import pytest
from starlette.responses import Response

from app.proxy.forward import BrokerAnswer, PassedResponse

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
