"""Messages through the proxy (:mod:`app.proxy.messages`): sends to the right group, pulls of one
cluster-wide queue from its group's master or a slave, lookups by key and by id across groups
— answered in the cluster's terms (cluster-wide queue ids, ``broker_group``) — and a client's
mistakes answered 4xx, never 500."""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import httpx
import pytest

from app.proxy.messages import may_name
from services.send import shard_queue
from tests.app.proxy.support import (
    Cluster,
    FaultyHop,
    create_topic,
    is_problem,
    local_queue_counts,
    member,
    put_members,
    send,
)
from tests.conftest import wait_until


def test_sends_reach_every_queue_and_are_read_back_in_the_clusters_terms(
    cluster: Cluster,
) -> None:
    http = cluster.http
    create_topic(http, "Orders")  # 0-3 are g1's own 0-3; 4-7 are g2's 0-3
    receipts = [send(http, "Orders", f"m{i}") for i in range(16)]
    assert sorted(r["queue_id"] for r in receipts) == sorted(list(range(8)) * 2)
    assert local_queue_counts(cluster.a, "Orders") == {0: 2, 1: 2, 2: 2, 3: 2}
    assert local_queue_counts(cluster.b, "Orders") == {0: 2, 1: 2, 2: 2, 3: 2}

    explicit = http.post("/v1/topics/Orders/messages", json={"body": "to-six", "queue_id": 6})
    assert explicit.status_code == 201, explicit.text
    assert explicit.json()["broker_group"] == "g2"
    [receipt] = explicit.json()["messages"]
    assert receipt["queue_id"] == 6
    assert local_queue_counts(cluster.b, "Orders")[2] == 3
    pulled = http.get("/v1/topics/Orders/queues/6/messages").json()
    assert pulled["queue_id"] == 6
    assert {m["queue_id"] for m in pulled["messages"]} == {6}
    sent_to_six = [f"m{i}" for i, r in enumerate(receipts) if r["queue_id"] == 6]
    assert [m["body"] for m in pulled["messages"]] == [*sent_to_six, "to-six"]

    found = http.get(f"/v1/messages/{receipt['msg_id']}").json()
    assert (found["body"], found["queue_id"]) == ("to-six", 6)
    keyed = send(http, "Orders", "keyed", keys=["order-42"], sharding_key="cust-1")
    by_key = http.get("/v1/topics/Orders/messages", params={"key": "order-42"}).json()
    assert [(m["body"], m["queue_id"]) for m in by_key["messages"]] == [
        ("keyed", keyed["queue_id"])
    ]
    again = send(http, "Orders", "keyed-again", sharding_key="cust-1")
    assert again["queue_id"] == keyed["queue_id"]

    raw = http.post(
        "/v1/topics/Orders/messages",
        params={"queue_id": 5},
        content=b"\x00raw",
        headers={"content-type": "application/octet-stream"},
    )
    assert raw.status_code == 201 and raw.json()["messages"][0]["queue_id"] == 5
    assert raw.json()["broker_group"] == "g2"
    assert http.get("/v1/topics/Orders/queues/5/messages").json()["messages"][-1]["body"] == (
        "\x00raw"
    )


def test_a_key_lookup_merges_every_groups_messages_oldest_first(cluster: Cluster) -> None:
    http = cluster.http
    create_topic(http, "Keys")
    for i, queue_id in enumerate((7, 0, 5, 2)):
        send(http, "Keys", f"k{i}", queue_id=queue_id, keys=["shared"])
        time.sleep(0.002)  # each stored in a millisecond of its own: their order is known
    send(http, "Keys", "other", queue_id=4, keys=["else"])
    found = http.get("/v1/topics/Keys/messages", params={"key": "shared"}).json()
    assert [(m["body"], m["queue_id"]) for m in found["messages"]] == [
        ("k0", 7),
        ("k1", 0),
        ("k2", 5),
        ("k3", 2),
    ]
    assert all("broker_group" not in m for m in found["messages"])
    first = http.get("/v1/topics/Keys/messages", params={"key": "shared", "max_messages": 2})
    assert [m["body"] for m in first.json()["messages"]] == ["k0", "k1"]


def test_a_message_no_group_has_is_not_found(cluster: Cluster) -> None:
    http = cluster.http
    create_topic(http, "Ids", 4)
    receipt = send(http, "Ids", "x", queue_id=3)
    missing = receipt["msg_id"][:-4] + ("0000" if receipt["msg_id"][-4:] != "0000" else "0001")
    is_problem(http.get(f"/v1/messages/{missing}"), 404, "MESSAGE_NOT_FOUND")


def test_what_does_not_exist_or_is_malformed_is_a_problem_and_nothing_is_stored(
    cluster: Cluster,
) -> None:
    http = cluster.http
    create_topic(http, "Errs", 4)
    missing = http.post("/v1/topics/Nope/messages", json={"body": "x"})
    is_problem(missing, 404, "TOPIC_NOT_FOUND")
    is_problem(http.get("/v1/topics/Errs/queues/9/messages"), 404, "QUEUE_NOT_FOUND")
    is_problem(http.get("/v1/topics/Nope/queues/0/messages"), 404, "TOPIC_NOT_FOUND")
    bad_json = http.post(
        "/v1/topics/Errs/messages", content=b"{", headers={"content-type": "application/json"}
    )
    is_problem(bad_json, 400, "MALFORMED_JSON")
    for bad_queue in ("2", -1, 99):
        wrong = http.post("/v1/topics/Errs/messages", json={"body": "x", "queue_id": bad_queue})
        assert wrong.status_code in (404, 422), (bad_queue, wrong.text)
    raw_wrong = http.post("/v1/topics/Errs/messages", params={"queue_id": "-3"}, content=b"x")
    is_problem(raw_wrong, 422, "VALIDATION_FAILED")
    split = http.post(
        "/v1/topics/Errs/messages",
        json={"messages": [{"body": "a", "queue_id": 0}, {"body": "b", "queue_id": 3}]},
    )
    is_problem(split, 422, "BATCH_REJECTED")
    # the broker's own refusal passes through as it gave it
    from_broker = http.get("/v1/topics/Errs/queues/3/messages", params={"max_messages": 0})
    is_problem(from_broker, 422, "VALIDATION_FAILED")
    assert all(
        max(local_queue_counts(live, "Errs").values()) == 0 for live in (cluster.a, cluster.b)
    )


MISTAKES: list[dict[str, Any]] = [
    {"body": "x", "queue_id": [1]},
    {"body": "x", "queue_id": {"a": 1}},
    {"body": "x", "queue_id": True},
    {"body": "x", "sharding_key": ["k"]},
    {"body": "x", "sharding_key": {"k": 1}},
    {"messages": [{"body": "a", "queue_id": [0]}]},
    {"messages": [{"body": "a", "sharding_key": {}}]},
    {"messages": 5, "queue_id": 1},
    {"messages": True, "sharding_key": "k"},
]


def test_a_send_naming_its_queue_wrongly_is_a_client_error(cluster: Cluster) -> None:
    http = cluster.http
    create_topic(http, "Mistakes", 4)
    for mistake in MISTAKES:
        answer = http.post("/v1/topics/Mistakes/messages", json=mistake)
        assert 400 <= answer.status_code < 500, (mistake, answer.status_code, answer.text)
        assert answer.headers["content-type"].startswith("application/problem+json")
    assert all(
        max(local_queue_counts(live, "Mistakes").values()) == 0 for live in (cluster.a, cluster.b)
    )


def test_a_queue_id_too_long_for_a_number_is_a_client_error(cluster: Cluster) -> None:
    """Python's int() refuses a string of more than 4300 digits (ValueError)."""
    http = cluster.http
    create_topic(http, "LongIds", 4)
    answer = http.get(f"/v1/topics/LongIds/queues/{'9' * 5000}/messages")
    assert 400 <= answer.status_code < 500, (answer.status_code, answer.text[:300])
    raw = http.post("/v1/topics/LongIds/messages", params={"queue_id": "9" * 5000}, content=b"x")
    assert 400 <= raw.status_code < 500, (raw.status_code, raw.text[:300])


def deep_send(depth: int) -> bytes:
    """A send naming its queue, with a member nested deeper than the proxy can encode again
    (orjson reads 1024 levels but writes 254)."""
    return b'{"queue_id":2,"body":"x","tags":' + b"[" * depth + b"]" * depth + b"}"


def test_a_send_too_deep_to_pass_on_is_a_client_error_and_takes_no_connection(
    cluster: Cluster,
) -> None:
    http = cluster.http
    create_topic(http, "Deep", 4)  # queues 2, 3 on g2 (broker b)
    assert send(http, "Deep", "before", queue_id=2)["queue_id"] == 2
    upstream = cluster.proxy.parts.forwarder.upstream
    split = urlsplit(cluster.b.url)
    origin = (split.hostname or "", split.port or 0)

    failed = http.post(
        "/v1/topics/Deep/messages",
        content=deep_send(300),
        headers={"content-type": "application/json"},
    )

    is_problem(failed, 422, "VALIDATION_FAILED")
    slots = upstream._slots[origin]
    wait_until(lambda: slots.free == upstream.max_per_origin and not slots.waiters)
    assert send(http, "Deep", "after", queue_id=2)["queue_id"] == 2
    assert local_queue_counts(cluster.b, "Deep")[0] == 2


def test_the_send_headers_are_read_as_the_broker_reads_them(cluster: Cluster) -> None:
    """Content-Type (the first one, parameters aside) and Idempotency-Key, read from the raw
    headers: a key is checked as the broker checks it, and only when there is one."""
    http = cluster.http
    create_topic(http, "Heads", 4)
    url = "/v1/topics/Heads/messages"
    twice = http.post(
        url, json={"body": "x"}, headers=[("Idempotency-Key", "a"), ("Idempotency-Key", "b")]
    )
    is_problem(twice, 400, "INVALID_IDEMPOTENCY_KEY")
    is_problem(
        http.post(url, json={"body": "x"}, headers={"Idempotency-Key": ""}),
        400,
        "INVALID_IDEMPOTENCY_KEY",
    )
    charset = http.post(
        url,
        content=b'{"body": "json with a charset"}',
        headers={"Content-Type": "application/json ; charset=utf-8", "Idempotency-Key": "k-1"},
    )
    assert charset.status_code == 201, charset.text
    assert charset.json()["messages"][0]["queue_id"] == shard_queue("k-1", 4)
    raw = http.post(
        url, content=b'{"body": "stored as it is"}', headers={"Content-Type": "text/plain"}
    )
    assert raw.status_code == 201, raw.text
    stored = sum(local_queue_counts(cluster.a, "Heads").values())
    assert stored + sum(local_queue_counts(cluster.b, "Heads").values()) == 2
    bodies = set()
    for queue in range(4):
        pulled = http.get(f"/v1/topics/Heads/queues/{queue}/messages").json()["messages"]
        bodies |= {m["body"] for m in pulled}
    assert bodies == {"json with a charset", '{"body": "stored as it is"}'}


def test_a_json_send_is_recognised_as_the_broker_recognises_it(cluster: Cluster) -> None:
    """Media types are case-insensitive, and ``application/*+json`` is JSON too; anything
    else (``text/json`` as well) is a raw body, as the broker decides."""
    http = cluster.http
    create_topic(http, "Media", 4)
    url = "/v1/topics/Media/messages"
    for queue, content_type in enumerate(
        ("Application/JSON", "APPLICATION/JSON; Charset=UTF-8", "application/vnd.x+JSON")
    ):
        body = b'{"body": "%s", "queue_id": %d}' % (content_type.encode(), queue)
        sent = http.post(url, content=body, headers={"Content-Type": content_type})
        assert sent.status_code == 201, sent.text
        assert sent.json()["messages"][0]["queue_id"] == queue
    raw = http.post(
        url,
        params={"queue_id": 3},
        content=b'{"body": "raw"}',
        headers={"Content-Type": "text/json"},
    )
    assert raw.status_code == 201, raw.text
    bodies = {
        queue: [
            m["body"] for m in http.get(f"{url[:-9]}/queues/{queue}/messages").json()["messages"]
        ]
        for queue in range(4)
    }
    assert bodies == {
        0: ["Application/JSON"],
        1: ["APPLICATION/JSON; Charset=UTF-8"],
        2: ["application/vnd.x+JSON"],
        3: ['{"body": "raw"}'],
    }


def test_a_broker_down_is_503_for_its_queues_while_the_other_group_serves(
    cluster: Cluster,
) -> None:
    http = cluster.http
    create_topic(http, "Half", 4)  # g1 hosts 0, 1; g2 hosts 2, 3
    for i in range(4):
        send(http, "Half", f"h{i}", queue_id=i)
    cluster.a.stop()

    down = http.post("/v1/topics/Half/messages", json={"body": "x", "queue_id": 0})
    assert is_problem(down, 503, "BROKER_UNAVAILABLE")
    assert down.headers["retry-after"] == "1"
    pull_down = http.get("/v1/topics/Half/queues/1/messages")
    is_problem(pull_down, 503, "BROKER_UNAVAILABLE")
    assert pull_down.headers["retry-after"] == "1"

    assert send(http, "Half", "still", queue_id=2)["queue_id"] == 2
    for _ in range(4):  # round robin skips the group that does not answer
        assert send(http, "Half", "rr")["queue_id"] in (2, 3)
    pulled = http.get("/v1/topics/Half/queues/3/messages").json()
    assert pulled["messages"][0]["body"] == "h3"
    assert {m["queue_id"] for m in pulled["messages"]} == {3}
    group_pull = http.get("/v1/groups/Any/topics/Half/messages", params={"max_messages": 32})
    assert group_pull.status_code == 200
    assert {m["queue_id"] for m in group_pull.json()["messages"]} == {2, 3}


# ================================================================ a pull whose answer is lost


def pull(http: httpx.Client, query: str = "", **kwargs: Any) -> httpx.Response:
    return http.get(f"/v1/topics/Hopped/queues/2/messages{query}", **kwargs)


def test_a_pull_the_master_does_not_answer_is_read_from_the_groups_slave(
    cluster: Cluster, hop: FaultyHop
) -> None:
    http = cluster.http
    send(http, "Hopped", "m", queue_id=2)
    # b itself, as g2's slave (etcd's word is all the proxy has): the reader after the master.
    put_members(cluster.etcd.url, {}, member("b-replica", "g2", cluster.b, "slave"))
    wait_until(lambda: http.get("/healthz").json()["slaves"].get("g2") == ["b-replica"])
    assert pull(http).status_code == 200
    asked = hop.requests
    hop.plan.append("lose")

    pulled = pull(http, "?max_messages=4")

    assert pulled.status_code == 200, pulled.text
    assert pulled.json()["queue_id"] == 2
    assert [(m["body"], m["queue_id"]) for m in pulled.json()["messages"]] == [("m", 2)]
    assert hop.requests == asked + 1  # the master was asked once, then the slave
    # A pull that commits an offset is the master's alone: its lost answer is not read again.
    hop.plan.append("lose")
    committing = pull(http, "?commit_offset=1&group=G")
    is_problem(committing, 503, "BROKER_UNAVAILABLE")
    assert hop.requests == asked + 2


def test_a_pull_no_replica_answers_is_503_and_the_proxy_serves_on(
    cluster: Cluster, hop: FaultyHop
) -> None:
    http = cluster.http
    send(http, "Hopped", "m", queue_id=2)
    hop.plan.append("lose")

    pulled = pull(http, headers={"X-Request-Id": "r-9"})

    problem = is_problem(pulled, 503, "BROKER_UNAVAILABLE")
    assert pulled.headers["retry-after"] == "1"
    assert problem["request_id"] == "r-9"
    # The next pull opens a new connection through the hop.
    again = pull(http)
    assert [m["body"] for m in again.json()["messages"]] == ["m"]


@pytest.mark.parametrize(
    "query",
    [
        b"",
        b"offset=3&max_messages=32",
        b"offset=3&wait_ms=100",
        b"wait_ms",
        b"commit_offset=4&offset=4",
        b"wait%5Fms=5",
        b"commit%5foffset=1",
        b"x=wait_ms",
        b"commit_offset_x=1",
        b"a=%20&b=1",
        b"wait+ms=1",
    ],
)
def test_a_query_is_parsed_for_a_pull_whenever_it_may_name_the_parameter(query: bytes) -> None:
    names = {k for k, _ in parse_qsl(query.decode("latin-1"), keep_blank_values=True)}
    for name in ("wait_ms", "commit_offset"):
        if name in names:
            assert may_name(query, name.encode())
