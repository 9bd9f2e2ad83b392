"""Range reads of a queue's records over HTTP (``GET .../queues/{q}/records``): the records as
the CommitLog stores them, the same messages a pull shows, within a byte budget, filtered by
tag and SQL92 as a pull is (a group's stored filter too), long-polling as a pull does, without
timer copies, and refused as a pull is refused."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from storage.record.decode import walk_records
from storage.record.fields import NamedView, message_view
from tests.app.auth_support import start_auth_server
from tests.conftest import LiveServer, wait_until

MEDIA_TYPE = "application/vnd.spoolmq.commitlog-records"
REGIONS = ["eu", "us", "eu", "ap", "us", "eu", "ap", "eu"]


def create_topic(client: httpx.Client, topic: str, queues: int = 1) -> None:
    answer = client.put(
        f"/v1/topics/{topic}", json={"write_queue_nums": queues, "read_queue_nums": queues}
    )
    assert answer.status_code in (200, 201), answer.text


def send_orders(client: httpx.Client, topic: str) -> None:
    """Eight messages to queue 0: message i has region REGIONS[i], amount i, tag even/odd."""
    messages = [
        {
            "body": f"order-{i}",
            "tags": "even" if i % 2 == 0 else "odd",
            "keys": [f"k{i}"],
            "properties": {"region": r, "amount": str(i)},
        }
        for i, r in enumerate(REGIONS)
    ]
    answer = client.post(f"/v1/topics/{topic}/messages", json={"messages": messages, "queue_id": 0})
    assert answer.status_code == 201, answer.text


def read(client: httpx.Client, topic: str, **params: Any) -> httpx.Response:
    answer = client.get(f"/v1/topics/{topic}/queues/0/records", params=params)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"] == MEDIA_TYPE
    return answer


def views(records: bytes) -> list[NamedView]:
    """The records of a range read as a consumer is shown them (the store's own framing)."""
    positions, stop = walk_records(records, 0, len(records), len(records))
    assert stop.position == len(records)
    return [NamedView._make(message_view(records, at)) for at in positions]


def offsets(answer: httpx.Response) -> tuple[str, int, int, int, int]:
    h = answer.headers
    return (
        h["spoolmq-status"],
        int(h["spoolmq-next-offset"]),
        int(h["spoolmq-min-offset"]),
        int(h["spoolmq-max-offset"]),
        int(h["spoolmq-record-count"]),
    )


def test_a_range_read_holds_the_messages_a_pull_shows(client: httpx.Client, topic: str) -> None:
    create_topic(client, topic)
    send_orders(client, topic)
    answer = read(client, topic, offset=2)
    assert offsets(answer) == ("FOUND", 8, 0, 8, 6)
    pulled = client.get(
        f"/v1/topics/{topic}/queues/0/messages", params={"offset": 2, "max_messages": 32}
    ).json()["messages"]
    shown = views(answer.content)
    assert [v.msg_id for v in shown] == [m["msg_id"] for m in pulled]
    assert [v.body.decode() for v in shown] == [m["body"] for m in pulled]
    assert [(v.tags, v.keys, v.properties) for v in shown] == [
        (m["tags"], m["keys"], m["properties"]) for m in pulled
    ]
    assert [v.queue_offset for v in shown] == list(range(2, 8))


def test_a_range_read_keeps_its_byte_budget_and_its_end(client: httpx.Client, topic: str) -> None:
    create_topic(client, topic)
    send_orders(client, topic)
    one = read(client, topic, offset=3, max_bytes=1)  # the first record always comes
    assert offsets(one)[1:] == (4, 0, 8, 1)
    assert [v.body for v in views(one.content)] == [b"order-3"]
    ended = read(client, topic, offset=3, end_offset=5)
    assert offsets(ended)[1:] == (5, 0, 8, 2)
    size = len(one.content)
    two = read(client, topic, offset=0, max_bytes=2 * size + size // 2)
    assert offsets(two)[4] == 2


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        pytest.param({"tags": "odd"}, [1, 3, 5, 7], id="tags"),
        pytest.param({"filter": "region = 'eu' AND amount >= 2"}, [2, 5, 7], id="sql92"),
        pytest.param({"tags": "even", "filter": "region = 'eu'"}, [0, 2], id="both"),
        pytest.param({"tags": "none"}, [], id="nothing-matches"),
    ],
)
def test_a_range_read_filters_as_a_pull_and_moves_past_the_rest(
    client: httpx.Client, topic: str, params: dict[str, str], expected: list[int]
) -> None:
    create_topic(client, topic)
    send_orders(client, topic)
    answer = read(client, topic, offset=0, **params)
    status = "FOUND" if expected else "NO_MATCHED_MESSAGE"
    assert offsets(answer) == (status, 8, 0, 8, len(expected))
    assert [v.body.decode() for v in views(answer.content)] == [f"order-{i}" for i in expected]


def test_a_range_read_at_or_past_the_end_answers_a_pulls_status_and_no_records(
    client: httpx.Client, topic: str
) -> None:
    create_topic(client, topic)
    empty = read(client, topic, offset=0)
    assert (offsets(empty), empty.content) == (("NO_MESSAGE_IN_QUEUE", 0, 0, 0, 0), b"")
    send_orders(client, topic)
    at_end = read(client, topic, offset=8)
    assert (offsets(at_end), at_end.content) == (("OFFSET_OVERFLOW_ONE", 8, 0, 8, 0), b"")
    past = read(client, topic, offset=100)
    assert offsets(past)[0] == "OFFSET_OVERFLOW_BADLY"
    default = read(client, topic)  # from the min offset
    assert offsets(default)[4] == 8


def test_timer_copies_waiting_for_their_time_are_not_in_the_range(
    client: httpx.Client, topic: str
) -> None:
    create_topic(client, topic)
    later = client.post(
        f"/v1/topics/{topic}/messages",
        json={"body": "later", "queue_id": 0, "deliver_after_ms": 3_600_000},
    )
    assert later.status_code == 201, later.text
    send_orders(client, topic)
    answer = read(client, topic, offset=0)
    assert [v.body for v in views(answer.content)] == [f"order-{i}".encode() for i in range(8)]


@pytest.mark.parametrize(
    ("path", "params", "status", "code"),
    [
        pytest.param(
            "/v1/topics/T_missing/queues/0/records", {}, 404, "TOPIC_NOT_FOUND", id="topic"
        ),
        pytest.param("/v1/topics/{topic}/queues/5/records", {}, 404, "QUEUE_NOT_FOUND", id="queue"),
        pytest.param(
            "/v1/topics/{topic}/queues/0/records",
            {"filter": "region = "},
            400,
            "INVALID_FILTER",
            id="filter",
        ),
        pytest.param(
            "/v1/topics/{topic}/queues/0/records",
            {"max_bytes": 64 * 1024 * 1024},
            422,
            "VALIDATION_FAILED",
            id="budget-over-the-cap",
        ),
    ],
)
def test_a_range_read_is_refused_as_a_pull_is(
    client: httpx.Client, topic: str, path: str, params: dict[str, Any], status: int, code: str
) -> None:
    create_topic(client, topic)
    answer = client.get(path.format(topic=topic), params=params)
    assert (answer.status_code, answer.json()["code"]) == (status, code), answer.text


def test_a_range_read_needs_the_right_to_consume_the_topic(tmp_path: Path) -> None:
    server = start_auth_server(tmp_path / "secured")
    try:
        admin = server.client("admin")
        create_topic(admin, "SecRecords")
        send = admin.post("/v1/topics/SecRecords/messages", json={"body": "b", "queue_id": 0})
        assert send.status_code == 201, send.text
        path = "/v1/topics/SecRecords/queues/0/records"
        consumer = server.client("consumer")
        assert consumer.get(path).status_code == 200
        assert consumer.get(path, params={"group": "SecGroup"}).status_code == 200
        assert consumer.get(path, params={"group": "Other"}).status_code == 403
        assert server.client("stranger").get(path).status_code == 403
        assert server.client().get(path).status_code == 401
    finally:
        server.stop()


def test_a_tag_whose_hash_code_collides_is_left_out(client: httpx.Client, topic: str) -> None:
    create_topic(client, topic)  # "Aa" and "BB" have the same Java hash code
    messages = [{"body": f"b{i}", "tags": tag} for i, tag in enumerate(["Aa", "BB", "Aa"])]
    sent = client.post(f"/v1/topics/{topic}/messages", json={"messages": messages, "queue_id": 0})
    assert sent.status_code == 201, sent.text
    answer = read(client, topic, offset=0, tags="Aa")
    assert offsets(answer) == ("FOUND", 3, 0, 3, 2)
    assert [v.body for v in views(answer.content)] == [b"b0", b"b2"]


def test_a_range_read_by_a_group_applies_the_groups_stored_filter(
    client: httpx.Client, topic: str
) -> None:
    create_topic(client, topic)
    send_orders(client, topic)
    group = f"G{topic}"
    stored = client.put(f"/v1/groups/{group}", json={"filters": {topic: "region = 'eu'"}})
    assert stored.status_code in (200, 201), stored.text
    answer = read(client, topic, offset=0, group=group)
    assert offsets(answer) == ("FOUND", 8, 0, 8, 4)
    assert [v.body.decode() for v in views(answer.content)] == [
        f"order-{i}" for i, region in enumerate(REGIONS) if region == "eu"
    ]
    own = read(client, topic, offset=0, group=group, filter="region = 'ap'")
    assert offsets(own)[4] == 2  # a read's own filter comes first, as a pull's


def test_a_range_read_long_polls_until_a_record_arrives(
    live_server: LiveServer, client: httpx.Client, topic: str
) -> None:
    create_topic(client, topic)
    send_orders(client, topic)
    parked = live_server.broker.waiters.parked
    answers: list[httpx.Response] = []
    with live_server.client() as other:
        waiting = threading.Thread(
            target=lambda: answers.append(read(other, topic, offset=8, wait_ms=25_000))
        )
        waiting.start()
        wait_until(lambda: live_server.broker.waiters.parked > parked)
        sent = client.post(f"/v1/topics/{topic}/messages", json={"body": "late", "queue_id": 0})
        assert sent.status_code == 201, sent.text
        waiting.join(30)
    assert offsets(answers[0]) == ("FOUND", 9, 0, 9, 1)
    assert [v.body for v in views(answers[0].content)] == [b"late"]
    done = read(client, topic, offset=0, end_offset=9, wait_ms=25_000)  # there: at once
    assert offsets(done)[4] == 9
    empty = read(client, topic, offset=9, wait_ms=20)
    assert (offsets(empty), empty.content) == (("OFFSET_OVERFLOW_ONE", 9, 0, 9, 0), b"")
