"""Send and pull over HTTP: JSON and raw bodies, batches, tags, statuses, lookups."""

from __future__ import annotations

import base64
import json
import os
import re
import socket
import time
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.conftest import LiveServer

Json = dict[str, Any]


def send(client: httpx.Client, topic: str, **message: Any) -> Json:
    response = client.post(f"/v1/topics/{topic}/messages", json=message)
    assert response.status_code == 201, response.text
    receipt: Json = response.json()["messages"][0]
    return receipt


def pull(client: httpx.Client, topic: str, queue_id: int = 0, **params: Any) -> Json:
    response = client.get(f"/v1/topics/{topic}/queues/{queue_id}/messages", params=params)
    assert response.status_code == 200, response.text
    answer: Json = response.json()
    return answer


def test_text_message_round_trip(client: httpx.Client, topic: str) -> None:
    receipt = send(
        client,
        topic,
        body="héllo wörld",
        tags="TagA",
        keys=["order-1", "user-7"],
        properties={"color": "red"},
        queue_id=0,
    )
    assert receipt["queue_id"] == 0
    assert receipt["queue_offset"] == 0
    assert re.fullmatch(r"[0-9A-F]{32}", receipt["msg_id"])
    assert re.fullmatch(r"[0-9A-F]{32}", receipt["uniq_key"])
    got = pull(client, topic, offset=0)
    assert got["status"] == "FOUND"
    assert (got["offset"], got["next_offset"], got["min_offset"], got["max_offset"]) == (0, 1, 0, 1)
    [message] = got["messages"]
    assert message["body"] == "héllo wörld"
    assert message["body_encoding"] == "utf-8"
    assert message["tags"] == "TagA"
    assert message["keys"] == ["order-1", "user-7"]
    assert message["properties"] == {"color": "red", "UNIQ_KEY": receipt["uniq_key"]}
    assert message["msg_id"] == receipt["msg_id"]
    assert message["commit_log_offset"] == receipt["commit_log_offset"]
    assert message["store_timestamp"] == receipt["store_timestamp"]
    assert message["born_timestamp"] > 0
    assert message["reconsume_times"] == 0


def test_a_send_answers_the_epoch_of_the_master_that_stored_it(
    client: httpx.Client, topic: str
) -> None:
    """The partition tests tell two masters' acknowledgements apart by it."""
    epoch = client.get("/v1/replication").json()["epoch"]
    batch = {"messages": [{"body": "one"}, {"body": "two"}]}
    for answer in (
        client.post(f"/v1/topics/{topic}/messages", json={"body": "e"}),
        client.post(f"/v1/topics/{topic}/messages", json=batch),
        client.post(f"/v1/topics/{topic}/messages", content=b"raw"),
    ):
        assert answer.status_code == 201, answer.text
        assert answer.headers["spoolmq-epoch"] == str(epoch)


def test_binary_message_round_trip(client: httpx.Client, topic: str) -> None:
    body = os.urandom(1000) + b"\xff\xfe"
    send(client, topic, body=base64.b64encode(body).decode(), body_encoding="base64", queue_id=1)
    [message] = pull(client, topic, 1, offset=0)["messages"]
    assert message["body_encoding"] == "base64"
    assert base64.b64decode(message["body"]) == body
    # A text body can be asked for as base64 too.
    send(client, topic, body="plain", queue_id=1)
    got = pull(client, topic, 1, offset=1, body_encoding="base64")
    assert base64.b64decode(got["messages"][0]["body"]) == b"plain"


def test_client_uniq_key_is_kept(client: httpx.Client, topic: str) -> None:
    receipt = send(client, topic, body="x", properties={"UNIQ_KEY": "MY-OWN-ID"}, queue_id=0)
    assert receipt["uniq_key"] == "MY-OWN-ID"


def test_curl_style_raw_body(client: httpx.Client, topic: str) -> None:
    body = bytes(range(256)) * 4
    response = client.post(
        f"/v1/topics/{topic}/messages",
        content=body,
        params=[
            ("tags", "Raw"),
            ("keys", "k1"),
            ("keys", "k2"),
            ("property", "a=b=c"),
            ("queue_id", "2"),
        ],
        headers={"content-type": "application/octet-stream"},
    )
    assert response.status_code == 201, response.text
    assert response.json()["messages"][0]["queue_id"] == 2
    [message] = pull(client, topic, 2, offset=0)["messages"]
    assert base64.b64decode(message["body"]) == body
    assert message["tags"] == "Raw"
    assert message["keys"] == ["k1", "k2"]
    assert message["properties"]["a"] == "b=c"


def test_a_form_is_not_a_message(client: httpx.Client, topic: str) -> None:
    """``curl -d '{"body": "x"}'`` without a content type sends a form: refused, never stored
    as a raw body holding JSON text."""
    for content_type in ("application/x-www-form-urlencoded", "multipart/form-data; boundary=b"):
        response = client.post(
            f"/v1/topics/{topic}/messages",
            content=b'{"body": "x"}',
            headers={"content-type": content_type},
        )
        assert response.status_code == 415, response.text
        problem = response.json()
        assert problem["code"] == "UNSUPPORTED_MEDIA_TYPE"
        assert "Content-Type" in problem["detail"] and "application/json" in problem["detail"]
    assert client.get(f"/v1/topics/{topic}").status_code == 404  # nothing was stored


def test_an_empty_raw_body_is_refused(client: httpx.Client, topic: str) -> None:
    response = client.post(
        f"/v1/topics/{topic}/messages",
        content=b"",
        headers={"content-type": "application/octet-stream"},
    )
    assert response.status_code == 400, response.text
    assert response.json()["code"] == "MESSAGE_ILLEGAL"
    assert "empty" in response.json()["detail"]


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/groups/{group}/offsets", b'{"offsets": []}'),
        ("/v1/groups/{group}/topics/{topic}/receive", b"{}"),
    ],
)
@pytest.mark.parametrize("content_type", [None, "application/x-www-form-urlencoded", "text/plain"])
def test_a_json_route_names_the_content_type_it_needs(
    client: httpx.Client, topic: str, group: str, path: str, body: bytes, content_type: str | None
) -> None:
    headers = {"content-type": content_type} if content_type else {}
    response = client.post(path.format(group=group, topic=topic), content=body, headers=headers)
    assert response.status_code == 415, response.text
    problem = response.json()
    assert problem["code"] == "UNSUPPORTED_MEDIA_TYPE"
    assert "Content-Type: application/json" in problem["detail"]
    assert (repr(content_type) if content_type else "no Content-Type") in problem["detail"]


def test_raw_body_without_content_type(client: httpx.Client, topic: str) -> None:
    response = client.post(f"/v1/topics/{topic}/messages?queue_id=0", content=b"no type")
    assert response.status_code == 201
    assert pull(client, topic, offset=0)["messages"][0]["body"] == "no type"


def test_batch_is_atomic_with_consecutive_offsets(client: httpx.Client, topic: str) -> None:
    send(client, topic, body="first", queue_id=3)
    batch = {"messages": [{"body": f"m{i}", "tags": "B"} for i in range(10)], "queue_id": 3}
    response = client.post(f"/v1/topics/{topic}/messages", json=batch)
    assert response.status_code == 201, response.text
    receipts = response.json()["messages"]
    assert [r["queue_offset"] for r in receipts] == list(range(1, 11))
    assert {r["queue_id"] for r in receipts} == {3}
    got = pull(client, topic, 3, offset=1, max_messages=100)
    assert [m["body"] for m in got["messages"]] == [f"m{i}" for i in range(10)]


def test_batch_spanning_queues_is_refused(client: httpx.Client, topic: str) -> None:
    batch = {"messages": [{"body": "a", "queue_id": 0}, {"body": "b", "queue_id": 1}]}
    response = client.post(f"/v1/topics/{topic}/messages", json=batch)
    assert response.status_code == 422
    assert response.json()["code"] == "BATCH_REJECTED"


def test_sharding_key_picks_a_stable_queue(client: httpx.Client, topic: str) -> None:
    queues = {send(client, topic, body="x", sharding_key="order-42")["queue_id"] for _ in range(5)}
    assert len(queues) == 1


def test_round_robin_spreads_over_write_queues(client: httpx.Client, topic: str) -> None:
    queues = {send(client, topic, body=str(i))["queue_id"] for i in range(8)}
    assert queues == set(range(8))


def test_tag_filtering(client: httpx.Client, topic: str) -> None:
    for tags in ("A", "B", "C", "A", None):
        send(client, topic, body=f"tag {tags}", queue_id=0, **({"tags": tags} if tags else {}))
    got = pull(client, topic, offset=0, tags="A||C")
    assert [m["tags"] for m in got["messages"]] == ["A", "C", "A"]
    assert got["next_offset"] == 5
    everything = pull(client, topic, offset=0, tags="*")
    assert len(everything["messages"]) == 5
    none = pull(client, topic, offset=0, tags="Z")
    assert none["status"] == "NO_MATCHED_MESSAGE"
    assert none["messages"] == []
    assert none["next_offset"] == 5


def test_max_messages_and_max_bytes(client: httpx.Client, topic: str) -> None:
    batch = {"messages": [{"body": "x" * 1000} for _ in range(10)], "queue_id": 0}
    assert client.post(f"/v1/topics/{topic}/messages", json=batch).status_code == 201
    assert len(pull(client, topic, offset=0, max_messages=3)["messages"]) == 3
    assert pull(client, topic, offset=0, max_messages=3)["next_offset"] == 3
    # The first message is returned even when it alone is over the byte budget.
    assert len(pull(client, topic, offset=0, max_bytes=10)["messages"]) == 1
    assert len(pull(client, topic, offset=0, max_bytes=3500)["messages"]) == 3


def test_get_message_by_id(client: httpx.Client, topic: str) -> None:
    receipt = send(client, topic, body="find me", tags="T")
    response = client.get(f"/v1/messages/{receipt['msg_id']}")
    assert response.status_code == 200
    assert response.json()["body"] == "find me"
    assert response.json()["queue_offset"] == receipt["queue_offset"]
    assert client.get(f"/v1/messages/{receipt['msg_id'].lower()}").status_code == 200
    missing = client.get("/v1/messages/7F00000100002A9F00000000FFFFFFFF")
    assert missing.status_code == 404
    assert missing.json()["code"] == "MESSAGE_NOT_FOUND"
    bad = client.get("/v1/messages/not-an-id")
    assert bad.status_code == 400
    assert bad.json()["code"] == "INVALID_MESSAGE_ID"


def test_percent_in_topic_names_is_decoded(client: httpx.Client) -> None:
    response = client.post("/v1/topics/%25PCT%25g1/messages", json={"body": "r", "queue_id": 0})
    assert response.status_code == 201, response.text
    assert response.json()["topic"] == "%PCT%g1"
    got = client.get("/v1/topics/%25PCT%25g1/queues/0/messages", params={"offset": 0})
    assert got.json()["messages"][0]["topic"] == "%PCT%g1"
    assert client.get("/v1/topics/%25PCT%25g1").json()["topic"] == "%PCT%g1"


def test_send_and_pull_count_in_metrics(
    live_server: LiveServer, client: httpx.Client, topic: str
) -> None:
    send(client, topic, body="12345", queue_id=0)
    pull(client, topic, offset=0)
    text = client.get("/metrics").text
    assert f'spoolmq_messages_in_total{{topic="{topic}"}} 1' in text
    assert f'spoolmq_bytes_in_total{{topic="{topic}"}} 5' in text
    assert f'spoolmq_messages_out_total{{topic="{topic}"}} 1' in text


@pytest.mark.parametrize(
    "message",
    [
        {},
        {"tags": "Paid"},
        {"body": ""},
        {"body": "", "body_encoding": "base64"},
    ],
)
def test_a_message_without_a_body_is_refused_and_nothing_is_created(
    client: httpx.Client, topic: str, message: Json
) -> None:
    """As RocketMQ's producers refuse an empty body (and a raw send refuses one: 400)."""
    answer = client.post(f"/v1/topics/{topic}/messages", json={**message, "queue_id": 0})
    assert answer.status_code == 422, answer.text
    problem = answer.json()
    assert problem["code"] == "VALIDATION_FAILED"
    assert [e["loc"] for e in problem["errors"]] == [["body", "body"]]
    assert client.get(f"/v1/topics/{topic}").status_code == 404  # not even auto-created


def test_query_by_key_and_uniq_key(client: httpx.Client, topic: str) -> None:
    first = send(client, topic, body="one", keys=["order-7", "user-1"], queue_id=0)
    send(client, topic, body="two", keys=["order-7"], queue_id=1)
    send(client, topic, body="three", keys=["order-8"], queue_id=2)
    url = f"/v1/topics/{topic}/messages"
    by_key = client.get(url, params={"key": "order-7"}).json()
    assert by_key["topic"] == topic
    assert [m["body"] for m in by_key["messages"]] == ["one", "two"]
    by_uniq = client.get(url, params={"key": first["uniq_key"]}).json()
    assert [m["msg_id"] for m in by_uniq["messages"]] == [first["msg_id"]]
    assert (
        len(client.get(url, params={"key": "order-7", "max_messages": 1}).json()["messages"]) == 1
    )
    assert client.get(url, params={"key": "nothing"}).json()["messages"] == []
    later = client.get(
        url, params={"key": "order-7", "begin_timestamp": first["store_timestamp"] + 10**6}
    )
    assert later.json()["messages"] == []
    missing = client.get(url)
    assert missing.status_code == 422
    assert missing.json()["code"] == "VALIDATION_FAILED"
    assert client.get("/v1/topics/NoSuchKeyTopic/messages", params={"key": "k"}).status_code == 404


@pytest.mark.parametrize("content_type", ["application/json", "application/octet-stream"])
def test_a_body_that_arrives_in_pieces_is_sent_whole(
    client: httpx.Client, live_server: LiveServer, topic: str, content_type: str
) -> None:
    """The send route reads the body from ``receive`` itself: a body in three writes, the
    client pausing between them, is stored whole, as one message."""
    text = "z" * 200_000
    raw = content_type != "application/json"
    body = text.encode() if raw else json.dumps({"body": text, "tags": "P"}).encode()
    query = "?tags=P" if raw else ""
    head = (
        f"POST /v1/topics/{topic}/messages{query} HTTP/1.1\r\nHost: p\r\n"
        f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    address = urlsplit(live_server.url)
    assert address.hostname is not None and address.port is not None
    with socket.create_connection((address.hostname, address.port), timeout=20) as sock:
        sock.sendall(head.encode() + body[:10])
        time.sleep(0.1)
        sock.sendall(body[10:150_000])
        time.sleep(0.1)
        sock.sendall(body[150_000:])
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    assert received.startswith(b"HTTP/1.1 201 "), received[:500]
    queue_id = json.loads(received.split(b"\r\n\r\n", 1)[1])["messages"][0]["queue_id"]
    [message] = pull(client, topic, queue_id, offset=0)["messages"]
    assert (message["body"], message["tags"]) == (text, "P")


def test_a_keyed_batch_answers_and_stores_as_an_unkeyed_one(
    client: httpx.Client, topic: str
) -> None:
    batch = {"messages": [{"body": f"m{i}"} for i in range(5)], "queue_id": 1}
    columns = client.post(f"/v1/topics/{topic}/messages", json=batch)
    general = client.post(
        f"/v1/topics/{topic}/messages", json=batch, headers={"Idempotency-Key": "k-1"}
    )
    assert columns.status_code == general.status_code == 201
    assert columns.headers["content-type"] == general.headers["content-type"]
    assert columns.headers["content-length"] == str(len(columns.content))
    first, second = columns.json(), general.json()
    assert [m["queue_offset"] for m in first["messages"]] == list(range(5))
    assert [m["queue_offset"] for m in second["messages"]] == list(range(5, 10))
    for one, other in zip(first["messages"], second["messages"], strict=True):
        assert one.keys() == other.keys()
        assert {k: v for k, v in one.items() if k in ("queue_id", "status", "delay_level")} == {
            k: v for k, v in other.items() if k in ("queue_id", "status", "delay_level")
        }
    pulled = client.get(
        f"/v1/topics/{topic}/queues/1/messages", params={"offset": 0, "max_messages": 10}
    ).json()
    assert [m["body"] for m in pulled["messages"]] == [f"m{i}" for i in range(5)] * 2
    assert [m["msg_id"] for m in pulled["messages"][:5]] == [m["msg_id"] for m in first["messages"]]
