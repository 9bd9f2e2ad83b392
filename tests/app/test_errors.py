"""Bad input of every kind: its 4xx, as application/problem+json with a stable code."""

from __future__ import annotations

import importlib
import pkgutil
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import services
import storage
from app.problem_codes import STATUS_BY_CODE
from services.errors import ServiceError, StorageError
from tests.conftest import LiveServer, start_server

MIB = 1024 * 1024


def assert_problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["code"] == code
    assert problem["status"] == status
    assert problem["request_id"] == response.headers["x-request-id"]
    assert problem["detail"]
    assert problem["type"].startswith("urn:spoolmq:problem:")
    assert isinstance(problem, dict)
    return problem


@pytest.fixture(scope="module")
def strict(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """Auto-creation off, small messages."""
    live = start_server(
        Path(tmp_path_factory.mktemp("strict")),
        auto_create_topics=False,
        auto_create_groups=False,
        max_message_size=1024,
    )
    yield live
    live.stop()


JSON = {"content-type": "application/json"}
LONG = "T" * 128

CASES = [
    # (id, method, path, request kwargs, status, code)
    (
        "malformed-json-send",
        "POST",
        "/v1/topics/E/messages",
        {"content": b"{nope", "headers": JSON},
        400,
        "MALFORMED_JSON",
    ),
    (
        "malformed-json-commit",
        "PUT",
        "/v1/groups/g/topics/E/queues/0/offset",
        {"content": b"[1,", "headers": JSON},
        400,
        "MALFORMED_JSON",
    ),
    (
        "body-not-a-string",
        "POST",
        "/v1/topics/E/messages",
        {"json": {"body": 123}},
        422,
        "VALIDATION_FAILED",
    ),
    (
        "queue-id-false",
        "POST",
        "/v1/topics/E/messages",
        {"json": {"body": "x", "queue_id": False}},
        422,
        "VALIDATION_FAILED",
    ),
    (
        "queue-id-string",
        "POST",
        "/v1/topics/E/messages",
        {"json": {"body": "x", "queue_id": "1"}},
        422,
        "VALIDATION_FAILED",
    ),
    (
        "unknown-field",
        "POST",
        "/v1/topics/E/messages",
        {"json": {"body": "x", "tag": "typo"}},
        422,
        "VALIDATION_FAILED",
    ),
    ("json-array", "POST", "/v1/topics/E/messages", {"json": [1, 2]}, 422, "VALIDATION_FAILED"),
    (
        "empty-batch",
        "POST",
        "/v1/topics/E/messages",
        {"json": {"messages": []}},
        422,
        "VALIDATION_FAILED",
    ),
    (
        "bad-base64",
        "POST",
        "/v1/topics/E/messages",
        {"json": {"body": "***", "body_encoding": "base64"}},
        422,
        "INVALID_BODY_ENCODING",
    ),
    (
        "unknown-encoding",
        "POST",
        "/v1/topics/E/messages",
        {"json": {"body": "x", "body_encoding": "latin-1"}},
        422,
        "VALIDATION_FAILED",
    ),
    (
        "reserved-property",
        "POST",
        "/v1/topics/E/messages",
        {"json": {"body": "x", "properties": {"DELAY": "3"}}},
        422,
        "INVALID_PROPERTY",
    ),
    (
        "double-bar-tag",
        "POST",
        "/v1/topics/E/messages",
        {"json": {"body": "x", "tags": "A||B"}},
        422,
        "INVALID_PROPERTY",
    ),
    (
        "key-with-space",
        "POST",
        "/v1/topics/E/messages",
        {"json": {"body": "x", "keys": ["a b"]}},
        422,
        "INVALID_PROPERTY",
    ),
    (
        "query-with-json",
        "POST",
        "/v1/topics/E/messages?tags=A",
        {"json": {"body": "x"}},
        422,
        "PARAMETER_NOT_ALLOWED",
    ),
    (
        "bad-property-param",
        "POST",
        "/v1/topics/E/messages?property=novalue",
        {"content": b"x"},
        422,
        "PARAMETER_NOT_ALLOWED",
    ),
    (
        "system-topic",
        "POST",
        "/v1/topics/SCHEDULE_TOPIC_XXXX/messages",
        {"json": {"body": "x"}},
        403,
        "SYSTEM_TOPIC",
    ),
    (
        "invalid-topic-name",
        "POST",
        "/v1/topics/bad.name/messages",
        {"json": {"body": "x"}},
        400,
        "INVALID_TOPIC_NAME",
    ),
    (
        "encoded-slash-topic",
        "POST",
        "/v1/topics/..%2F..%2Fetc/messages",
        {"json": {"body": "x"}},
        400,
        "INVALID_TOPIC_NAME",
    ),
    (
        "encoded-slash-pull",
        "GET",
        "/v1/topics/a%2Fb/queues/0/messages",
        {},
        400,
        "INVALID_TOPIC_NAME",
    ),
    ("topic-too-long", "GET", f"/v1/topics/{LONG}", {}, 400, "INVALID_TOPIC_NAME"),
    (
        "unknown-topic-pull",
        "GET",
        "/v1/topics/NeverSeen/queues/0/messages",
        {},
        404,
        "TOPIC_NOT_FOUND",
    ),
    ("unknown-topic-get", "GET", "/v1/topics/NeverSeen", {}, 404, "TOPIC_NOT_FOUND"),
    (
        "queue-out-of-range-pull",
        "GET",
        "/v1/topics/E/queues/8/messages",
        {},
        404,
        "QUEUE_NOT_FOUND",
    ),
    (
        "queue-out-of-range-send",
        "POST",
        "/v1/topics/E/messages",
        {"json": {"body": "x", "queue_id": 8}},
        404,
        "QUEUE_NOT_FOUND",
    ),
    ("queue-id-huge", "GET", "/v1/topics/E/queues/5000/messages", {}, 422, "VALIDATION_FAILED"),
    ("queue-id-not-int", "GET", "/v1/topics/E/queues/zero/messages", {}, 422, "VALIDATION_FAILED"),
    (
        "wait-too-long",
        "GET",
        "/v1/topics/E/queues/0/messages?wait_ms=30001",
        {},
        422,
        "VALIDATION_FAILED",
    ),
    (
        "negative-offset",
        "GET",
        "/v1/topics/E/queues/0/messages?offset=-1",
        {},
        422,
        "VALIDATION_FAILED",
    ),
    (
        "offset-false",
        "GET",
        "/v1/topics/E/queues/0/messages?offset=false",
        {},
        422,
        "VALIDATION_FAILED",
    ),
    (
        "max-messages-zero",
        "GET",
        "/v1/topics/E/queues/0/messages?max_messages=0",
        {},
        422,
        "VALIDATION_FAILED",
    ),
    (
        "max-messages-huge",
        "GET",
        "/v1/topics/E/queues/0/messages?max_messages=100000",
        {},
        422,
        "VALIDATION_FAILED",
    ),
    (
        "commit-without-group",
        "GET",
        "/v1/topics/E/queues/0/messages?commit_offset=1",
        {},
        400,
        "INVALID_REQUEST",
    ),
    ("invalid-group-name", "GET", "/v1/groups/bad.group", {}, 400, "INVALID_GROUP_NAME"),
    ("unknown-group", "GET", "/v1/groups/NoSuchGroup", {}, 404, "GROUP_NOT_FOUND"),
    ("unknown-group-offsets", "GET", "/v1/groups/NoSuchGroup/offsets", {}, 404, "GROUP_NOT_FOUND"),
    (
        "offset-beyond-max",
        "PUT",
        "/v1/groups/g/topics/E/queues/0/offset",
        {"json": {"offset": 99}},
        409,
        "INVALID_OFFSET",
    ),
    (
        "offset-as-string",
        "PUT",
        "/v1/groups/g/topics/E/queues/0/offset",
        {"json": {"offset": "1"}},
        422,
        "VALIDATION_FAILED",
    ),
    (
        "batch-commit-unknown-topic",
        "POST",
        "/v1/groups/g/offsets",
        {
            "json": {
                "offsets": [
                    {"topic": "E", "queue_id": 0, "offset": 0},
                    {"topic": "Nope", "queue_id": 0, "offset": 0},
                ]
            }
        },
        404,
        "TOPIC_NOT_FOUND",
    ),
    (
        "topic-queue-nums-zero",
        "PUT",
        "/v1/topics/E2",
        {"json": {"read_queue_nums": 0}},
        422,
        "VALIDATION_FAILED",
    ),
    ("topic-perm-bool", "PUT", "/v1/topics/E2", {"json": {"perm": True}}, 422, "VALIDATION_FAILED"),
    (
        "change-system-topic",
        "PUT",
        "/v1/topics/SCHEDULE_TOPIC_XXXX",
        {"json": {}},
        403,
        "SYSTEM_TOPIC",
    ),
    ("delete-system-topic", "DELETE", "/v1/topics/SCHEDULE_TOPIC_XXXX", {}, 403, "SYSTEM_TOPIC"),
    (
        "group-timestamp-missing",
        "PUT",
        "/v1/groups/g2",
        {"json": {"consume_from": "timestamp"}},
        422,
        "VALIDATION_FAILED",
    ),
    ("bad-message-id", "GET", "/v1/messages/XYZ", {}, 400, "INVALID_MESSAGE_ID"),
    ("unknown-route", "GET", "/v2/nothing", {}, 404, "ROUTE_NOT_FOUND"),
    ("wrong-method", "PATCH", "/v1/topics/E", {}, 405, "METHOD_NOT_ALLOWED"),
]


@pytest.fixture(scope="module")
def with_topic_e(live_server: LiveServer) -> LiveServer:
    client = live_server.client()
    assert client.put("/v1/topics/E", json={}).status_code in (200, 201)
    return live_server


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "status", "code"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_bad_input(
    with_topic_e: LiveServer, method: str, path: str, kwargs: dict[str, Any], status: int, code: str
) -> None:
    with httpx.Client(base_url=with_topic_e.url, timeout=10) as client:
        assert_problem(client.request(method, path, **kwargs), status, code)


def test_validation_problem_lists_field_errors(client: httpx.Client) -> None:
    problem = assert_problem(
        client.get("/v1/topics/E/queues/0/messages", params={"wait_ms": 60_000}),
        422,
        "VALIDATION_FAILED",
    )
    assert problem["errors"][0]["loc"] == ["query", "wait_ms"]


def test_unknown_topic_with_auto_create_off(strict: LiveServer) -> None:
    client = strict.client()
    assert_problem(
        client.post("/v1/topics/Fresh/messages", json={"body": "x"}), 404, "TOPIC_NOT_FOUND"
    )
    assert client.put("/v1/topics/Fresh", json={}).status_code == 201
    assert client.post("/v1/topics/Fresh/messages", json={"body": "x"}).status_code == 201
    assert_problem(client.get("/v1/groups/Nobody/topics/Fresh/messages"), 404, "GROUP_NOT_FOUND")


def test_message_over_the_store_limit(strict: LiveServer) -> None:
    client = strict.client()
    client.put("/v1/topics/Big", json={})
    assert_problem(
        client.post("/v1/topics/Big/messages", content=b"x" * 2000), 413, "MESSAGE_TOO_LARGE"
    )


def test_topic_perms(client: httpx.Client, topic: str, group: str) -> None:
    assert client.put(f"/v1/topics/{topic}", json={"perm": 4}).status_code == 201
    assert_problem(
        client.post(f"/v1/topics/{topic}/messages", json={"body": "x"}), 403, "TOPIC_NOT_WRITEABLE"
    )
    assert client.put(f"/v1/topics/{topic}", json={"perm": 2}).status_code == 200
    assert_problem(client.get(f"/v1/topics/{topic}/queues/0/messages"), 403, "TOPIC_NOT_READABLE")
    assert client.put(f"/v1/topics/{topic}", json={"perm": 6}).status_code == 200
    assert client.put(f"/v1/groups/{group}", json={"consume_enable": False}).status_code == 201
    assert_problem(
        client.get(f"/v1/groups/{group}/topics/{topic}/messages"), 403, "CONSUME_DISABLED"
    )


def test_request_id_is_echoed_or_made(client: httpx.Client) -> None:
    assert (
        client.get("/healthz", headers={"x-request-id": "abc-123"}).headers["x-request-id"]
        == "abc-123"
    )
    made = client.get("/healthz", headers={"x-request-id": "x" * 500}).headers["x-request-id"]
    assert made != "x" * 500
    assert len(made) == 32
    problem = client.get("/v2/none", headers={"x-request-id": "trace-9"})
    assert problem.json()["request_id"] == problem.headers["x-request-id"] == "trace-9"


def test_oversized_body_is_refused_before_it_is_read(live_server: LiveServer) -> None:
    host, port = live_server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/topics/E/messages HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/octet-stream\r\n"
            + f"Content-Length: {100 * MIB}\r\n\r\n".encode()
            + b"x" * 1024
        )
        # Only 1 KiB of the 100 MiB was sent, yet the answer comes, and the connection closes.
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413")
    assert b"connection: close" in head.lower()
    assert b"x-request-id" in head.lower()
    assert b'"code":"REQUEST_TOO_LARGE"' in body


def test_oversized_chunked_body_is_refused(client: httpx.Client) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(5):
            yield b"y" * MIB

    response = client.post("/v1/topics/E/messages", content=chunks())
    assert_problem(response, 413, "REQUEST_TOO_LARGE")
    json_chunks = (b'{"body": "' + b"z" * MIB for _ in range(5))
    response = client.put(
        "/v1/groups/g/topics/E/queues/0/offset", content=json_chunks, headers=JSON
    )
    assert_problem(response, 413, "REQUEST_TOO_LARGE")


def test_body_just_under_the_limit_is_accepted(client: httpx.Client, topic: str) -> None:
    response = client.post(f"/v1/topics/{topic}/messages", content=b"b" * (4 * MIB - 1))
    assert response.status_code == 201


def test_unexpected_errors_are_500_problems_with_the_request_id(
    live_server: LiveServer, client: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    from services.messages import MessageQueryService

    def broken(self: MessageQueryService, msg_id: str) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(MessageQueryService, "by_id", broken)
    response = client.get(
        "/v1/messages/7F00000100002A9F0000000000000000", headers={"x-request-id": "bug-1"}
    )
    problem = assert_problem(response, 500, "INTERNAL_ERROR")
    assert problem["request_id"] == "bug-1"
    assert "a bug" not in response.text  # internals stay in the log


def test_method_not_allowed_lists_every_method_of_the_path(client: httpx.Client) -> None:
    response = client.patch("/v1/topics/E")
    assert_problem(response, 405, "METHOD_NOT_ALLOWED")
    assert response.headers["allow"] == "DELETE, GET, PUT"


def test_every_domain_error_code_has_one_status() -> None:
    """Every code a services or storage error carries is in the one code table."""
    for package in (services, storage):
        for module in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            importlib.import_module(module.name)
    missing = set()
    for root in (ServiceError, StorageError):
        todo: list[type[Exception]] = [root]
        while todo:
            cls = todo.pop()
            todo.extend(cls.__subclasses__())
            code = getattr(cls, "code", None)
            if code not in STATUS_BY_CODE:
                missing.add(f"{cls.__module__}.{cls.__qualname__}: {code}")
    assert missing == set()
