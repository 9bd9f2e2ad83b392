"""Issue 8: hostile input with authentication on — schemathesis over every operation, then
malformed JSON, wrong types, huge numbers, unicode and traversal in names, header
injection, oversized and stalled requests: every answer a 4xx, never a 5xx, nothing written.
Also each documented limit's 413/422, and the byte cap of pull responses."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from tests.app.auth_support import AuthServer, start_auth_server
from tests.app.schemathesis_support import run_schemathesis

BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthServer]:
    """Auth on, small limits, short timeouts; rate limits off so the fuzzer is never 429'd."""
    server = start_auth_server(
        tmp_path_factory.mktemp("hostile"),
        long_poll_max_ms=50,
        rate_limit_per_s=0,
        max_request_bytes=64 * 1024,
        max_message_size=1024,
        max_batch_messages=10,
        max_batch_bytes=2000,
        max_pull_bytes=2048,
        body_read_timeout_s=2,
        header_read_timeout_s=2,
        keep_alive_timeout_s=2,
        max_header_bytes=8 * 1024,
    )
    admin = server.client("admin")
    assert admin.put("/v1/topics/SecFuzz", json={"read_queue_nums": 1, "write_queue_nums": 1})
    yield server
    server.stop()


def store_state(server: AuthServer) -> tuple[int, frozenset[str], frozenset[str]]:
    """CommitLog end, topic names, group names: what "nothing written" compares."""
    broker = server.live.broker
    return server.live.call(
        lambda: (
            broker.store_gauges().commit_log_max_offset,
            frozenset(t.topic_name for t in broker.topics.all()),
            frozenset(g.group_name for g in broker.groups.all()),
        )
    )


def raw_request(server: AuthServer, data: bytes, *, timeout: float = 15) -> bytes:
    """Send bytes as they are (no client normalizes them) and read until the server closes."""
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def status_of(answer: bytes) -> int:
    assert answer.startswith(b"HTTP/1.1 "), answer[:200]
    return int(answer.split(b" ", 2)[1])


# ==================================================================== schemathesis


@pytest.fixture
def fuzzed(tmp_path: Path) -> Iterator[AuthServer]:
    """Default limits (schemathesis knows the documented ones), short long-polls, no rate."""
    server = start_auth_server(tmp_path / "fuzzed", long_poll_max_ms=50, rate_limit_per_s=0)
    yield server
    server.stop()


def test_schemathesis_with_auth_finds_no_server_errors(fuzzed: AuthServer, tmp_path: Path) -> None:
    # The live document of a server with an auth file: security is required, not optional,
    # so schemathesis also checks that each operation refuses requests without the token
    # (ignored_auth).
    schema = tmp_path / "openapi.json"
    schema.write_bytes(fuzzed.client("nobody").get("/openapi.json").content)
    result = run_schemathesis(
        schema,
        fuzzed.url,
        tmp_path,
        seed=8,
        max_examples=20,
        # Above the longest long poll a request may ask for (30 s), with room to spare.
        request_timeout_s=90,
        headers=(f"Authorization: Bearer {fuzzed.tokens['admin']}",),
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert " passed" in result.stdout


# ==================================================================== hostile requests

JSON = {"content-type": "application/json"}
HUGE = "9" * 40

HOSTILE: list[Any] = [
    # (id, who, method, path, request kwargs)
    (
        "malformed-json",
        "admin",
        "POST",
        "/v1/topics/SecFuzz/messages",
        {"content": b"{nope", "headers": JSON},
    ),
    (
        "json-nul",
        "admin",
        "POST",
        "/v1/topics/SecFuzz/messages",
        {"content": b'{"body": "\x00', "headers": JSON},
    ),
    (
        "deep-json",
        "admin",
        "POST",
        "/v1/groups/SecG/offsets",
        {"content": b"[" * 100_000, "headers": JSON},
    ),
    (
        "not-utf8-json",
        "admin",
        "POST",
        "/v1/topics/SecFuzz/messages",
        {"content": b'{"body": "\xff"}', "headers": JSON},
    ),
    ("body-number", "admin", "POST", "/v1/topics/SecFuzz/messages", {"json": {"body": 1}}),
    (
        "queue-id-bool",
        "admin",
        "POST",
        "/v1/topics/SecFuzz/messages",
        {"json": {"body": "x", "queue_id": True}},
    ),
    (
        "queue-id-huge",
        "admin",
        "POST",
        "/v1/topics/SecFuzz/messages",
        {"json": {"body": "x", "queue_id": 10**30}},
    ),
    (
        "queue-id-float",
        "admin",
        "POST",
        "/v1/topics/SecFuzz/messages",
        {"content": b'{"body": "x", "queue_id": 1e309}', "headers": JSON},
    ),
    (
        "delay-huge",
        "admin",
        "POST",
        "/v1/topics/SecFuzz/messages",
        {"json": {"body": "x", "deliver_after_ms": 10**30}},
    ),
    ("offset-huge", "admin", "GET", f"/v1/topics/SecFuzz/queues/0/messages?offset={HUGE}", {}),
    ("wait-inf", "admin", "GET", "/v1/topics/SecFuzz/queues/0/messages?wait_ms=1e309", {}),
    (
        "max-messages-huge",
        "admin",
        "GET",
        f"/v1/topics/SecFuzz/queues/0/messages?max_messages={HUGE}",
        {},
    ),
    ("queue-path-huge", "admin", "GET", f"/v1/topics/SecFuzz/queues/{HUGE}/messages", {}),
    ("queue-path-negative", "admin", "GET", "/v1/topics/SecFuzz/queues/-1/messages", {}),
    (
        "commit-huge",
        "consumer",
        "PUT",
        "/v1/groups/SecG/topics/SecFuzz/queues/0/offset",
        {"json": {"offset": 2**64}},
    ),
    (
        "batch-commit-huge",
        "consumer",
        "POST",
        "/v1/groups/SecG/offsets",
        {"json": {"offsets": [{"topic": "SecFuzz", "queue_id": 0, "offset": 10**40}]}},
    ),
    ("timestamp-huge", "admin", "GET", f"/v1/topics/SecFuzz/queues/0/offset?timestamp={HUGE}", {}),
    (
        "topic-config-huge",
        "admin",
        "PUT",
        "/v1/topics/SecFuzzNew",
        {"json": {"read_queue_nums": 10**12}},
    ),
    (
        "group-config-wrong",
        "admin",
        "PUT",
        "/v1/groups/SecFuzzG",
        {"json": {"retry_max_times": "16"}},
    ),
    (
        "reset-wrong",
        "admin",
        "POST",
        "/v1/groups/SecG/offsets/reset",
        {"json": {"to": "yesterday"}},
    ),
    (
        "send-back-huge",
        "consumer",
        "POST",
        "/v1/groups/SecG/retry",
        {"json": {"commit_log_offset": 10**30}},
    ),
    ("redrive-wrong", "admin", "POST", "/v1/groups/SecG/dlq/redrive", {"json": {"limit": -1}}),
]
NAMES = [
    "Tópico",
    "名前",
    "emoji😀",
    "zero\u200bwidth",
    "rtl\u202eevil",
    "nul\x00byte",
    "sp ace",
    "a" * 300,
]
for _i, _name in enumerate(NAMES):
    _q = quote(_name, safe="")
    HOSTILE += [
        (
            f"unicode-topic-{_i}",
            "admin",
            "POST",
            f"/v1/topics/{_q}/messages",
            {"json": {"body": "x"}},
        ),
        (f"unicode-topic-put-{_i}", "admin", "PUT", f"/v1/topics/{_q}", {"json": {}}),
        (f"unicode-group-{_i}", "admin", "GET", f"/v1/groups/{_q}/topics/SecFuzz/messages", {}),
        (
            f"unicode-producer-{_i}",
            "producer",
            "POST",
            f"/v1/topics/{_q}/messages",
            {"json": {"body": "x"}},
        ),
    ]


@pytest.mark.parametrize(
    ("who", "method", "path", "kwargs"), [pytest.param(*case[1:], id=case[0]) for case in HOSTILE]
)
def test_hostile_requests_are_4xx_and_write_nothing(
    hostile: AuthServer, who: str, method: str, path: str, kwargs: dict[str, Any]
) -> None:
    before = store_state(hostile)
    with httpx.Client(base_url=hostile.url, timeout=30, headers=hostile.headers(who)) as client:
        response = client.request(method, path, **kwargs)
    assert 400 <= response.status_code < 500, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert store_state(hostile) == before


@pytest.mark.parametrize("text", NAMES)
def test_unicode_keys_and_tags_are_stored_or_refused(hostile: AuthServer, text: str) -> None:
    client = hostile.client("admin")
    for message in ({"body": text, "keys": [text]}, {"body": text, "tags": text}):
        response = client.post("/v1/topics/SecFuzz/messages", json=message)
        assert response.status_code in (201, 413, 422), response.text
    raw = client.post("/v1/topics/SecFuzz/messages", params={"tags": text}, content=b"x")
    assert raw.status_code in (201, 413, 422), raw.text


TRAVERSALS = [
    b"/v1/topics/../messages",
    b"/v1/topics/..%2F..%2Fetc/messages",
    b"/v1/topics/%2e%2e/messages",
    b"/v1/topics/%2e%2e%2f%2e%2e%2fetc/messages",
    b"/v1/topics/..%5c..%5cwindows/messages",
    b"/v1/topics/SecFuzz/../../../etc/passwd",
    b"/v1/topics/.%00./messages",
    b"/v1/groups/..%2Fconfig/topics/SecFuzz/messages",
    b"/v1/topics/%2e%2e/queues/0/messages",
    b"/v1/topics/consumerOffset.json%2F..%2F..%2Fx",
]


@pytest.mark.parametrize("path", TRAVERSALS, ids=[p.decode() for p in TRAVERSALS])
@pytest.mark.parametrize("who", ["admin", "producer", None])
def test_path_traversal_in_names(hostile: AuthServer, path: bytes, who: str | None) -> None:
    before = store_state(hostile)
    method = b"GET" if b"queues" in path or b"passwd" in path or b"/groups/" in path else b"POST"
    auth = b"" if who is None else f"Authorization: Bearer {hostile.tokens[who]}\r\n".encode()
    body = b'{"body": "x"}'
    answer = raw_request(
        hostile,
        method
        + b" "
        + path
        + b" HTTP/1.1\r\nHost: t\r\nConnection: close\r\n"
        + auth
        + b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
        + body,
    )
    assert 400 <= status_of(answer) < 500, answer[:300]
    assert store_state(hostile) == before
    assert not list(hostile.live.store_dir.parent.glob("etc*"))


HEADER_ATTACKS = [
    pytest.param(b"X-Request-Id: a\rInjected: 1\r\n", 400, id="bare-cr"),
    pytest.param(b"X-Request-Id: a\nInjected: 1\r\n", 400, id="bare-lf"),
    pytest.param(b"Authorization: Bearer x\r\n Injected: 1\r\n", 400, id="folded-header"),
    pytest.param(b"X-Request-Id: a\x00b\r\n", 400, id="nul-in-value"),
    pytest.param(b"Bad Name: x\r\n", 400, id="space-in-name"),
    pytest.param(b"X-Big: " + b"a" * 20_000 + b"\r\n", 431, id="oversized-header"),
    pytest.param(b"".join(b"X-%d: a\r\n" % i for i in range(2000)), 431, id="many-headers"),
    pytest.param(b"Authorization: Bearer \xff\xfe\r\n", 401, id="non-ascii-token"),
    pytest.param(b"Authorization: Basic YWRtaW46YWRtaW4=\r\n", 401, id="basic-auth"),
    pytest.param(b"Authorization: Bearer\r\n", 401, id="empty-bearer"),
    pytest.param(b"Content-Length: 5\r\nContent-Length: 7\r\n", 400, id="double-length"),
    pytest.param(b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n", 400, id="smuggling"),
]


@pytest.mark.parametrize(("headers", "status"), HEADER_ATTACKS)
def test_header_injection_and_oversized_headers(
    hostile: AuthServer, headers: bytes, status: int
) -> None:
    before = store_state(hostile)
    answer = raw_request(
        hostile,
        b"POST /v1/topics/SecFuzz/messages HTTP/1.1\r\nHost: t\r\nConnection: close\r\n"
        + headers
        + b"\r\nhello",
    )
    assert status_of(answer) == status, answer[:300]
    assert b"\r\ninjected:" not in answer.lower()
    assert store_state(hostile) == before


def test_oversized_request_line(hostile: AuthServer) -> None:
    answer = raw_request(
        hostile, b"GET /v1/topics/" + b"a" * 20_000 + b" HTTP/1.1\r\nHost: t\r\n\r\n"
    )
    assert status_of(answer) in (400, 414, 431)


# ==================================================================== slow and stalled clients


def test_a_stalled_body_gets_408_and_the_connection_closes(hostile: AuthServer) -> None:
    before = store_state(hostile)
    token = hostile.tokens["producer"].encode()
    answer = raw_request(
        hostile,
        b"POST /v1/topics/SecFuzz/messages HTTP/1.1\r\nHost: t\r\n"
        b"Authorization: Bearer " + token + b"\r\nContent-Type: application/json\r\n"
        b'Content-Length: 100\r\n\r\n{"body": ',
    )  # returns once the server has closed the connection
    assert status_of(answer) == 408
    assert b"connection: close" in answer.lower()
    assert b"REQUEST_TIMEOUT" in answer
    assert store_state(hostile) == before


def test_stalled_headers_get_408_and_the_connection_closes(hostile: AuthServer) -> None:
    assert status_of(raw_request(hostile, b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Slow: ")) == 408
    assert status_of(raw_request(hostile, b"")) == 408  # connected, never said anything


def test_idle_keep_alive_connections_are_closed(hostile: AuthServer) -> None:
    answer = raw_request(hostile, b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
    assert status_of(answer) == 200  # and then the server closed the idle connection


def test_pipelined_requests_with_bodies_are_not_counted_as_headers(hostile: AuthServer) -> None:
    token = hostile.tokens["producer"].encode()
    body = b'{"body": "' + b"p" * 900 + b'"}'
    one = (
        b"POST /v1/topics/SecFuzz/messages HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer "
        + token
        + b"\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
        + body
    )
    answer = raw_request(
        hostile, one * 12 + b"GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    )
    assert answer.count(b"HTTP/1.1 201 ") == 12 and answer.count(b"HTTP/1.1 200 ") == 1


# ==================================================================== limits: 413 and 422


def _batch(count: int, size: int) -> dict[str, Any]:
    return {"messages": [{"body": "b" * size} for _ in range(count)]}


LIMITS: list[Any] = [
    # (id, method, path, kwargs, status, code)
    (
        "request-body",
        "POST",
        "/v1/topics/SecFuzz/messages",
        {"content": b"x" * (65 * 1024)},
        413,
        "REQUEST_TOO_LARGE",
    ),
    (
        "batch-count",
        "POST",
        "/v1/topics/SecFuzz/messages",
        {"json": _batch(11, 1)},
        422,
        "BATCH_REJECTED",
    ),
    (
        "batch-count-schema",
        "POST",
        "/v1/topics/SecFuzz/messages",
        {"json": _batch(1001, 0)},
        422,
        "VALIDATION_FAILED",
    ),
    (
        "batch-bytes",
        "POST",
        "/v1/topics/SecFuzz/messages",
        {"json": _batch(3, 700)},
        422,
        "BATCH_REJECTED",
    ),
    (
        "message-size",
        "POST",
        "/v1/topics/SecFuzz/messages",
        {"content": b"x" * 1025},
        413,
        "MESSAGE_TOO_LARGE",
    ),
    (
        "properties-size",
        "POST",
        "/v1/topics/SecFuzz/messages",
        {"json": {"body": "x", "properties": {f"p{i}": "v" * 16_000 for i in range(3)}}},
        413,
        "PROPERTIES_TOO_LARGE",
    ),
    (
        "property-value",
        "POST",
        "/v1/topics/SecFuzz/messages",
        {"json": {"body": "x", "properties": {"p": "v" * 16_385}}},
        422,
        "VALIDATION_FAILED",
    ),
    (
        "property-count",
        "POST",
        "/v1/topics/SecFuzz/messages",
        {"json": {"body": "x", "properties": {f"p{i}": "v" for i in range(65)}}},
        422,
        "VALIDATION_FAILED",
    ),
    (
        "topic-length",
        "POST",
        f"/v1/topics/{'T' * 128}/messages",
        {"json": {"body": "x"}},
        400,
        "INVALID_TOPIC_NAME",
    ),
    (
        "group-length",
        "GET",
        f"/v1/groups/{'G' * 121}/topics/SecFuzz/messages",
        {},
        400,
        "INVALID_GROUP_NAME",
    ),
    (
        "key-length",
        "POST",
        "/v1/topics/SecFuzz/messages",
        {"json": {"body": "x", "keys": ["k" * 256]}},
        422,
        "VALIDATION_FAILED",
    ),
    (
        "key-count",
        "POST",
        "/v1/topics/SecFuzz/messages",
        {"json": {"body": "x", "keys": ["k"] * 65}},
        422,
        "VALIDATION_FAILED",
    ),
    (
        "tag-length",
        "POST",
        "/v1/topics/SecFuzz/messages",
        {"json": {"body": "x", "tags": "t" * 256}},
        422,
        "VALIDATION_FAILED",
    ),
    (
        "raw-key-count",
        "POST",
        "/v1/topics/SecFuzz/messages?" + "&".join(["keys=k"] * 65),
        {"content": b"x"},
        422,
        "VALIDATION_FAILED",
    ),
    (
        "wait-ms",
        "GET",
        "/v1/topics/SecFuzz/queues/0/messages?wait_ms=30001",
        {},
        422,
        "VALIDATION_FAILED",
    ),
    (
        "max-messages",
        "GET",
        "/v1/topics/SecFuzz/queues/0/messages?max_messages=1025",
        {},
        422,
        "VALIDATION_FAILED",
    ),
    (
        "max-bytes",
        "GET",
        f"/v1/topics/SecFuzz/queues/0/messages?max_bytes={64 * 1024 * 1024 + 1}",
        {},
        422,
        "VALIDATION_FAILED",
    ),
    (
        "pull-tags-length",
        "GET",
        f"/v1/topics/SecFuzz/queues/0/messages?tags={'t' * 1025}",
        {},
        422,
        "VALIDATION_FAILED",
    ),
    (
        "group-pull-wait",
        "GET",
        "/v1/groups/SecG/topics/SecFuzz/messages?wait_ms=-1",
        {},
        422,
        "VALIDATION_FAILED",
    ),
    (
        "commit-batch-count",
        "POST",
        "/v1/groups/SecG/offsets",
        {"json": {"offsets": [{"topic": "SecFuzz", "queue_id": 0, "offset": 0}] * 1001}},
        422,
        "VALIDATION_FAILED",
    ),
]


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "status", "code"),
    [pytest.param(*case[1:], id=case[0]) for case in LIMITS],
)
def test_every_limit_has_its_4xx(
    hostile: AuthServer, method: str, path: str, kwargs: dict[str, Any], status: int, code: str
) -> None:
    before = store_state(hostile)
    with httpx.Client(base_url=hostile.url, timeout=30, headers=hostile.headers("admin")) as client:
        response = client.request(method, path, **kwargs)
    assert response.status_code == status, response.text
    assert response.json()["code"] == code
    assert store_state(hostile) == before


@pytest.mark.parametrize("max_bytes", [None, 1_000_000])
def test_pull_responses_are_capped_in_bytes(hostile: AuthServer, max_bytes: int | None) -> None:
    admin = hostile.client("admin")
    topic = f"SecCap{max_bytes or 0}"
    assert admin.put(f"/v1/topics/{topic}", json={"read_queue_nums": 1, "write_queue_nums": 1})
    sent = admin.post(f"/v1/topics/{topic}/messages", json=_batch(10, 180))
    assert sent.status_code == 201, sent.text
    params: dict[str, Any] = {"max_messages": 10, "offset": 0}
    if max_bytes is not None:
        params["max_bytes"] = max_bytes
    queue = admin.get(f"/v1/topics/{topic}/queues/0/messages", params=params).json()
    # max_pull_bytes is 2048: 10 stored records of ~300 bytes do not fit.
    assert 1 <= len(queue["messages"]) < 10
    params.pop("offset")
    group = admin.get(f"/v1/groups/SecCapG/topics/{topic}/messages", params=params).json()
    assert 1 <= len(group["messages"]) < 10
    small = admin.get(
        f"/v1/topics/{topic}/queues/0/messages", params={"offset": 0, "max_bytes": 10}
    )
    assert len(small.json()["messages"]) == 1  # a smaller budget is kept
